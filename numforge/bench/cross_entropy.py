"""``numforge bench cross_entropy``: the weight-tied loss, chunked vs materialized (vs PyTorch).

Times forward + backward of the loss over ``logits = h @ table^T`` (best of
``--repeats`` after one untimed run) and measures the peak extra memory of one
forward + backward, for:

- tied, chunk_rows = R for each R in ``--chunk-rows`` (numforge's tied_cross_entropy_*, which
  recomputes each chunk's logits in the backward),
- fused, chunk_rows = R (tied_cross_entropy_and_grads_*, the training path: loss and
  gradients in one pass, three matmuls),
- materialized: the full (N, V) logits, then cross_entropy_* and the two matmuls back,
- torch: ``F.cross_entropy(h @ table.T)`` forward + backward on the CPU, when torch is
  importable (never a dependency; its memory is not traced).

Peak memory: tracemalloc on NumPy, the memory pool on CuPy (numforge.bench.measure).

Every number comes from one run, so the ratios are what counts on a noisy machine.
The library's chunk sizes were chosen from runs of this table: the fastest rows
that keep the logits block far below the materialized size.
"""

from __future__ import annotations

import argparse

import numpy as np

from .. import backend
from ..ops.cross_entropy import (
    DEFAULT_CHUNK_ROWS,
    FUSED_CHUNK_ROWS,
    cross_entropy_backward,
    cross_entropy_forward,
    scale_tied_cross_entropy_grads,
    tied_cross_entropy_backward,
    tied_cross_entropy_forward,
    tied_cross_entropy_with_grads,
)
from .measure import MIB, best_times, optional_torch, peak_extra_bytes, positive_int, where_it_runs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=positive_int, default=4096, metavar="N", help="B*T rows of h")
    parser.add_argument("--vocab", type=positive_int, default=8192, metavar="V")
    parser.add_argument("--width", type=positive_int, default=256, metavar="C")
    parser.add_argument("--chunk-rows", type=positive_int, nargs="+", default=[64, 128, 256, 512, 1024, 2048])
    parser.add_argument("--repeats", type=positive_int, default=3, help="timed runs per routine; the best is kept")
    parser.add_argument("--no-torch", action="store_true", help="skip PyTorch even if importable")


def _chunked_step(forward, backward, h, table, targets, chunk_rows):
    def step():
        loss, cache = forward(h, table, targets, chunk_rows=chunk_rows)
        return loss, backward(1.0, cache)

    return step


def _materialized_step(h, table, targets):
    def step():
        logits = h @ table.T  # (N, C) @ (C, V) -> (N, V)
        loss, cache = cross_entropy_forward(logits, targets)
        dlogits = cross_entropy_backward(1.0, cache)
        return loss, dlogits @ table, dlogits.T @ h  # dh (N, C), dtable (V, C)

    return step


def _torch_step(h, table, targets):
    torch = optional_torch()
    if torch is None:
        return None
    th = torch.from_numpy(backend.to_numpy(h)).requires_grad_()
    ttable = torch.from_numpy(backend.to_numpy(table)).requires_grad_()
    ttargets = torch.from_numpy(backend.to_numpy(targets))

    def step():
        th.grad = ttable.grad = None
        loss = torch.nn.functional.cross_entropy(th @ ttable.T, ttargets, ignore_index=-1)
        loss.backward()
        return loss

    return step


def run(args: argparse.Namespace) -> int:
    xp = backend.array_module()
    rng = np.random.default_rng(0)
    h = backend.asarray(rng.standard_normal((args.rows, args.width)), dtype="float32")
    table = backend.asarray(rng.standard_normal((args.vocab, args.width)) * 0.02, dtype="float32")
    targets = backend.asarray(rng.integers(0, args.vocab, size=args.rows))
    steps = {}
    for r in args.chunk_rows:
        steps[f"tied, chunk_rows={r}"] = _chunked_step(
            tied_cross_entropy_forward, tied_cross_entropy_backward, h, table, targets, r
        )
        steps[f"fused, chunk_rows={r}"] = _chunked_step(
            tied_cross_entropy_with_grads, scale_tied_cross_entropy_grads, h, table, targets, r
        )
    steps["materialized (N, V) logits"] = _materialized_step(h, table, targets)
    torch_step = None if args.no_torch or xp is not np else _torch_step(h, table, targets)
    print(where_it_runs(None if torch_step is None else optional_torch()))

    print(
        f"cross-entropy over h @ table^T, forward + backward: N={args.rows} rows, V={args.vocab}, "
        f"C={args.width}, float32, {backend.backend_name()}; "
        f"library defaults: chunk_rows={DEFAULT_CHUNK_ROWS} (tied), {FUSED_CHUNK_ROWS} (fused)"
    )
    peaks = {name: peak_extra_bytes(step, xp) for name, step in steps.items()}  # also the warm-up
    if torch_step is not None:
        torch_step()  # untimed warm-up
        steps["torch F.cross_entropy (CPU)"] = torch_step
    seconds = best_times(steps, args.repeats, xp)
    reference = seconds["materialized (N, V) logits"]
    print(f"{'routine':32s} {'ms':>9s} {'vs materialized':>16s} {'peak extra MiB':>15s}")
    for name, t in seconds.items():
        memory = f"{peaks[name] / MIB:.1f}" if name in peaks else "-"
        print(f"{name:32s} {t * 1e3:9.1f} {t / reference:15.2f}x {memory:>15s}")
    return 0
