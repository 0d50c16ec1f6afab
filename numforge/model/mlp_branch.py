"""The MLP branch of a block: ``m = Drop(down_proj(act(*projections(pre_mlp_norm(x)))))``; with ``post_norms``
``m = Drop(post_mlp_norm(down_proj(...)))`` (Gemma 2/3's sandwich).

The activation comes from ``ops.activations.ACTIVATIONS`` and declares its inputs: ``("up",)`` (GELU, ReLU)
or ``("gate", "up")`` (SwiGLU). Input ``name`` is the projection ``mlp.{name}_proj`` of the same normalized
``h`` (``names.projection``), so in the backward ``dh`` is the sum of one path per input.
"""

from __future__ import annotations

from typing import NamedTuple

from ..ops.activations import ACTIVATIONS
from .layers import (
    dropout_if,
    dropout_if_backward,
    linear_layer_backward,
    linear_layer_forward,
    norm_backward,
    norm_forward,
)
from .names import DOWN_PROJ, POST_MLP_NORM, PRE_MLP_NORM, projection


class MlpBranchCache(NamedTuple):
    norm: object
    projections: tuple  # the linear caches of the activation's inputs, in its order
    activation: object
    down_proj: object
    dropout: object
    post_norm: object = None  # post_mlp_norm's cache (post_norms), else None

    @property
    def aux_loss(self):
        """A dense MLP adds nothing to the model's loss (an MLP with experts does: ``moe_branch.py``)."""
        return None


def mlp_branch_forward(x, p, config, *, rng=None):
    """``Drop(down_proj(act(*[projection(h) per input])))``, ``h = pre_mlp_norm(x)``.

    GELU: ``act(up_proj(h))``; SwiGLU: ``act(gate_proj(h), up_proj(h))``."""
    B, T, C = x.shape
    h, norm_cache = norm_forward(x.reshape(B * T, C), p, PRE_MLP_NORM, config)  # (B,T,C) -> (N,C)
    activation = ACTIVATIONS[config.activation]
    projected = [linear_layer_forward(h, p, projection(name), rng) for name in activation.inputs]  # each (N,C) -> (N,F)
    act, act_cache = activation.forward(*(y for y, _ in projected), **config.activation_options())  # (N,F)
    m, down_cache = linear_layer_forward(act, p, DOWN_PROJ, rng)  # (N,F) -> (N,C)
    post_cache = None
    if config.post_norms:
        m, post_cache = norm_forward(m, p, POST_MLP_NORM, config)  # (N,C): Gemma's norm after the branch
    m, drop_cache = dropout_if(m, config, rng)
    projection_caches = tuple(cache for _, cache in projected)
    cache = MlpBranchCache(norm_cache, projection_caches, act_cache, down_cache, drop_cache, post_cache)
    return m.reshape(B, T, C), cache


class MlpBackward(NamedTuple):
    """What ``mlp_branch_backward`` made, by reference: ``dx`` and ``grads`` go on into the block; the rest are
    the gradients on the way, in the order they were made (the study tools show them)."""

    dx: object  # (B,T,C) into the residual
    grads: dict  # short name -> gradient: down_proj's, each projection's, the norm's
    dact: object  # (N,F) the activation's output, down_proj's input
    dinputs: tuple  # (N,F) each: the activation's inputs, in its order (GELU: up; SwiGLU: gate, up)
    dh: object  # (N,C) the norm's output, which feeds every projection: the sum of their paths


def mlp_branch_backward(dm, cache: MlpBranchCache, config) -> MlpBackward:
    """``MlpBackward(dx, grads, ...)``; ``h`` feeds every input's projection, so ``dh`` is the sum of their paths."""
    B, T, C = dm.shape
    dm = dropout_if_backward(dm.reshape(B * T, C), cache.dropout)  # (B,T,C) -> (N,C)
    post_grads = {}
    if cache.post_norm is not None:  # forward: m = post_mlp_norm(m)
        dm, post_grads = norm_backward(dm, cache.post_norm, POST_MLP_NORM, config)
    # forward: m = down_proj(act)
    dact, down_grads = linear_layer_backward(dm, cache.down_proj, DOWN_PROJ)  # (N,C) -> (N,F)
    activation = ACTIVATIONS[config.activation]
    # forward: act = activation(*inputs); input name = name_proj(h)
    dinputs = activation.gradients(dact, cache.activation)  # one (N,F) per input, in its order
    dhs, grads = [], {}
    for name, dinput, projection_cache in zip(activation.inputs, dinputs, cache.projections):
        dh_path, path_grads = linear_layer_backward(dinput, projection_cache, projection(name))  # (N,F) -> (N,C)
        dhs.append(dh_path)
        grads |= path_grads
    dh = dhs[0]
    for dh_path in dhs[1:]:
        dh += dh_path  # h feeds every projection: the paths add
    # forward: h = pre_mlp_norm(x)
    dx, norm_grads = norm_backward(dh, cache.norm, PRE_MLP_NORM, config)
    grads = post_grads | down_grads | grads | norm_grads
    return MlpBackward(dx.reshape(B, T, C), grads, dact, tuple(dinputs), dh)  # (N,C) -> (B,T,C)
