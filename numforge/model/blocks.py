"""A transformer block of ``gpt.py``: two residual branches, attention then MLP.

A pre-norm block::

    x = x + Drop(attn.out_proj(Attention(qk(attn.qkv_proj(pre_attn_norm(x))))))   attention_branch.py
    x = x + Drop(mlp.down_proj(act(mlp.up_proj(pre_mlp_norm(x)))))                mlp_branch.py

``block_forward`` adds both branches and returns a ``BlockCache(attention,
mlp)``; ``block_backward`` reverses it. Each branch's ``*_forward(x, p,
config, ...)`` takes the block's parameters ``p`` by short name
(``"attn.qkv_proj.weight"``; an absent parameter is ``None``) and returns
``(branch, cache)``; each ``*_backward(dbranch, cache, config, record)``
returns ``(dx, grads)`` with ``grads`` keyed by the same short names. ``rng``
is None when dropout is off (at ``drop_prob = 0``, in evaluation and at
inference).

Every backward takes a recorder ``record(stage, grad, params)``
(``layers.no_record`` by default): it is called with each upstream gradient
as the backward computes it (and the parameter gradients that step
produced), so that ``study/backward.py`` shows the real backward's numbers,
stage by stage. It only receives references: the math is the same with or
without it. (A study-side re-walk of these calls would duplicate the
backward's logic and could drift from it; a callback cannot.)
"""

from __future__ import annotations

from typing import NamedTuple

from .attention_branch import AttentionBranchCache, attention_branch_backward, attention_branch_forward
from .layers import no_record
from .mlp_branch import MlpBranchCache, mlp_branch_backward, mlp_branch_forward


class BlockCache(NamedTuple):
    attention: AttentionBranchCache
    mlp: MlpBranchCache


def block_forward(
    x,
    p,
    config,
    *,
    rng=None,
    for_backward: bool = False,
    kv_cache=None,
    layer: int = 0,
    tables: dict | None = None,
    keep_cache: bool = True,
):
    """``x + a``, then ``+ m``: one block on ``x (B,T,C)``; ``(x, BlockCache)``.

    ``for_backward`` lets the attention keep what speeds up its backward;
    ``kv_cache``, ``layer`` and ``tables`` as in ``attention_branch_forward``.
    Without ``keep_cache`` (evaluation, inference) the cache is ``None``, and the
    attention's is dropped before the MLP runs: the block's peak is its larger branch's.
    """
    a, attention_cache = attention_branch_forward(
        x, p, config, rng=rng, for_backward=for_backward, kv_cache=kv_cache, layer=layer, tables=tables
    )
    if not keep_cache:
        attention_cache = None
    x = x + a  # (B,T,C)
    del a
    m, mlp_cache = mlp_branch_forward(x, p, config, rng=rng)
    x = x + m  # (B,T,C)
    return x, (BlockCache(attention_cache, mlp_cache) if keep_cache else None)


def block_backward(dx, cache: BlockCache, config, record=no_record):
    """``(dx, grads)``: the residual gradient passes through each skip and adds each branch's."""
    # forward: x = x + m, m = mlp_branch(x)
    dx_mlp, mlp_grads = mlp_branch_backward(dx, cache.mlp, config, record)
    dx = dx + dx_mlp
    record("residual after attention (skip + MLP)", dx, {})
    # forward: x = x + a, a = attention_branch(x)
    dx_attention, attention_grads = attention_branch_backward(dx, cache.attention, config, record)
    dx = dx + dx_attention
    record("residual into the block (skip + attention)", dx, {})
    return dx, mlp_grads | attention_grads
