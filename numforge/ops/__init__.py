"""Operations: a ``*_forward`` returning ``(y, cache)`` and a ``*_backward`` returning the gradients
in the order of the forward's array arguments.

The caches are ``NamedTuple``s, and their field names are part of the op contract: the model's backward
reads them, and so do the study tools (``numforge.study``: trace, attention maps, the backward stage by
stage, the logit lens, the inspector page), which show what a cache holds, by name, never recomputing it:
``AttentionCache.probs``, ``FlashAttentionCache.q, .k, .lse, .scale`` (the tiled weights are rebuilt as
``exp(S - lse)``), ``LayerNormCache.x``, ``LinearCache.x``, the activations' inputs, ... Renaming or
repurposing a field is a change of the public interface, made together with its readers (the study
tests fail otherwise).

Every op file is also an exercise (``numforge gradcheck --write-exercise``, ``gradcheck/exercise.py``)
as soon as a gradient-check case names its backward; the exercise removes the backward, the helpers
only it uses, its docstring, and every paragraph or section of the module docstring that begins with
"Backward": that is where a module docstring states the backward's formulas.

A component's registry entry (``ACTIVATIONS``, ``NORMS``, ``POSITIONS``) lists its gradient checks as
``OpCheck``s, defined here with the inputs' makers; ``gradcheck/ops.py`` runs one case per check, so a
component is checked as soon as it is entered. Sizes are small and odd on purpose (``T = 3``, ``C = 5``) so a
transposed or mis-broadcast axis cannot hide behind a square shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ..backend import asarray

B, T, C, F = 2, 3, 5, 4  # batch, sequence, model width, feed-forward width of the checks


class OpCheck(NamedTuple):
    """One gradient check: ``y, cache = forward(*inputs().values(), **options())``, then every float input of
    ``inputs()`` (None: an absent parameter, whose gradient must be None) against central differences."""

    name: str  # the case's name (``numforge gradcheck --only NAME``)
    inputs: Callable[[], dict]  # the forward's positional arguments by name, in order, float64
    options: Callable[[], dict] = dict  # keyword arguments held fixed (GELU's approximate, RoPE's cos and sin)


def normal(*shape: int, seed: int = 0, scale: float = 1.0):
    """Standard normal float64 values times ``scale``, ``shape``, on the default backend."""
    return asarray(scale * np.random.default_rng(seed).standard_normal(shape), dtype="float64")


def away_from_zero(*shape: int, seed: int = 0):
    """Normal values pushed at least 0.1 from 0, so a kink at 0 (ReLU's) stays outside the finite-difference step."""
    x = np.random.default_rng(seed).standard_normal(shape)
    return asarray(np.sign(x) * (np.abs(x) + 0.1), dtype="float64")
