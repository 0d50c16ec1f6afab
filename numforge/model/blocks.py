"""A transformer block of ``gpt.py``: two residual branches, attention then MLP.

A pre-norm block (GPT-2 style)::

    x = x + Drop(attn.out_proj(Attention(attn.qkv_proj(pre_attn_norm(x)))))     attention_branch_forward
    x = x + Drop(mlp.down_proj(act(mlp.up_proj(pre_mlp_norm(x)))))             mlp_branch_forward

``block_forward`` adds both branches and returns a ``BlockCache(attention,
mlp)``; ``block_backward`` reverses it. Each ``*_forward(x, p, config, rng)``
takes the block's parameters ``p`` by short name (``"attn.qkv_proj.weight"``;
an absent bias is ``None``) and returns ``(branch, cache)``; each
``*_backward(dbranch, cache)`` returns ``(dx, grads)`` with ``grads`` keyed by
the same short names. ``rng`` is
None when dropout is off (at ``drop_prob = 0`` and at inference). With dropout
on, the attention weights are dropped too (``Drop`` inside ``Attention``,
unless ``config.attention_dropout`` is False): each layer draws one seed per batch
row from ``rng`` and the attention kernel draws its masks from them, tile by tile. Inside a
branch the tokens are rows, ``(N,C)`` with ``N = B*T``, so that every
projection is one 2-D matrix product (one BLAS call).

Every backward takes an optional ``record(stage, grad, params)``: when given,
it is called with each upstream gradient as the backward computes it (and the
parameter gradients that step produced), so that ``study/backward.py`` shows
the real backward's numbers, stage by stage. It only receives references: the
math is the same with or without it, and unused it costs one ``is None`` test
per stage. (A study-side re-walk of these calls would duplicate the backward's
logic and could drift from it; a callback cannot.)
"""

from __future__ import annotations

from typing import NamedTuple

from ..backend import get_xp, to_numpy
from ..ops.activations import ACTIVATIONS
from ..ops.attention import attention_backward, attention_forward
from ..ops.dropout import dropout_backward, dropout_forward
from ..ops.flash_attention import flash_attention_backward, flash_attention_forward
from ..ops.layernorm import layer_norm_backward, layer_norm_forward
from ..ops.linear import linear_backward, linear_forward


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


# Tile sizes of the tiled kernel in the model: with 64 queries x 256 keys, up to T = 256 each query tile
# sees its keys in one tile (the online softmax makes a single pass), and fully masked causal tiles are
# skipped (chosen by `numforge bench train`).
ATTENTION_BLOCK_Q, ATTENTION_BLOCK_K = 64, 256
# In training the tiled kernel keeps its probability tiles for the backward (keep_probs) while a layer's
# whole (B,H,T,T) score array would have at most this many elements (32 MiB of float32; the causal tiles
# kept hold a little over half): the backward then skips a matrix product and an exp per tile.
KEEP_PROBS_LIMIT = 2**23


def attention_seeds(config, rng, batch: int) -> list[int] | None:
    """One seed per batch row for this layer's attention-weight dropout, drawn from ``rng``; None when it is off.

    ``rng.random((B, 1))`` gives each row one uniform from that row's own stream in training
    (``training/dropout.py``), so a row's attention masks do not depend on how the batch is split.
    """
    if rng is None or not config.attention_dropout:
        return None
    uniforms = to_numpy(rng.random((batch, 1), dtype="float64")).ravel()  # (B,)
    return [int(u * 2**53) for u in uniforms]  # 53 random bits each


def attend(q, k, v, config, training: bool = False, dropout_seed: list[int] | None = None):
    """Causal attention by the configured kernel: ``"plain"`` (the oracle) or ``"tiled"``;
    the weights dropped with ``config.drop_prob`` when a ``dropout_seed`` is given."""
    dropout = {} if dropout_seed is None else {"dropout_p": config.drop_prob, "dropout_seed": dropout_seed}
    if config.attention == "plain":
        return attention_forward(q, k, v, causal=True, **dropout)
    B, H, Tq, _ = q.shape
    keep_probs = training and B * H * Tq * k.shape[2] <= KEEP_PROBS_LIMIT
    return flash_attention_forward(
        q, k, v, causal=True, block_q=ATTENTION_BLOCK_Q, block_k=ATTENTION_BLOCK_K, keep_probs=keep_probs, **dropout
    )


def attend_backward(do, cache, config):
    if config.attention == "plain":
        return attention_backward(do, cache)
    return flash_attention_backward(do, cache)


class AttentionBranchCache(NamedTuple):
    norm: object
    qkv_proj: object
    attention: object
    out_proj: object
    dropout: object


def attention_branch_forward(x, p, config, rng, kv_cache=None, layer=0, training: bool = False):
    """``Drop(out_proj(Attention(split(qkv_proj(pre_attn_norm(x))))))`` on ``x (B,T,C)``.

    With a ``kv_cache`` the new keys and values are appended to the cached
    ones of this ``layer`` and the new queries attend to all of them.
    ``training`` lets the attention keep what speeds up its backward.
    """
    B, T, C = x.shape
    h, norm_cache = layer_norm_forward(
        x.reshape(B * T, C), p["pre_attn_norm.weight"], p.get("pre_attn_norm.bias"), eps=config.ln_eps
    )  # (B,T,C) -> (N,C)
    qkv, qkv_cache = linear_forward(h, p["attn.qkv_proj.weight"], p.get("attn.qkv_proj.bias"))  # (N,C) -> (N,3C)
    q, k, v = split_heads(qkv.reshape(B, T, 3 * C), config.num_heads)  # (N,3C) -> 3 x (B,H,T,D)
    if kv_cache is not None:
        k, v = kv_cache.extend(layer, k, v)  # (B,H,T,D) -> (B,H,cached+T,D)
    o, attention_cache = attend(q, k, v, config, training, attention_seeds(config, rng, B))  # (B,H,T,D)
    merged = merge_heads(o).reshape(B * T, C)  # (B,H,T,D) -> (N,C)
    a, out_cache = linear_forward(merged, p["attn.out_proj.weight"], p.get("attn.out_proj.bias"))  # (N,C)
    a, drop_cache = dropout_if(a, config, rng)
    return a.reshape(B, T, C), AttentionBranchCache(norm_cache, qkv_cache, attention_cache, out_cache, drop_cache)


def attention_branch_backward(da, cache: AttentionBranchCache, config, record=None):
    """``(dx, grads)``: each step reverses the forward line named beside it."""
    grads = {}
    B, T, C = da.shape
    da = dropout_if_backward(da.reshape(B * T, C), cache.dropout)  # (B,T,C) -> (N,C)
    # forward: a = out_proj(merge_heads(o))
    dmerged, grads["attn.out_proj.weight"], grads["attn.out_proj.bias"] = linear_backward(da, cache.out_proj)
    if record is not None:
        record("heads merged (out_proj input)", dmerged, present_grads(grads, "attn.out_proj."))
    do = dmerged.reshape(B, T, config.num_heads, C // config.num_heads).transpose(0, 2, 1, 3)  # (N,C) -> (B,H,T,D)
    # forward: o = attend(q, k, v)
    dq, dk, dv = attend_backward(get_xp(do).ascontiguousarray(do), cache.attention, config)
    if record is not None:
        for name, grad in (("q", dq), ("k", dk), ("v", dv)):
            record(name, grad, {})
    # forward: q, k, v = split_heads(qkv)
    dqkv = merge_qkv_grads(dq, dk, dv).reshape(B * T, 3 * C)  # 3 x (B,H,T,D) -> (N,3C)
    # forward: qkv = qkv_proj(h)
    dh, grads["attn.qkv_proj.weight"], grads["attn.qkv_proj.bias"] = linear_backward(dqkv, cache.qkv_proj)
    if record is not None:
        record("pre-attention norm output", dh, present_grads(grads, "attn.qkv_proj."))
    # forward: h = pre_attn_norm(x)
    dx, grads["pre_attn_norm.weight"], grads["pre_attn_norm.bias"] = layer_norm_backward(dh, cache.norm)
    if record is not None:
        record("attention branch -> residual", dx, present_grads(grads, "pre_attn_norm."))
    return dx.reshape(B, T, C), grads  # (N,C) -> (B,T,C)


def present_grads(grads: dict, prefix: str) -> dict:
    """The gradients whose names start with ``prefix`` (absent biases, None, left out)."""
    return {name: g for name, g in grads.items() if name.startswith(prefix) and g is not None}


class MlpBranchCache(NamedTuple):
    norm: object
    up_proj: object
    gate_proj: object  # None unless the activation is gated (SwiGLU)
    activation: object
    down_proj: object
    dropout: object


def mlp_branch_forward(x, p, config, rng):
    """``Drop(down_proj(act(up_proj(pre_mlp_norm(x)))))``; gated (SwiGLU): ``act(gate_proj(h), up_proj(h))``."""
    B, T, C = x.shape
    h, norm_cache = layer_norm_forward(
        x.reshape(B * T, C), p["pre_mlp_norm.weight"], p.get("pre_mlp_norm.bias"), eps=config.ln_eps
    )  # (B,T,C) -> (N,C)
    up, up_cache = linear_forward(h, p["mlp.up_proj.weight"], p.get("mlp.up_proj.bias"))  # (N,C) -> (N,F)
    activation, gate_cache = ACTIVATIONS[config.activation], None
    if activation.gated:
        gate, gate_cache = linear_forward(h, p["mlp.gate_proj.weight"], p.get("mlp.gate_proj.bias"))  # (N,C) -> (N,F)
        act, act_cache = activation.forward(gate, up)  # (N,F)
    else:
        act, act_cache = activation.forward(up, **config.activation_options())  # (N,F)
    m, down_cache = linear_forward(act, p["mlp.down_proj.weight"], p.get("mlp.down_proj.bias"))  # (N,F) -> (N,C)
    m, drop_cache = dropout_if(m, config, rng)
    return m.reshape(B, T, C), MlpBranchCache(norm_cache, up_cache, gate_cache, act_cache, down_cache, drop_cache)


def mlp_branch_backward(dm, cache: MlpBranchCache, config, record=None):
    """``(dx, grads)``; with a gated activation ``dh`` is the sum of the gate and up paths."""
    grads = {}
    B, T, C = dm.shape
    dm = dropout_if_backward(dm.reshape(B * T, C), cache.dropout)  # (B,T,C) -> (N,C)
    # forward: m = down_proj(act)
    dact, grads["mlp.down_proj.weight"], grads["mlp.down_proj.bias"] = linear_backward(dm, cache.down_proj)
    if record is not None:
        record("MLP activation (down_proj input)", dact, present_grads(grads, "mlp.down_proj."))
    activation = ACTIVATIONS[config.activation]
    if activation.gated:
        # forward: act = swiglu(gate, up); gate = gate_proj(h); up = up_proj(h)
        dgate, dup = activation.backward(dact, cache.activation)
        dh_gate, grads["mlp.gate_proj.weight"], grads["mlp.gate_proj.bias"] = linear_backward(dgate, cache.gate_proj)
        if record is not None:
            record("MLP gate (pre-activation)", dgate, {})
    else:
        # forward: act = gelu(up) or relu(up)
        dup = activation.backward(dact, cache.activation)
    if record is not None:
        record("MLP up (pre-activation)" if activation.gated else "MLP pre-activation", dup, {})
    dh, grads["mlp.up_proj.weight"], grads["mlp.up_proj.bias"] = linear_backward(dup, cache.up_proj)
    if activation.gated:
        dh += dh_gate  # h feeds both projections: the two paths add
    if record is not None:
        record("pre-MLP norm output", dh, present_grads(grads, "mlp.up_proj.") | present_grads(grads, "mlp.gate_proj."))
    # forward: h = pre_mlp_norm(x)
    dx, grads["pre_mlp_norm.weight"], grads["pre_mlp_norm.bias"] = layer_norm_backward(dh, cache.norm)
    if record is not None:
        record("MLP branch -> residual", dx, present_grads(grads, "pre_mlp_norm."))
    return dx.reshape(B, T, C), grads  # (N,C) -> (B,T,C)


# ---------------------------------------------------------------- the block


class BlockCache(NamedTuple):
    attention: AttentionBranchCache
    mlp: MlpBranchCache


def block_forward(x, p, config, rng, training: bool = False, kv_cache=None, layer: int = 0):
    """``x + a``, then ``+ m``: one block on ``x (B,T,C)``; ``(x, BlockCache)``."""
    a, attention_cache = attention_branch_forward(x, p, config, rng, kv_cache, layer, training)
    x = x + a  # (B,T,C)
    m, mlp_cache = mlp_branch_forward(x, p, config, rng)
    x = x + m  # (B,T,C)
    return x, BlockCache(attention_cache, mlp_cache)


def block_backward(dx, cache: BlockCache, config, record=None):
    """``(dx, grads)``: the residual gradient passes through each skip and adds each branch's."""
    # forward: x = x + m, m = mlp_branch(x)
    dx_mlp, grads = mlp_branch_backward(dx, cache.mlp, config, record)
    dx = dx + dx_mlp
    if record is not None:
        record("residual after attention (skip + MLP)", dx, {})
    # forward: x = x + a, a = attention_branch(x)
    dx_attention, attention_grads = attention_branch_backward(dx, cache.attention, config, record)
    grads.update(attention_grads)
    dx = dx + dx_attention
    if record is not None:
        record("residual into the block (skip + attention)", dx, {})
    return dx, grads
