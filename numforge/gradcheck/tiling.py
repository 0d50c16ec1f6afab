"""The tiled-attention exercise's memory case: is the learner's backward tiled, or does it hold a T x T array?

The gradient cases (``attention.py``) are small, so a plain backward that
rebuilds the whole ``P = exp(S - L)`` passes them all; what makes the backward
tiled is its memory. At ``T = 2048`` (one head, ``D = 16``, causal) one
``(T, T)`` float64 array is 32 MiB, while the tiled backward holds its
gradients, ``O(T D)``, and one tile at a time, ``O(block_q block_k)``: about
1 MiB. The case measures the peak of what the learner's backward allocates
(``tracemalloc``, which NumPy reports its arrays to), with the forward's cache
made outside the measure, and passes under half a ``(T, T)`` array.
"""

from __future__ import annotations

import tracemalloc

import numpy as np

from ..ops.flash_attention import flash_attention_backward, flash_attention_forward
from .cases import Case
from .check import MatchResult

T, D, BLOCK = 2048, 16, 128
MIB = 2**20
SQUARE = T * T * 8  # bytes of one (T, T) float64 array
BUDGET = SQUARE // 2


def peak_bytes(function, *args) -> int:
    """The most memory ``function(*args)`` holds at once beyond what was held before it ran (tracemalloc)."""
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        function(*args)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        if not tracing:
            tracemalloc.stop()


def check_memory(learner=None) -> list[MatchResult]:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, T, D)) for _ in range(3))  # (B,H,T,D)
    out, cache = flash_attention_forward(q, k, v, causal=True, block_q=BLOCK, block_k=BLOCK)
    dout = rng.standard_normal(out.shape)
    backward = flash_attention_backward if learner is None else learner.flash_attention_backward
    peak = peak_bytes(backward, dout, cache)
    detail, notes = "", ()
    if peak > BUDGET:
        detail = (
            f"your backward allocated {peak / MIB:.0f} MiB at T = {T}: a T×T array ({T}×{T} float64 = "
            f"{SQUARE / MIB:.0f} MiB); the tiled one holds O(T·B): {BLOCK}×{BLOCK} tiles of P, one at a time, "
            f"and gradients of (T, D)"
        )
        notes = ("recompute each tile P_ij = exp(S_ij - L_i) from the cache's q, k and L inside the loop over tiles",)
    argument = f"its peak memory at T = {T} (at most {BUDGET / MIB:.0f} MiB)"
    return [MatchResult("flash_attention.memory", argument, peak <= BUDGET, detail, notes)]


CASES = [
    Case(
        "flash_attention.memory",
        check_memory,
        module=flash_attention_backward.__module__,
        learner=(flash_attention_backward.__name__,),
        forwards=(flash_attention_forward.__name__,),
    )
]
