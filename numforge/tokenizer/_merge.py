"""Encoding one chunk by merge rank, in O(n log n) even for a 100,000-byte chunk.

Rule (equal to ``reference.encode``): repeatedly merge the adjacent pair of
lowest rank, the leftmost one among equal ranks. Merge i has rank i and makes
token ``256 + i``, so the new id itself serves as the rank.

Why this equals walking the merge list in order: a merge made from token X
always has a higher rank than the merge that made X, so merging never creates
a pair of lower rank than the one just merged; ranks come out in order, and
within one rank, leftmost-first is the reference's left-to-right scan.

Data structures: the chunk is a doubly linked list over positions (``nxt``,
``prv``); ``waiting`` maps a rank to the positions where a pair of that rank
was seen, and a heap holds the ranks that have waiting positions. Pop the
lowest rank, visit its positions left to right, and merge where the pair is
still there (an entry goes stale when a neighbour merged first); a merge
rewrites the left node, unlinks the right one and files the (at most two) new
pairs around it under their ranks, which are always higher. The heap sees one
push per rank, not per pair, which keeps the constant small: a run of 100,000
equal letters costs a few list appends per byte. Worked example, merges
(97, 97) -> 256 and (256, 97) -> 257, chunk "aaa" = [97, 97, 97]:
waiting {256: [0, 1]}; at 0: [256, 97], file 1 position under 257;
at 1: stale (node 1 unlinked); rank 257 at 0: [257].
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush

# A pair (p, q) of token ids is the dict key p * PAIR_BASE + q: one int hashes
# faster than a tuple, and keys sort like the pairs as long as ids < PAIR_BASE.
PAIR_BASE = 1 << 32


def merge_chunk(ids: list[int], merged: dict[int, int]) -> list[int]:
    """Apply merges to one chunk's token ids; `merged` maps a pair key to the id the merge makes.

    Example: ids [97, 97, 97], merged {97*B+97: 256, 256*B+97: 257} -> [257].
    """
    n = len(ids)
    if n < 2:
        return list(ids)
    tokens = list(ids)  # tokens[j] is the token at node j, or -1 once node j is unlinked
    nxt = list(range(1, n + 1))  # (n,) next node, n = none
    prv = list(range(-1, n - 1))  # (n,) previous node, -1 = none
    waiting: dict[int, list[int]] = {}  # rank -> positions whose pair had that rank
    for j, rank in enumerate(map(merged.get, map(_key, tokens[:-1], tokens[1:]))):
        if rank is not None:
            waiting.setdefault(rank, []).append(j)
    ranks = list(waiting)
    heapify(ranks)
    while ranks:
        rank = heappop(ranks)
        for j in sorted(waiting.pop(rank)):  # leftmost first
            k = nxt[j]
            if tokens[j] < 0 or k >= n or merged.get(tokens[j] * PAIR_BASE + tokens[k]) != rank:
                continue  # stale: node j is gone, or a neighbour merged first
            tokens[j] = rank  # the left node becomes the merged token (the rank is its id)
            tokens[k] = -1  # unlink the right node
            nxt[j] = k = nxt[k]
            if k < n:
                prv[k] = j
                _file(waiting, ranks, merged.get(rank * PAIR_BASE + tokens[k]), j)
            if (p := prv[j]) >= 0:
                _file(waiting, ranks, merged.get(tokens[p] * PAIR_BASE + rank), p)
    return [t for t in tokens if t >= 0]


def _file(waiting: dict[int, list[int]], ranks: list[int], rank: int | None, j: int) -> None:
    """Note that the pair at position j has `rank` (None: not a merge); a new rank enters the heap."""
    if rank is None:
        return
    if rank in waiting:
        waiting[rank].append(j)
    else:
        waiting[rank] = [j]
        heappush(ranks, rank)


def _key(p: int, q: int) -> int:
    return p * PAIR_BASE + q
