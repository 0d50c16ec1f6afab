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

from ..backend import get_xp, to_numpy
from ..model.attention_branch import attention_branch_backward
from ..model.mlp_branch import mlp_branch_backward
from ..model.names import TOKEN_EMBEDDING
from ..ops.activations import swiglu_forward
from ..ops.linear import linear_backward
from ..ops.lora import lora_backward
from ..ops.moe import moe_backward
from ..ops.rope import rope_forward
from . import window_mistakes
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
        wrong = self.mistake.gradient(*self.context)
        if wrong is None:  # a mistake this case cannot show (the renormalisation's, on gates not renormalised)
            return []
        wrong, mine = to_numpy(wrong), np.asarray(result.analytic)
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


MOE_ARGUMENTS = ("h", "w_router", "w_gate", "w_up", "w_down")  # moe_forward's arrays, moe_backward's order


def _moe_experts_over_all_pairs(argument: str, idle_too: bool):
    """Each expert's weight gradient taken over all N k routed pairs, not over its own run: the sum of every
    expert's true gradient, given to each expert that received a row (or, ``idle_too``, to every expert: a
    mistake of its own only where an expert received none)."""

    def gradient(dy, cache, daux=1.0):
        if idle_too and bool((cache.load > 0).all()):
            return None
        true = moe_backward(dy, cache, daux)[MOE_ARGUMENTS.index(argument)]  # (E, ., .)
        routed = (cache.load > 0) | idle_too  # (E,)
        return true.sum(axis=0, keepdims=True) * routed.reshape(-1, 1, 1)

    return gradient


def _scattered(cache, chosen_values):
    """(N, k) values on the chosen experts of each row -> (N, E), zero elsewhere."""
    xp = get_xp(cache.probs)
    dp = xp.zeros_like(cache.probs)
    dp[xp.arange(len(dp))[:, None], cache.chosen] = chosen_values
    return dp


def _moe_gate_parts(dy, cache):
    """``(dg (N, k), S (N, 1), dp (N, E))``: the gates' gradient dg_j = dy . o_j, the chosen probabilities' sum
    and the true gradient of p from the gates (``demos/derivations/moe.md``, the renormalisation)."""
    xp = get_xp(cache.probs)
    n, top_k = cache.chosen.shape
    out = xp.empty_like(cache.out)
    out[cache.order] = cache.out  # sorted -> (row, choice) order
    dgates = (out.reshape(n, top_k, -1) * dy.reshape(n, 1, -1)).sum(axis=2)  # (N, k)
    total = xp.take_along_axis(cache.probs, cache.chosen, axis=1).sum(axis=1, keepdims=True)  # (N, 1) S
    dchosen = (dgates - (cache.gates * dgates).sum(axis=1, keepdims=True)) / total if cache.renormalize else dgates
    return dgates, total, _scattered(cache, dchosen)


def _moe_router_with(argument: str, wrong_dp):
    """The gradient of ``argument`` (h or w_router) when the router receives ``wrong_dp(dy, cache, dg, S)``
    (N, E) as the gradient of p from the gates, in place of the true one; None where the mistake cannot be made.
    The softmax's backward is linear in dp, so the difference is ``p * (Δ - sum_e p_e Δ_e)`` through z = h W_r."""

    def gradient(dy, cache, daux=1.0):
        dgates, total, dp = _moe_gate_parts(dy, cache)
        wrong = wrong_dp(dy, cache, dgates, total)
        if wrong is None:
            return None
        delta = wrong - dp  # (N, E)
        ddz = cache.probs * (delta - (cache.probs * delta).sum(axis=1, keepdims=True))  # (N, E)
        dh, dw_router, _ = linear_backward(ddz, cache.router)  # forward: z = h W_r
        true = moe_backward(dy, cache, daux)[MOE_ARGUMENTS.index(argument)]
        return true + (dh.reshape(true.shape) if argument == "h" else dw_router)

    return gradient


def _soft_choice(dy, cache, dgates, total):
    """dp_e = dy . expert_e(h) for every expert, chosen or not: the dense mixture y = sum_e p_e expert_e(h)."""
    rows, dy = cache.router.x, dy.reshape(len(cache.probs), -1)  # (N, C) each
    outs = [swiglu_forward(rows @ wg, rows @ wu)[0] @ wd for wg, wu, wd in zip(*cache.experts)]  # E x (N, C)
    return get_xp(rows).stack([(o * dy).sum(axis=1) for o in outs], axis=1)  # (N, E)


def _no_renorm_jacobian(dy, cache, dgates, total):
    """dp_{c_j} = dg_j: the gates taken as p_{c_j}, though they are p_{c_j} / S."""
    return _scattered(cache, dgates) if cache.renormalize else None


def _constant_total(dy, cache, dgates, total):
    """dp_{c_j} = dg_j / S: S held constant, though every chosen p is in it."""
    return _scattered(cache, dgates / total) if cache.renormalize else None


MOE_OWN_ROWS = (
    "yours gives each expert the gradient of all N k routed (row, choice) pairs, every expert's own summed: "
    "expert e's weights meet only the rows routed to it, so its gradient sums over its own run of the sorted "
    "pairs (an expert that receives no row gets 0)"
)
MOE_SOFT_CHOICE = (
    "yours lets the top-k choice carry gradient: it is the router gradient of the dense mixture "
    "y = sum_e p_e expert_e(h), every expert's gate gradient dy . o_e, chosen or not; the choice is piecewise "
    "constant in the logits, so an expert not chosen has no gate and dp_e = 0"
)
MOE_NO_JACOBIAN = (
    "yours leaves out the renormalisation's Jacobian (dp_{c_j} = dg_j): the gates are g_j = p_{c_j} / S, so "
    "dp_{c_j} = (dg_j - sum_i g_i dg_i) / S"
)
MOE_CONSTANT_S = (
    "yours holds the renormalisation's sum S constant (dp_{c_j} = dg_j / S): every chosen p is in S = sum_i p_{c_i}, "
    "so dp_{c_j} = (dg_j - sum_i g_i dg_i) / S"
)
MOE_MISTAKES = (
    *(Mistake(w, MOE_OWN_ROWS, _moe_experts_over_all_pairs(w, idle)) for w in MOE_ARGUMENTS[2:] for idle in (0, 1)),
    *(
        Mistake(argument, words, _moe_router_with(argument, wrong))
        for words, wrong in (
            (MOE_SOFT_CHOICE, _soft_choice),
            (MOE_NO_JACOBIAN, _no_renorm_jacobian),
            (MOE_CONSTANT_S, _constant_total),
        )
        for argument in MOE_ARGUMENTS[:2]
    ),
)  # each bound to (dy, cache) of a check, and daux where the auxiliary losses are on


def _window_argument(mistake, index: int):
    """Gradient ``index`` (dq, dk, dv) of a windowed tiled backward with ``mistake`` (``window_mistakes.py``)."""

    def gradient(dy, cache):
        grads = mistake(dy, cache)
        return None if grads is None else grads[index]

    return gradient


WINDOW_UNMASKED = (
    "yours rebuilds the probabilities P = exp(S - L) of the tiles the window crosses without its mask: a key "
    "outside the window has S' = -inf, so P = 0 exactly and dS = P (dP - D) = 0; recompute each tile with the "
    "terms the forward added (the tile's masked flag, from _query_tiles)"
)
WINDOW_CROSSED = (
    "yours skips every tile a mask crosses (the window's left edge, the diagonal): only a tile hidden from every "
    "query of it is all zeros; a tile partly inside the window is visited, with the mask added"
)
WINDOW_EDGE = (
    "yours skips the key tile the window's left edge crosses (it starts before the first key the query tile "
    "sees, yet holds keys some of its queries see): walk every key tile that meets [i - W + 1, i] for some "
    "query i of the tile, from lo = max(k_start, that first key)"
)
WINDOW_DROPPED = (
    "yours drops the window from the scores' seam: it walks and recomputes P as if query i saw every key the "
    "other masks allow; the backward's P must be the forward's, exp(S + M - L) with the window's M "
    "(-inf unless i - W < j <= i), on the tiles the window leaves"
)
WINDOW_MISTAKES = tuple(
    Mistake(argument, words, _window_argument(mistake, index))
    for words, mistake in (
        (WINDOW_UNMASKED, window_mistakes.unmasked),
        (WINDOW_CROSSED, window_mistakes.crossed_skipped),
        (WINDOW_EDGE, window_mistakes.edge_skipped),
        (WINDOW_DROPPED, window_mistakes.window_dropped),
    )
    for index, argument in enumerate(("q", "k", "v"))
)  # each bound to (dy, cache) of a tiled attention check; None where the case has no window


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
    "moe_backward": MOE_MISTAKES,
    "flash_attention_backward": WINDOW_MISTAKES,
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
