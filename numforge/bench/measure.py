"""Measuring tools shared by the benchmarks: fair timing, peak memory, the CPU they ran on."""

from __future__ import annotations

import pathlib
import platform
import time
import tracemalloc
from collections.abc import Callable

import numpy as np

from ..checks import float_between, int_at_least

MIB = 2**20


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
