"""The attention branch of a block: ``a = Drop(out_proj(Attention(q, k, v)))`` on ``pre_attn_norm(x)``.

With ``H`` query heads, ``H_kv`` key/value heads and head width ``D``::

    h = pre_attn_norm(x)                                   (N,C)
    q | k | v = h @ attn.qkv_proj                          (N,(H + 2 H_kv) D), split into heads
    q, k = qk(q, k)        QK-norm and the rotation by position, in the config's order (either may be absent)
    o = Attention(q, k, v)                                 (B,H,T,D): query head h reads key/value head h // (H / H_kv)
    a = Drop(post_attn_norm(merge(o) @ attn.out_proj))     (N,H D) -> (N,C); the post-norm only with post_norms

``attention_branch_backward`` walks it back. Inside the branch the tokens are
rows, ``(N,C)`` with ``N = B*T``, so that every projection is one 2-D matrix
product (one BLAS call). With dropout on (``rng`` given), the attention
weights are dropped too (unless ``config.attention_dropout`` is False): each
layer draws one seed per batch row from ``rng`` and the kernel draws its
masks from them, tile by tile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from ..backend import get_xp, to_numpy
from ..ops.attention import attention_backward, attention_forward
from ..ops.flash_attention import flash_attention_backward, flash_attention_forward
from .layers import (
    dropout_if,
    dropout_if_backward,
    linear_layer_backward,
    linear_layer_forward,
    norm_backward,
    norm_forward,
)
from .names import K_NORM, OUT_PROJ, POST_ATTN_NORM, PRE_ATTN_NORM, Q_NORM, QKV_PROJ
from .positions import POSITIONS, layer_tables
from .qk_norm import qk_norm_backward, qk_norm_forward


def split_heads(qkv, num_heads: int, num_kv_heads: int):
    """``(B,T,(H + 2 H_kv) D)`` -> ``q (B,H,T,D)``, ``k, v (B,H_kv,T,D)``, each contiguous."""
    B, T, width = qkv.shape
    D = width // (num_heads + 2 * num_kv_heads)
    heads = qkv.reshape(B, T, num_heads + 2 * num_kv_heads, D).transpose(0, 2, 1, 3)  # -> (B,H + 2 H_kv,T,D), a view
    xp = get_xp(qkv)
    bounds = (0, num_heads, num_heads + num_kv_heads, num_heads + 2 * num_kv_heads)
    return tuple(xp.ascontiguousarray(heads[:, a:b]) for a, b in zip(bounds, bounds[1:]))


def merge_heads(o):
    """``(B,H,T,D)`` -> ``(B,T,H D)``: the heads side by side."""
    B, H, T, D = o.shape
    return o.transpose(0, 2, 1, 3).reshape(B, T, H * D)  # (B,H,T,D) -> (B,T,H D)


def merge_qkv_grads(dq, dk, dv):
    """The inverse of ``split_heads`` for gradients: ``(B,H,T,D)``, 2 x ``(B,H_kv,T,D)`` -> ``(B,T,(H + 2 H_kv) D)``."""
    B, H, T, D = dq.shape
    H_kv = dk.shape[1]
    xp = get_xp(dq, dk, dv)
    merged = xp.empty((B, T, H + 2 * H_kv, D), dtype=dq.dtype)  # the one copy
    merged[:, :, :H] = dq.transpose(0, 2, 1, 3)  # (B,H,T,D) -> (B,T,H,D)
    merged[:, :, H : H + H_kv] = dk.transpose(0, 2, 1, 3)
    merged[:, :, H + H_kv :] = dv.transpose(0, 2, 1, 3)
    return merged.reshape(B, T, (H + 2 * H_kv) * D)  # free


# ---------------------------------------------------------------- the attention kernel

# Tile sizes of the tiled kernel in the model: with 64 queries x 256 keys, up to T = 256 each query tile
# sees its keys in one tile (the online softmax makes a single pass), and fully masked causal tiles are
# skipped (chosen by `numforge bench train`).
ATTENTION_BLOCK_Q, ATTENTION_BLOCK_K = 64, 256
# When a backward follows, the tiled kernel keeps its probability tiles (keep_probs) while a layer's
# whole (B,H,T,T) score array would have at most this many elements (32 MiB of float32; the causal tiles
# kept hold a little over half): the backward then skips a matrix product and an exp per tile.
KEEP_PROBS_LIMIT = 2**23


def attention_seeds(config, rng, batch: int) -> list[int] | None:
    """One seed per batch row for this layer's attention-weight dropout, drawn from ``rng``; None when it is off.

    ``rng.random((B, 1))`` gives each row one uniform from that row's own stream in training
    (``training/dropout.py``), so a row's attention masks do not depend on how the batch is split.
    """
    if rng is None or not config.attention_dropout or config.drop_prob == 0:  # (LoRA's dropout alone: rng, p = 0)
        return None
    uniforms = to_numpy(rng.random((batch, 1), dtype="float64")).ravel()  # (B,)
    return [int(u * 2**53) for u in uniforms]  # 53 random bits each


def _plain(q, k, v, keep_probs: bool, modifiers: tuple, scale: float, **dropout):
    return attention_forward(q, k, v, causal=False, modifiers=modifiers, scale=scale, **dropout)  # keeps (B,H,T,T)


def _tiled(q, k, v, keep_probs: bool, modifiers: tuple, scale: float, **dropout):
    return flash_attention_forward(
        q, k, v, causal=False, block_q=ATTENTION_BLOCK_Q, block_k=ATTENTION_BLOCK_K, keep_probs=keep_probs,
        modifiers=modifiers, scale=scale, **dropout,
    )  # fmt: skip


class AttentionKernel(NamedTuple):
    """``o, cache = forward(q, k, v, keep_probs, modifiers, scale, **dropout)``; ``dq, dk, dv = backward(do, cache)``;
    ``weights``: where its cache holds the attention weights, as ``numforge attention`` says it; ``keeps_weights``:
    whether a cache for the backward always holds them (else only up to ``KEEP_PROBS_LIMIT``: the memory plan)."""

    forward: Callable
    backward: Callable
    weights: str
    keeps_weights: bool = False


KERNELS = {  # config.attention -> AttentionKernel
    "tiled": AttentionKernel(
        _tiled, flash_attention_backward,
        "tiled attention keeps no weights: rebuilt from the log-sum-exp L it saves, P = exp(S - L)",
    ),
    "plain": AttentionKernel(
        _plain, attention_backward, "plain attention keeps its weights: read from its cache (AttentionCache.probs)",
        keeps_weights=True,
    ),
}  # fmt: skip
ORACLE_KERNEL = "plain"  # the one that holds every (B,H,T,T) weight: the oracle the others are compared with


def attend(
    q, k, v, config, *, layer: int = 0, for_backward: bool = False, dropout_seed: list[int] | None = None, segments=None
):
    """Attention by the configured kernel (``KERNELS``) with layer ``layer``'s score modifiers (causal or a
    window, ALiBi, ...: ``config.score_modifiers(layer)``); the weights dropped with ``config.drop_prob`` when a
    ``dropout_seed`` is given. ``for_backward`` lets the kernel keep what speeds up its backward. ``segments
    (B,Tk)``: packed rows' sequences (``packing.py``), none attending to another (the ``segments`` modifier).

    With a KV cache, ``q`` holds the ``Tq`` new positions and ``k, v`` all ``Tk`` (cached + new): the
    kernels align them bottom-right, so query row ``r`` is at position ``r + Tk - Tq``, the cached
    length added, for every modifier (``ops/scores.py``)."""
    dropout = {} if dropout_seed is None else {"dropout_p": config.drop_prob, "dropout_seed": dropout_seed}
    B, H, Tq, _ = q.shape
    keep_probs = for_backward and B * H * Tq * k.shape[2] <= KEEP_PROBS_LIMIT
    modifiers, scale = config.score_modifiers(layer), config.attention_scale()
    if segments is not None:
        modifiers = (*modifiers, ("segments", segments))
    return KERNELS[config.attention].forward(q, k, v, keep_probs, modifiers, scale, **dropout)


def attend_backward(do, cache, config):
    return KERNELS[config.attention].backward(do, cache)


# ---------------------------------------------------------------- q and k: QK-norm and the rotation

QK_NORM = "qk_norm"  # the step of qk_steps that normalizes q and k (over each head, or the whole projection)


def qk_steps(config) -> tuple[str, ...]:
    """What happens to q and k between the split and the attention, in order: ``QK_NORM`` (``attn.q_norm``,
    ``attn.k_norm``) and the position scheme's rotation (by the scheme's name), each where the config has it.
    Qwen3: ``("qk_norm", "rope")``; nanochat: ``("rope", "qk_norm")``; GPT-2: ``()``."""
    rotation = () if POSITIONS[config.position].rotation is None else (config.position,)
    if not config.qk_norm:
        return rotation
    return (QK_NORM, *rotation) if config.qk_norm_order == "before_rope" else (*rotation, QK_NORM)


class QKCache(NamedTuple):
    """The steps of ``qk_steps``, their op caches ``(q's, k's)`` per step, and, for study, every
    ``(q, k)`` along the way by reference: ``path[0]`` as split, ``path[i + 1]`` after step ``i``."""

    steps: tuple[str, ...]
    caches: tuple[tuple[object, object], ...]
    path: tuple[tuple[object, object], ...]


def qk_forward(q, k, p, config, tables: dict, start: int, layer: int = 0, positions=None):
    """``(q, k, QKCache)``: the ``qk_steps`` on ``q (B,H,T,D)`` and ``k (B,H_kv,T,D)``; the rotation turns
    position ``t`` of them by its absolute position ``start + t`` (or, packed, by ``positions (B,T)``: each
    token's place in its own sequence), with layer ``layer``'s tables (``positions.layer_tables``: a local
    layer's own with ``rope_local_theta``)."""
    steps, caches, path = qk_steps(config), [], [(q, k)]
    for step in steps:
        if step == QK_NORM:
            q, q_cache = qk_norm_forward(q, p, Q_NORM, config)  # (B,H,T,D), over D or H D (qk_norm.py)
            k, k_cache = qk_norm_forward(k, p, K_NORM, config)  # (B,H_kv,T,D), over D or H_kv D
        else:
            rotation = POSITIONS[step].rotation
            names = layer_tables(config, layer, rotation.tables)
            if positions is None:
                rows = [tables[name][start : start + q.shape[2]] for name in names]  # each (T,D)
            else:  # each row's own positions: (B,T) -> (B,T,D) -> (B,1,T,D), one row of angles for every head
                rows = [get_xp(q).take(tables[name], positions, axis=0)[:, None] for name in names]
            q, q_cache = rotation.forward(q, *rows)  # (B,H,T,D)
            k, k_cache = rotation.forward(k, *rows)  # (B,H_kv,T,D)
        caches.append((q_cache, k_cache))
        path.append((q, k))
    return q, k, QKCache(steps, tuple(caches), tuple(path))


class QKBackward(NamedTuple):
    """What ``qk_backward`` made, by reference: ``dq``, ``dk`` as split and the norms' ``grads``; ``path`` the
    ``(step, dq, dk)`` that each step's backward gave, the last step first (the study tools show them)."""

    dq: object  # (B,H,T,D)
    dk: object  # (B,H_kv,T,D)
    grads: dict
    path: tuple[tuple[str, object, object], ...]


def qk_backward(dq, dk, cache: QKCache, config) -> QKBackward:
    """``QKBackward(dq, dk, grads, path)``: ``qk_forward`` walked back, the last step first."""
    grads, path = {}, []
    for step, (q_cache, k_cache) in reversed(list(zip(cache.steps, cache.caches))):
        if step == QK_NORM:
            # forward: q = q_norm(q), k = k_norm(k)
            dq, q_grads = qk_norm_backward(dq, q_cache, Q_NORM, config)
            dk, k_grads = qk_norm_backward(dk, k_cache, K_NORM, config)
            grads.update(q_grads | k_grads)
        else:
            # forward: q = rotate(q), k = rotate(k); the backward rotates them back
            rotation = POSITIONS[step].rotation
            dq, dk = rotation.backward(dq, q_cache), rotation.backward(dk, k_cache)
        path.append((step, dq, dk))
    return QKBackward(dq, dk, grads, tuple(path))


# ---------------------------------------------------------------- the branch


class AttentionBranchCache(NamedTuple):
    norm: object
    qkv_proj: object
    qk: QKCache
    attention: object
    out_proj: object
    dropout: object
    post_norm: object = None  # post_attn_norm's cache (post_norms), else None


def attention_branch_forward(
    x,
    p,
    config,
    *,
    rng=None,
    for_backward: bool = False,
    kv_cache=None,
    layer: int = 0,
    tables: dict | None = None,
    packed=None,
):
    """``Drop(out_proj(Attention(qk(split(qkv_proj(pre_attn_norm(x)))))))`` on ``x (B,T,C)``.

    With a ``kv_cache`` the new keys and values (rotated at their absolute
    positions) are appended to the cached ones of this ``layer`` and the new
    queries attend to all of them. ``tables`` are the model's fixed position
    tables (``GPT.position_tables``). ``packed``: packed rows' segment ids and positions (``packing.py``),
    by which each sequence is rotated and attends as if alone; None: one sequence a row.
    """
    B, T, C = x.shape
    H, H_kv, D = config.num_heads, config.num_kv_heads, config.head_dim
    start = 0 if kv_cache is None else kv_cache.length
    h, norm_cache = norm_forward(x.reshape(B * T, C), p, PRE_ATTN_NORM, config)  # (B,T,C) -> (N,C)
    qkv, qkv_cache = linear_layer_forward(h, p, QKV_PROJ, rng)  # (N,C) -> (N,(H + 2 H_kv) D)
    q, k, v = split_heads(qkv.reshape(B, T, -1), H, H_kv)  # -> (B,H,T,D), 2 x (B,H_kv,T,D)
    positions, segments = (None, None) if packed is None else (packed.positions, packed.ids)
    q, k, qk_cache = qk_forward(q, k, p, config, tables, start, layer, positions)
    if kv_cache is not None:
        k, v = kv_cache.extend(layer, k, v)  # (B,H_kv,T,D) -> (B,H_kv,cached+T,D)
    seeds = attention_seeds(config, rng, B)
    o, attention_cache = attend(
        q, k, v, config, layer=layer, for_backward=for_backward, dropout_seed=seeds, segments=segments
    )
    merged = merge_heads(o).reshape(B * T, H * D)  # (B,H,T,D) -> (N,H D)
    a, out_cache = linear_layer_forward(merged, p, OUT_PROJ, rng)  # (N,H D) -> (N,C)
    post_cache = None
    if config.post_norms:
        a, post_cache = norm_forward(a, p, POST_ATTN_NORM, config)  # (N,C): Gemma's norm after the branch
    a, drop_cache = dropout_if(a, config, rng)
    cache = AttentionBranchCache(norm_cache, qkv_cache, qk_cache, attention_cache, out_cache, drop_cache, post_cache)
    return a.reshape(B, T, C), cache


class AttentionBackward(NamedTuple):
    """What ``attention_branch_backward`` made, by reference: ``dx`` and ``grads`` go on into the block; the rest
    are the gradients on the way, in the order they were made (the study tools show them)."""

    dx: object  # (B,T,C) into the residual
    grads: dict  # short name -> gradient: out_proj's, the QK-norms', qkv_proj's, the norm's
    dmerged: object  # (N,H D) the heads side by side, out_proj's input
    dq: object  # (B,H,T,D) the kernel's q, k, v
    dk: object  # (B,H_kv,T,D)
    dv: object  # (B,H_kv,T,D)
    qk: QKBackward  # q and k walked back through the QK-norm and the rotation
    dh: object  # (N,C) the norm's output, qkv_proj's input


def attention_branch_backward(da, cache: AttentionBranchCache, config) -> AttentionBackward:
    """``AttentionBackward(dx, grads, ...)``: each step reverses the forward line named beside it."""
    B, T, C = da.shape
    H, D = config.num_heads, config.head_dim
    da = dropout_if_backward(da.reshape(B * T, C), cache.dropout)  # (B,T,C) -> (N,C)
    post_grads = {}
    if cache.post_norm is not None:  # forward: a = post_attn_norm(a)
        da, post_grads = norm_backward(da, cache.post_norm, POST_ATTN_NORM, config)
    # forward: a = out_proj(merge_heads(o))
    dmerged, out_grads = linear_layer_backward(da, cache.out_proj, OUT_PROJ)  # (N,C) -> (N,H D)
    do = dmerged.reshape(B, T, H, D).transpose(0, 2, 1, 3)  # (N,H D) -> (B,H,T,D)
    # forward: o = attend(q, k, v)
    dq, dk, dv = attend_backward(get_xp(do).ascontiguousarray(do), cache.attention, config)
    # forward: q, k = qk(q, k)
    qk = qk_backward(dq, dk, cache.qk, config)
    # forward: q, k, v = split_heads(qkv)
    dqkv = merge_qkv_grads(qk.dq, qk.dk, dv).reshape(B * T, -1)  # -> (N,(H + 2 H_kv) D)
    # forward: qkv = qkv_proj(h)
    dh, qkv_grads = linear_layer_backward(dqkv, cache.qkv_proj, QKV_PROJ)  # -> (N,C)
    # forward: h = pre_attn_norm(x)
    dx, norm_grads = norm_backward(dh, cache.norm, PRE_ATTN_NORM, config)
    grads = post_grads | out_grads | qk.grads | qkv_grads | norm_grads
    return AttentionBackward(dx.reshape(B, T, C), grads, dmerged, dq, dk, dv, qk, dh)  # (N,C) -> (B,T,C)
