"""ReLU, GELU (tanh and exact), SwiGLU, and the erf behind exact GELU."""

import math
import warnings

import numpy as np
import pytest
from helpers import assert_gradients_pass, randn
from hypothesis import given
from hypothesis import strategies as st

from numforge import backend
from numforge.backend import get_xp
from numforge.gradcheck import check_op
from numforge.ops._erf import _erf_small, _erfc_large, normal_cdf
from numforge.ops.activations import (
    gelu_backward,
    gelu_forward,
    relu_backward,
    relu_forward,
    swiglu_backward,
    swiglu_forward,
)

GELU_GRAD_ROOT = -0.7518  # Phi(x) + x phi(x) = 0 (the tanh form's root differs by < 1e-3)
SILU_GRAD_ROOT = -1.2785  # sigma(g) (1 + g (1 - sigma(g))) = 0
shapes_3d = st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(1, 6))  # (B, T, F), T = 1 included


def erf_numpy(x):
    """erf from the pieces normal_cdf is built of (Cody's three rational approximations); NaN stays NaN."""
    xp = get_xp(x)
    y = abs(x)
    out = x.copy()  # every finite element is overwritten below; the copy fixes shape and dtype
    small = y <= 0.5
    out[small] = _erf_small(x[small])
    large = y > 0.5
    out[large] = xp.copysign(1.0 - _erfc_large(y[large]), x[large])
    return out


def _ulp_error(values, exact):
    return np.max(np.abs(values - exact) / np.spacing(np.abs(exact)).clip(min=np.finfo(np.float64).smallest_subnormal))


def test_erf_matches_math_erf_to_a_few_ulp_over_a_wide_range():
    x = np.concatenate(
        [
            np.linspace(-30.0, 30.0, 120_001),  # includes every range boundary (0.5, 4) and the far tails
            np.geomspace(1e-300, 8.0, 4000),  # tiny arguments, where erf(x) ~ 2x/sqrt(pi)
            -np.geomspace(1e-300, 8.0, 4000),
            [0.5, np.nextafter(0.5, 1.0), 4.0, np.nextafter(4.0, 5.0), 5.9, 6.0],
        ]
    )
    exact = np.array([math.erf(v) for v in x])
    assert _ulp_error(erf_numpy(x), exact) <= 4.0


def test_erf_special_values():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e300])
    got = erf_numpy(x)
    np.testing.assert_array_equal(got[:4], [0.0, -0.0, 1.0, -1.0])
    assert np.signbit(got[1])
    assert np.isnan(got[4]) and got[5] == 1.0


def test_erf_float32_stays_float32_and_is_accurate():
    x = np.linspace(-6, 6, 2001, dtype=np.float32)
    got = erf_numpy(backend.asarray(x))
    assert got.dtype == np.float32
    exact = np.array([math.erf(float(v)) for v in x])
    assert np.max(np.abs(backend.to_numpy(got) - exact)) < 2e-7


def test_relu_at_known_points():
    y, _ = relu_forward(backend.asarray([-2.0, -0.0, 0.0, 0.5, 3.0]))
    np.testing.assert_array_equal(backend.to_numpy(y), [0.0, 0.0, 0.0, 0.5, 3.0])
    _, cache = relu_forward(backend.asarray([-1.0, 0.0, 2.0]))
    dx = relu_backward(backend.asarray([5.0, 5.0, 5.0]), cache)
    np.testing.assert_array_equal(backend.to_numpy(dx), [0.0, 0.0, 5.0])  # derivative at 0 taken as 0


def _gelu_tanh_by_hand(x):
    return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_gelu_at_known_points(approximate):
    points = [-3.0, -1.0, 0.0, 0.5, 1.0, 2.0]
    if approximate == "none":
        expected = [x * 0.5 * (1.0 + math.erf(x / math.sqrt(2.0))) for x in points]
    else:
        expected = [_gelu_tanh_by_hand(x) for x in points]
    y, _ = gelu_forward(backend.asarray(points), approximate=approximate)
    np.testing.assert_allclose(backend.to_numpy(y), expected, rtol=1e-14, atol=1e-16)
    assert abs(float(y[4]) - (0.8413447460685429 if approximate == "none" else 0.8411919906082768)) < 1e-15


def test_normal_cdf_keeps_relative_precision_in_both_tails():
    x = np.concatenate([np.linspace(-37.0, 8.0, 2001), [0.0, -0.7, 0.7]])
    # the same rounded argument z = x * (1/sqrt 2) as the implementation: Phi's condition number
    # is ~x^2 in the left tail, so a different rounding of z alone would cost ~x^2 ulp
    exact = np.array([0.5 * math.erfc(-z) for z in x * (1.0 / math.sqrt(2.0))])
    got = backend.to_numpy(normal_cdf(backend.asarray(x)))
    assert _ulp_error(got, exact) <= 8  # (1 + erf(x/sqrt2))/2 is off by ~1e8 ulp already at x = -6


@pytest.mark.parametrize("x", [-12.0, -6.0, -4.0, 6.0])
def test_gelu_tails_keep_relative_precision(x):
    exact_none = x * 0.5 * math.erfc(-x / math.sqrt(2.0))
    u = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
    exact_tanh = x / (1.0 + math.exp(-2.0 * u))  # x (1 + tanh u) / 2 without the cancellation
    for approximate, exact in [("none", exact_none), ("tanh", exact_tanh)]:
        y, _ = gelu_forward(backend.asarray([x]), approximate=approximate)
        # 1e-12 allows the tails' own conditioning (~x^2 ulp); 1 + tanh(u) would be off by 6e-12 at x = -6
        assert float(y[0]) == pytest.approx(exact, rel=1e-12, abs=0.0), approximate


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_far_tails_give_exact_limits_without_warnings(dtype):
    # exp overflows in the sigmoid past x ~ -10.1 (float32) or -21.2 (float64) for GELU, -88.7 or -709.8 for
    # SiLU; the results are the limits
    x = backend.asarray([-1e4, -50.0, 50.0, 1e4], dtype=dtype)
    dy = backend.asarray([1.0, 1.0, 1.0, 1.0], dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y, cache = gelu_forward(x, approximate="tanh")
        dx = gelu_backward(dy, cache)
        silu_up, swiglu_cache = swiglu_forward(x, dy)  # silu(g) * 1
        dgate, _ = swiglu_backward(dy, swiglu_cache)
    np.testing.assert_array_equal(backend.to_numpy(y), [0.0, 0.0, 50.0, 1e4])
    np.testing.assert_array_equal(backend.to_numpy(dx), [0.0, 0.0, 1.0, 1.0])
    np.testing.assert_array_equal(backend.to_numpy(silu_up)[[0, 3]], [0.0, 1e4])
    np.testing.assert_array_equal(backend.to_numpy(dgate)[[0, 3]], [0.0, 1.0])


def test_gelu_tanh_is_close_to_exact_gelu():
    x = randn(1000, seed=3) * 3.0
    exact, _ = gelu_forward(x, approximate="none")
    approx, _ = gelu_forward(x, approximate="tanh")
    gap = np.max(np.abs(backend.to_numpy(exact) - backend.to_numpy(approx)))
    assert 1e-5 < gap < 1e-3  # the tanh form is an approximation, a good one


def test_swiglu_at_known_points():
    gate = backend.asarray([0.0, 1.0, -1.0, 2.0])
    up = backend.asarray([3.0, 2.0, 2.0, -1.0])
    expected = [g / (1.0 + math.exp(-g)) * u for g, u in zip([0.0, 1.0, -1.0, 2.0], [3.0, 2.0, 2.0, -1.0])]
    y, _ = swiglu_forward(gate, up)
    np.testing.assert_allclose(backend.to_numpy(y), expected, rtol=1e-14)


@given(shape=shapes_3d, seed=st.integers(0, 2**16))
def test_relu_gradient(shape, seed):
    x = backend.to_numpy(randn(*shape, seed=seed))
    x = backend.asarray(np.sign(x) * (np.abs(x) + 0.01))  # keep the kink outside the finite-difference step
    assert_gradients_pass(check_op("relu", relu_forward, relu_backward, {"x": x}))


@given(shape=shapes_3d, seed=st.integers(0, 2**16), approximate=st.sampled_from(["tanh", "none"]))
def test_gelu_gradient(shape, seed, approximate):
    x = backend.to_numpy(randn(*shape, seed=seed) * 3.0)
    # GELU'(x) = 0 at x ~ -0.7518: next to it the gradient is smaller than the finite-difference
    # noise, so a relative error means nothing there (the kink rule of the ReLU test, for a root)
    x = backend.asarray(np.where(np.abs(x - GELU_GRAD_ROOT) < 0.02, x + 0.1, x))
    assert_gradients_pass(check_op("gelu", gelu_forward, gelu_backward, {"x": x}, {"approximate": approximate}))


@given(shape=shapes_3d, seed=st.integers(0, 2**16))
def test_swiglu_gradient(shape, seed):
    gate = backend.to_numpy(randn(*shape, seed=seed) * 3.0)
    gate = np.where(np.abs(gate - SILU_GRAD_ROOT) < 0.02, gate + 0.1, gate)  # silu'(g) = 0 there
    inputs = {"gate": backend.asarray(gate), "up": randn(*shape, seed=seed + 1)}
    assert_gradients_pass(check_op("swiglu", swiglu_forward, swiglu_backward, inputs))


def test_bad_input_is_named():
    x = randn(2, 3)
    with pytest.raises(ValueError, match=r"approximate must be one of \('tanh', 'none'\), got 'erf'"):
        gelu_forward(x, approximate="erf")
    with pytest.raises(TypeError, match="x must be float32 or float64, got int"):
        relu_forward(backend.asarray([1, 2]))
    with pytest.raises(TypeError, match="x must be a numpy or cupy array, got list"):
        gelu_forward([1.0, 2.0])
    with pytest.raises(ValueError, match=r"gate and up must have one shape, got \(2, 3\) and \(3, 2\)"):
        swiglu_forward(x, randn(3, 2))
    with pytest.raises(TypeError, match="up must have gate's dtype float64, got float32"):
        swiglu_forward(x, randn(2, 3, dtype="float32"))
