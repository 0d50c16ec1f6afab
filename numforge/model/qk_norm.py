"""QK-norm's extent, ``QK_NORM_EXTENTS`` by ``config.qk_norm_extent``: what one norm of q (or k) covers.

``"head"``: each head's ``D`` values, with a ``(D,)`` weight shared by the heads (Qwen3, nanochat).
``"projection"``: the whole projection's ``H D`` values of a position (``H_kv D`` for k), with an
``(H D,)`` weight, as if before the split into heads (OLMoE: ``q_norm(q_proj(h))``, then the split). The
norm is the same op either way (``config.norm``, over the last axis); a projection-wide one runs on the
heads side by side::

    q (B,H,T,D) --swap H and T--> (B,T,H,D) --reshape--> (B,T,H D)   rows of the whole projection
    norm over the last axis: y (B,T,H D) --reshape, swap back--> (B,H,T,D)

and its backward walks the same view: ``dy`` to rows, the norm's backward, back to heads. Being per
position, either extent normalizes new positions alone, so KV-cache decoding needs nothing more.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from ..backend import get_xp
from .layers import norm_backward, norm_forward


class QKNormExtent(NamedTuple):
    width: Callable[[int, int], int]  # (heads, D) -> the width of the norm's weight
    over: str  # what one norm covers, in words (the study's equations)
    to_rows: Callable  # heads (B,H,T,D) -> what the norm normalizes over its last axis
    from_rows: Callable  # (the norm's output, H) -> heads (B,H,T,D)


def _identity(x, heads: int | None = None):
    return x


def _projection_rows(x):
    """``(B,H,T,D)`` -> ``(B,T,H D)``: each position's heads side by side (NumPy, CuPy and torch alike)."""
    B, H, T, D = x.shape
    return x.swapaxes(1, 2).reshape(B, T, H * D)  # (B,H,T,D) -> (B,T,H,D) -> (B,T,H D)


def _projection_heads(y, heads: int):
    """``(B,T,H D)`` -> ``(B,H,T,D)``, the inverse of ``_projection_rows``."""
    B, T, width = y.shape
    return y.reshape(B, T, heads, width // heads).swapaxes(1, 2)  # (B,T,H D) -> (B,T,H,D) -> (B,H,T,D)


QK_NORM_EXTENTS = {  # config.qk_norm_extent -> QKNormExtent
    "head": QKNormExtent(lambda heads, D: D, "each head's D values", _identity, _identity),
    "projection": QKNormExtent(
        lambda heads, D: heads * D, "the whole projection's H D values", _projection_rows, _projection_heads
    ),
}


def qk_norm_forward(x, p, name: str, config):
    """``config.norm`` of heads ``x (B,H,T,D)`` over ``config.qk_norm_extent``'s values with the weight
    ``p[name.weight]``: ``(y (B,H,T,D) contiguous, the norm's cache)``."""
    extent = QK_NORM_EXTENTS[config.qk_norm_extent]
    y, cache = norm_forward(extent.to_rows(x), p, name, config)  # over D, or (B,T,H D)
    return get_xp(y).ascontiguousarray(extent.from_rows(y, x.shape[1])), cache  # -> (B,H,T,D)


def qk_norm_backward(dy, cache, name: str, config):
    """``(dx (B,H,T,D), {name.weight: dweight})``: the norm's backward on the same rows as the forward."""
    extent = QK_NORM_EXTENTS[config.qk_norm_extent]
    dx, grads = norm_backward(extent.to_rows(dy), cache, name, config)  # (B,H,T,D) -> rows
    return get_xp(dx).ascontiguousarray(extent.from_rows(dx, dy.shape[1])), grads  # rows -> (B,H,T,D)
