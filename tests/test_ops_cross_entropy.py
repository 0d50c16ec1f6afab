"""Cross-entropy, plain and weight-tied: values by hand, ignored rows, gradients, tied == plain, bad input."""

import math

import numpy as np
import pytest
from helpers import assert_gradients_pass, randn
from hypothesis import given
from hypothesis import strategies as st

from numforge import backend
from numforge.gradcheck import check_op
from numforge.ops.cross_entropy import (
    cross_entropy_backward,
    cross_entropy_forward,
    scale_tied_cross_entropy_grads,
    tied_cross_entropy_backward,
    tied_cross_entropy_forward,
    tied_cross_entropy_with_grads,
)


def _ints(values):
    return backend.asarray(np.asarray(values, dtype=np.int64))


def _targets(rng, shape, vocab, ignore_fraction):
    t = rng.integers(0, vocab, size=shape)
    t[rng.random(shape) < ignore_fraction] = -1
    return _ints(t)


@pytest.mark.parametrize("vocab", [1, 4, 50257])
def test_equal_logits_give_log_v(vocab):
    loss, _ = cross_entropy_forward(backend.asarray(np.zeros((3, vocab), dtype=np.float32)), _ints([0, vocab - 1, 0]))
    assert loss.shape == () and loss.dtype == np.float32
    assert abs(float(loss) - math.log(vocab)) < 1e-5 * max(1.0, math.log(vocab))


def test_by_hand_with_an_ignored_row():
    logits = backend.asarray([[0.0, math.log(3.0)], [5.0, 5.0], [2.0, 0.0]])
    targets = _ints([1, -1, 0])  # row 1 is ignored: the mean is over rows 0 and 2
    loss, cache = cross_entropy_forward(logits, targets)
    row0 = -math.log(3.0 / 4.0)
    row2 = -math.log(math.exp(2.0) / (math.exp(2.0) + 1.0))
    assert abs(float(loss) - (row0 + row2) / 2) < 1e-15
    dlogits = backend.to_numpy(cross_entropy_backward(1.0, cache))
    p2 = math.exp(2.0) / (math.exp(2.0) + 1.0)
    np.testing.assert_allclose(dlogits, [[0.25 / 2, -0.25 / 2], [0.0, 0.0], [(p2 - 1) / 2, (1 - p2) / 2]], rtol=1e-14)


def test_huge_logits_do_not_overflow():
    logits = backend.asarray(np.array([[1000.0, 0.0], [-1000.0, 0.0]], dtype=np.float32))
    with np.errstate(over="raise", invalid="raise"):
        loss, cache = cross_entropy_forward(logits, _ints([0, 0]))
        dlogits = cross_entropy_backward(1.0, cache)
    assert abs(float(loss) - 500.0) < 1e-3  # rows give 0 and 1000
    assert np.all(np.isfinite(backend.to_numpy(dlogits)))


TIED_OPS = {
    "tied": (tied_cross_entropy_forward, tied_cross_entropy_backward),
    "fused": (tied_cross_entropy_with_grads, scale_tied_cross_entropy_grads),
}


@pytest.mark.parametrize("kind", ["plain", "tied", "fused"])
def test_all_ignored_gives_zero_loss_and_zero_gradients(kind):
    targets = _ints([[-1, -1, -1]])
    h, table = randn(1, 3, 4), randn(5, 4, seed=1)
    if kind in TIED_OPS:
        forward, backward = TIED_OPS[kind]
        loss, cache = forward(h, table, targets)
        grads = backward(1.0, cache)
    else:
        loss, cache = cross_entropy_forward(h @ table.T, targets)
        grads = (cross_entropy_backward(1.0, cache),)
    assert float(loss) == 0.0 and loss.shape == ()
    for g in grads:
        assert not np.any(backend.to_numpy(g))


@given(
    lead=st.lists(st.integers(1, 4), min_size=1, max_size=2),  # (N, V) or (B, T, V), T = 1 included
    vocab=st.integers(1, 7),
    ignore_fraction=st.sampled_from([0.0, 0.3, 1.0]),
    seed=st.integers(0, 2**16),
)
def test_plain_gradient(lead, vocab, ignore_fraction, seed):
    rng = np.random.default_rng(seed)
    inputs = {"logits": randn(*lead, vocab, seed=seed) * 2.0, "targets": _targets(rng, lead, vocab, ignore_fraction)}
    assert_gradients_pass(check_op("cross_entropy", cross_entropy_forward, cross_entropy_backward, inputs))


@given(
    lead=st.lists(st.integers(1, 4), min_size=1, max_size=2),  # h (N, C) or (B, T, C)
    vocab=st.integers(1, 7),
    width=st.integers(1, 4),
    chunk_rows=st.integers(1, 20),  # 1 row, uneven chunks, and one chunk larger than N
    seed=st.integers(0, 2**16),
    kind=st.sampled_from(sorted(TIED_OPS)),
)
def test_tied_gradient(lead, vocab, width, chunk_rows, seed, kind):
    rng = np.random.default_rng(seed)
    inputs = {
        "h": randn(*lead, width, seed=seed),
        "table": randn(vocab, width, seed=seed + 1),
        "targets": _targets(rng, lead, vocab, 0.3),
    }
    # A step of 1e-5, not the default 1e-6: a draw can predict its targets almost surely (vocab 2, seed 11505:
    # loss 5.5e-4, gradients ~1e-4), and then the default step's rounding error, about 1e-16 / 1e-6 on the
    # difference of two losses, is 1.8e-7 of the gradient; at 1e-5 that draw checks to 1e-8 (1e-7 is the bar).
    rows = check_op(kind, *TIED_OPS[kind], inputs, {"chunk_rows": chunk_rows}, eps=1e-5)
    assert_gradients_pass(rows)


@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-12), ("float32", 2e-5)])
@pytest.mark.parametrize("chunk_rows", [1, 7, 64, 1000])
@pytest.mark.parametrize("kind", sorted(TIED_OPS))
def test_tied_equals_plain_on_materialized_logits(dtype, rtol, chunk_rows, kind):
    b, t, c, v = 3, 21, 16, 97  # N = 63 rows: chunks of 7 divide it, 64 and 1000 exceed it
    h, table = randn(b, t, c, dtype=dtype), randn(v, c, dtype=dtype, seed=1) * 0.5
    targets = _targets(np.random.default_rng(2), (b, t), v, 0.2)
    dloss = backend.asarray(0.7, dtype=dtype)
    forward, backward = TIED_OPS[kind]
    loss, cache = forward(h, table, targets, chunk_rows=chunk_rows)
    dh, dtable = backward(dloss, cache)

    logits = h @ table.T  # (B, T, C) @ (C, V) -> (B, T, V): the oracle materializes every logit
    plain_loss, plain_cache = cross_entropy_forward(logits, targets)
    dlogits = cross_entropy_backward(dloss, plain_cache)
    assert loss.dtype == dh.dtype == dtable.dtype == np.dtype(dtype) and dh.shape == h.shape
    np.testing.assert_allclose(float(loss), float(plain_loss), rtol=rtol)
    expected_dh = backend.to_numpy(dlogits @ table)
    expected_dtable = backend.to_numpy(dlogits.reshape(-1, v).T @ h.reshape(-1, c))
    scale_dh, scale_dtable = np.abs(expected_dh).max(), np.abs(expected_dtable).max()
    np.testing.assert_allclose(backend.to_numpy(dh), expected_dh, rtol=0, atol=rtol * scale_dh)
    np.testing.assert_allclose(backend.to_numpy(dtable), expected_dtable, rtol=0, atol=rtol * scale_dtable)


@pytest.mark.parametrize("chunk_rows", [1, 5, 64])
def test_fused_equals_the_chunked_tied_op_and_scales_by_dloss_without_touching_its_cache(chunk_rows):
    h, table = randn(2, 9, 6), randn(11, 6, seed=1)
    targets = _targets(np.random.default_rng(3), (2, 9), 11, 0.3)
    tied_loss, tied_cache = tied_cross_entropy_forward(h, table, targets, chunk_rows=4)
    loss, cache = tied_cross_entropy_with_grads(h, table, targets, chunk_rows=chunk_rows)
    assert abs(float(loss) - float(tied_loss)) <= 1e-12 * abs(float(tied_loss))
    kept = [backend.to_numpy(a).copy() for a in (cache.dh_of_sum, cache.dtable_of_sum)]
    for dloss in (1.0, -2.5, 0.0):
        expected = tied_cross_entropy_backward(dloss, tied_cache)
        for got, want in zip(scale_tied_cross_entropy_grads(dloss, cache), expected):
            want = backend.to_numpy(want)
            np.testing.assert_allclose(
                backend.to_numpy(got), want, rtol=0, atol=1e-12 * max(np.abs(want).max(), 1e-300)
            )
    for before, after in zip(kept, (cache.dh_of_sum, cache.dtable_of_sum)):
        np.testing.assert_array_equal(backend.to_numpy(after), before)


def test_fused_bad_input_is_named():
    h, table, targets = randn(2, 3, 4), randn(5, 4), _ints(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="h's last axis and dtype must match table"):
        tied_cross_entropy_with_grads(h, randn(5, 3), targets)
    with pytest.raises(ValueError, match="chunk_rows must be a positive integer, got 0"):
        tied_cross_entropy_with_grads(h, table, targets, chunk_rows=0)
    _, cache = tied_cross_entropy_with_grads(h, table, targets)
    with pytest.raises(ValueError, match=r"dloss must be a scalar \(0-d\), got shape \(2,\)"):
        scale_tied_cross_entropy_grads(backend.asarray([1.0, 1.0]), cache)


def test_plain_bad_input_is_named():
    logits = randn(2, 3, 5)
    with pytest.raises(ValueError, match=r"targets must lie in \[0, 5\) or equal ignore_index=-1, got 5"):
        cross_entropy_forward(logits, _ints([[0, 1, 5], [0, 0, 0]]))
    with pytest.raises(ValueError, match=r"targets must lie in \[0, 5\) or equal ignore_index=-1, got -2"):
        cross_entropy_forward(logits, _ints([[0, 1, -2], [0, 0, 0]]))
    with pytest.raises(ValueError, match=r"or equal ignore_index=-100, got -1"):
        cross_entropy_forward(logits, _ints([[0, 1, -1], [0, 0, 0]]), ignore_index=-100)
    with pytest.raises(TypeError, match="targets must be an integer array, got dtype float64"):
        cross_entropy_forward(logits, randn(2, 3))
    with pytest.raises(ValueError, match=r"targets must have shape \(2, 3\), got \(3, 2\)"):
        cross_entropy_forward(logits, _ints(np.zeros((3, 2))))
    with pytest.raises(ValueError, match=r"logits must have 2 or 3 dimensions, got shape \(5,\)"):
        cross_entropy_forward(randn(5), _ints([0]))
    _, cache = cross_entropy_forward(logits, _ints(np.zeros((2, 3))))
    with pytest.raises(ValueError, match=r"dloss must be a scalar \(0-d\), got shape \(2,\)"):
        cross_entropy_backward(randn(2), cache)


def test_tied_bad_input_is_named():
    h, table, targets = randn(2, 3, 4), randn(6, 4), _ints(np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"must match table \(6, 5\) float64, got h \(2, 3, 4\) float64"):
        tied_cross_entropy_forward(h, randn(6, 5), targets)
    with pytest.raises(ValueError, match=r"must match table \(6, 4\) float32"):
        tied_cross_entropy_forward(h, randn(6, 4, dtype="float32"), targets)
    with pytest.raises(ValueError, match=r"targets must lie in \[0, 6\)"):
        tied_cross_entropy_forward(h, table, _ints(np.full((2, 3), 6)))
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match=f"chunk_rows must be a positive integer, got {bad!r}"):
            tied_cross_entropy_forward(h, table, targets, chunk_rows=bad)
