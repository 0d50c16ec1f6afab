"""The MLP branch of a block: ``m = Drop(down_proj(act(up_proj(pre_mlp_norm(x)))))``.

A gated activation (SwiGLU) takes two projections of the same ``h``:
``act(gate_proj(h), up_proj(h))``, so in the backward ``dh`` is the sum of
the gate and up paths. The activation comes from ``ops.activations.ACTIVATIONS``.
"""

from __future__ import annotations

from typing import NamedTuple

from ..ops.activations import ACTIVATIONS
from .layers import (
    dropout_if,
    dropout_if_backward,
    linear_layer_backward,
    linear_layer_forward,
    no_record,
    norm_backward,
    norm_forward,
)


class MlpBranchCache(NamedTuple):
    norm: object
    up_proj: object
    gate_proj: object  # None unless the activation is gated (SwiGLU)
    activation: object
    down_proj: object
    dropout: object


def mlp_branch_forward(x, p, config, *, rng=None):
    """``Drop(down_proj(act(up_proj(pre_mlp_norm(x)))))``; gated (SwiGLU): ``act(gate_proj(h), up_proj(h))``."""
    B, T, C = x.shape
    h, norm_cache = norm_forward(x.reshape(B * T, C), p, "pre_mlp_norm", config)  # (B,T,C) -> (N,C)
    up, up_cache = linear_layer_forward(h, p, "mlp.up_proj")  # (N,C) -> (N,F)
    activation, gate_cache = ACTIVATIONS[config.activation], None
    if activation.gated:
        gate, gate_cache = linear_layer_forward(h, p, "mlp.gate_proj")  # (N,C) -> (N,F)
        act, act_cache = activation.forward(gate, up)  # (N,F)
    else:
        act, act_cache = activation.forward(up, **config.activation_options())  # (N,F)
    m, down_cache = linear_layer_forward(act, p, "mlp.down_proj")  # (N,F) -> (N,C)
    m, drop_cache = dropout_if(m, config, rng)
    return m.reshape(B, T, C), MlpBranchCache(norm_cache, up_cache, gate_cache, act_cache, down_cache, drop_cache)


def mlp_branch_backward(dm, cache: MlpBranchCache, config, record=no_record):
    """``(dx, grads)``; with a gated activation ``dh`` is the sum of the gate and up paths."""
    B, T, C = dm.shape
    dm = dropout_if_backward(dm.reshape(B * T, C), cache.dropout)  # (B,T,C) -> (N,C)
    # forward: m = down_proj(act)
    dact, down_grads = linear_layer_backward(dm, cache.down_proj, "mlp.down_proj")  # (N,C) -> (N,F)
    record("MLP activation (down_proj input)", dact, down_grads)
    activation = ACTIVATIONS[config.activation]
    if activation.gated:
        # forward: act = swiglu(gate, up); gate = gate_proj(h); up = up_proj(h)
        dgate, dup = activation.backward(dact, cache.activation)
        dh_gate, gate_grads = linear_layer_backward(dgate, cache.gate_proj, "mlp.gate_proj")
        record("MLP gate (pre-activation)", dgate, {})
        record("MLP up (pre-activation)", dup, {})
    else:
        # forward: act = gelu(up) or relu(up)
        dup, gate_grads = activation.backward(dact, cache.activation), {}
        record("MLP pre-activation", dup, {})
    dh, up_grads = linear_layer_backward(dup, cache.up_proj, "mlp.up_proj")  # (N,F) -> (N,C)
    if activation.gated:
        dh += dh_gate  # h feeds both projections: the two paths add
    record("pre-MLP norm output", dh, up_grads | gate_grads)
    # forward: h = pre_mlp_norm(x)
    dx, norm_grads = norm_backward(dh, cache.norm, "pre_mlp_norm", config)
    record("MLP branch -> residual", dx, norm_grads)
    return dx.reshape(B, T, C), down_grads | gate_grads | up_grads | norm_grads  # (N,C) -> (B,T,C)
