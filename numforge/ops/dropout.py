"""Inverted dropout: zero each element with probability p, scale the survivors by 1/(1-p).

Shapes: x (...) -> y (...). The expectation of y equals x, so evaluation
(training=False) is the identity and needs no rescaling.
"""

from __future__ import annotations

from typing import NamedTuple

from ..backend import get_xp
from ..checks import check_float, check_number


class DropoutCache(NamedTuple):
    keep: object  # bool mask of x's shape, or None when the forward was the identity
    scale: float  # 1 / (1 - p)


def dropout_forward(x, p: float, rng, training: bool = True):
    """y = x * keep / (1 - p),  keep ~ Bernoulli(1 - p) drawn from ``rng``.

    ``rng`` is a generator of x's backend (``numforge.backend.default_rng`` or
    ``numpy/cupy.random.default_rng``); the caller owns it, so runs are reproducible.
    Identity (y is x) when p == 0 or not training.
    Example: p = 0.5, x = [1, 1, 1, 1], keep = [1, 0, 0, 1] -> y = [2, 0, 0, 2].
    """
    check_float(x, "x")
    check_number(p, "p", 0, 1, high_open=True)
    if not training or p == 0:
        return x, DropoutCache(None, 1.0)
    if not hasattr(rng, "random"):
        raise TypeError(f"rng must be a numpy or cupy random Generator, got {type(rng).__name__}")
    keep = rng.random(x.shape, dtype=x.dtype)  # uniform [0, 1), x's shape
    if get_xp(keep) is not get_xp(x):
        raise TypeError("rng must belong to x's backend (numpy arrays need a numpy Generator, cupy a cupy one)")
    keep = keep >= p
    scale = 1.0 / (1.0 - p)
    y = x * keep
    y *= scale
    return y, DropoutCache(keep, scale)


def dropout_backward(dy, cache: DropoutCache):
    """dx = dy * keep / (1 - p) (the same mask and scale as the forward); dx = dy (a copy) for the identity."""
    if cache.keep is None:
        return dy.copy()
    dx = dy * cache.keep  # forward: y = x * keep * scale
    dx *= cache.scale
    return dx
