"""Grouped-query attention's head groups: which key/value head serves which query head.

With ``H`` query heads and ``H_kv`` key/value heads, ``G = H / H_kv`` query
heads share each key/value head: kv head ``j`` serves query heads
``j G, ..., j G + G - 1`` (the order of Hugging Face's ``repeat_kv``).
``H_kv = H`` is multi-head attention (``G = 1``), ``H_kv = 1`` multi-query
attention. Example, H = 8, H_kv = 2: query heads 0-3 read kv head 0, 4-7 kv head 1.

Plain attention repeats each kv head ``G`` times (``repeat_kv``) and, in the
backward, sums the gradients of the ``G`` copies (``sum_over_group``): a
shared variable's gradient is the sum over its uses.

The tiled kernel never repeats ``k`` and ``v``. It stacks the ``g`` query heads
that share a kv head row by row (``stack_heads``): row ``t g + m`` of the
stack is position ``t`` of the ``m``-th head, so a tile of query positions
``[t0, t1)`` is the contiguous rows ``[t0 g, t1 g)``, and one matrix product
with a key tile serves the whole group. Example, g = 2, positions 0 1 2::

    heads (2, 3, D): [a0 a1 a2], [b0 b1 b2]  ->  stack (6, D): a0 b0 a1 b1 a2 b2
"""

from __future__ import annotations

from ..backend import get_xp


def repeat_kv(a, group: int):
    """``(B,H_kv,T,E) -> (B,H_kv G,T,E)``: kv head ``j`` copied to heads ``j G ... j G + G - 1``; ``a`` when G = 1."""
    return a if group == 1 else get_xp(a).repeat(a, group, axis=1)


def sum_over_group(d, group: int):
    """The reverse of ``repeat_kv``: ``(B,H,T,E) -> (B,H/G,T,E)``, summing the ``G`` heads of each group."""
    if group == 1:
        return d
    B, H, T, E = d.shape
    # (B,H,T,E) -> (B,H_kv,G,T,E) -> (B,H_kv,T,E)
    return d.reshape(B, H // group, group, T, E).sum(axis=2)


def stack_heads(a, group: int):
    """``(B,H,T,E) -> (B,H/g,T g,E)``: each ``g`` heads stacked row by row (module docstring); ``a`` when g = 1.

    ``unstack_into`` is the inverse."""
    if group == 1:
        return a
    B, H, T, E = a.shape
    # (B,H,T,E) -> (B,H/g,g,T,E) -> (B,H/g,T,g,E) -> (B,H/g,T g,E), a copy
    return a.reshape(B, H // group, group, T, E).swapaxes(2, 3).reshape(B, H // group, T * group, E)


def stacked_buffer(a, group: int):
    """Where a kernel writes (or adds into) ``stack_heads(a)`` for ``a (B,H,T,E)``: ``a`` itself when g = 1,
    else a new ``(B,H/g,T g,E)`` array of zeros that ``unstack_into`` then moves into ``a``."""
    if group == 1:
        return a
    B, H, T, E = a.shape
    return get_xp(a).zeros((B, H // group, T * group, E), dtype=a.dtype)


def unstack_into(a, rows, group: int) -> None:
    """``a[...]`` from its stacked ``rows (B,R,T g,E)``, the inverse of ``stack_heads``, in one copy; nothing
    when g = 1 (``rows`` is then ``a`` itself: ``stacked_buffer``)."""
    if group == 1:
        return
    B, R, rows_per_stack, E = rows.shape
    heads = a.reshape(B, R, group, rows_per_stack // group, E)  # a view of a (B,H,T,E)
    heads[...] = rows.reshape(B, R, rows_per_stack // group, group, E).swapaxes(2, 3)
