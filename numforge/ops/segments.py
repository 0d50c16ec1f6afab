"""Segments: several sequences packed into one row, none attending to another (the ``segments`` score modifier).

A packed row holds several conversations end to end; ``ids (B, Tk)`` gives each position's segment, a
non-decreasing integer along each row (``[0, 0, 0, 1, 1, 2, 2, 2]``: three segments). Query ``i`` sees key ``j``
only when both lie in the same segment of their row::

    term(b, i, j) = 0 if ids[b, i] == ids[b, j] else -inf

With the causal mask beside it, each segment is causal attention over its own tokens alone: the softmax
of a query in segment ``s`` runs over ``s``'s keys only, exactly as if ``s`` were a row of its own (a mask's
``-inf`` gives ``P = 0``, so no gradient crosses from one segment to another either: ``dS = P (dP - D) = 0``).
With a KV cache the ids cover all ``Tk`` keys and query row ``r`` is position ``r + Tk - Tq``
(``ops/scores.py``), so ``Tq <= Tk``.

Segments are contiguous, which lets the tiled kernel skip tiles: a run of query positions ``[i0, i1]`` of a
row sees keys from the start of ``i0``'s segment to the end of ``i1``'s, and every one of them sees the keys
from the start of ``i1``'s segment to the end of ``i0``'s (none unless ``i0`` and ``i1`` share a segment);
over the tile's batch rows, the union and the intersection of those spans. Example, ids ``[0 0 0 1 1 2 2 2]``,
queries 3..4: some see keys 3..4, all see 3..4; queries 2..5: some see 0..7, none is seen by all.

``segment_positions(ids)`` counts each token's place in its own segment, ``[0 1 2 0 1 0 1 2]``: the positions
a packed row's tokens take so that each sequence is embedded (or rotated) as it would be alone.
"""

from __future__ import annotations

import math

import numpy as np

from ..backend import get_xp, to_numpy
from ..checks import check_int


def check_segments(ids, shape) -> None:
    """``ids``: an integer array ``(B, Tk)`` of the call ``shape = (B,H,Tq,Tk)``, ``Tq <= Tk``, non-decreasing
    along each row; else a TypeError or ValueError naming it."""
    B, _, Tq, Tk = shape
    check_int(ids, "the segment ids (score modifier 'segments')", ndim=2)
    if tuple(ids.shape) != (B, Tk):
        raise ValueError(f"the segment ids must have shape (B, Tk) = {(B, Tk)}, got {tuple(ids.shape)}")
    if Tq > Tk:
        raise ValueError(f"segments need every query among the keys (Tq <= Tk), got Tq = {Tq}, Tk = {Tk}")
    if bool((ids[:, 1:] < ids[:, :-1]).any()):
        raise ValueError("the segment ids must not decrease along a row (each segment one run of positions)")


def segment_positions(ids):
    """Each position's place in its own segment, ``(B, T)`` ints: ``j - (the first position of j's segment)``.

    Example: ids ``[[0, 0, 0, 1, 1, 2]]`` -> ``[[0, 1, 2, 0, 1, 0]]``.
    """
    xp = get_xp(ids)
    B, T = ids.shape
    new = xp.concatenate([xp.ones((B, 1), dtype=bool), ids[:, 1:] != ids[:, :-1]], axis=1)  # (B,T) a segment starts
    rank = xp.cumsum(new, axis=1) - 1 + T * xp.arange(B)[:, None]  # (B,T) segment number, rows apart: non-decreasing
    first = xp.searchsorted(rank.ravel(), rank.ravel(), side="left").reshape(B, T)  # flat index of each start
    return xp.arange(B * T).reshape(B, T) - first  # (B,T): j - the first position of j's segment


def _same_segment(query_ids, key_ids):
    return query_ids[:, :, None] == key_ids[:, None, :]  # (b,nq,1) == (b,1,nk) -> (b,nq,nk)


def segments_tile(xp, ids, tile, dtype):
    """The term on one tile ``(b,1,nq,1,nk)``: 0 where query and key share a segment, else -inf."""
    rows = xp.asarray(ids)[tile.batches]  # (b,Tk)
    queries = rows[:, tile.queries.start + tile.offset : tile.queries.stop + tile.offset]  # (b,nq) at i = r + offset
    same = _same_segment(queries, rows[:, tile.keys.start : tile.keys.stop])  # (b,nq,nk)
    return xp.where(same, dtype.type(0), dtype.type(-np.inf))[:, None, :, None, :]  # (b,1,nq,1,nk)


def segments_textbook(xp, ids, shape, dtype):
    B, H, Tq, Tk = shape
    same = _same_segment(ids[:, Tk - Tq :], ids)  # (B,Tq,Tk): query row r is position r + Tk - Tq
    return xp.where(same, dtype.type(0), dtype.type(-np.inf))[:, None]  # (B,1,Tq,Tk)


def segments_torch(ids, shape, dtype):
    import torch

    B, H, Tq, Tk = shape
    ids = torch.as_tensor(to_numpy(ids))
    same = ids[:, Tk - Tq :, None] == ids[:, None, :]  # (B,Tq,Tk)
    return torch.zeros(B, 1, Tq, Tk, dtype=dtype).masked_fill(~same[:, None], -math.inf)


def segments_gradcheck(rng, shape):
    """Segments starting at positions 3 - (b mod 2) and 5 of row b (``[0 0 0 1 1 2 2]`` and ``[0 0 1 1 1 2 2]``
    at Tk = 7): with 2 x 3 tiles some are wholly hidden, others crossed."""
    B, _, _, Tk = shape
    j = np.arange(Tk)
    return np.stack([(j >= 3 - b % 2).astype(np.int64) + (j >= 5) for b in range(B)])  # (B,Tk)


def segments_keys(ids, batches: slice, queries: range, offset: int, Tk: int) -> tuple[range, range]:
    """``(any, every)``: the keys some query of ``queries`` (positions ``+ offset``) sees in some row of ``batches``,
    and those every query sees in every row (module docstring)."""
    rows = ids[batches]  # (b,Tk)
    first, last = rows[:, queries.start + offset, None], rows[:, queries.stop - 1 + offset, None]  # (b,1) each
    start = lambda s: (rows < s).sum(axis=1)  # noqa: E731  (b,): where segment s begins (the ids do not decrease)
    stop = lambda s: (rows <= s).sum(axis=1)  # noqa: E731  (b,): where it ends
    some = range(int(start(first).min()), int(stop(last).max()))
    low, high = int(start(last).max()), int(stop(first).min())
    return some, range(low, max(low, high))
