"""Measuring tools shared by the benchmarks: where they run (the CPU, the cores, the BLAS), fair timing, peak memory."""

from __future__ import annotations

import os
import pathlib
import platform
import statistics
import threading
import time
import tracemalloc
from collections.abc import Callable

import numpy as np

from ..blas import numpy_openblas
from ..checks import float_between, int_at_least
from ..training.threads import usable_cores

MIB = 2**20


def where_it_runs(torch=None) -> str:
    """The lines every bench prints first: the CPU and its vector extensions, the cores, NumPy's BLAS, PyTorch's.

    Example (a 2-core AMD EPYC)::

        CPU: AMD EPYC, vector extensions: avx avx2 avx512f ...; 2 cores usable (of 2); load average ...
        NumPy 2.4.1, BLAS scipy-openblas 0.3.31.188.0, kernel Cooperlake, 2 threads now
        PyTorch 2.14.1: 2 threads, CPU capability AVX512, MKL; OMP_WAIT_POLICY=PASSIVE

    ``torch`` is the module when the bench runs it, else None.
    """
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    lines = [
        f"CPU: {cpu_description()}; {usable_cores()} cores usable (of {os.cpu_count()}); "
        f"load average (1, 5, 15 min) {load}"
    ]
    blas, openblas = np.show_config(mode="dicts")["Build Dependencies"]["blas"], numpy_openblas()
    count = openblas.num_threads() if openblas else 0
    kernel = f", kernel {openblas.corename()}, {count} thread{'s' * (count != 1)} now" if openblas else ""
    lines.append(f"NumPy {np.__version__}, BLAS {blas.get('name', '?')} {blas.get('version', '')}{kernel}")
    if torch is None:
        lines.append("PyTorch: not run")
    else:
        library = "MKL" if torch.backends.mkl.is_available() else "no MKL"
        wait, threads = os.environ.get("OMP_WAIT_POLICY", "(unset)"), torch.get_num_threads()
        lines.append(
            f"PyTorch {torch.__version__}: {threads} thread{'s' * (threads != 1)}, CPU capability "
            f"{torch.backends.cpu.get_cpu_capability()}, {library}; OMP_WAIT_POLICY={wait}"
        )
    return "\n".join(lines)


def free_cores(threads: int, rounds: int = 7) -> float:
    """How many cores this process could use just now: the same float32 products (``512 x 512``, which
    release the GIL) on ``threads`` Python threads against one, taking turns; the median speed-up.

    ``threads`` on idle cores; about 1 on a machine whose other work leaves this process one core's worth
    (Linux's autogroup scheduling shares the cores out by session first, then by thread). It says whether
    any thread count could pay just then. Call it on one BLAS thread.
    """
    a = np.random.default_rng(0).standard_normal((512, 512), dtype=np.float32)

    def products(count: int) -> None:
        for _ in range(count):
            a @ a

    ratios = []
    for _ in range(rounds):
        start = time.perf_counter()
        products(8 * threads)
        alone = time.perf_counter() - start
        workers = [threading.Thread(target=products, args=(8,)) for _ in range(threads)]
        start = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        ratios.append(alone / (time.perf_counter() - start))
    return statistics.median(ratios)


def synchronize(xp) -> None:
    """Wait for queued GPU work, so a timer stops when the work is done (no-op on NumPy)."""
    if xp is not np:
        xp.cuda.Device().synchronize()


def run_times(steps: dict[str, Callable[[], object]], repeats: int, xp) -> dict[str, list[float]]:
    """Seconds of every run of each step; the steps take turns, so load changes hit all alike."""
    seconds = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            synchronize(xp)
            start = time.perf_counter()
            step()
            synchronize(xp)
            seconds[name].append(time.perf_counter() - start)
    return seconds


def best_times(steps: dict[str, Callable[[], object]], repeats: int, xp) -> dict[str, float]:
    """Seconds of the fastest run of each step (``run_times``)."""
    return {name: min(runs) for name, runs in run_times(steps, repeats, xp).items()}


def peak_extra_bytes(step: Callable[[], object], xp) -> int:
    """Peak bytes allocated above the starting level while ``step`` runs (its results freed after).

    NumPy reports its buffers to tracemalloc; on CuPy the memory pool's
    allocations are followed with a memory hook.
    """
    if xp is np:
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            step()
            return tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
    return _cupy_pool_peak(step)


def _cupy_pool_peak(step: Callable[[], object]) -> int:
    from cupy.cuda import memory_hook

    class PoolPeak(memory_hook.MemoryHook):
        """Bytes handed out by the CuPy memory pool: current and highest."""

        name = "numforge_pool_peak"

        def __init__(self) -> None:
            self.current = self.peak = 0

        def malloc_postprocess(self, **kwargs) -> None:
            self.current += kwargs["mem_size"]
            self.peak = max(self.peak, self.current)

        def free_postprocess(self, **kwargs) -> None:
            self.current -= kwargs["mem_size"]

    hook = PoolPeak()
    with hook:
        step()
    return hook.peak


def cpu_description(cpuinfo: str | pathlib.Path = "/proc/cpuinfo") -> str:
    """The CPU's model name and its vector extensions (the ``avx*`` flags), as ``lscpu`` reads them from
    ``/proc/cpuinfo``: a speed ratio against a peer differs between AVX2 and AVX-512 machines, so a
    bench's header names them. Example: ``"AMD EPYC, vector extensions: avx avx2 avx512f ..."``."""
    try:
        lines = pathlib.Path(cpuinfo).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:  # not Linux
        return f"{platform.processor() or platform.machine() or 'unknown CPU'}, vector extensions: not read"
    fields = {}
    for line in lines:
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())  # the first processor's
    model = fields.get("model name") or platform.processor() or platform.machine() or "unknown CPU"
    avx = [flag for flag in fields.get("flags", "").split() if flag.startswith("avx")]
    return f"{model}, vector extensions: {' '.join(avx) or 'no AVX'}"


def verdict(holds: bool) -> str:
    """How a bench prints whether a target holds in this run."""
    return "holds" if holds else "MISSED"


def optional_torch():
    """The ``torch`` module, or None when it is not installed (it is a peer to compare with, never a dependency)."""
    try:
        import torch
    except ImportError:
        return None
    return torch


positive_int = int_at_least(1)  # the argparse types of the benchmarks' flags
positive_float = float_between(0, low_open=True)
non_negative_int = int_at_least(0)
