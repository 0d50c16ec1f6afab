"""Embedding lookup: out[b, t] = table[ids[b, t]].

Shapes: ids (...) integers in [0, V), table (V, C) -> out (..., C).
"""

from __future__ import annotations

from typing import NamedTuple

from ..backend import get_xp, scatter_add
from ..checks import check_float, check_int


class EmbeddingCache(NamedTuple):
    ids: object  # the looked-up rows; the table itself is not needed backward, only its shape
    table_shape: tuple[int, int]


def embedding_forward(ids, table):
    """out = table[ids]. Example: table = [[0, 0], [1, 1], [2, 2]], ids = [2, 2, 0] -> [[2, 2], [2, 2], [0, 0]]."""
    check_int(ids, "ids")
    check_float(table, "table", ndim=2)
    xp = get_xp(ids, table)
    vocab_size = table.shape[0]
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        bad = ids[(ids < 0) | (ids >= vocab_size)].reshape(-1)[0]
        raise ValueError(f"ids must lie in [0, {vocab_size}) (the table's rows), got {int(bad)}")
    out = xp.take(table, ids, axis=0)  # (...) -> (..., C)
    return out, EmbeddingCache(ids, tuple(table.shape))


def embedding_backward(dout, cache: EmbeddingCache):
    """dtable[v] = sum of dout[i] over every position i with ids[i] == v (repeats accumulate).

    ``dtable[ids] += dout`` would be wrong: with a repeated id, the buffered
    assignment keeps one update and drops the rest. ``scatter_add`` accumulates
    every one (``numpy.add.at`` on the table's flat view / ``cupyx.scatter_add``).
    """
    xp = get_xp(dout, cache.ids)
    vocab_size, width = cache.table_shape
    if tuple(dout.shape) != (*cache.ids.shape, width):
        raise ValueError(f"dout must have shape {(*cache.ids.shape, width)}, got {tuple(dout.shape)}")
    dtable = xp.zeros((vocab_size, width), dtype=dout.dtype)  # (V, C)
    # forward: out = table[ids], so every row dout[i] flows back into row ids[i]
    scatter_add(dtable, cache.ids.reshape(-1), dout.reshape(-1, width))  # (N,) ids, (N, C) rows
    return dtable
