"""Layer norm: the normalized rows, a hand-computed row, gradients on drawn shapes, bad input."""

import math

import numpy as np
import pytest
from helpers import assert_gradients_pass, randn
from hypothesis import given
from hypothesis import strategies as st

from numforge import backend
from numforge.gradcheck import check_op
from numforge.ops.layernorm import layer_norm_backward, layer_norm_forward


def test_row_by_hand():
    y, _ = layer_norm_forward(backend.asarray([[1.0, 2.0, 3.0]]), backend.asarray([1.0, 1.0, 1.0]), eps=0.0)
    s = math.sqrt(1.5)  # var = 2/3, so (x - 2) / sqrt(2/3) = [-sqrt(3/2), 0, sqrt(3/2)]
    np.testing.assert_allclose(backend.to_numpy(y), [[-s, 0.0, s]], rtol=1e-15)


def test_affine_part_by_hand():
    weight, bias = backend.asarray([2.0, 3.0]), backend.asarray([1.0, -1.0])
    y, _ = layer_norm_forward(backend.asarray([[5.0, 7.0]]), weight, bias, eps=0.0)
    np.testing.assert_allclose(backend.to_numpy(y), [[2.0 * -1.0 + 1.0, 3.0 * 1.0 - 1.0]], rtol=1e-15)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_normalized_rows_have_mean_0_and_variance_1(dtype):
    x = randn(4, 7, 33, dtype=dtype) * 5.0 + 3.0
    y, _ = layer_norm_forward(x, backend.asarray(np.ones(33), dtype=dtype), eps=0.0)
    rows = backend.to_numpy(y).astype(np.float64)
    tol = 1e-5 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(rows.mean(axis=-1), 0.0, atol=tol)
    np.testing.assert_allclose(rows.var(axis=-1), 1.0, atol=tol)


@given(
    lead=st.lists(st.integers(1, 3), min_size=1, max_size=2),  # (N,) or (B, T), T = 1 included
    width=st.integers(3, 7),  # at C = 2 every row normalizes to +-1, dx ~ eps: nothing to check
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_gradient(lead, width, bias, seed):
    inputs = {
        "x": randn(*lead, width, seed=seed) * 2.0,
        "weight": randn(width, seed=seed + 1),
        "bias": randn(width, seed=seed + 2) if bias else None,
    }
    rows = check_op("layer_norm", layer_norm_forward, layer_norm_backward, inputs)
    assert len(rows) == (3 if bias else 2)
    assert_gradients_pass(rows)


def test_bad_input_is_named():
    x = randn(2, 3, 4)
    with pytest.raises(ValueError, match=r"weight must have shape \(4,\) to match x \(2, 3, 4\), got \(3,\)"):
        layer_norm_forward(x, randn(3))
    with pytest.raises(TypeError, match=r"bias must have x's dtype float64, got float32"):
        layer_norm_forward(x, randn(4), randn(4, dtype="float32"))
    with pytest.raises(ValueError, match=r"weight must have 1 dimensions, got shape \(4, 1\)"):
        layer_norm_forward(x, randn(4, 1))
    with pytest.raises(ValueError, match="eps must be a number >= 0, got -1"):
        layer_norm_forward(x, randn(4), eps=-1)
    with pytest.raises(ValueError, match="eps must be a number >= 0, got True"):
        layer_norm_forward(x, randn(4), eps=True)


def test_upstream_gradient_of_another_shape_is_named():
    _, cache = layer_norm_forward(randn(2, 3, 4), randn(4))
    with pytest.raises(ValueError, match=r"dy must have the shape of x \(2, 3, 4\), got \(3, 2, 4\)"):
        layer_norm_backward(randn(3, 2, 4), cache)
