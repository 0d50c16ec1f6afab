"""``numforge bench memory``: the peak memory of a training step with and without ``--recompute``, by depth.

For each ``L`` in ``--layers`` (default 2, 4, 8), one forward and backward of a GPT-2-shaped model on
``B x T`` tokens, measured by tracemalloc (NumPy reports its buffers to it): the peak bytes above what was
allocated before the step (the weights, the batch), beside the memory plan's count of the same
(``training/memory_plan.py``: activations kept + the backward's working memory + the gradients). Without
recomputation every block's cache is alive when the backward starts, so the peak grows by a block's cache per
layer; with it, by one ``(B,T,C)`` input and the layer's gradients. Then the step's time each way (best of
``--repeats``, without tracemalloc): recomputation runs the blocks' forward twice.

Example (2 shared cores, ``numforge bench memory``): the peak at 8 layers is about a quarter of the plain one.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ..model import GPT, GPTConfig
from ..resources import format_bytes
from ..table import format_table
from ..training import TrainSettings
from ..training.dropout import dropout_rng
from ..training.memory_plan import memory_plan
from .measure import peak_extra_bytes, positive_int, where_it_runs

MODES = {"plain": False, "--recompute": True}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--layers", type=positive_int, nargs="+", default=[2, 4, 8], metavar="L")
    parser.add_argument("--batch-size", type=positive_int, default=8, metavar="B")
    parser.add_argument("--seq-len", type=positive_int, default=128, metavar="T")
    parser.add_argument("--d-model", type=positive_int, default=64, metavar="C")
    parser.add_argument("--heads", type=positive_int, default=4, metavar="H")
    parser.add_argument("--vocab", type=positive_int, default=256, metavar="V")
    parser.add_argument("--repeats", type=positive_int, default=2, help="timed steps each way; the best is kept")


def step_of(model: GPT, ids, targets, recompute: bool):
    """One forward and backward of ``model`` on ``ids, targets (B,T)``, dropout's masks as training draws them."""

    def step():
        rng = dropout_rng(model.config, seed=1, step=0, rows=range(ids.shape[0]))
        loss, cache = model.forward(ids, targets, rng=rng, recompute=recompute)
        return model.backward(cache)

    return step


def step_peak(model: GPT, ids, targets, recompute: bool) -> int:
    """tracemalloc's peak bytes above the starting level during one step (its gradients freed after)."""
    return peak_extra_bytes(step_of(model, ids, targets, recompute), np)


def planned_peak(config: GPTConfig, B: int, T: int, recompute: bool) -> int:
    """The memory plan's count of what a step allocates: activations kept, the backward's working memory and
    the gradients (the weights and AdamW's moments exist before it)."""
    plan = memory_plan(config, TrainSettings(batch_size=B, seq_len=T), recompute=recompute)
    return plan.activations + plan.working + plan.gradients


def _best_time(step, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return min(times)


def run(args: argparse.Namespace) -> int:
    B, T = args.batch_size, args.seq_len
    print(where_it_runs())
    print(
        f"one forward + backward, float32, B x T = {B} x {T}, d_model {args.d_model}, {args.heads} heads, "
        f"vocab {args.vocab}; peak bytes above the weights (tracemalloc) and the memory plan's count"
    )
    rows, peaks, times = [], {}, {}
    for L in args.layers:
        config = GPTConfig(
            vocab_size=args.vocab, max_seq_len=T, d_model=args.d_model, num_heads=args.heads, num_layers=L
        )
        model = GPT(config)
        data = np.random.default_rng(0)
        ids, targets = (data.integers(0, args.vocab, size=(B, T)) for _ in range(2))
        cells = [str(L)]
        for name, recompute in MODES.items():
            peaks[L, name] = step_peak(model, ids, targets, recompute)
            times[L, name] = _best_time(step_of(model, ids, targets, recompute), args.repeats)
            plan = planned_peak(config, B, T, recompute)
            cells += [format_bytes(peaks[L, name]), f"{peaks[L, name] / plan:.2f}"]
        cells += [
            f"{peaks[L, '--recompute'] / peaks[L, 'plain']:.2f}",
            f"{times[L, '--recompute'] / times[L, 'plain']:.2f}",
        ]
        rows.append(tuple(cells))
    header = ("L", "plain peak", "/ plan", "--recompute peak", "/ plan", "peak ratio", "time ratio")
    print(format_table(header, rows))
    first, last = args.layers[0], args.layers[-1]
    if last > first:
        for name in MODES:
            growth = (peaks[last, name] - peaks[first, name]) / (last - first)
            print(f"{name}: the peak grows by {format_bytes(growth)} per layer")
    return 0
