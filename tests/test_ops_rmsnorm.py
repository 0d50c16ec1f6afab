"""RMSNorm: a row by hand, rows of mean square 1, gradients on drawn shapes, PyTorch, bad input."""

import math

import numpy as np
import pytest
from helpers import assert_gradients_pass, randn
from hypothesis import given
from hypothesis import strategies as st

from numforge import backend
from numforge.gradcheck import check_op
from numforge.ops.rmsnorm import rms_norm_backward, rms_norm_forward


def test_row_by_hand():
    y, _ = rms_norm_forward(backend.asarray([[3.0, -4.0]]), backend.asarray([1.0, 2.0]), eps=0.0)
    s = math.sqrt((9.0 + 16.0) / 2)  # root mean square of [3, -4]
    np.testing.assert_allclose(backend.to_numpy(y), [[3.0 / s, -8.0 / s]], rtol=1e-15)


def test_without_weight_the_row_is_only_rescaled():
    x = randn(3, 4, 6)
    y, cache = rms_norm_forward(x, None, eps=0.0)
    rows = backend.to_numpy(x).reshape(-1, 6)
    rms = np.sqrt((rows**2).mean(axis=-1, keepdims=True))
    np.testing.assert_allclose(backend.to_numpy(y), (rows / rms).reshape(3, 4, 6), rtol=1e-14)
    assert cache.weight is None
    assert rms_norm_backward(randn(3, 4, 6, seed=1), cache)[1] is None


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_normalized_rows_have_mean_square_1(dtype):
    x = randn(4, 7, 33, dtype=dtype) * 5.0 + 3.0  # not centred: RMSNorm keeps the mean, it only rescales
    eps = 1e-6
    _, cache = rms_norm_forward(x, backend.asarray(np.ones(33), dtype=dtype), eps=eps)
    xhat = backend.to_numpy(cache.xhat).astype(np.float64)
    mean_square = backend.to_numpy(x).astype(np.float64).reshape(-1, 33) ** 2
    expected = mean_square.mean(axis=-1) / (mean_square.mean(axis=-1) + eps)  # 1 up to eps
    tol = 1e-6 if dtype == "float32" else 1e-14
    np.testing.assert_allclose((xhat**2).mean(axis=-1), expected, atol=tol)
    assert np.abs(xhat.mean(axis=-1)).min() > 0.1  # the rows' means are still there


@given(
    lead=st.lists(st.integers(1, 3), min_size=1, max_size=3),  # (N,), (B, T) or (B, H, T): QK-norm's shape
    width=st.integers(3, 8),  # at C = 2, dx is dy's one component across xhat: a dy along xhat leaves ~0
    weight=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_gradient(lead, width, weight, seed):
    # check_op draws dy with seed 1: x from seed 1 would be 2 dy, and dx (orthogonal to x) ~0 without a weight
    inputs = {"x": randn(*lead, width, seed=seed + 2) * 2.0, "weight": randn(width, seed=seed + 3) if weight else None}
    rows = check_op("rms_norm", rms_norm_forward, rms_norm_backward, inputs)
    assert [r.argument for r in rows] == (["x", "weight"] if weight else ["x"])
    assert_gradients_pass(rows)


@pytest.mark.parametrize("weight", [True, False])
def test_rows_of_dx_are_orthogonal_to_xhat_for_the_parameter_free_norm(weight):
    """dx = rstd (g - xhat mean(g xhat)), so <dx, xhat> = rstd (<g, xhat> - C mean(g xhat) mean(xhat^2)): zero when
    mean(xhat^2) = 1, i.e. at eps = 0, for any g; scaling a row does not change xhat."""
    x = randn(5, 9)
    _, cache = rms_norm_forward(x, randn(9, seed=1) if weight else None, eps=0.0)
    dx, _ = rms_norm_backward(randn(5, 9, seed=2), cache)
    dots = (backend.to_numpy(dx) * backend.to_numpy(cache.xhat)).sum(axis=-1)
    np.testing.assert_allclose(dots, 0.0, atol=1e-13)


def test_works_on_strided_input():
    """q and k reach QK-norm as views (B,T,H,D) -> (B,H,T,D): the result is that of a contiguous copy."""
    x = randn(2, 5, 3, 4).swapaxes(1, 2)  # (B,T,H,D) -> (B,H,T,D), not contiguous
    weight, dy = randn(4, seed=1), randn(2, 3, 5, 4, seed=2)
    y, cache = rms_norm_forward(x, weight)
    y_copy, cache_copy = rms_norm_forward(backend.asarray(backend.to_numpy(x).copy()), weight)
    np.testing.assert_array_equal(backend.to_numpy(y), backend.to_numpy(y_copy))
    for a, b in zip(rms_norm_backward(dy, cache), rms_norm_backward(dy, cache_copy)):
        np.testing.assert_array_equal(backend.to_numpy(a), backend.to_numpy(b))


def test_the_output_is_never_the_cached_xhat():
    """Without a weight y equals xhat; it is a copy, so a caller writing into y cannot change the backward."""
    x, dy = randn(3, 4), randn(3, 4, seed=1)
    y, cache = rms_norm_forward(x, None)
    dx_before = backend.to_numpy(rms_norm_backward(dy, cache)[0]).copy()
    y *= 0.0
    np.testing.assert_array_equal(backend.to_numpy(rms_norm_backward(dy, cache)[0]), dx_before)


def test_against_torch_forward_and_backward():
    torch = pytest.importorskip("torch")
    x, weight, dy = randn(2, 3, 4, 6), randn(6, seed=1), randn(2, 3, 4, 6, seed=2)
    eps = 1e-6
    for w in (weight, None):
        y, cache = rms_norm_forward(x, w, eps=eps)
        dx, dweight = rms_norm_backward(dy, cache)
        tx = torch.tensor(backend.to_numpy(x), requires_grad=True)
        tw = None if w is None else torch.tensor(backend.to_numpy(w), requires_grad=True)
        ty = torch.nn.functional.rms_norm(tx, (6,), tw, eps=eps)
        ty.backward(torch.tensor(backend.to_numpy(dy)))
        # Hugging Face's LlamaRMSNorm: x * rsqrt(mean(x^2) + eps), then times the weight
        hf = tx.detach() * torch.rsqrt(tx.detach().pow(2).mean(-1, keepdim=True) + eps)
        hf = hf if tw is None else tw.detach() * hf
        np.testing.assert_allclose(backend.to_numpy(y), ty.detach().numpy(), rtol=0, atol=1e-12)
        np.testing.assert_allclose(backend.to_numpy(y), hf.numpy(), rtol=0, atol=1e-12)
        np.testing.assert_allclose(backend.to_numpy(dx), tx.grad.numpy(), rtol=0, atol=1e-12)
        if w is None:
            assert dweight is None
        else:
            np.testing.assert_allclose(backend.to_numpy(dweight), tw.grad.numpy(), rtol=0, atol=1e-12)


def test_bad_input_is_named():
    x = randn(2, 3, 4)
    with pytest.raises(ValueError, match=r"weight must have shape \(4,\) to match x \(2, 3, 4\), got \(3,\)"):
        rms_norm_forward(x, randn(3))
    with pytest.raises(TypeError, match=r"weight must have x's dtype float64, got float32"):
        rms_norm_forward(x, randn(4, dtype="float32"))
    with pytest.raises(ValueError, match=r"weight must have 1 dimensions, got shape \(4, 1\)"):
        rms_norm_forward(x, randn(4, 1))
    with pytest.raises(ValueError, match="eps must be a number >= 0, got -1"):
        rms_norm_forward(x, None, eps=-1)
    with pytest.raises(ValueError, match="eps must be a number >= 0, got 'small'"):
        rms_norm_forward(x, None, eps="small")
    with pytest.raises(TypeError, match="x must be float32 or float64, got int64"):
        rms_norm_forward(backend.asarray(np.ones((2, 3), dtype=np.int64)), None)
    with pytest.raises(ValueError, match=r"x must have a last axis of at least 1 feature, got shape \(\)"):
        rms_norm_forward(randn(), None)


def test_upstream_gradient_of_another_shape_is_named():
    _, cache = rms_norm_forward(randn(2, 3, 4), randn(4))
    with pytest.raises(ValueError, match=r"dy must have the shape of x \(2, 3, 4\), got \(3, 2, 4\)"):
        rms_norm_backward(randn(3, 2, 4), cache)
