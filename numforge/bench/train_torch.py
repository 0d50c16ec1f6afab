"""The same GPT written with PyTorch autograd: the reference for speed and for correctness.

Used only by ``numforge bench train`` and by ``tests/test_model_vs_torch.py``,
both of which run only when torch happens to be installed (it is never a
dependency of numforge). The network reads numforge's parameter dict, so
both implementations run on identical weights; dropout is not modelled.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..backend import to_numpy


def torch_params(params: dict, requires_grad: bool = True) -> dict:
    """numforge params (name -> array) as leaf torch tensors (copies)."""
    return {name: torch.tensor(to_numpy(p).copy(), requires_grad=requires_grad) for name, p in params.items()}


def torch_loss(p: dict, config, ids, targets, sinusoidal_table=None):
    """The mean cross-entropy of the GPT in ``model.py``, by torch autograd ops."""
    B, T = ids.shape
    C, H = config.d_model, config.num_heads
    x = p["token_embedding"][ids]  # (B,T) -> (B,T,C)
    if config.scale_embeddings:
        x = x * math.sqrt(C)
    positions = p["position_embedding"] if config.position == "learned" else sinusoidal_table
    x = x + positions[:T]
    for i in range(config.num_layers):
        layer = {n[len(f"layers.{i}.") :]: t for n, t in p.items() if n.startswith(f"layers.{i}.")}
        h = F.layer_norm(x, (C,), layer["pre_attn_norm.weight"], layer.get("pre_attn_norm.bias"), config.ln_eps)
        qkv = _linear(h, layer, "attn.qkv_proj")  # (B,T,C) -> (B,T,3C)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in qkv.split(C, dim=-1))  # -> (B,H,T,D)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B,H,T,D)
        x = x + _linear(o.transpose(1, 2).reshape(B, T, C), layer, "attn.out_proj")
        h = F.layer_norm(x, (C,), layer["pre_mlp_norm.weight"], layer.get("pre_mlp_norm.bias"), config.ln_eps)
        up = _linear(h, layer, "mlp.up_proj")  # (B,T,C) -> (B,T,F)
        if config.activation == "swiglu":
            act = F.silu(_linear(h, layer, "mlp.gate_proj")) * up
        elif config.activation == "relu":
            act = F.relu(up)
        else:
            act = F.gelu(up, approximate=config.gelu_approximate)
        x = x + _linear(act, layer, "mlp.down_proj")  # (B,T,F) -> (B,T,C)
    h = F.layer_norm(x, (C,), p["final_norm.weight"], p.get("final_norm.bias"), config.ln_eps)
    unembedding = p["token_embedding"] if config.tie_weights else p["lm_head.weight"]
    logits = h @ unembedding.T  # (B,T,C) -> (B,T,V)
    return F.cross_entropy(logits.view(B * T, -1), targets.view(-1), ignore_index=-1)


def _linear(x, layer: dict, name: str):
    y = x @ layer[f"{name}.weight"]
    bias = layer.get(f"{name}.bias")
    return y if bias is None else y + bias
