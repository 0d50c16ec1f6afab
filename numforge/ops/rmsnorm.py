"""Root-mean-square normalization over the last axis (Llama's RMSNorm; nanochat's without a weight; Gemma's,
whose weight is zero-centred: ``y = xhat (1 + weight)``, the ``rms_norm_offset_*`` pair).

Shapes: x (..., C), weight (C,) or None -> y (..., C). The model calls it on its (B, T, C) rows and,
for QK-norm, on each head's q and k, (B, H, T, D) with a weight of shape (D,). The fast pair, then the textbook
formula that ``model/reference.py`` uses and the PyTorch twin (torch imported inside it).
"""

from __future__ import annotations

from typing import NamedTuple

from ..backend import get_xp
from ..checks import check_float, check_same_dtype, is_real


class RMSNormCache(NamedTuple):
    """What the backward needs. xhat is kept rather than recomputed from x and rstd: that spares the backward
    a pass over (..., C), for one more (..., C) array per norm. x itself is not needed (xhat and rstd say all)."""

    x: object  # (..., C), the input by reference (no copy): numforge trace reads it
    xhat: object  # (N, C) normalized input rows x * rstd, N = product of the leading axes
    rstd: object  # (N, 1) reciprocal root mean square 1 / sqrt(mean(x^2) + eps)
    weight: object  # (C,), or None for the parameter-free norm


def rms_norm_forward(x, weight=None, eps: float = 1e-6):
    """y = xhat * weight,  xhat = x * rstd,  rstd = 1 / sqrt(mean(x^2) + eps),

    the mean over the last axis; without a weight, y = xhat. Unlike LayerNorm nothing is subtracted: a
    row keeps its mean and only its scale is normalized. Example: x = [3, -4], no weight, eps = 0 ->
    mean(x^2) = 12.5 and y = [0.8485281, -1.1313708]; every xhat row has mean square 1 (up to eps).
    Without a weight y is a copy of xhat, never the cached array itself: a caller that writes into y
    cannot change what the backward reads.
    """
    check_float(x, "x")
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ValueError(f"x must have a last axis of at least 1 feature, got shape {tuple(x.shape)}")
    width = x.shape[-1]
    if weight is not None:
        check_float(weight, "weight", ndim=1)
        if weight.shape[0] != width:
            raise ValueError(
                f"weight must have shape ({width},) to match x {tuple(x.shape)}, got {tuple(weight.shape)}"
            )
        check_same_dtype(weight, "weight", x, "x")
    if not (is_real(eps) and eps >= 0):
        raise ValueError(f"eps must be a number >= 0, got {eps!r}")
    xp = get_xp(x, weight)
    rows = x.reshape(-1, width)  # (..., C) -> (N, C); a copy only when x is a strided view
    mean_square = xp.einsum("nc,nc->n", rows, rows)  # sum of squares, no (N, C) temporary; (N, C) -> (N,)
    mean_square /= width
    mean_square += eps
    rstd = xp.sqrt(mean_square, out=mean_square)[:, None]
    xp.divide(1.0, rstd, out=rstd)  # 1 / sqrt(mean(x^2) + eps), (N, 1)
    xhat = rows * rstd  # (N, C)
    y = xhat * weight if weight is not None else xhat.copy()
    return y.reshape(x.shape), RMSNormCache(x, xhat, rstd, weight)  # (N, C) -> (..., C)


def rms_norm_backward(dy, cache: RMSNormCache):
    """With g = dy * weight (dy without a weight: the gradient reaching xhat) and means over the last axis:

        dx      = rstd * (g - xhat * mean(g * xhat))
        dweight = sum of dy * xhat over every leading axis

    The mean is the gradient flowing through rstd(x): LayerNorm's variance path. There is no mean path,
    since nothing was subtracted. Returns (dx, dweight); dweight is None when the forward had no weight.
    """
    xhat, rstd, weight = cache.xhat, cache.rstd, cache.weight
    if tuple(dy.shape) != tuple(cache.x.shape):
        raise ValueError(f"dy must have the shape of x {tuple(cache.x.shape)}, got {tuple(dy.shape)}")
    xp = get_xp(dy, xhat)
    dy_rows = dy.reshape(xhat.shape)  # (..., C) -> (N, C)
    # forward: y = xhat * weight
    dweight = xp.einsum("nc,nc->c", dy_rows, xhat) if weight is not None else None  # (N, C) -> (C,)
    g = dy_rows * weight if weight is not None else dy_rows  # dL/dxhat, (N, C); dy itself is only read
    # forward: xhat = x * rstd(x), rstd = (mean(x^2) + eps)^(-1/2); project out the direction of xhat
    gx_mean = xp.einsum("nc,nc->n", g, xhat)[:, None]  # (N, C) -> (N, 1)
    gx_mean /= xhat.shape[1]
    dx = xhat * gx_mean  # (N, C)
    xp.subtract(g, dx, out=dx)
    dx *= rstd
    return dx.reshape(dy.shape), dweight  # (N, C) -> (..., C)


def rms_norm_textbook(x, weight=None, eps: float = 1e-6):
    """``y = xhat weight`` (no weight: ``y = xhat``), ``xhat = x / sqrt(mean(x^2) + eps)`` over the last axis
    (nothing subtracted), as the textbook writes it."""
    xhat, _ = _textbook_xhat(x, eps)  # (...,C)
    return xhat if weight is None else xhat * weight  # (...,C)


def rms_norm_textbook_backward(dy, x, weight=None, eps: float = 1e-6):
    """``(dx, dweight)``: ``dx = rstd (g - xhat mean(g xhat))`` with ``g = dy weight`` (or ``dy``), the mean over
    the last axis (only the scale path: nothing was subtracted); ``dweight = sum of dy xhat`` over every leading
    axis (None without a weight). ``xhat`` and ``rstd`` are recomputed from ``x``."""
    xhat, rstd = _textbook_xhat(x, eps)  # (...,C), (...,1)
    g = dy if weight is None else dy * weight  # (...,C): the gradient reaching xhat
    dx = rstd * (g - xhat * (g * xhat).mean(axis=-1, keepdims=True))  # (...,C)
    dweight = None if weight is None else (dy * xhat).sum(axis=tuple(range(dy.ndim - 1)))  # (C,)
    return dx, dweight


def _textbook_xhat(x, eps: float):
    """``(xhat, rstd)``: ``rstd = 1 / sqrt(mean(x^2) + eps)`` over the last axis, ``xhat = x rstd``."""
    rstd = 1.0 / get_xp(x).sqrt((x**2).mean(axis=-1, keepdims=True) + eps)  # (...,1)
    return x * rstd, rstd  # (...,C), (...,1)


def rms_norm_torch(x, weight=None, eps: float = 1e-6):
    import torch.nn.functional as functional

    return functional.rms_norm(x, x.shape[-1:], weight, eps)


# ---------------------------------------------------------------- Gemma's: a zero-centred weight, y = xhat (1 + w)


def rms_norm_offset_forward(x, weight, eps: float = 1e-6):
    """``y = xhat * (1 + weight)``, ``xhat`` as in ``rms_norm_forward`` (Gemma's RMSNorm: its weight starts at 0,
    the norm at the identity scale). The forward is ``rms_norm_forward`` with the weight ``1 + weight``, which its
    cache keeps. Shapes: x (..., C), weight (C,) -> y (..., C). Example: weight 0 gives xhat itself.
    """
    check_float(weight, "weight", ndim=1)
    return rms_norm_forward(x, 1.0 + weight, eps)


def rms_norm_offset_backward(dy, cache: RMSNormCache):
    """``d(1 + weight)/dweight = 1``: the gradients of ``rms_norm_backward`` with the weight ``1 + weight``
    (its ``dx`` uses ``g = dy (1 + weight)``). Returns (dx, dweight)."""
    return rms_norm_backward(dy, cache)


def rms_norm_offset_textbook(x, weight, eps: float = 1e-6):
    """``y = xhat (1 + weight)``, ``xhat = x / sqrt(mean(x^2) + eps)``."""
    return rms_norm_textbook(x, 1.0 + weight, eps)  # (...,C)


def rms_norm_offset_textbook_backward(dy, x, weight, eps: float = 1e-6):
    """``(dx, dweight)`` of ``rms_norm_textbook_backward`` with the weight ``1 + weight``: ``dweight = sum dy xhat``."""
    return rms_norm_textbook_backward(dy, x, 1.0 + weight, eps)


def rms_norm_offset_torch(x, weight, eps: float = 1e-6):
    import torch.nn.functional as functional

    return functional.rms_norm(x, x.shape[-1:], 1.0 + weight, eps)
