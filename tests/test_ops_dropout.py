"""Dropout: identity cases, the kept fraction and scaling, the shared mask, gradients, bad p."""

import numpy as np
import pytest
from helpers import assert_gradients_pass, randn
from hypothesis import given
from hypothesis import strategies as st

from numforge import backend
from numforge.gradcheck import check_op
from numforge.ops.dropout import dropout_backward, dropout_forward


@pytest.mark.parametrize("p, training", [(0.0, True), (0.5, False)])
def test_identity_when_p_is_0_or_not_training(p, training):
    x = randn(2, 3, 4)
    y, cache = dropout_forward(x, p, backend.default_rng(0), training=training)
    np.testing.assert_array_equal(backend.to_numpy(y), backend.to_numpy(x))
    dy = randn(2, 3, 4, seed=1)
    np.testing.assert_array_equal(backend.to_numpy(dropout_backward(dy, cache)), backend.to_numpy(dy))


def test_kept_fraction_scaling_and_shared_mask():
    p, n = 0.3, 200_000
    x = backend.asarray(np.full(n, 2.0, dtype=np.float32))
    y, cache = dropout_forward(x, p, backend.default_rng(1))
    values = backend.to_numpy(y)
    kept = values != 0
    np.testing.assert_allclose(values[kept], 2.0 / 0.7, rtol=1e-6)  # survivors scaled by 1/(1-p)
    sigma = np.sqrt(n * p * (1 - p))  # binomial standard deviation of the dropped count
    assert abs((~kept).sum() - n * p) < 6 * sigma
    dx = backend.to_numpy(dropout_backward(backend.asarray(np.ones(n, dtype=np.float32)), cache))
    np.testing.assert_array_equal(dx != 0, kept)  # the backward drops exactly what the forward dropped
    np.testing.assert_allclose(dx[kept], 1.0 / 0.7, rtol=1e-6)


def test_same_seed_same_mask_other_seed_other_mask():
    x = randn(50, 40)
    first, _ = dropout_forward(x, 0.5, backend.default_rng(3))
    again, _ = dropout_forward(x, 0.5, backend.default_rng(3))
    other, _ = dropout_forward(x, 0.5, backend.default_rng(4))
    np.testing.assert_array_equal(backend.to_numpy(first), backend.to_numpy(again))
    assert not np.array_equal(backend.to_numpy(first), backend.to_numpy(other))


@given(
    shape=st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(1, 6)),
    p=st.floats(0.0, 0.9),
    seed=st.integers(0, 2**16),
)
def test_gradient(shape, p, seed):
    def forward(x):  # a fresh generator per call: every evaluation draws the same mask
        return dropout_forward(x, p, backend.default_rng(seed))

    rows = check_op("dropout", forward, dropout_backward, {"x": randn(*shape, seed=seed)})
    assert_gradients_pass(rows)


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5, "0.5", True, None])
def test_p_outside_0_1_is_refused(p):
    with pytest.raises(ValueError, match=r"p must be a finite number in \[0, 1\), got"):
        dropout_forward(randn(2, 3), p, backend.default_rng(0))


def test_rng_must_be_a_generator():
    with pytest.raises(TypeError, match="rng must be a numpy or cupy random Generator, got int"):
        dropout_forward(randn(2, 3), 0.5, 42)
