"""Layer normalization over the last axis.

Shapes: x (..., C), weight (C,), bias (C,) or None -> y (..., C). The fast pair, then the textbook formula
that ``model/reference.py`` uses and the PyTorch twin (torch imported inside it).
"""

from __future__ import annotations

from typing import NamedTuple

from ..backend import get_xp
from ..checks import check_float, check_same_dtype, is_real
from ._sums import column_sums, row_sums


class LayerNormCache(NamedTuple):
    """What the backward needs. xhat is kept rather than recomputed from x: that spares the
    backward two passes over (..., C), for one more (..., C) array per norm layer."""

    x: object  # (..., C), the input by reference (no copy): numforge trace reads it
    xhat: object  # (N, C) normalized input rows (x - mean) * rstd, N = product of the leading axes
    rstd: object  # (N, 1) reciprocal standard deviation 1 / sqrt(var + eps)
    weight: object  # (C,)
    has_bias: bool


def layer_norm_forward(x, weight, bias=None, eps: float = 1e-5):
    """y = xhat * weight + bias,  xhat = (x - mean) / sqrt(var + eps),

    mean and (biased) var over the last axis. Example: x = [1, 2, 3], weight = 1,
    no bias, eps = 0 -> var = 2/3 and y = [-1.2247449, 0, 1.2247449]; every xhat
    row has mean 0 and variance 1 (up to eps).
    """
    check_float(x, "x")
    check_float(weight, "weight", ndim=1)
    width = x.shape[-1] if x.ndim else None
    for name, param in (("weight", weight), ("bias", bias)):
        if param is None:
            continue
        check_float(param, name, ndim=1)
        if param.shape[0] != width:
            raise ValueError(f"{name} must have shape ({width},) to match x {tuple(x.shape)}, got {tuple(param.shape)}")
        check_same_dtype(param, name, x, "x")
    if not (is_real(eps) and eps >= 0):
        raise ValueError(f"eps must be a number >= 0, got {eps!r}")
    xp = get_xp(x, weight, bias)
    rows = x.reshape(-1, width)  # (..., C) -> (N, C)
    mean = row_sums(rows)  # (N, C) -> (N,), one BLAS call
    mean /= width
    xhat = rows - mean[:, None]  # centred x, (N, C)
    var = xp.einsum("nc,nc->n", xhat, xhat)  # sum of squares, no (N, C) temporary; (N, C) -> (N,)
    var /= width
    var += eps
    rstd = xp.sqrt(var, out=var)[:, None]
    xp.divide(1.0, rstd, out=rstd)  # 1 / sqrt(var + eps), (N, 1)
    xhat *= rstd
    y = xhat * weight
    if bias is not None:
        y += bias
    return y.reshape(x.shape), LayerNormCache(x, xhat, rstd, weight, bias is not None)  # (N, C) -> (..., C)


def layer_norm_backward(dy, cache: LayerNormCache):
    """With g = dy * weight (the gradient reaching xhat) and means over the last axis:

        dx      = rstd * (g - mean(g) - xhat * mean(g * xhat))
        dweight = sum of dy * xhat over every leading axis
        dbias   = sum of dy over every leading axis

    The two means are the gradient flowing through mean(x) and var(x).
    Returns (dx, dweight, dbias); dbias is None when the forward had no bias.
    """
    xhat, rstd, weight = cache.xhat, cache.rstd, cache.weight
    if tuple(dy.shape) != tuple(cache.x.shape):
        raise ValueError(f"dy must have the shape of x {tuple(cache.x.shape)}, got {tuple(dy.shape)}")
    xp = get_xp(dy, xhat)
    dy_rows = dy.reshape(xhat.shape)  # (..., C) -> (N, C)
    # forward: y = xhat * weight + bias
    dweight = xp.einsum("nc,nc->c", dy_rows, xhat)  # (N, C) -> (C,)
    dbias = column_sums(dy_rows) if cache.has_bias else None  # (N, C) -> (C,)
    g = dy_rows * weight  # dL/dxhat, (N, C)
    # forward: xhat = (x - mean(x)) * rstd(x); project out the mean and variance directions
    width = xhat.shape[1]
    g_mean = row_sums(g)[:, None]  # (N, C) -> (N, 1)
    g_mean /= width
    gx_mean = xp.einsum("nc,nc->n", g, xhat)[:, None]  # (N, C) -> (N, 1)
    gx_mean /= width
    dx = g
    dx -= g_mean
    dx -= xhat * gx_mean
    dx *= rstd
    return dx.reshape(dy.shape), dweight, dbias  # (N, C) -> (..., C)


def layer_norm_textbook(x, weight, bias=None, eps: float = 1e-5):
    """``y = xhat weight + bias`` (no bias: no ``+ bias``), ``xhat = (x - mean) / sqrt(var + eps)`` over the last
    axis, as the textbook writes it."""
    xhat, _ = _textbook_xhat(x, eps)  # (...,C)
    y = xhat * weight  # (...,C) * (C,) -> (...,C)
    return y if bias is None else y + bias


def layer_norm_textbook_backward(dy, x, weight, bias=None, eps: float = 1e-5):
    """``(dx, dweight, dbias)``: ``dx = rstd (g - mean(g) - xhat mean(g xhat))`` with ``g = dy weight``, means over
    the last axis; ``dweight = sum of dy xhat``, ``dbias = sum of dy`` (None without a bias) over every leading
    axis. ``xhat`` and ``rstd`` are recomputed from ``x``."""
    xhat, rstd = _textbook_xhat(x, eps)  # (...,C), (...,1)
    leading = tuple(range(dy.ndim - 1))
    g = dy * weight  # (...,C): the gradient reaching xhat
    dx = rstd * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))  # (...,C)
    dbias = None if bias is None else dy.sum(axis=leading)  # (C,)
    return dx, (dy * xhat).sum(axis=leading), dbias  # (...,C), (C,), (C,)


def _textbook_xhat(x, eps: float):
    """``(xhat, rstd)``: ``rstd = 1 / sqrt(var + eps)``, ``xhat = (x - mean) rstd``, mean and biased var over the
    last axis."""
    mean = x.mean(axis=-1, keepdims=True)  # (...,C) -> (...,1)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)  # (...,1), the biased variance
    rstd = 1.0 / get_xp(x).sqrt(var + eps)  # (...,1)
    return (x - mean) * rstd, rstd  # (...,C), (...,1)


def layer_norm_torch(x, weight, bias=None, eps: float = 1e-5):
    import torch.nn.functional as functional

    return functional.layer_norm(x, x.shape[-1:], weight, bias, eps)
