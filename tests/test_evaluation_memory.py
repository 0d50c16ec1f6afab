"""Evaluation keeps no cache and no ``(N,V)`` logits: the peak memory of ``forward(..., for_backward=False)``,
measured by tracemalloc, and its loss against the materialized logits' loss.

NumPy reports its buffers to tracemalloc, so the peak traced while the forward runs is the most its
arrays held at once (the parameters, the ids and the targets exist before and are not counted).
"""

import tracemalloc

import numpy as np
import pytest

from numforge import backend
from numforge.model import GPT, GPTConfig
from numforge.model.attention_branch import attention_branch_forward
from numforge.model.blocks import block_forward
from numforge.model.mlp_branch import mlp_branch_forward
from numforge.ops.cross_entropy import DEFAULT_CHUNK_ROWS

# A vocabulary large enough that the logits dominate: (N,V) = 1024 x 8192 float32 is 32 MiB, one chunk of
# rows of them (256 x 8192) 8 MiB, one (B,T,C) activation 128 KiB, one (B,T,F) 512 KiB.
SHAPE = dict(vocab_size=8192, max_seq_len=32, d_model=32, num_heads=2, d_ff=128)
B, T = 32, 32


def traced_peak(compute) -> tuple[int, object]:
    """``(peak bytes traced while compute() runs, what it returns)``, after a first untraced call (lazy imports
    and caches of the ops)."""
    compute()
    tracemalloc.start()
    try:
        result = compute()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, result


def evaluation_peak(num_layers: int, monkeypatch) -> tuple[int, object]:
    """``(peak bytes traced during forward(for_backward=False), its cache)``, a model of ``num_layers`` layers."""
    monkeypatch.setattr("numforge.ops.flash_attention.worker_count", lambda *args: 1)  # a peak free of timing
    model = GPT(GPTConfig(**SHAPE, num_layers=num_layers), seed=0)
    rng = np.random.default_rng(0)
    ids, targets = (backend.asarray(rng.integers(0, SHAPE["vocab_size"], size=(B, T))) for _ in range(2))
    peak, (_, cache) = traced_peak(lambda: model.forward(ids, targets, for_backward=False))
    return peak, cache


@pytest.fixture
def numpy_only():
    if backend.backend_name() != "numpy":
        pytest.skip("tracemalloc sees NumPy buffers only")


def test_evaluation_peak_is_a_chunk_of_logits_plus_a_few_activations(numpy_only, monkeypatch):
    N, V, C, F = B * T, SHAPE["vocab_size"], SHAPE["d_model"], SHAPE["d_ff"]
    assert N >= 4 * DEFAULT_CHUNK_ROWS  # the loss runs over several chunks of rows
    peak, cache = evaluation_peak(num_layers=6, monkeypatch=monkeypatch)
    # The loss holds one chunk of rows of logits and exp(z - row max) at once (two (256,V) arrays,
    # ops/cross_entropy.py's tied forward), beside h (N,C) and O(N) rows; the layers hold less, so a few
    # activations, 4 (N,F) + 8 (N,C) = 3 MiB, are room enough. Measured: 16.14 MiB; 64.16 MiB when the
    # (N,V) logits and their exponentials were materialized (two 32 MiB arrays).
    bound = 2 * DEFAULT_CHUNK_ROWS * V * 4 + (4 * N * F + 8 * N * C) * 4
    assert bound < N * V * 4  # under the logits' own size
    assert peak <= bound, (peak, bound)
    assert cache is None  # and nothing is handed back


def test_evaluation_peak_does_not_grow_with_the_layers(numpy_only, monkeypatch):
    (one, _), (six, _) = (evaluation_peak(n, monkeypatch) for n in (1, 6))
    N, C = B * T, SHAPE["d_model"]
    # Five more layers add nothing that stays: the difference is bookkeeping, under two (N,C) arrays
    # (measured: 920 bytes; keeping every layer's cache added 3.64 MiB, 116 (N,C) arrays).
    assert six - one <= 2 * N * C * 4, (one, six)


def test_a_block_in_evaluation_peaks_at_its_larger_branch(numpy_only, monkeypatch):
    monkeypatch.setattr("numforge.ops.flash_attention.worker_count", lambda *args: 1)
    model = GPT(GPTConfig(**SHAPE, num_layers=1), seed=0)
    N, C = B * T, SHAPE["d_model"]
    x = backend.asarray(np.random.default_rng(0).standard_normal((B, T, C)).astype(np.float32))
    layer, config, tables = model.layers[0], model.config, model.position_tables
    attention, _ = traced_peak(lambda: attention_branch_forward(x, layer, config, tables=tables))
    mlp, _ = traced_peak(lambda: mlp_branch_forward(x, layer, config))
    block, (_, cache) = traced_peak(lambda: block_forward(x, layer, config, tables=tables, keep_cache=False))
    # The attention's cache is dropped before the MLP runs, so beside the MLP's peak only x + a and the
    # block's output, two (N,C) arrays (measured: 2.13 MiB against a 1.68 MiB attention branch and a
    # 1.91 MiB MLP branch, a bound of 2.16 MiB; 3.02 MiB when the attention's cache lived on through the MLP).
    assert block <= max(attention, mlp) + 2 * N * C * 4, (block, attention, mlp)
    assert cache == (None, None, None)  # no branch's cache, and a dense MLP has no auxiliary loss


@pytest.mark.parametrize("dtype, rel", [("float64", 1e-14), ("float32", 1e-6)])
@pytest.mark.parametrize("tie_weights", [True, False])
@pytest.mark.parametrize("ignored", ["none", "some", "all"])
def test_evaluation_loss_is_the_materialized_logits_loss(dtype, rel, tie_weights, ignored):
    """Evaluation's chunked loss against the study tools' route, which materializes the (N,V) logits."""
    V = 1024  # a smaller vocabulary: the same routes, quicker
    model = GPT(GPTConfig(**{**SHAPE, "vocab_size": V}, num_layers=2, tie_weights=tie_weights), seed=1, dtype=dtype)
    rng = np.random.default_rng(2)
    ids, targets = rng.integers(0, V, size=(2, B, T))  # N = 1024 rows: four chunks
    if ignored == "some":
        targets[:, ::3] = -1  # every third position
    if ignored == "all":
        targets[...] = -1
    ids, targets = backend.asarray(ids), backend.asarray(targets)
    loss, cache = model.forward(ids, targets, for_backward=False)
    expected, kept = model.forward(ids, targets, for_backward=False, keep_caches=True)
    assert cache is None and kept.loss.route == "materialized"
    assert loss.dtype == expected.dtype == np.dtype(dtype) and loss.shape == ()
    if ignored == "all":
        assert float(loss) == float(expected) == 0.0  # nothing counted: the loss is 0
    else:
        assert float(loss) == pytest.approx(float(expected), rel=rel)
        assert float(loss) > 6.0  # about ln 1024 = 6.93 for an untrained model: a loss, not a placeholder
