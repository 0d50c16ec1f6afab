"""Soft-capping ``y = c tanh(z / c)``: Gemma 2's smooth bound on attention scores and on the final logits.

Shapes: ``z (...)`` -> ``y (...)``, elementwise; ``c > 0`` a number. Near 0 it is the identity
(``tanh(u) ~ u``), and ``|y| < c`` always: a score or a logit can no longer grow without bound.
Example: c = 2, z = [0, 2, 100] -> y = [0, 1.5231884, 2.0]. transformers writes it as three steps,
``z / c``, ``tanh``, ``* c``; so does the forward, so that float32 rounds alike.

Backward: with ``t = tanh(z / c)``, ``dy/dz = c (1 - t^2) / c = 1 - t^2 = 1 - (y / c)^2``, so
``dz = dy (1 - (y / c)^2)``: the slope is read from the capped values themselves, nothing else kept.
The attention kernels and the loss head use ``softcap_slope`` on what they hold (``ops/scores.py``,
``ops/cross_entropy.py``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from ..backend import get_xp
from ..checks import check_float, is_real


class SoftcapCache(NamedTuple):
    """The capped values ``y`` (the slope ``1 - (y / c)^2`` is computed from them) and ``c``."""

    capped: object  # (...) y = c tanh(z / c)
    cap: float


def check_cap(cap: object, name: str = "cap") -> float:
    """``cap`` as a positive finite Python float, else a ValueError naming it."""
    if not is_real(cap) or not (cap > 0 and math.isfinite(cap)):
        raise ValueError(f"{name} must be a positive finite number (the soft cap c of c tanh(z / c)), got {cap!r}")
    return float(cap)


def softcap_in_place(z, cap: float):
    """``z <- c tanh(z / c)``, in place (the kernels' and the loss's tiles); returns ``z``."""
    xp = get_xp(z)
    z /= cap
    xp.tanh(z, out=z)
    z *= cap
    return z


def softcap_slope(capped, cap: float):
    """``dy/dz = 1 - (y / c)^2`` from the capped values ``y``, a new array."""
    slope = capped / cap
    slope *= slope
    return get_xp(capped).subtract(1.0, slope, out=slope)


def softcap_forward(z, cap: float):
    """``y = c tanh(z / c)`` (module docstring); returns ``(y, SoftcapCache)``."""
    check_float(z, "z")
    cap = check_cap(cap)
    y = softcap_in_place(z.copy(), cap)
    return y, SoftcapCache(y, cap)


def softcap_backward(dy, cache: SoftcapCache):
    """``dz = dy (1 - (y / c)^2)``."""
    dz = softcap_slope(cache.capped, cache.cap)  # forward: y = c tanh(z / c)
    dz *= dy
    return dz


def softcap_textbook(z, cap: float):
    """``c tanh(z / c)``."""
    return cap * get_xp(z).tanh(z / cap)


def softcap_textbook_backward(dy, z, cap: float):
    """``(dz,)``: ``d/dz c tanh(z / c) = 1 - tanh(z / c)^2``."""
    return (dy * (1.0 - get_xp(z).tanh(z / cap) ** 2),)


def softcap_torch(z, cap: float):
    import torch

    return torch.tanh(z / cap) * cap
