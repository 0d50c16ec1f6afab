"""An independent float64 NumPy forward of a numforge GPT, written from the equations on the model's parameter
arrays and sharing no code with numforge: the study tests compare what the study tools read from the model's
caches with it. It covers LayerNorm and RMSNorm, learned and RoPE positions, GELU (tanh) and SwiGLU, grouped-query
attention, a sliding window, biases or none; nothing else (no QK-norm, ALiBi, soft caps, experts, post-norms).
"""

import math

import numpy as np


def norm(x, p, name, c):
    w = p[f"{name}.weight"]
    if c.norm == "rmsnorm":
        return w * x / np.sqrt((x * x).mean(-1, keepdims=True) + c.norm_eps)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return w * (x - mu) / np.sqrt(var + c.norm_eps) + p[f"{name}.bias"]


def dense(x, p, name):
    return x @ p[f"{name}.weight"] + p.get(f"{name}.bias", 0)


def rotate(x, c):
    """RoPE in rotate_half pairs (x_i, x_{i + D/2}) at each row's position: x (H,T,D)."""
    D, T = x.shape[-1], x.shape[-2]
    angle = np.arange(T)[:, None] * c.rope_theta ** (-np.arange(0, D, 2) / D)  # (T,D/2)
    cos, sin = np.cos(np.concatenate([angle] * 2, 1)), np.sin(np.concatenate([angle] * 2, 1))
    half = np.concatenate([-x[..., D // 2 :], x[..., : D // 2]], -1)
    return x * cos + half * sin


def reference(model, ids):
    """``{(layer, kind): array over all positions}`` of the forward, written from the equations."""
    c, p, T = model.config, model.params, len(ids)
    H, G, D = c.num_heads, c.num_kv_heads, c.head_dim
    found = {(None, "token embedding"): p["token_embedding"][ids]}  # (T,C)
    if "position_embedding" in p:
        found[(None, "position embedding")] = p["position_embedding"][:T]
    x = found[(None, "embedding sum")] = sum(found.values())
    for i in range(c.num_layers):
        at = {}
        h = at["pre-attention norm output"] = norm(x, p, f"layers.{i}.pre_attn_norm", c)
        qkv = dense(h, p, f"layers.{i}.attn.qkv_proj").reshape(T, H + 2 * G, D).transpose(1, 0, 2)  # (H+2G,T,D)
        q, k, v = qkv[:H], qkv[H : H + G], qkv[H + G :]
        at["q"], at["k"], at["v"] = q, k, v
        if c.position == "rope":
            q, k = at["q after rope"], at["k after rope"] = rotate(q, c), rotate(k, c)
        k, v = np.repeat(k, H // G, 0), np.repeat(v, H // G, 0)  # (H,T,D): query head h reads kv head h // (H/G)
        scores = at["scores"] = q @ k.transpose(0, 2, 1) / math.sqrt(D)  # (H,T,T)
        j, t = np.meshgrid(np.arange(T), np.arange(T))
        seen = (j <= t) & (t - j < (c.sliding_window or T + 1))
        masked = at["mask"] = np.where(seen, scores, -np.inf)
        weights = np.exp(masked - masked.max(-1, keepdims=True))
        weights = at["softmax"] = weights / weights.sum(-1, keepdims=True)
        o = at["weighted sum"] = weights @ v  # (H,T,D)
        merged = at["heads merged (out_proj input)"] = o.transpose(1, 0, 2).reshape(T, H * D)
        a = at["attention branch output"] = dense(merged, p, f"layers.{i}.attn.out_proj")
        x = at["residual after attention"] = x + a
        h = at["pre-MLP norm output"] = norm(x, p, f"layers.{i}.pre_mlp_norm", c)
        u = dense(h, p, f"layers.{i}.mlp.up_proj")
        if c.activation == "swiglu":
            g = at["MLP gate (pre-activation)"] = dense(h, p, f"layers.{i}.mlp.gate_proj")
            at["MLP up (pre-activation)"] = u
            m = g / (1 + np.exp(-g)) * u
        else:
            at["MLP pre-activation"] = u
            m = 0.5 * u * (1 + np.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))
        at["MLP activation (down_proj input)"] = m
        f = at["MLP branch output"] = dense(m, p, f"layers.{i}.mlp.down_proj")
        x = at["residual after MLP"] = x + f
        found |= {(i, kind): array for kind, array in at.items()}
    found[(None, "final norm output")] = norm(x, p, "final_norm", c)
    return found
