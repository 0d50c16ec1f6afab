"""Evaluation keeps no cache: the peak memory of ``forward(..., for_backward=False)``, measured by tracemalloc.

NumPy reports its buffers to tracemalloc, so the peak traced while the forward runs is the most its
arrays held at once (the parameters, the ids and the targets exist before and are not counted).
"""

import tracemalloc

import numpy as np
import pytest

from numforge import backend
from numforge.model import GPT, GPTConfig
from numforge.model import unembedding as unembedding_module

# A vocabulary large enough that the logits dominate: (N,V) = 256 x 8192 float32 is 8 MiB, one (B,T,C)
# activation 32 KiB, one (B,T,F) 128 KiB; a layer's cache, kept, is 0.73 MiB (about 23 (B,T,C) arrays).
SHAPE = dict(vocab_size=8192, max_seq_len=32, d_model=32, num_heads=2, d_ff=128)
B, T = 8, 32


def evaluation_peak(num_layers: int, monkeypatch) -> tuple[int, object]:
    """``(peak bytes traced during forward(for_backward=False), its cache)``, a model of ``num_layers`` layers."""
    monkeypatch.setattr("numforge.ops.flash_attention.worker_count", lambda *args: 1)  # a peak free of timing
    model = GPT(GPTConfig(**SHAPE, num_layers=num_layers), seed=0)
    rng = np.random.default_rng(0)
    ids, targets = (backend.asarray(rng.integers(0, SHAPE["vocab_size"], size=(B, T))) for _ in range(2))
    model.forward(ids, targets, for_backward=False)  # first call: lazy imports and caches of the ops
    tracemalloc.start()
    try:
        _, cache = model.forward(ids, targets, for_backward=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, cache


@pytest.fixture
def numpy_only():
    if backend.backend_name() != "numpy":
        pytest.skip("tracemalloc sees NumPy buffers only")


def test_evaluation_peak_is_the_losss_own_arrays_plus_a_few_activations(numpy_only, monkeypatch):
    N, V, C, F = B * T, SHAPE["vocab_size"], SHAPE["d_model"], SHAPE["d_ff"]
    assert N * V <= unembedding_module.MATERIALIZED_LOGITS_LIMIT  # the materialized loss: its logits exist whole
    peak, cache = evaluation_peak(num_layers=6, monkeypatch=monkeypatch)
    # The materialized cross-entropy holds two (N,V) arrays at once (the logits and exp(z - row max),
    # ops/cross_entropy.py); beside them only h (N,C) and O(N) rows, so a few activations, 4 (N,F) + 8 (N,C)
    # = 768 KiB, are room enough. Measured: 16.045 MiB (16 MiB + 45 KiB); 20.47 MiB when every layer's
    # cache was kept (and 16.83 MiB with one layer).
    bound = 2 * N * V * 4 + (4 * N * F + 8 * N * C) * 4
    assert peak <= bound, (peak, bound)
    assert cache is None  # and nothing is handed back


def test_evaluation_peak_does_not_grow_with_the_layers(numpy_only, monkeypatch):
    (one, _), (six, _) = (evaluation_peak(n, monkeypatch) for n in (1, 6))
    N, C = B * T, SHAPE["d_model"]
    # Five more layers add nothing that stays: the difference is bookkeeping, under two (N,C) arrays
    # (measured: 920 bytes; keeping every layer's cache added 3.64 MiB, 116 (N,C) arrays).
    assert six - one <= 2 * N * C * 4, (one, six)
