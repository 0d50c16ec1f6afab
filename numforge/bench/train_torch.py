"""The same GPT written with PyTorch autograd: the reference for speed and for correctness.

Used only by ``numforge bench train`` and by ``tests/test_model_vs_torch.py``,
both of which run only when torch happens to be installed (it is never a
dependency of numforge). The network reads numforge's parameter dict and its
fixed position tables (``GPT.position_tables``), so both implementations run
on identical weights; dropout is not modelled. Every component numforge
registers brings its torch twin in its registry entry (``torch``): the norms
(``F.layer_norm``, ``F.rms_norm``), the activations, the rotation of q and k
(Hugging Face's ``rotate_half``), and the score modifiers (the causal mask, ALiBi)
as an additive float ``attn_mask`` (``ops.scores.torch_attention_options``), a transform of the scores
(Gemma 2's softcap) on scores written out (``ops.scores.torch_transform``);
grouped-query attention is ``scaled_dot_product_attention(enable_gqa=True)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..backend import to_numpy
from ..model.moe_branch import WEIGHTS
from ..model.names import (
    DOWN_PROJ,
    FINAL_NORM,
    K_NORM,
    LM_HEAD,
    OUT_PROJ,
    POST_ATTN_NORM,
    POST_MLP_NORM,
    PRE_ATTN_NORM,
    PRE_MLP_NORM,
    Q_NORM,
    QKV_PROJ,
    TOKEN_EMBEDDING,
    projection,
)
from ..model.positions import POSITIONS, layer_tables
from ..model.qk_norm import QK_NORM_EXTENTS
from ..ops.activations import ACTIVATIONS
from ..ops.moe import moe_torch
from ..ops.norms import NORMS
from ..ops.scores import torch_attention_options, torch_transform
from ..ops.softcap import softcap_torch


def torch_params(params: dict, requires_grad: bool = True) -> dict:
    """numforge params (name -> array) as leaf torch tensors (copies)."""
    return {name: torch.tensor(to_numpy(p).copy(), requires_grad=requires_grad) for name, p in params.items()}


def torch_tables(model) -> dict:
    """A model's fixed position tables as torch tensors."""
    return {name: torch.tensor(to_numpy(table)) for name, table in model.position_tables.items()}


def torch_loss(p: dict, config, ids, targets, tables: dict | None = None):
    """The mean cross-entropy of numforge's GPT (``model/gpt.py``), by torch autograd ops, plus with experts the
    layers' auxiliary losses (``ops.moe.moe_torch``: the pairs sorted by expert, one product per expert)."""
    B, T = ids.shape
    scheme, tables = POSITIONS[config.position], tables or {}
    x = p[TOKEN_EMBEDDING][ids]  # (B,T) -> (B,T,C)
    if config.scale_embeddings:
        x = x * math.sqrt(config.d_model)
    if scheme.added is not None:
        x = x + {**p, **tables}[scheme.added][:T]
    aux_loss = 0.0  # the experts' auxiliary losses, summed over the layers
    for i in range(config.num_layers):
        layer = {n[len(f"layers.{i}.") :]: t for n, t in p.items() if n.startswith(f"layers.{i}.")}
        a = _attention_branch(_norm(x, layer, PRE_ATTN_NORM, config), layer, config, i, tables)  # (B,T,C)
        x = x + (_norm(a, layer, POST_ATTN_NORM, config) if config.post_norms else a)
        h = _norm(x, layer, PRE_MLP_NORM, config)
        if config.num_experts:  # experts: moe_torch, its auxiliary loss added to the model's
            m, aux, _ = moe_torch(h, *(layer[f"{name}.weight"] for name in WEIGHTS), **config.experts_options())
            x, aux_loss = x + m, aux_loss + aux
            continue
        activation = ACTIVATIONS[config.activation]
        inputs = [_linear(h, layer, projection(name)) for name in activation.inputs]  # each (B,T,C) -> (B,T,F)
        act = activation.torch(*inputs, **config.activation_options())  # (B,T,F)
        m = _linear(act, layer, DOWN_PROJ)  # (B,T,F) -> (B,T,C)
        x = x + (_norm(m, layer, POST_MLP_NORM, config) if config.post_norms else m)
    h = _norm(x, p, FINAL_NORM, config)
    unembedding = p[TOKEN_EMBEDDING] if config.tie_weights else p[LM_HEAD]
    logits = h @ unembedding.T  # (B,T,C) -> (B,T,V)
    if config.logit_softcap is not None:
        logits = softcap_torch(logits, config.logit_softcap)  # c tanh(z / c)
    return F.cross_entropy(logits.view(B * T, -1), targets.view(-1), ignore_index=-1) + aux_loss


def _attention_branch(h, layer: dict, config, i: int, tables: dict):
    """Layer ``i``'s ``out_proj(attention(q, k, v))`` on the normalized ``h (B,T,C)``: SDPA with the modifiers'
    float mask, or with a transform of the scores (softcap) the scores written out, transformed, masked."""
    B, T, _ = h.shape
    H, H_kv, D = config.num_heads, config.num_kv_heads, config.head_dim
    scheme = POSITIONS[config.position]
    qkv = _linear(h, layer, QKV_PROJ)  # (B,T,C) -> (B,T,(H + 2 H_kv) D)
    q, k, v = qkv.split([H * D, H_kv * D, H_kv * D], dim=-1)
    q = q.view(B, T, H, D).transpose(1, 2)  # (B,H,T,D)
    k, v = (t.view(B, T, H_kv, D).transpose(1, 2) for t in (k, v))  # (B,H_kv,T,D)
    norm_first = config.qk_norm and config.qk_norm_order == "before_rope"
    if norm_first:
        q, k = _qk_norm(q, layer, Q_NORM, config), _qk_norm(k, layer, K_NORM, config)
    if scheme.rotation is not None:
        rotation = [tables[name][:T] for name in layer_tables(config, i, scheme.rotation.tables)]  # cos, sin
        q, k = scheme.rotation.torch(q, *rotation), scheme.rotation.torch(k, *rotation)
    if config.qk_norm and not norm_first:
        q, k = _qk_norm(q, layer, Q_NORM, config), _qk_norm(k, layer, K_NORM, config)
    modifiers, scale = config.score_modifiers(i), config.attention_scale()
    transform = torch_transform(modifiers)
    masks = torch_attention_options(modifiers, (B, H, T, T), h.dtype, float_mask=transform is not None)
    if transform is None:
        o = F.scaled_dot_product_attention(q, k, v, **masks, scale=scale, enable_gqa=H_kv != H)  # (B,H,T,D)
    else:  # f(S) before every term, as transformers' Gemma 2 eager attention
        k, v = (t.repeat_interleave(H // H_kv, dim=1) for t in (k, v))  # (B,H,T,D)
        scores = transform(q @ k.transpose(-1, -2) * scale)  # (B,H,T,T)
        o = torch.softmax(scores + masks["attn_mask"], dim=-1) @ v  # (B,H,T,D): + causal|window, ALiBi
    return _linear(o.transpose(1, 2).reshape(B, T, H * D), layer, OUT_PROJ)


def _linear(x, layer: dict, name: str):
    y = x @ layer[f"{name}.weight"]
    bias = layer.get(f"{name}.bias")
    return y if bias is None else y + bias


def _norm(x, layer: dict, name: str, config):
    norm = NORMS[config.norm]
    return norm.torch(x, *(layer.get(f"{name}.{param}") for param in norm.parameters), eps=config.norm_eps)


def _qk_norm(x, layer: dict, name: str, config):
    """The norm of heads ``x (B,H,T,D)`` over ``config.qk_norm_extent``'s values (each head, or the projection)."""
    extent = QK_NORM_EXTENTS[config.qk_norm_extent]
    return extent.from_rows(_norm(extent.to_rows(x), layer, name, config), x.shape[1])
