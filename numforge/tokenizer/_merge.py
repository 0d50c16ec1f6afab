"""Encoding one chunk by merge rank: fast for short chunks, O(n log n) for a 100,000-byte one.

Rule (Hugging Face's BPE; equal to ``reference.encode`` on numforge's own merges): repeatedly
merge the adjacent pair of lowest rank, the leftmost one among equal ranks. Merge i has rank
``256 + i`` and makes the token ``made[256 + i]``; in numforge's own numbering (``made`` None)
merge i makes token ``256 + i``, so the new id itself serves as the rank.

Why this equals walking the merge list in order when each token is made by one merge: a
merge made from token X always has a higher rank than the merge that made X, so merging never
creates a pair of lower rank than the one just merged; ranks come out in order, and within
one rank, leftmost-first is the reference's left-to-right scan. Files converted from tiktoken
(Llama 3's) list every split of a token as a merge, so one token can be made by several merges
and a later-ranked merge can create a pair of lower rank: then that pair goes first.

Short chunks (``merge_short``, nearly all of them): recompute nothing but the two
pair ranks beside each merge; the scans for the lowest rank run inside list methods.

Long chunks (``merge_long``): the chunk is a doubly linked list over positions
(``nxt``, ``prv``); ``waiting`` maps a rank to the positions where a pair of that rank
was seen, and a heap holds the ranks that have waiting positions. Pop the
lowest rank, visit its positions left to right, and merge where the pair is
still there (an entry goes stale when a neighbour merged first); a merge
rewrites the left node, unlinks the right one and files the (at most two) new
pairs around it under their ranks, which are higher (if one is lower, the
positions left wait under their rank and the lower one goes first). The heap sees one
push per rank, not per pair, which keeps the constant small: a run of 100,000
equal letters costs a few list appends per byte. Worked example, merges
(97, 97) -> 256 and (256, 97) -> 257, chunk "aaa" = [97, 97, 97]:
waiting {256: [0, 1]}; at 0: [256, 97], file position 0 under 257;
at 1: stale (node 1 unlinked); rank 257 at 0: [257].
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush
from itertools import repeat

NOT_A_MERGE = 1 << 62  # larger than every rank
SHORT_CHUNK = 64  # tokens; beyond this the O(n log n) path is faster (measured)


def internal_ids(byte_ids: list[int], merge_ids: list[int], merges) -> tuple[dict, list[int] | None, list[int] | None]:
    """(``merged``: pair -> rank, ``made``: rank -> the internal id it makes, internal id -> the tokenizer's id)
    for a tokenizer whose byte b has id ``byte_ids[b]`` and whose merge i joins the ids ``merges[i]`` into
    ``merge_ids[i]``; None where nothing is to be translated (numforge's own layout).

    Internal ids: byte b is b, merge i has rank 256 + i and makes 256 + i (or, when several merges make one
    token, the internal id of the first of them), so that an id is its own rank.
    Example, GPT-2's bytes (id 0 is "!", byte 33) and the merge (0, 0) -> 256: merged {(33, 33): 256}.
    """
    ordinary = byte_ids + merge_ids  # internal id -> id
    internal = {}
    for i, token in enumerate(ordinary):
        internal.setdefault(token, i)
    merged = {(internal[p], internal[q]): 256 + i for i, (p, q) in enumerate(merges)}
    made = [internal[token] for token in ordinary]
    identity = list(range(len(ordinary)))
    return merged, None if made == identity else made, None if ordinary == identity else ordinary


def merge_chunk(ids: list[int], merged: dict[tuple[int, int], int], made: list[int] | None = None) -> list[int]:
    """Apply merges to one chunk's token ids; `merged` maps a pair (p, q) to its rank, `made` a rank to the
    token it makes (None: the rank itself).

    Example: ids [97, 97, 97], merged {(97, 97): 256, (256, 97): 257} -> [257].
    Chunks up to SHORT_CHUNK tokens take the quadratic path, longer ones the linked list.
    """
    return merge_short(ids, merged, made) if len(ids) <= SHORT_CHUNK else merge_long(ids, merged, made)


def merge_short(ids: list[int], merged: dict[tuple[int, int], int], made: list[int] | None = None) -> list[int]:
    """Merge the lowest-rank pair, leftmost first, until none is left: O(n^2), fast for small n.

    ranks[j] is the rank of the pair (ids[j], ids[j+1]) (NOT_A_MERGE if none); a merge at j
    replaces two ids by one, drops ranks[j] and refreshes the two ranks beside it.
    """
    ids = list(ids)
    ranks = list(map(merged.get, zip(ids, ids[1:]), repeat(NOT_A_MERGE)))  # (n-1,)
    while ranks:
        rank = min(ranks)
        if rank == NOT_A_MERGE:
            break
        j = ranks.index(rank)  # the leftmost pair of lowest rank
        token = rank if made is None else made[rank]
        ids[j : j + 2] = (token,)  # (n,) -> (n-1,)
        del ranks[j]  # (n-1,) -> (n-2,)
        if j > 0:
            ranks[j - 1] = merged.get((ids[j - 1], token), NOT_A_MERGE)
        if j < len(ranks):
            ranks[j] = merged.get((token, ids[j + 1]), NOT_A_MERGE)
    return ids


def merge_long(ids: list[int], merged: dict[tuple[int, int], int], made: list[int] | None = None) -> list[int]:
    """The same result as ``merge_short`` in O(n log n): rank buckets over a linked list."""
    n = len(ids)
    if n < 2:
        return list(ids)
    tokens = list(ids)  # tokens[j] is the token at node j, or -1 once node j is unlinked
    nxt = list(range(1, n + 1))  # (n,) next node, n = none
    prv = list(range(-1, n - 1))  # (n,) previous node, -1 = none
    waiting: dict[int, list[int]] = {}  # rank -> positions whose pair had that rank
    for j, rank in enumerate(map(merged.get, zip(tokens, tokens[1:]))):
        if rank is not None:
            waiting.setdefault(rank, []).append(j)
    ranks = list(waiting)
    heapify(ranks)
    while ranks:
        rank = heappop(ranks)
        positions = sorted(waiting.pop(rank))
        for done, j in enumerate(positions, 1):  # leftmost first
            k = nxt[j]
            if tokens[j] < 0 or k >= n or merged.get((tokens[j], tokens[k])) != rank:
                continue  # stale: node j is gone, or a neighbour merged first
            tokens[j] = token = rank if made is None else made[rank]  # the left node becomes the merged token
            tokens[k] = -1  # unlink the right node
            nxt[j] = k = nxt[k]
            if k < n:
                prv[k] = j
                _file(waiting, ranks, merged.get((token, tokens[k])), j)
            if (p := prv[j]) >= 0:
                _file(waiting, ranks, merged.get((tokens[p], token)), p)
            if ranks and ranks[0] < rank:  # a pair of lower rank appeared: it goes before the positions left
                for later in positions[done:]:
                    _file(waiting, ranks, rank, later)
                break
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
