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
from ..ops.lora import lora_backward
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


def _lora_unscaled(index: int):
    """LoRA's gradient ``index`` (dx, dA, dB) with the scale alpha / r left out of the chain rule."""
    return lambda dy, c: lora_backward(dy, c._replace(scale=1.0, scaled_u=c.scaled_u / c.scale))[index]


def _lora_unmasked_dx(dy, cache):
    """LoRA's dx without the dropout's backward: du A^T as it is, the mask and 1 / (1 - p) not applied."""
    return lora_backward(dy, cache._replace(dropout=cache.dropout._replace(keep=None)))[0]


LORA_SCALE = (
    "yours leaves out the scale s = alpha / r: the forward multiplies the update by s, so every gradient of it "
    "carries s"
)
LORA_MASK = (
    "yours skips the dropout's backward: the forward drops the adapter's input, so dx is du A^T times the same "
    "mask and 1 / (1 - p)"
)
MISTAKES: dict[str, tuple[Mistake, ...]] = {  # by the backward they are mistakes of
    "lora_backward": (
        *(Mistake(arg, LORA_SCALE, _lora_unscaled(i)) for i, arg in enumerate(("x", "lora_a", "lora_b"))),
        Mistake("x", LORA_MASK, _lora_unmasked_dx),
    ),
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
