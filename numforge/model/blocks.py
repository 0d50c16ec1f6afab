"""A transformer block of ``gpt.py``: two residual branches, attention then MLP.

A pre-norm block::

    x = x + Drop(attn.out_proj(Attention(qk(attn.qkv_proj(pre_attn_norm(x))))))   attention_branch.py
    x = x + Drop(mlp.down_proj(act(mlp.up_proj(pre_mlp_norm(x)))))                mlp_branch.py
                                         or with experts, x + Drop(moe(pre_mlp_norm(x)))   moe_branch.py

``block_forward`` adds both branches and returns a ``BlockCache(attention,
mlp, aux_loss)``; ``block_backward`` reverses it. The MLP branch is the config's kind
(``mlp_kinds.MLP_KINDS``); an MLP with experts has an auxiliary loss (``aux_loss``, None without), which the
model adds to its loss, and its backward takes that loss's upstream gradient ``daux``. Each branch's ``*_forward(x, p,
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

Recomputation (activation checkpointing, ``numforge train --recompute``): the model's forward keeps a
``BlockInput`` per block (its input ``x`` and a copy of the dropout generator as it stood before the block drew
from it) instead of the block's cache, and ``recompute_block`` runs the block's forward once more, just before
its backward: the same input, the same masks, so the same cache, bit for bit.
"""

from __future__ import annotations

import copy
from typing import NamedTuple

from .attention_branch import (
    AttentionBackward,
    AttentionBranchCache,
    attention_branch_backward,
    attention_branch_forward,
)
from .mlp_branch import MlpBackward
from .mlp_kinds import MLP_KINDS
from .moe_branch import MoeBackward


class BlockCache(NamedTuple):
    attention: AttentionBranchCache | None  # None in evaluation and inference (``keep_cache`` False)
    mlp: object | None  # the MLP kind's cache (``MlpBranchCache``, ``MoeBranchCache``), or None likewise
    aux_loss: object = None  # () the MLP's auxiliary loss, kept in evaluation too; None: it has none


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
    packed=None,
):
    """``x + a``, then ``+ m``: one block on ``x (B,T,C)``; ``(x, BlockCache)``.

    ``for_backward`` lets the attention keep what speeds up its backward;
    ``kv_cache``, ``layer``, ``tables`` and ``packed`` as in ``attention_branch_forward``.
    Without ``keep_cache`` (evaluation, inference) the cache holds only ``aux_loss``, and the
    attention's is dropped before the MLP runs: the block's peak is its larger branch's.
    """
    a, attention_cache = attention_branch_forward(
        x, p, config, rng=rng, for_backward=for_backward, kv_cache=kv_cache, layer=layer, tables=tables, packed=packed
    )
    if not keep_cache:
        attention_cache = None
    x = x + a  # (B,T,C)
    del a
    m, mlp_cache = MLP_KINDS[config.mlp_kind].forward(x, p, config, rng=rng)
    x = x + m  # (B,T,C)
    return x, BlockCache(attention_cache, mlp_cache if keep_cache else None, mlp_cache.aux_loss)


class BlockInput(NamedTuple):
    """What a block keeps under recomputation: its input and its dropout generator before the block drew."""

    x: object  # (B,T,C) the block's input
    rng: object  # a copy of the dropout generator in the state the block found it (None: dropout off)
    layer: int  # the block's index (its attention's place in a KV cache and its mask stream)
    packed: object = None  # packed rows' segments and positions (packing.py); None: one sequence a row


def rng_copy(rng):
    """A copy of ``rng`` in its current state (None stays None): the copy draws what ``rng`` draws next.

    Example: ``a = rng_copy(g); a.random(3)`` equals the ``g.random(3)`` that follows. A NumPy ``Generator`` and
    ``training.dropout.RowStreams`` (a list of them) copy by value."""
    return None if rng is None else copy.deepcopy(rng)


def recompute_block(saved: BlockInput, p, config, tables: dict | None = None) -> BlockCache:
    """The block's cache made again from ``saved``: its forward once more, on the same input, its masks drawn
    from a fresh copy of the saved generator (so a second backward of the same forward draws them again)."""
    _, cache = block_forward(
        saved.x, p, config, rng=rng_copy(saved.rng), for_backward=True, layer=saved.layer, tables=tables,
        packed=saved.packed,
    )  # fmt: skip
    return cache


class ResidualStep(NamedTuple):
    """One branch walked back (``branch``: its ``MlpBackward`` or ``AttentionBackward``) and the residual
    gradient it leaves: the skip's ``dx`` plus the branch's."""

    branch: MlpBackward | MoeBackward | AttentionBackward
    dx: object  # (B,T,C)

    @property
    def grads(self) -> dict:
        return self.branch.grads


def block_backward_steps(dx, cache: BlockCache, config, daux=0.0):
    """The block's backward as two ``ResidualStep``s, in the order it runs: the MLP branch, then attention.
    ``daux``: the upstream gradient of the block's ``aux_loss`` (the model passes its loss's; 0: none)."""
    # forward: x = x + m, m = mlp_branch(x)
    mlp = MLP_KINDS[config.mlp_kind].backward(dx, cache.mlp, config, daux)
    dx = dx + mlp.dx
    yield ResidualStep(mlp, dx)
    del mlp  # not alive while the attention branch runs (unless the caller keeps it)
    # forward: x = x + a, a = attention_branch(x)
    attention = attention_branch_backward(dx, cache.attention, config)
    yield ResidualStep(attention, dx + attention.dx)


def block_backward(dx, cache: BlockCache, config, daux=0.0):
    """``(dx, grads)``: the residual gradient passes through each skip and adds each branch's."""
    grads = {}
    for step in block_backward_steps(dx, cache, config, daux):
        dx, grads = step.dx, grads | step.grads
        del step  # not alive while the next branch runs
    return dx, grads
