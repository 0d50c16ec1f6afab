"""A transformer block of ``gpt.py``: two residual branches, attention then MLP.

A pre-norm block::

    x = x + Drop(attn.out_proj(Attention(qk(attn.qkv_proj(pre_attn_norm(x))))))   attention_branch.py
    x = x + Drop(mlp.down_proj(act(mlp.up_proj(pre_mlp_norm(x)))))                mlp_branch.py

``block_forward`` adds both branches and returns a ``BlockCache(attention,
mlp)``; ``block_backward`` reverses it. Each branch's ``*_forward(x, p,
config, ...)`` takes the block's parameters ``p`` by short name
(``"attn.qkv_proj.weight"``; an absent parameter is ``None``) and returns
``(branch, cache)``; each ``*_backward(dbranch, cache, config)`` returns a
NamedTuple that starts with ``(dx, grads)``, ``grads`` keyed by the same short
names. ``rng`` is None when dropout is off (at ``drop_prob = 0``, in
evaluation and at inference).

The model walks a block back one branch at a time (``block_backward_steps``): each step
is a ``ResidualStep``, the branch's ``MlpBackward`` or ``AttentionBackward`` (every gradient it
made, by reference) and the residual gradient it leaves. Training keeps only each step's
``grads`` and drops the rest before the next branch runs, so the gradients on the way are
freed as soon as they are used; ``study/backward.py`` reads them all (``numforge trace
--backward``). ``block_backward`` is the same walk with only ``(dx, grads)`` kept.
"""

from __future__ import annotations

from typing import NamedTuple

from .attention_branch import (
    AttentionBackward,
    AttentionBranchCache,
    attention_branch_backward,
    attention_branch_forward,
)
from .mlp_branch import MlpBackward, MlpBranchCache, mlp_branch_backward, mlp_branch_forward


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


class ResidualStep(NamedTuple):
    """One branch walked back (``branch``: its ``MlpBackward`` or ``AttentionBackward``) and the residual
    gradient it leaves: the skip's ``dx`` plus the branch's."""

    branch: MlpBackward | AttentionBackward
    dx: object  # (B,T,C)

    @property
    def grads(self) -> dict:
        return self.branch.grads


def block_backward_steps(dx, cache: BlockCache, config):
    """The block's backward as two ``ResidualStep``s, in the order it runs: the MLP branch, then attention."""
    # forward: x = x + m, m = mlp_branch(x)
    mlp = mlp_branch_backward(dx, cache.mlp, config)
    dx = dx + mlp.dx
    yield ResidualStep(mlp, dx)
    del mlp  # not alive while the attention branch runs (unless the caller keeps it)
    # forward: x = x + a, a = attention_branch(x)
    attention = attention_branch_backward(dx, cache.attention, config)
    yield ResidualStep(attention, dx + attention.dx)


def block_backward(dx, cache: BlockCache, config):
    """``(dx, grads)``: the residual gradient passes through each skip and adds each branch's."""
    grads = {}
    for step in block_backward_steps(dx, cache, config):
        dx, grads = step.dx, grads | step.grads
        del step  # not alive while the next branch runs
    return dx, grads
