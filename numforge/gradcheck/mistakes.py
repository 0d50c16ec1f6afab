"""Known mistakes, each computed: the gradient a backward with that mistake returns, and the words for it.

A wrong gradient's scale and cosine (``diagnose.describe``) say how far off it
is, not why. A ``Mistake`` is the why, as math: the gradient of a plausible
wrong derivation (RoPE's forward rotation where its transpose goes, RMSNorm
with LayerNorm's mean term, a block whose skips pass no gradient, a tied table
that sums only one of its two uses), computed from the case's own ``dy`` and
cache. When the learner's gradient equals it, to rounding, the report names the
mistake. Bound to a case's ``dy`` and cache (``bound``), a mistake is a
diagnosis of ``diagnose.diagnosed``: ``notes(result, inputs)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..backend import to_numpy
from ..model.attention_branch import attention_branch_backward
from ..model.mlp_branch import mlp_branch_backward
from ..model.names import TOKEN_EMBEDDING
from ..ops.rope import rope_forward
from .check import relative_error

SAME = 1e-9  # a learner's gradient this close to a mistake's is that mistake (rounding apart)


@dataclass(frozen=True)
class Mistake:
    """``gradient(*context)``: the gradient of ``argument`` that a backward with this mistake returns."""

    argument: str
    words: str
    gradient: Callable

    def bound(self, *context) -> Found:
        return Found(self, context)


@dataclass(frozen=True)
class Found:
    """A mistake with the case's ``dy`` and cache: a diagnosis (``notes(result, inputs)``)."""

    mistake: Mistake
    context: tuple

    def notes(self, result, inputs) -> list[str]:
        if result.argument != self.mistake.argument or result.analytic is None:
            return []
        wrong = to_numpy(self.mistake.gradient(*self.context))
        mine = np.asarray(result.analytic)
        if wrong.shape != mine.shape or relative_error(mine, wrong) > SAME:
            return []
        return [self.mistake.words]


def _rms_with_mean(dy, cache):
    """LayerNorm's dx on RMSNorm's cache: rstd (g - mean(g) - xhat mean(g xhat))."""
    g = dy.reshape(cache.xhat.shape) * (1.0 if cache.weight is None else cache.weight)
    dx = g - g.mean(axis=-1, keepdims=True) - cache.xhat * (g * cache.xhat).mean(axis=-1, keepdims=True)
    return (cache.rstd * dx).reshape(dy.shape)


def _block_without(skips: set[str]):
    """A block's dx with the gradient of the ``skips`` ("mlp", "attention") left out of the residual sums."""

    def gradient(dy, cache, config):
        dx_mlp = mlp_branch_backward(dy, cache.mlp, config).dx
        dx = dx_mlp if "mlp" in skips else dy + dx_mlp
        dx_attention = attention_branch_backward(dx, cache.attention, config).dx
        return dx_attention if "attention" in skips else dx + dx_attention

    return gradient


SKIP = "each residual sum x + f(x) passes dy on unchanged: its gradient is dy plus what f's backward returns"
ROPE_FORWARD = (
    "yours is the forward's rotation of dy (by +angle, sin as it is): the backward is its transpose, the rotation "
    "by -angle: the sign of sin flips (R^T, not R)"
)
RMS_MEAN = (
    "yours has LayerNorm's mean term (- mean(g)): RMSNorm subtracts no mean from x, so its dx has only the term "
    "through rstd, - xhat mean(g xhat)"
)
MISTAKES: dict[str, tuple[Mistake, ...]] = {  # by the backward they are mistakes of
    "rope_backward": (Mistake("x", ROPE_FORWARD, lambda dy, c: rope_forward(dy, c.cos, c.sin)[0]),),
    "rms_norm_backward": (Mistake("x", RMS_MEAN, _rms_with_mean),),
    "block_backward": tuple(
        Mistake("x", f"yours leaves out the gradient of {which}: {SKIP}", _block_without(skips))
        for which, skips in (
            ("both skips", {"mlp", "attention"}),
            ("the skip around the MLP", {"mlp"}),
            ("the skip around attention", {"attention"}),
        )
    ),
}


def tied_sides(input_side, output_side) -> tuple[Mistake, ...]:
    """The tied table's two uses, each alone: ``input_side`` (the lookup's rows) and ``output_side``
    (``dlogits^T h``, the output layer's), arrays of the table's shape."""
    both = "the table is tied: the token embedding and the output layer, so its gradient is the sum of both uses"
    return (
        Mistake(TOKEN_EMBEDDING, f"yours is the input side only (the lookup's rows): {both}, + dlogits^T h",
                lambda: input_side),
        Mistake(TOKEN_EMBEDDING, f"yours is the output side only (dlogits^T h): {both}, + the lookup's rows",
                lambda: output_side),
    )  # fmt: skip
