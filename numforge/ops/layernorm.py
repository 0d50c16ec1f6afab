"""Layer normalization over the last axis.

Shapes: x (..., C), weight (C,), bias (C,) or None -> y (..., C).
"""

from __future__ import annotations

from typing import NamedTuple

from ..backend import check_float, get_xp


class LayerNormCache(NamedTuple):
    """What the backward needs. xhat = (x - mean) * rstd is recomputed, not cached:
    x is already alive (it is the residual stream, referenced here without a copy),
    so caching xhat would hold one more (..., C) array per norm layer for the whole
    step, to save one subtract and one multiply in the backward."""

    x: object  # (..., C), by reference
    mean: object  # (..., 1)
    rstd: object  # (..., 1) reciprocal standard deviation 1 / sqrt(var + eps)
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
        if param.shape[0] != width or param.dtype != x.dtype:
            raise ValueError(
                f"{name} must have shape ({width},) and dtype {x.dtype} to match x {tuple(x.shape)}, "
                f"got {tuple(param.shape)} {param.dtype}"
            )
    if not (isinstance(eps, (int, float)) and eps >= 0):
        raise ValueError(f"eps must be a number >= 0, got {eps!r}")
    xp = get_xp(x, weight, bias)
    mean = x.mean(axis=-1, keepdims=True)  # (..., C) -> (..., 1)
    y = x - mean  # centred x, (..., C)
    var = xp.einsum("...c,...c->...", y, y)[..., None]  # sum of squares, no (..., C) temporary; (..., C) -> (..., 1)
    var /= width
    var += eps
    rstd = xp.sqrt(var, out=var)
    xp.reciprocal(rstd, out=rstd)  # 1 / sqrt(var + eps)
    y *= rstd  # xhat
    y *= weight
    if bias is not None:
        y += bias
    return y, LayerNormCache(x, mean, rstd, weight, bias is not None)


def layer_norm_backward(dy, cache: LayerNormCache):
    """With g = dy * weight (the gradient reaching xhat) and means over the last axis:

        dx      = rstd * (g - mean(g) - xhat * mean(g * xhat))
        dweight = sum of dy * xhat over every leading axis
        dbias   = sum of dy over every leading axis

    The two means are the gradient flowing through mean(x) and var(x).
    Returns (dx, dweight, dbias); dbias is None when the forward had no bias.
    """
    x, mean, rstd, weight = cache.x, cache.mean, cache.rstd, cache.weight
    xp = get_xp(dy, x)
    width = x.shape[-1]
    xhat = x - mean
    xhat *= rstd  # recomputed: forward xhat = (x - mean) * rstd
    # forward: y = xhat * weight + bias
    dweight = xp.einsum("nc,nc->c", dy.reshape(-1, width), xhat.reshape(-1, width))  # (N, C) -> (C,)
    dbias = dy.reshape(-1, width).sum(axis=0) if cache.has_bias else None  # (N, C) -> (C,)
    g = dy * weight  # dL/dxhat
    # forward: xhat = (x - mean(x)) * rstd(x); project out the mean and variance directions
    g_mean = g.mean(axis=-1, keepdims=True)  # (..., C) -> (..., 1)
    gx_mean = xp.einsum("...c,...c->...", g, xhat)[..., None]  # (..., C) -> (..., 1)
    gx_mean /= width
    dx = g
    dx -= g_mean
    xhat *= gx_mean
    dx -= xhat
    dx *= rstd
    return dx, dweight, dbias
