"""Linear (affine) map over the last axis: y = x W + b.

Shapes: x (..., C_in), weight (C_in, C_out), bias (C_out,) or None -> y (..., C_out).
The weight is stored input-major, as in ``y = x W``, so no transpose is needed forward.
"""

from __future__ import annotations

from typing import NamedTuple

from ..backend import get_xp
from ..checks import check_float, check_same_dtype
from ._sums import column_sums


class LinearCache(NamedTuple):
    x: object  # the input, kept by reference (no copy): dweight = x^T dy needs it
    weight: object  # dx = dy W^T needs it
    has_bias: bool


def linear_forward(x, weight, bias=None):
    """y = x W + b. Example: x = [[1, 2]], W = [[1, 0, 1], [0, 1, 1]], b = [0, 0, 1] -> [[1, 2, 4]]."""
    check_float(x, "x")
    check_float(weight, "weight", ndim=2)
    if x.ndim < 1 or x.shape[-1] != weight.shape[0]:
        raise ValueError(
            f"x's last axis must match weight's first (C_in = {weight.shape[0]}), "
            f"got x {tuple(x.shape)} and weight {tuple(weight.shape)}"
        )
    check_same_dtype(weight, "weight", x, "x")
    xp = get_xp(x, weight, bias)
    y = xp.matmul(x, weight)  # (..., C_in) -> (..., C_out)
    if bias is not None:
        check_float(bias, "bias", ndim=1)
        if bias.shape[0] != weight.shape[1]:
            raise ValueError(f"bias must have shape ({weight.shape[1]},), got {tuple(bias.shape)}")
        check_same_dtype(bias, "bias", x, "x")
        y += bias
    return y, LinearCache(x, weight, bias is not None)


def linear_input_backward(dy, cache: LinearCache):
    """dx = dy W^T alone: the backward of a frozen layer (LoRA's base, ``ops/lora.py``), which makes no dweight."""
    return get_xp(dy, cache.weight).matmul(dy, cache.weight.T)  # forward: y = x W; (..., C_out) -> (..., C_in)


def linear_backward(dy, cache: LinearCache):
    """dx = dy W^T,  dweight = x^T dy (summed over every leading axis),  dbias = sum of dy over rows.

    Returns (dx, dweight, dbias); dbias is None when the forward had no bias.
    """
    x, weight = cache.x, cache.weight
    xp = get_xp(dy, x, weight)
    c_in, c_out = weight.shape
    dx = xp.matmul(dy, weight.T)  # forward: y = x W, so dx = dy W^T; (..., C_out) -> (..., C_in)
    rows_x = x.reshape(-1, c_in)  # (..., C_in) -> (N, C_in)
    rows_dy = dy.reshape(-1, c_out)  # (..., C_out) -> (N, C_out)
    dweight = xp.matmul(rows_x.T, rows_dy)  # (C_in, N) @ (N, C_out) -> (C_in, C_out)
    dbias = column_sums(rows_dy) if cache.has_bias else None  # forward: y += b; (N, C_out) -> (C_out,)
    return dx, dweight, dbias
