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
``OpCheck``s, defined here with the inputs' makers and the ``Invariant``s of its gradients (LayerNorm's
rows of ``dx`` sum to 0); ``gradcheck/ops.py`` runs one case per check, so a component is checked as soon as
it is entered. Sizes are small and odd on purpose (``T = 3``, ``C = 5``) so a
transposed or mis-broadcast axis cannot hide behind a square shape.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..backend import asarray, to_numpy

B, T, C, F = 2, 3, 5, 4  # batch, sequence, model width, feed-forward width of the checks
EXACT = 1e-6  # a relative residual below this is "the same up to rounding" (the checker's threshold is 1e-7)


@dataclass(frozen=True)
class Invariant:
    """What the true gradient of ``argument`` satisfies: ``terms(inputs, grad)`` sum to 0 along ``axis`` (up to
    ``tol`` of their absolute sum). ``statement`` says what holds, ``term`` which part of the backward makes it
    hold: what a gradient that breaks it is missing."""

    argument: str
    statement: str
    term: str
    terms: Callable[[Mapping, np.ndarray], np.ndarray]
    axis: int = -1
    tol: float = EXACT

    def values(self, inputs: Mapping, grad) -> np.ndarray:
        """The sums that are zero for the true gradient, flat, in float64."""
        return self._sums(inputs, grad)[0]

    def _sums(self, inputs: Mapping, grad) -> tuple[np.ndarray, np.ndarray]:
        numpy_inputs = {k: (to_numpy(v) if hasattr(v, "shape") else v) for k, v in inputs.items()}
        terms = np.asarray(self.terms(numpy_inputs, np.asarray(grad, dtype=np.float64)), dtype=np.float64)
        return terms.sum(axis=self.axis).reshape(-1), np.abs(terms).sum(axis=self.axis).reshape(-1)

    def holds(self, inputs: Mapping, grad) -> bool:
        sums, size = self._sums(inputs, grad)
        return bool(np.all(np.abs(sums) <= self.tol * np.maximum(size, 1e-300)))

    def notes(self, result, inputs: Mapping) -> list[str]:
        if result.argument != self.argument or result.analytic is None or result.reference is None:
            return []
        if not self.holds(inputs, result.reference):
            return []  # not an invariant of this case (it cannot name a missing term)
        if self.holds(inputs, result.analytic):
            return [f"still true of yours: {self.statement}"]
        mine, true = self.values(inputs, result.analytic), self.values(inputs, result.reference)
        shown = ", ".join(f"{v:.3g}" for v in mine[:4]) + (", ..." if mine.size > 4 else "")
        return [
            f"{self.statement} for the true gradient (to {np.max(np.abs(true)):.1e}), but yours gives {shown}: "
            f"{self.term} is missing or wrong"
        ]


class OpCheck(NamedTuple):
    """One gradient check: ``y, cache = forward(*inputs().values(), **options())``, then every float input of
    ``inputs()`` (None: an absent parameter, whose gradient must be None) against central differences;
    ``invariants``: what every right gradient of the op satisfies, by which the grader says what a learner's
    wrong one misses (``gradcheck/diagnose.py``)."""

    name: str  # the case's name (``numforge gradcheck --only NAME``)
    inputs: Callable[[], dict]  # the forward's positional arguments by name, in order, float64
    options: Callable[[], dict] = dict  # keyword arguments held fixed (GELU's approximate, RoPE's cos and sin)
    invariants: tuple[Invariant, ...] = ()


def normal(*shape: int, seed: int = 0, scale: float = 1.0):
    """Standard normal float64 values times ``scale``, ``shape``, on the default backend."""
    return asarray(scale * np.random.default_rng(seed).standard_normal(shape), dtype="float64")


def away_from_zero(*shape: int, seed: int = 0):
    """Normal values pushed at least 0.1 from 0, so a kink at 0 (ReLU's) stays outside the finite-difference step."""
    x = np.random.default_rng(seed).standard_normal(shape)
    return asarray(np.sign(x) * (np.abs(x) + 0.1), dtype="float64")
