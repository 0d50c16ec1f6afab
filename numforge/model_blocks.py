"""The pieces of ``model.py``: the two sub-layers of a block, the loss, the KV cache.

A pre-norm block is two residual branches (``model.py`` adds them)::

    x = x + Drop(Attn(LN1(x)))          attention_branch_forward
    x = x + Drop(FFN(LN2(x)))           mlp_branch_forward

Each ``*_forward(x, p, config, rng)`` takes the block's parameters ``p`` by
short name (``"attn.qkv_proj.weight"``; an absent bias is ``None``) and
returns ``(branch, cache)``; each ``*_backward(dbranch, cache)`` returns
``(dx, grads)`` with ``grads`` keyed by the same short names. ``rng`` is
None when dropout is off (at ``drop_prob = 0`` and at inference). Inside a
branch the tokens are rows, ``(N,C)`` with ``N = B*T``, so that every
projection is one 2-D matrix product (one BLAS call).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .backend import get_xp
from .ops.activations import (gelu_backward, gelu_forward, relu_backward, relu_forward,
                              swiglu_backward, swiglu_forward)
from .ops.attention import attention_backward, attention_forward
from .ops.cross_entropy import (cross_entropy_backward, cross_entropy_forward, tied_cross_entropy_and_grads_backward,
                                tied_cross_entropy_and_grads_forward, tied_cross_entropy_backward,
                                tied_cross_entropy_forward)
from .ops.dropout import dropout_backward, dropout_forward
from .ops.flash_attention import flash_attention_backward, flash_attention_forward
from .ops.layernorm import layer_norm_backward, layer_norm_forward
from .ops.linear import linear_backward, linear_forward


def dropout_if(x, config, rng):
    """``dropout(x)`` when ``rng`` is given (dropout active), else ``x`` itself and no cache."""
    if rng is None:
        return x, None
    return dropout_forward(x, config.drop_prob, rng)


def dropout_if_backward(dy, cache):
    return dy if cache is None else dropout_backward(dy, cache)


def split_heads(qkv, num_heads: int):
    """``(B,T,3C)`` -> three ``(B,H,T,D)`` arrays, q | k | v, each contiguous."""
    B, T, three_c = qkv.shape
    D = three_c // (3 * num_heads)
    heads = qkv.reshape(B, T, 3, num_heads, D).transpose(2, 0, 3, 1, 4)  # -> (3,B,H,T,D)
    xp = get_xp(qkv)
    return tuple(xp.ascontiguousarray(heads[i]) for i in range(3))


def merge_heads(o):
    """``(B,H,T,D)`` -> ``(B,T,C)``: the heads side by side."""
    B, H, T, D = o.shape
    return o.transpose(0, 2, 1, 3).reshape(B, T, H * D)  # (B,H,T,D) -> (B,T,C)


def merge_qkv_grads(dq, dk, dv):
    """The inverse of ``split_heads`` for gradients: three ``(B,H,T,D)`` -> ``(B,T,3C)``."""
    B, H, T, D = dq.shape
    xp = get_xp(dq, dk, dv)
    token_major = [d.transpose(0, 2, 1, 3) for d in (dq, dk, dv)]  # 3 x (B,H,T,D) -> 3 x (B,T,H,D), views
    stacked = xp.stack(token_major, axis=2)  # -> (B,T,3,H,D), the one copy
    return stacked.reshape(B, T, 3 * H * D)  # (B,T,3,H,D) -> (B,T,3C), free


# Tile sizes of the tiled kernel, by `numforge bench train`'s shapes (T = 128 and 256, D = 32, one thread):
# 64 x 64 tiles ran forward+backward 1.3-1.6x faster than the kernel's default 128 x 256, since more
# fully masked causal tiles are skipped; 64 queries x 256 keys was another 7% faster than 64 x 64
# (alternating runs): up to T = 256 each query tile then sees its keys in one tile, so the forward's
# online softmax makes a single pass with no rescaling, and it skips the same masked tiles
ATTENTION_BLOCK_Q, ATTENTION_BLOCK_K = 64, 256
# In training the tiled kernel keeps its probability tiles for the backward (keep_probs) while a layer's
# whole (B,H,T,T) score array would have at most this many elements (32 MiB of float32; the causal tiles
# kept hold a little over half). The backward then skips a matrix product and an exp per tile: training
# steps ran 3-4% faster at both `numforge bench train` configs (alternating steps, one thread).
KEEP_PROBS_LIMIT = 2**23


def attend(q, k, v, config, training: bool = False):
    """Causal attention by the configured kernel: ``"naive"`` (the oracle) or ``"tiled"``."""
    if config.attention == "naive":
        return attention_forward(q, k, v, causal=True)
    B, H, Tq, _ = q.shape
    keep_probs = training and B * H * Tq * k.shape[2] <= KEEP_PROBS_LIMIT
    return flash_attention_forward(q, k, v, causal=True, block_q=ATTENTION_BLOCK_Q,
                                   block_k=ATTENTION_BLOCK_K, keep_probs=keep_probs)


def attend_backward(do, cache, config):
    if config.attention == "naive":
        return attention_backward(do, cache)
    return flash_attention_backward(do, cache)


class AttentionBranchCache(NamedTuple):
    norm: object
    qkv_proj: object
    attention: object
    out_proj: object
    dropout: object


def attention_branch_forward(x, p, config, rng, kv_cache=None, layer=0, training: bool = False):
    """``Drop(out_proj(Attention(split(qkv_proj(LN1(x))))))`` on ``x (B,T,C)``.

    With a ``kv_cache`` the new keys and values are appended to the cached
    ones of this ``layer`` and the new queries attend to all of them.
    ``training`` lets the attention keep what speeds up its backward.
    """
    B, T, C = x.shape
    h, norm_cache = layer_norm_forward(x.reshape(B * T, C), p["pre_attn_norm.weight"],
                                       p.get("pre_attn_norm.bias"), eps=config.ln_eps)  # (B,T,C) -> (N,C)
    qkv, qkv_cache = linear_forward(h, p["attn.qkv_proj.weight"], p.get("attn.qkv_proj.bias"))  # (N,C) -> (N,3C)
    q, k, v = split_heads(qkv.reshape(B, T, 3 * C), config.num_heads)  # (N,3C) -> 3 x (B,H,T,D)
    if kv_cache is not None:
        k, v = kv_cache.extend(layer, k, v)  # (B,H,T,D) -> (B,H,cached+T,D)
    o, attention_cache = attend(q, k, v, config, training)  # (B,H,T,D)
    merged = merge_heads(o).reshape(B * T, C)  # (B,H,T,D) -> (N,C)
    a, out_cache = linear_forward(merged, p["attn.out_proj.weight"], p.get("attn.out_proj.bias"))  # (N,C)
    a, drop_cache = dropout_if(a, config, rng)
    return a.reshape(B, T, C), AttentionBranchCache(norm_cache, qkv_cache, attention_cache, out_cache, drop_cache)


def attention_branch_backward(da, cache: AttentionBranchCache, config):
    """``(dx, grads)``: each step reverses the forward line named beside it."""
    grads = {}
    B, T, C = da.shape
    da = dropout_if_backward(da.reshape(B * T, C), cache.dropout)  # (B,T,C) -> (N,C)
    # forward: a = out_proj(merge_heads(o))
    dmerged, grads["attn.out_proj.weight"], grads["attn.out_proj.bias"] = linear_backward(da, cache.out_proj)
    do = dmerged.reshape(B, T, config.num_heads, C // config.num_heads).transpose(0, 2, 1, 3)  # (N,C) -> (B,H,T,D)
    # forward: o = attend(q, k, v)
    dq, dk, dv = attend_backward(get_xp(do).ascontiguousarray(do), cache.attention, config)
    # forward: q, k, v = split_heads(qkv)
    dqkv = merge_qkv_grads(dq, dk, dv).reshape(B * T, 3 * C)  # 3 x (B,H,T,D) -> (N,3C)
    # forward: qkv = qkv_proj(h)
    dh, grads["attn.qkv_proj.weight"], grads["attn.qkv_proj.bias"] = linear_backward(dqkv, cache.qkv_proj)
    # forward: h = LN1(x)
    dx, grads["pre_attn_norm.weight"], grads["pre_attn_norm.bias"] = layer_norm_backward(dh, cache.norm)
    return dx.reshape(B, T, C), grads  # (N,C) -> (B,T,C)


def activation_forward(u, config):
    """``gelu(u)`` or ``relu(u)``, as configured (SwiGLU is handled by the caller)."""
    if config.ffn == "gelu":
        return gelu_forward(u, approximate=config.gelu_approximate)
    return relu_forward(u)


def activation_backward(dy, cache, config):
    return gelu_backward(dy, cache) if config.ffn == "gelu" else relu_backward(dy, cache)


class MlpBranchCache(NamedTuple):
    norm: object
    up_proj: object
    gate_proj: object  # None unless SwiGLU
    activation: object
    down_proj: object
    dropout: object


def mlp_branch_forward(x, p, config, rng):
    """``Drop(down_proj(act(up_proj(LN2(x)))))``; SwiGLU: ``act = silu(gate_proj(h)) * up_proj(h)``."""
    B, T, C = x.shape
    h, norm_cache = layer_norm_forward(x.reshape(B * T, C), p["pre_mlp_norm.weight"],
                                       p.get("pre_mlp_norm.bias"), eps=config.ln_eps)  # (B,T,C) -> (N,C)
    up, up_cache = linear_forward(h, p["mlp.up_proj.weight"], p.get("mlp.up_proj.bias"))  # (N,C) -> (N,F)
    gate_cache = None
    if config.ffn == "swiglu":
        gate, gate_cache = linear_forward(h, p["mlp.gate_proj.weight"], p.get("mlp.gate_proj.bias"))  # (N,C) -> (N,F)
        act, act_cache = swiglu_forward(gate, up)
    else:
        act, act_cache = activation_forward(up, config)
    m, down_cache = linear_forward(act, p["mlp.down_proj.weight"], p.get("mlp.down_proj.bias"))  # (N,F) -> (N,C)
    m, drop_cache = dropout_if(m, config, rng)
    return m.reshape(B, T, C), MlpBranchCache(norm_cache, up_cache, gate_cache, act_cache, down_cache, drop_cache)


def mlp_branch_backward(dm, cache: MlpBranchCache, config):
    """``(dx, grads)``; with SwiGLU ``dh`` is the sum of the gate and up paths."""
    grads = {}
    B, T, C = dm.shape
    dm = dropout_if_backward(dm.reshape(B * T, C), cache.dropout)  # (B,T,C) -> (N,C)
    # forward: m = down_proj(act)
    dact, grads["mlp.down_proj.weight"], grads["mlp.down_proj.bias"] = linear_backward(dm, cache.down_proj)
    if config.ffn == "swiglu":
        # forward: act = swiglu(gate, up); gate = gate_proj(h); up = up_proj(h)
        dgate, dup = swiglu_backward(dact, cache.activation)
        dh_gate, grads["mlp.gate_proj.weight"], grads["mlp.gate_proj.bias"] = linear_backward(dgate, cache.gate_proj)
    else:
        # forward: act = gelu(up) or relu(up)
        dup = activation_backward(dact, cache.activation, config)
    dh, grads["mlp.up_proj.weight"], grads["mlp.up_proj.bias"] = linear_backward(dup, cache.up_proj)
    if config.ffn == "swiglu":
        dh += dh_gate  # h feeds both projections: the two paths add
    # forward: h = LN2(x)
    dx, grads["pre_mlp_norm.weight"], grads["pre_mlp_norm.bias"] = layer_norm_backward(dh, cache.norm)
    return dx.reshape(B, T, C), grads  # (N,C) -> (B,T,C)


MATERIALIZED_LOGITS_LIMIT = 2**25  # (N, V) logits elements held at once: 128 MiB in float32


class UnembeddingLossCache(NamedTuple):
    rows: object  # h as (N,C) rows, by reference
    table: object  # (V,C)
    cross_entropy: object  # the cross-entropy cache of the materialized logits; None when chunked
    tied_cross_entropy: object  # the chunked tied cross-entropy's cache; None when materialized
    fused: object  # the fused loss-and-gradients cache (with_gradients); None otherwise
    h_shape: tuple


def unembedding_loss_forward(h, table, targets, ignore_index: int, with_gradients: bool = True):
    """``loss = cross_entropy(h @ table^T, targets)`` for ``h (B,T,C)``, ``table (V,C)``.

    ``with_gradients`` (training): the fused tied cross-entropy computes the
    loss, ``dh`` and ``dtable`` in one pass over row chunks (three matrix
    products, no ``(N,V)`` array); the backward only scales them. Otherwise
    (evaluation) only the loss is computed: logits of at most
    ``MATERIALIZED_LOGITS_LIMIT`` elements are materialized, larger ones go
    through the chunked tied cross-entropy; both still have a backward.
    """
    B, T, C = h.shape
    rows, flat_targets = h.reshape(B * T, C), targets.reshape(B * T)  # (B,T,C) -> (N,C)
    if with_gradients:
        loss, fused_cache = tied_cross_entropy_and_grads_forward(rows, table, flat_targets, ignore_index=ignore_index)
        return loss, UnembeddingLossCache(rows, table, None, None, fused_cache, h.shape)
    if B * T * table.shape[0] > MATERIALIZED_LOGITS_LIMIT:
        loss, tied_cache = tied_cross_entropy_forward(rows, table, flat_targets, ignore_index=ignore_index)
        return loss, UnembeddingLossCache(rows, table, None, tied_cache, None, h.shape)
    logits = rows @ table.T  # (N,C) @ (C,V) -> (N,V)
    loss, loss_cache = cross_entropy_forward(logits, flat_targets, ignore_index=ignore_index)
    return loss, UnembeddingLossCache(rows, table, loss_cache, None, None, h.shape)


def unembedding_loss_backward(dloss, cache: UnembeddingLossCache):
    """``(dh, dtable)``: ``dlogits = (softmax - onehot) dloss / count``, ``dh = dlogits table``,
    ``dtable = dlogits^T h``."""
    if cache.fused is not None:
        dh, dtable = tied_cross_entropy_and_grads_backward(dloss, cache.fused)
        return dh.reshape(cache.h_shape), dtable  # (N,C) -> (B,T,C)
    if cache.cross_entropy is None:
        dh, dtable = tied_cross_entropy_backward(dloss, cache.tied_cross_entropy)
        return dh.reshape(cache.h_shape), dtable  # (N,C) -> (B,T,C)
    dlogits = cross_entropy_backward(dloss, cache.cross_entropy)  # (N,V)
    dh = dlogits @ cache.table  # forward: logits = h table^T, so dh = dlogits table; (N,V) @ (V,C) -> (N,C)
    # ... and dtable = dlogits^T h, computed as (h^T dlogits)^T: OpenBLAS ran this product plus the
    # transposing copy 10-15% faster than dlogits^T h at the bench shapes
    dtable_transposed = cache.rows.T @ dlogits  # (C,N) @ (N,V) -> (C,V)
    return dh.reshape(cache.h_shape), get_xp(dh).ascontiguousarray(dtable_transposed.T)  # (C,V) -> (V,C)


def sinusoidal_positions(max_seq_len: int, d_model: int, dtype) -> np.ndarray:
    """The fixed table of the original Transformer, ``(T_max, C)``, as a NumPy array.

    ``PE[t, 2i] = sin(t / 10000^(2i/C))``, ``PE[t, 2i+1] = cos(t / 10000^(2i/C))``.
    """
    position = np.arange(max_seq_len, dtype=np.float64)[:, None]  # (T_max, 1)
    frequency = 10000.0 ** (-np.arange(0, d_model, 2, dtype=np.float64) / d_model)  # (ceil(C/2),)
    angle = position * frequency  # (T_max, 1) * (ceil(C/2),) -> (T_max, ceil(C/2))
    table = np.empty((max_seq_len, d_model), dtype=np.float64)
    table[:, 0::2] = np.sin(angle)
    table[:, 1::2] = np.cos(angle[:, : d_model // 2])
    return table.astype(dtype)


class KVCache:
    """Keys and values of the positions already processed, per layer, for fast decoding.

    ``keys[layer]`` and ``values[layer]`` are preallocated ``(B, H, T_max, D)``;
    positions ``[0, length)`` are filled. ``GPT.logits(new_ids, kv_cache=kv)``
    extends every layer, then advances ``length``.
    """

    def __init__(self, xp, batch_size: int, config, dtype):
        shape = (batch_size, config.num_heads, config.max_seq_len, config.head_dim)
        self.keys = [xp.zeros(shape, dtype=dtype) for _ in range(config.num_layers)]
        self.values = [xp.zeros(shape, dtype=dtype) for _ in range(config.num_layers)]
        self.batch_size = batch_size
        self.max_seq_len = config.max_seq_len
        self.length = 0

    def extend(self, layer: int, k, v):
        """Write ``k, v (B,H,T_new,D)`` after the cached positions; return all ``(B,H,length+T_new,D)``."""
        stop = self.length + k.shape[2]
        self.keys[layer][:, :, self.length:stop] = k
        self.values[layer][:, :, self.length:stop] = v
        return self.keys[layer][:, :, :stop], self.values[layer][:, :, :stop]

    def advance(self, num_new: int) -> None:
        self.length += num_new
