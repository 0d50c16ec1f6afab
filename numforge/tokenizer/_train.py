"""The fast BPE trainer: the same merges as ``reference.train_merges``, without recounting.

The reference recounts every pair of the whole corpus for every merge. Here:

1. Chunks are counted once: a corpus of 2,000,000 chunks may hold only 40,000
   distinct ones, each stored once as a list of token ids with its count.
2. Pair counts are kept up to date: merging (a, b) -> X changes only the pairs
   next to each occurrence. For an occurrence with left neighbour p and right
   neighbour q (both as they stand while scanning left to right):
       (p, a) -= f, (p, X) += f, (b, q) -= f, (X, q) += f      (f = chunk count)
   and (a, b) drops to zero. "abab" -> [X, X]: the first occurrence gives
   (b, a) -1, (X, a) +1; the second, with p = X, gives (X, a) -1, (X, X) +1.
3. An index from each pair to the chunks that contain it means a merge visits
   only those chunks. Entries are never removed; a chunk that lost the pair is
   visited and found to have nothing to merge.
4. A heap of (-count, pair key) picks the best pair without a scan. Only pairs
   that contain the new token X can gain count; all others only lose. So the
   heap holds, for every pair, an entry whose count is at least the true one:
   pop the top, and if its count is out of date push the true count back and
   look again. The first up-to-date top is the true best, and among equal
   counts the heap yields the smallest key, i.e. the smallest pair (the tie
   rule of the reference).

Counts are Python ints, so they never overflow.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from heapq import heapify, heappop, heappush, heapreplace

from tqdm import tqdm

from .. import interrupts

# A pair (p, q) of token ids is the int key p * PAIR_BASE + q: ints hash faster than
# tuples, and keys sort like the pairs (the tie rule) as long as ids < PAIR_BASE.
PAIR_BASE = 1 << 32


def learn_merges(chunk_counts: dict[str, int], num_merges: int, progress: bool = False) -> list[tuple[int, int]]:
    """Up to `num_merges` merges learned from `chunk_counts` (chunk text -> how often it occurs)."""
    words = [list(chunk.encode("utf-8")) for chunk in chunk_counts]
    freqs = list(chunk_counts.values())
    pair_counts: dict[int, int] = defaultdict(int)
    where: dict[int, set[int]] = defaultdict(set)  # pair key -> indices of words that contained it
    for i, word in enumerate(words):
        for key in map(_key, word[:-1], word[1:]):
            pair_counts[key] += freqs[i]
            where[key].add(i)
    heap = [(-count, key) for key, count in pair_counts.items()]
    heapify(heap)

    merges = []
    with tqdm(total=num_merges, desc="BPE merges", unit="merge", disable=not progress) as bar:
        for new_id in range(256, 256 + num_merges):
            interrupts.check()  # a job's safe point (a no-op unless a stop signal was recorded)
            count, key = _pop_best(heap, pair_counts)
            if count < 2:
                warnings.warn(
                    f"no pair occurs twice after {len(merges)} merges; stopping early "
                    f"(vocabulary smaller than asked by {num_merges - len(merges)})",
                    stacklevel=3,
                )
                break
            a, b = divmod(key, PAIR_BASE)
            grown = _merge_everywhere(words, freqs, where.pop(key), a, b, new_id, pair_counts, where)
            del pair_counts[key]
            for grown_key in grown:
                heappush(heap, (-pair_counts[grown_key], grown_key))
            merges.append((a, b))
            bar.update()
    return merges


def _pop_best(heap: list[tuple[int, int]], pair_counts: dict[int, int]) -> tuple[int, int]:
    """(count, key) of the most frequent pair (smallest key among ties), or (0, -1) if none is left."""
    while heap:
        negative_count, key = heap[0]
        count = pair_counts.get(key, 0)
        if -negative_count == count:
            heappop(heap)
            return count, key
        if count > 0:
            heapreplace(heap, (-count, key))  # out of date: put the true (lower) count back
        else:
            heappop(heap)
    return 0, -1


def _merge_everywhere(words, freqs, word_indices, a, b, new_id, pair_counts, where) -> set[int]:
    """Replace (a, b) by new_id in the listed words, updating pair counts; return the keys that gained."""
    merged_key = a * PAIR_BASE + b
    grown = set()
    for i in word_indices:
        word = words[i]
        j = _find_pair(word, a, b, 0)
        if j < 0:
            continue  # a stale index entry: an earlier merge took this pair away
        f = freqs[i]
        out = []
        start = 0
        while j >= 0:
            out += word[start:j]
            if out:  # forward: (p, a) becomes (p, X)
                lost = out[-1] * PAIR_BASE + a
                if lost != merged_key:
                    pair_counts[lost] -= f
                gained = out[-1] * PAIR_BASE + new_id
                pair_counts[gained] += f
                grown.add(gained)
                where[gained].add(i)
            if j + 2 < len(word):  # forward: (b, q) becomes (X, q)
                lost = b * PAIR_BASE + word[j + 2]
                if lost != merged_key:
                    pair_counts[lost] -= f
                gained = new_id * PAIR_BASE + word[j + 2]
                pair_counts[gained] += f
                grown.add(gained)
                where[gained].add(i)
            out.append(new_id)
            start = j + 2
            j = _find_pair(word, a, b, start)
        out += word[start:]
        words[i] = out
    return {key for key in grown if pair_counts[key] > 0}


def _find_pair(word: list[int], a: int, b: int, start: int) -> int:
    """The first position j >= start with word[j:j+2] == [a, b], or -1 (searches with list.index)."""
    last = len(word) - 1
    while start < last:
        try:
            j = word.index(a, start, last)
        except ValueError:
            return -1
        if word[j + 1] == b:
            return j
        start = j + 1
    return -1


def _key(p: int, q: int) -> int:
    return p * PAIR_BASE + q
