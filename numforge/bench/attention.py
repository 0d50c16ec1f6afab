"""``numforge bench attention``: plain vs tiled attention (vs PyTorch SDPA), forward + backward.

For each sequence length T (B, H, D fixed, float32, causal by default) it
times forward + backward (best of ``--repeats``, after one untimed run) and
measures the peak extra memory of one forward + backward: tracemalloc on
NumPy (NumPy reports its buffers to it), the CuPy memory pool on a GPU. All
numbers in a row come from the same run, so the ratios are what counts on a
noisy machine. PyTorch's ``scaled_dot_product_attention`` is timed on the
CPU when torch is importable (never a dependency); its memory is not traced.
Setting ``OPENBLAS_NUM_THREADS`` (or ``OMP_NUM_THREADS``) gives NumPy's BLAS
and torch the same number of threads.

Targets (issue 3, on a 2-core CPU): tiled memory at T = 2048 <= 1/8 of plain;
tiled no slower than plain from T = 1024; tiled within 1.5x of SDPA at T = 2048.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

import numpy as np

from .. import backend
from ..ops.attention import attention_backward, attention_forward
from ..ops.flash_attention import (
    DEFAULT_BLOCK_K,
    DEFAULT_BLOCK_Q,
    flash_attention_backward,
    flash_attention_forward,
)
from ..table import format_table
from .measure import MIB, best_times, optional_torch, peak_extra_bytes, positive_int, verdict

SWEEP_BLOCKS_Q = (64, 128, 256, 512)
SWEEP_BLOCKS_K = (128, 256, 512, 1024)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seq-lens", type=positive_int, nargs="+", default=[512, 1024, 2048, 4096], metavar="T")
    parser.add_argument("--batch", type=positive_int, default=1, metavar="B")
    parser.add_argument("--heads", type=positive_int, default=8, metavar="H")
    parser.add_argument("--head-dim", type=positive_int, default=64, metavar="D")
    parser.add_argument("--repeats", type=positive_int, default=3, help="timed runs per routine; the best is kept")
    parser.add_argument("--block-q", type=positive_int, default=DEFAULT_BLOCK_Q)
    parser.add_argument("--block-k", type=positive_int, default=DEFAULT_BLOCK_K)
    parser.add_argument("--non-causal", action="store_true", help="full attention instead of causal")
    parser.add_argument("--no-torch", action="store_true", help="skip PyTorch SDPA even if importable")
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


def _torch_step(q, k, v, dout, causal: bool) -> Callable[[], object] | None:
    torch = optional_torch()
    if torch is None:
        return None
    threads = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
    if threads:
        torch.set_num_threads(int(threads))  # the same thread count as NumPy's BLAS
    tq, tk, tv = (torch.from_numpy(backend.to_numpy(a)).requires_grad_() for a in (q, k, v))
    tdout = torch.from_numpy(backend.to_numpy(dout))

    def step():
        for a in (tq, tk, tv):
            a.grad = None
        out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
        out.backward(tdout)
        return out

    return step


def _inputs(args, T: int):
    rng = np.random.default_rng(0)
    shape = (args.batch, args.heads, T, args.head_dim)
    q, k, v, dout = (backend.asarray(rng.standard_normal(shape), dtype="float32") for _ in range(4))
    return q, k, v, dout


def _compare(args, xp) -> int:
    causal = not args.non_causal
    blocks = {"block_q": args.block_q, "block_k": args.block_k}
    header = (
        "T", "plain ms", "tiled ms", "sdpa ms", "tiled/plain", "tiled/sdpa",
        "plain MiB", "tiled MiB", "mem tiled/plain", "max|o diff|",
    )  # fmt: skip
    rows, measured = [], {}
    for T in args.seq_lens:
        q, k, v, dout = _inputs(args, T)
        plain = _numforge_step(attention_forward, attention_backward, q, k, v, dout, causal=causal)
        tiled = _numforge_step(
            flash_attention_forward, flash_attention_backward, q, k, v, dout, causal=causal, **blocks
        )
        plain_mem, tiled_mem = peak_extra_bytes(plain, xp), peak_extra_bytes(tiled, xp)
        diff = float(xp.max(xp.abs(plain()[0] - tiled()[0])))
        steps = {"plain": plain, "tiled": tiled}
        sdpa = None if args.no_torch or xp is not np else _torch_step(q, k, v, dout, causal)
        if sdpa is not None:
            sdpa()  # untimed first run, as plain() and tiled() had above
            steps["sdpa"] = sdpa
        seconds = best_times(steps, args.repeats, xp)
        plain_s, tiled_s, sdpa_s = seconds["plain"], seconds["tiled"], seconds.get("sdpa")
        measured[T] = (plain_s, tiled_s, sdpa_s, plain_mem, tiled_mem)
        rows.append((
            str(T), f"{plain_s * 1e3:.1f}", f"{tiled_s * 1e3:.1f}",
            "-" if sdpa_s is None else f"{sdpa_s * 1e3:.1f}",
            f"{tiled_s / plain_s:.2f}", "-" if sdpa_s is None else f"{tiled_s / sdpa_s:.2f}",
            f"{plain_mem / MIB:.1f}", f"{tiled_mem / MIB:.1f}", f"1/{plain_mem / tiled_mem:.1f}", f"{diff:.1e}",
        ))  # fmt: skip
        print(rows[-1][0], "done", flush=True)
    print()
    print(format_table(header, rows))
    print()
    for line in _verdicts(measured):
        print(line)
    return 0


def _verdicts(measured: dict) -> list[str]:
    """Which of the issue's targets hold in this run (only for the lengths that were run)."""
    lines = []
    if 2048 in measured:
        plain_s, tiled_s, sdpa_s, plain_mem, tiled_mem = measured[2048]
        holds = tiled_mem * 8 <= plain_mem
        fraction = f"1/{plain_mem / tiled_mem:.1f}"
        lines.append(f"memory at T=2048: tiled = {fraction} of plain (target <= 1/8): {verdict(holds)}")
        if sdpa_s is not None:
            ratio = tiled_s / sdpa_s
            lines.append(f"time at T=2048: tiled = {ratio:.2f}x SDPA (target <= 1.5x): {verdict(ratio <= 1.5)}")
    long = {T: m for T, m in measured.items() if T >= 1024}
    if long:
        ratios = ", ".join(f"T={T}: {m[1] / m[0]:.2f}" for T, m in sorted(long.items()))
        holds = all(m[1] <= m[0] for m in long.values())
        lines.append(f"time tiled/plain from T=1024 ({ratios}) (target <= 1): {verdict(holds)}")
    return lines


def _sweep(args, xp) -> int:
    """Tiled forward+backward for a grid of block sizes, the configurations taking turns."""
    causal = not args.non_causal
    header = ("T", "block_q", "block_k", "tiled ms", "tiled MiB")
    rows = []
    for T in args.seq_lens:
        q, k, v, dout = _inputs(args, T)
        steps = {
            (block_q, block_k): _numforge_step(
                flash_attention_forward, flash_attention_backward, q, k, v, dout,
                causal=causal, block_q=block_q, block_k=block_k,
            )
            for block_q in SWEEP_BLOCKS_Q
            for block_k in SWEEP_BLOCKS_K
        }  # fmt: skip
        memory = {blocks: peak_extra_bytes(step, xp) for blocks, step in steps.items()}
        seconds = best_times(steps, args.repeats, xp)
        for (block_q, block_k), s in seconds.items():
            mib = memory[block_q, block_k] / MIB
            rows.append((str(T), str(block_q), str(block_k), f"{s * 1e3:.1f}", f"{mib:.1f}"))
    print(format_table(header, rows))
    return 0


def run(args: argparse.Namespace) -> int:
    xp = backend.array_module()
    print(
        f"attention forward+backward, backend {backend.backend_name()}, B={args.batch} H={args.heads} "
        f"D={args.head_dim} float32 {'non-causal' if args.non_causal else 'causal'}, best of {args.repeats}"
    )
    threads = {name: os.environ[name] for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS") if name in os.environ}
    print(f"BLAS threads: {threads or 'library default (all cores)'}")
    if args.sweep_blocks:
        return _sweep(args, xp)
    print(f"tiled blocks: block_q={args.block_q} block_k={args.block_k}")
    return _compare(args, xp)
