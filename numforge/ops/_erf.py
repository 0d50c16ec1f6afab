"""The error function for NumPy arrays, accurate to a few float64 ulp.

    erf(x) = 2/sqrt(pi) * integral_0^x exp(-t^2) dt,     erf(-x) = -erf(x)

NumPy has no erf, so this evaluates W. J. Cody's rational Chebyshev
approximations ("Rational Chebyshev approximations for the error function",
Mathematics of Computation 23, 1969, the near-minimax coefficients he
published for double precision) on three ranges of y = |x|:

    y <= 0.5       erf(y)  = y * R1(y^2)                        (no cancellation near 0)
    0.5 < y <= 4   erfc(y) = exp(-y^2) * R2(y)
    y > 4          erfc(y) = exp(-y^2) / y * (1/sqrt(pi) + z * R3(z)),   z = 1/y^2

where each R is a ratio of polynomials, and erf = 1 - erfc on the upper two
ranges. The same pieces give the normal CDF ``Phi(x) = erfc(-x/sqrt 2) / 2``
without the cancellation of ``(1 + erf(x/sqrt 2)) / 2`` for x << 0 (exact GELU
needs Phi to full relative precision in its left tail).

The polynomials are evaluated by Horner's rule in the input's dtype, so a
float32 input is computed and returned in float32. On CuPy, ``normal_cdf``
uses ``cupyx.scipy.special.ndtr``. (erf itself is assembled from the same
pieces in the tests, which check it against ``math.erf`` to a few ulp.)
"""

from __future__ import annotations

import math

from ..backend import get_xp

# erf(y) = y * P(y^2) / Q(y^2) for y <= 0.5; numerators highest power first.
_SMALL_NUM = (
    1.85777706184603153e-1,
    3.16112374387056560e00,
    1.13864154151050156e02,
    3.77485237685302021e02,
    3.20937758913846947e03,
)
_SMALL_DEN = (
    1.0,
    2.36012909523441209e01,
    2.44024637934444173e02,
    1.28261652607737228e03,
    2.84423683343917062e03,
)
# erfc(y) = exp(-y^2) * P(y) / Q(y) for 0.5 < y <= 4.
_MID_NUM = (
    2.15311535474403846e-8,
    5.64188496988670089e-1,
    8.88314979438837594e00,
    6.61191906371416295e01,
    2.98635138197400131e02,
    8.81952221241769090e02,
    1.71204761263407058e03,
    2.05107837782607147e03,
    1.23033935479799725e03,
)
_MID_DEN = (
    1.0,
    1.57449261107098347e01,
    1.17693950891312499e02,
    5.37181101862009858e02,
    1.62138957456669019e03,
    3.29079923573345963e03,
    4.36261909014324716e03,
    3.43936767414372164e03,
    1.23033935480374942e03,
)
# erfc(y) = exp(-y^2) / y * (1/sqrt(pi) - z * P(z) / Q(z)), z = 1/y^2, for y > 4.
_TAIL_NUM = (
    1.63153871373020978e-2,
    3.05326634961232344e-1,
    3.60344899949804439e-1,
    1.25781726111229246e-1,
    1.60837851487422766e-2,
    6.58749161529837803e-4,
)
_TAIL_DEN = (
    1.0,
    2.56852019228982242e00,
    1.87295284992346725e00,
    5.27905102951428412e-1,
    6.05183413124413191e-2,
    2.33520497626869185e-3,
)
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)


def _horner(coefficients: tuple[float, ...], t):
    """c[0] t^n + c[1] t^(n-1) + ... + c[n], by Horner's rule (Python-float coefficients keep t's dtype)."""
    result = coefficients[0] * t + coefficients[1]
    for c in coefficients[2:]:
        result *= t
        result += c
    return result


def _ratio(num: tuple[float, ...], den: tuple[float, ...], t):
    return _horner(num, t) / _horner(den, t)


def normal_cdf(x):
    """Phi(x) = erfc(-x / sqrt 2) / 2, the standard normal CDF, accurate in both tails.

    Written as ``(1 + erf(x / sqrt 2)) / 2`` it would lose all relative
    precision for x << 0 (1 + erf(-4.2) cancels to ~1e-8 with an absolute
    error of 1e-16); taking erfc directly keeps a few ulp everywhere.
    """
    xp = get_xp(x)
    if xp.__name__ == "cupy":
        import cupyx.scipy.special

        return cupyx.scipy.special.ndtr(x)
    z = x * _INV_SQRT_2
    y = abs(z)
    out = x.copy()  # every finite element is overwritten below; the copy fixes shape and dtype
    small = y <= 0.5
    out[small] = 0.5 + 0.5 * _erf_small(z[small])
    large = ~small & ~xp.isnan(y)
    half_erfc = 0.5 * _erfc_large(y[large])  # Phi(-|x|)
    out[large] = xp.where(z[large] < 0, half_erfc, 1.0 - half_erfc)
    return out


def _erf_small(t):
    """erf(t) for |t| <= 0.5: t * R1(t^2) (odd, so signed t works directly)."""
    return t * _ratio(_SMALL_NUM, _SMALL_DEN, t * t)


def _erfc_large(y):
    """erfc(y) for y > 0.5 by Cody's middle (y <= 4) and tail (y > 4) approximations."""
    xp = get_xp(y)
    out = xp.empty_like(y)
    mid = y <= 4.0
    ym = y[mid]
    out[mid] = _exp_minus_square(ym) * _ratio(_MID_NUM, _MID_DEN, ym)
    tail = ~mid
    # erfc(27) ~ 1e-319 underflows float64 anyway; the cap keeps y^2 and 1/y^2 finite for y = inf
    yt = xp.minimum(y[tail], 27.0)
    z = 1.0 / (yt * yt)
    out[tail] = _exp_minus_square(yt) / yt * (_INV_SQRT_PI - z * _ratio(_TAIL_NUM, _TAIL_DEN, z))
    return out


def _exp_minus_square(y):
    """exp(-y^2) without the rounding error of y^2 (which exp would turn into ~y^2 ulp).

    Split y = r + d with r = floor(16 y) / 16, so r^2 is exact for y <= 27, and
    y^2 = r^2 + d (y + r):  exp(-y^2) = exp(-r^2) * exp(-d (y + r)).  (Cody's trick.)
    """
    xp = get_xp(y)
    r = xp.floor(y * 16.0) / 16.0
    return xp.exp(-r * r) * xp.exp(-(y - r) * (y + r))
