"""``numforge bench attention``: plain vs tiled attention (vs PyTorch SDPA), forward + backward.

For each sequence length T (B, H, D fixed, float32, causal by default) it
times forward + backward ``--repeats`` times (after one untimed run) and
reports the fastest, the median and the slowest run: a kernel that is fast
on a quiet machine but stalls on a busy one shows in the slowest column. It
runs every length twice in one process, at NumPy's default BLAS threads (all
cores, or ``OPENBLAS_NUM_THREADS``) and at one thread, torch set to the same
count. ``--busy-core`` repeats both with a second process spinning on one
core (a ``while True`` loop the bench starts and stops), the load another job
would put on the machine.

It also measures the peak extra memory of one forward + backward: tracemalloc
on NumPy (NumPy reports its buffers to it), the CuPy memory pool on a GPU.
All numbers of a table come from the same run, so the ratios are what counts
on a noisy machine. PyTorch's ``scaled_dot_product_attention`` is timed on
the CPU when torch is importable (never a dependency); its memory is not
traced. Plain attention's memory is measured up to T = 2048 (at 4096 it holds
1.5 GiB); it is timed only with ``--time-plain``.

Before importing torch the bench sets ``OMP_WAIT_POLICY=PASSIVE`` (unless it is
set already). By default torch's OpenMP threads keep spinning on the cores for
a while after each call, and the routines take turns, so they took the cores
from the tiled routine timed right after SDPA: side by side, 2 threads, T = 2048,
tiled after SDPA took a median 136 ms with the default and 129 ms with PASSIVE,
while SDPA's own median did not move (125 and 124 ms).

``--kv-heads N`` gives ``k`` and ``v`` N heads (grouped-query attention, ``N``
dividing ``--heads``; multi-query with 1): the tiled kernel serves each group
from one tile, SDPA runs with ``enable_gqa=True``, plain attention repeats
``k, v`` (its memory includes the repeats).

Targets (issue 18, on a 2-core CPU, B 1, H 8, D 64, causal, 10 repeats, default
threads): at T = 2048 the median tiled time <= 1.0x SDPA's median and the
slowest <= 1.3x; no T taking more than 5x the T half its size (slowest run
against the median of the half); with a core busy, a median <= 2x the idle one;
tiled memory at T = 2048 <= 1/20 of plain. With ``--kv-heads`` below ``--heads``
(issue 22: H_kv 2, and 1): at T = 2048 the median tiled time <= 1.2x SDPA's median
with ``enable_gqa``, and tiled memory <= 1/8 of plain.

``--window W`` gives every routine a sliding window (query ``i`` sees keys ``i - W < j <= i``): the
tiled kernel skips the tiles outside it, plain attention masks its whole square, SDPA gets the window's
float ``attn_mask`` (``ops/scores.py``'s torch twin, ``4 T^2`` bytes). One more row times the tiled kernel
at T = 1024, causal with no window. Targets (issue 32, T = 8192, W = 512): the windowed tiled median within
1.5x of that row's, and <= 1.2x SDPA's median with the same mask.

The header says where it ran (``measure.where_it_runs``: the CPU and its vector
extensions, the cores, NumPy's BLAS, PyTorch's threads): the ratio to PyTorch
differs between AVX2 and AVX-512 machines.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator

import numpy as np

from .. import backend
from ..blas import blas_threads, numpy_openblas
from ..ops.attention import attention_backward, attention_forward
from ..ops.flash_attention import (
    DEFAULT_BLOCK_K,
    DEFAULT_BLOCK_Q,
    flash_attention_backward,
    flash_attention_forward,
)
from ..ops.scores import torch_attention_options
from ..table import format_table
from .measure import MIB, optional_torch, peak_extra_bytes, positive_int, run_times, verdict, where_it_runs

PLAIN_MEMORY_UP_TO = 2048
SWEEP_BLOCKS_Q = (64, 128, 256, 512)
SWEEP_BLOCKS_K = (128, 256, 512, 1024)
WINDOW_BASELINE_T = 1024  # with --window: the tiled kernel, causal without a window, at this length (issue 32)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seq-lens", type=positive_int, nargs="+", default=[512, 1024, 2048, 4096], metavar="T")
    parser.add_argument("--batch", type=positive_int, default=1, metavar="B")
    parser.add_argument("--heads", type=positive_int, default=8, metavar="H")
    parser.add_argument(
        "--kv-heads",
        type=positive_int,
        metavar="H_KV",
        help="key/value heads, dividing H: grouped-query attention (multi-query with 1; default H, multi-head)",
    )
    parser.add_argument("--head-dim", type=positive_int, default=64, metavar="D")
    parser.add_argument("--repeats", type=positive_int, default=10, help="timed runs per routine (default 10)")
    parser.add_argument("--block-q", type=positive_int, default=DEFAULT_BLOCK_Q)
    parser.add_argument("--block-k", type=positive_int, default=DEFAULT_BLOCK_K)
    parser.add_argument(
        "--time-plain", action="store_true", help="time plain attention too (its memory is always measured)"
    )
    parser.add_argument("--non-causal", action="store_true", help="full attention instead of causal")
    parser.add_argument(
        "--window",
        type=positive_int,
        metavar="W",
        help="a sliding window: query i sees keys i - W < j <= i (SDPA with the same float mask)",
    )
    parser.add_argument("--no-torch", action="store_true", help="skip PyTorch SDPA even if importable")
    parser.add_argument("--busy-core", action="store_true", help="also run with a second process spinning on one core")
    parser.add_argument(
        "--threads",
        type=positive_int,
        nargs="+",
        metavar="N",
        help="BLAS (and torch) thread counts to run at (default: NumPy's default count, then 1)",
    )
    parser.add_argument(
        "--sweep-blocks",
        action="store_true",
        help=f"time the tiled routine for block_q in {SWEEP_BLOCKS_Q} x block_k in {SWEEP_BLOCKS_K} instead",
    )


def _numforge_step(forward, backward, q, k, v, dout, **kwargs) -> Callable[[], object]:
    def step():
        out, cache = forward(q, k, v, **kwargs)
        return out, backward(dout, cache)

    return step


def _score_options(args) -> dict:
    """The kernels' score options: the window (causal itself), the causal mask, or neither."""
    if args.window is not None:
        return {"causal": False, "modifiers": (("window", args.window),)}
    return {"causal": not args.non_causal}


def _torch_step(torch, q, k, v, dout, scores: dict) -> Callable[[], object]:
    """SDPA forward + backward with the kernels' ``scores`` options: ``is_causal``, or the window's float mask."""
    tq, tk, tv = (torch.from_numpy(backend.to_numpy(a)).requires_grad_() for a in (q, k, v))
    tdout = torch.from_numpy(backend.to_numpy(dout))
    gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}  # k, v of fewer heads: grouped-query
    uses = (*(("causal",) if scores["causal"] else ()), *scores.get("modifiers", ()))
    shape = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    masks = torch_attention_options(uses, shape, torch.float32) if uses else {}  # is_causal, or attn_mask (T,T)

    def step():
        for a in (tq, tk, tv):
            a.grad = None
        out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, **masks, **gqa)
        out.backward(tdout)
        return out

    return step


def _kv_heads(args) -> int:
    return args.heads if args.kv_heads is None else args.kv_heads


def _inputs(args, T: int):
    """``q, dout (B,H,T,D)`` and ``k, v (B,H_kv,T,D)`` in float32."""
    rng = np.random.default_rng(0)
    query, kv = (args.batch, args.heads, T, args.head_dim), (args.batch, _kv_heads(args), T, args.head_dim)
    q, k, v, dout = (backend.asarray(rng.standard_normal(shape), dtype="float32") for shape in (query, kv, kv, query))
    return q, k, v, dout


@contextlib.contextmanager
def _threads(count: int, torch) -> Iterator[None]:
    """NumPy's BLAS and torch on ``count`` threads inside the block."""
    blas = numpy_openblas()
    saved = blas_threads(), None if torch is None else torch.get_num_threads()
    if blas is not None:
        blas.set_num_threads(count)
    if torch is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        if blas is not None:
            blas.set_num_threads(saved[0])
        if torch is not None:
            torch.set_num_threads(saved[1])


@contextlib.contextmanager
def _busy_core(busy: bool) -> Iterator[None]:
    """A second Python process spinning on one core inside the block (when ``busy``)."""
    if not busy:
        yield
        return
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def _spread(runs: list[float]) -> str:
    """``min / median / max`` in ms."""
    return " / ".join(f"{s * 1e3:.1f}" for s in (min(runs), statistics.median(runs), max(runs)))


def _steps(args, T: int, torch, memory: dict) -> dict:
    """The routines timed at length ``T`` (tiled, plain with ``--time-plain``, SDPA), each forward + backward with
    the same score options; plain and tiled memory measured into ``memory[T]`` up to ``PLAIN_MEMORY_UP_TO``."""
    xp, scores = backend.array_module(), _score_options(args)
    q, k, v, dout = _inputs(args, T)
    blocks = {"block_q": args.block_q, "block_k": args.block_k}
    plain = _numforge_step(attention_forward, attention_backward, q, k, v, dout, **scores)
    tiled = _numforge_step(flash_attention_forward, flash_attention_backward, q, k, v, dout, **scores, **blocks)
    steps = {"tiled": tiled, "plain": plain} if args.time_plain else {"tiled": tiled}
    if T <= PLAIN_MEMORY_UP_TO:
        diff = float(xp.max(xp.abs(plain()[0] - tiled()[0])))
        memory[T] = peak_extra_bytes(plain, xp), peak_extra_bytes(tiled, xp), diff
    if torch is not None:
        steps["sdpa"] = _torch_step(torch, q, k, v, dout, scores)
    return steps


def _window_baseline(args) -> dict:
    """With ``--window``: the tiled kernel at ``WINDOW_BASELINE_T``, causal, no window (the issue's yardstick)."""
    q, k, v, dout = _inputs(args, WINDOW_BASELINE_T)
    blocks = {"block_q": args.block_q, "block_k": args.block_k}
    return {"tiled": _numforge_step(flash_attention_forward, flash_attention_backward, q, k, v, dout, **blocks)}


def _compare(args, xp) -> int:
    torch = None if args.no_torch or xp is not np else optional_torch()
    memory = {}
    steps_by_t = {T: _steps(args, T, torch, memory) for T in args.seq_lens}
    if args.window is not None:
        steps_by_t[f"{WINDOW_BASELINE_T} no window"] = _window_baseline(args)
    _print_memory(memory)
    if args.window is not None and torch is not None:
        masks = ", ".join(f"T={T}: {4 * T * T / MIB:.1f} MiB" for T in args.seq_lens)
        print(f"SDPA's float mask alone (not traced beyond it): {masks}")
    conditions = [(threads, busy) for busy in ([False, True] if args.busy_core else [False])
                  for threads in args.threads or (blas_threads(), 1)]  # fmt: skip
    medians = {}
    for threads, busy in conditions:
        with _threads(threads, torch), _busy_core(busy):
            runs = {}
            for T, steps in steps_by_t.items():
                for step in steps.values():
                    step()  # untimed first run
                runs[T] = run_times(steps, args.repeats, xp)
        label = f"{threads} BLAS thread{'s' * (threads > 1)}, {'one core busy' if busy else 'no load of ours'}"
        load = "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
        print(f"\n{label}: forward + backward ms, min / median / max of {args.repeats} ({load})")
        _print_times(runs)
        medians[threads, busy] = {T: statistics.median(r["tiled"]) for T, r in runs.items()}
        for line in _verdicts_of(args)(runs, memory):
            print(line)
    for threads, busy in conditions:
        if busy:
            ratios = {T: m / medians[threads, False][T] for T, m in medians[threads, True].items()}
            text = ", ".join(f"T={T}: {r:.2f}" for T, r in ratios.items())
            worst = max(ratios.values())
            print(f"{threads} threads, tiled median busy / idle ({text}) (target <= 2): {verdict(worst <= 2)}")
    return 0


def _verdicts_of(args) -> Callable[[dict, dict], list[str]]:
    if args.window is not None:
        return _window_verdicts(args.window)
    return _verdicts if _kv_heads(args) == args.heads else _grouped_verdicts


def _print_memory(memory: dict) -> None:
    header = ("T", "plain MiB", "tiled MiB", "mem tiled/plain", "max|o diff|")
    rows = [
        (str(T), f"{p / MIB:.1f}", f"{t / MIB:.1f}", f"1/{p / t:.1f}", f"{diff:.1e}")
        for T, (p, t, diff) in memory.items()
    ]
    print(format_table(header, rows))


def _print_times(runs: dict) -> None:
    header = ("T", "tiled ms", "sdpa ms", "plain ms", "tiled/sdpa median", "tiled max/sdpa median")
    rows = []
    for T, r in runs.items():
        tiled, sdpa, plain = r["tiled"], r.get("sdpa"), r.get("plain")
        median = statistics.median
        rows.append((
            str(T), _spread(tiled), "-" if sdpa is None else _spread(sdpa), "-" if plain is None else _spread(plain),
            "-" if sdpa is None else f"{median(tiled) / median(sdpa):.2f}",
            "-" if sdpa is None else f"{max(tiled) / median(sdpa):.2f}",
        ))  # fmt: skip
    print(format_table(header, rows))


def _memory_verdict(memory: dict, at_most: int) -> list[str]:
    """The memory target at T = 2048, tiled <= 1/``at_most`` of plain (nothing when T = 2048 was not run)."""
    if 2048 not in memory:
        return []
    plain_mem, tiled_mem, _ = memory[2048]
    holds = verdict(tiled_mem * at_most <= plain_mem)
    return [f"memory at T=2048: tiled = 1/{plain_mem / tiled_mem:.1f} of plain (target <= 1/{at_most}): {holds}"]


def _verdicts(runs: dict, memory: dict) -> list[str]:
    """Which of issue 18's targets hold in this table (only for the lengths that were run)."""
    lines, median = _memory_verdict(memory, 20), statistics.median
    if 2048 in runs and "sdpa" in runs[2048]:
        tiled, sdpa = runs[2048]["tiled"], median(runs[2048]["sdpa"])
        lines.append(
            f"T=2048: tiled median {median(tiled) / sdpa:.2f}x, slowest {max(tiled) / sdpa:.2f}x SDPA's median "
            f"(targets <= 1.0, <= 1.3): {verdict(median(tiled) <= sdpa and max(tiled) <= 1.3 * sdpa)}"
        )
    growth = {T: max(r["tiled"]) / median(runs[T // 2]["tiled"]) for T, r in runs.items() if T // 2 in runs}
    if growth:
        text = ", ".join(f"T={T}: {g:.1f}" for T, g in growth.items())
        lines.append(f"growth, slowest T / median T/2 ({text}) (target <= 5): {verdict(max(growth.values()) <= 5)}")
    return lines


def _grouped_verdicts(runs: dict, memory: dict) -> list[str]:
    """Which of issue 22's grouped-query targets hold in this table (T = 2048 only)."""
    lines, median = _memory_verdict(memory, 8), statistics.median
    if 2048 in runs and "sdpa" in runs[2048]:
        ratio = median(runs[2048]["tiled"]) / median(runs[2048]["sdpa"])
        lines.append(f"T=2048: tiled median {ratio:.2f}x SDPA's (enable_gqa) (target <= 1.2): {verdict(ratio <= 1.2)}")
    return lines


def _seen_scores(T: int, width: int) -> int:
    """How many scores a window of ``width`` keeps on ``T`` positions: ``sum_i min(i + 1, W)``."""
    return T * width - width * (width - 1) // 2 if T >= width else T * (T + 1) // 2


def _window_verdicts(width: int) -> Callable[[dict, dict], list[str]]:
    """Issue 32's targets for each windowed T that was run: its tiled median within 1.5x of the unwindowed
    causal one at ``WINDOW_BASELINE_T`` (the target is stated at T = 8192, W = 512), and <= 1.2x SDPA's median
    with the same mask; beside them, how many times the baseline's scores the window keeps (the work)."""

    def verdicts(runs: dict, memory: dict) -> list[str]:
        median, lines = statistics.median, []
        key = f"{WINDOW_BASELINE_T} no window"
        baseline = median(runs[key]["tiled"])
        for T, r in ((T, r) for T, r in runs.items() if T != key):
            lines.append(_window_line(T, median(r["tiled"]), baseline, r.get("sdpa"), width))
        return lines

    return verdicts


def _window_line(T: int, tiled: float, baseline: float, sdpa: list | None, width: int) -> str:
    work = _seen_scores(T, width) / _seen_scores(WINDOW_BASELINE_T, WINDOW_BASELINE_T)
    line = (f"T={T}: tiled median {tiled / baseline:.2f}x the T={WINDOW_BASELINE_T} unwindowed (target <= 1.5; "
            f"the window keeps {work:.2f}x its scores)")  # fmt: skip
    holds = tiled <= 1.5 * baseline
    if sdpa is not None:
        line += f", {tiled / statistics.median(sdpa):.2f}x SDPA's with the same mask (target <= 1.2)"
        holds = holds and tiled <= 1.2 * statistics.median(sdpa)
    return f"{line}: {verdict(holds)}"


def _sweep(args, xp) -> int:
    """Tiled forward+backward for a grid of block sizes, the configurations taking turns."""
    header = ("T", "block_q", "block_k", "tiled median ms", "tiled MiB")
    rows = []
    for T in args.seq_lens:
        q, k, v, dout = _inputs(args, T)
        steps = {
            (block_q, block_k): _numforge_step(
                flash_attention_forward, flash_attention_backward, q, k, v, dout,
                **_score_options(args), block_q=block_q, block_k=block_k,
            )
            for block_q in SWEEP_BLOCKS_Q
            for block_k in SWEEP_BLOCKS_K
        }  # fmt: skip
        memory = {blocks: peak_extra_bytes(step, xp) for blocks, step in steps.items()}
        seconds = {blocks: statistics.median(runs) for blocks, runs in run_times(steps, args.repeats, xp).items()}
        for (block_q, block_k), s in seconds.items():
            mib = memory[block_q, block_k] / MIB
            rows.append((str(T), str(block_q), str(block_k), f"{s * 1e3:.1f}", f"{mib:.1f}"))
    print(format_table(header, rows))
    return 0


def _masking(args) -> str:
    if args.window is not None:
        return f"sliding window W={args.window}"
    return "non-causal" if args.non_causal else "causal"


def run(args: argparse.Namespace) -> int:
    if args.heads % _kv_heads(args):
        raise ValueError(f"--kv-heads must divide --heads ({args.heads}), got {args.kv_heads}")
    if args.window is not None and args.non_causal:
        raise ValueError("--window is causal itself (i - W < j <= i): it cannot be --non-causal")
    xp = backend.array_module()
    if not args.no_torch and xp is np:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # module docstring: torch's threads stop spinning
    print(where_it_runs(None if args.no_torch or xp is not np else optional_torch()))
    print(
        f"attention forward+backward, backend {backend.backend_name()}, B={args.batch} H={args.heads} "
        f"H_kv={_kv_heads(args)} D={args.head_dim} float32 {_masking(args)}, "
        f"{args.repeats} repeats"
    )
    threads = {name: os.environ[name] for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS") if name in os.environ}
    print(f"default BLAS threads: {blas_threads()} ({threads or 'library default: all cores'})")
    if args.sweep_blocks:
        status = _sweep(args, xp)
    else:
        print(f"tiled blocks: block_q={args.block_q} block_k={args.block_k}")
        status = _compare(args, xp)
    print("load average (1, 5, 15 min) at the end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    return status
