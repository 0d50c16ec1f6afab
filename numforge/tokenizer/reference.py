"""Byte-level BPE exactly as the math states it: slow on purpose, read this first.

This module is the oracle for the fast code in ``bpe.py``: every test of the
fast trainer and encoder compares against these functions.

Tokens are integers. Ids 0..255 are the 256 byte values; merge k (counting
from 1) creates token r_k = 255 + k, i.e. ``merges[i]`` creates id ``256 + i``.

Training (Sennrich et al. 2016, byte-level as in GPT-2)
    1. Split the text into chunks with the split pattern; write each chunk as
       its UTF-8 bytes. Pairs never cross a chunk boundary.
    2. Count every adjacent pair (p, q) over all chunks.
    3. Take the most frequent pair. Tie rule: the highest count wins; among
       equal counts the smallest pair (p, q) in token-id order wins.
       Stop early if no pair occurs at least twice.
    4. Create the new token r_k = 255 + k and replace every occurrence of
       (p, q), leftmost first, without overlaps ("aaa" with (a, a) -> [r, a]).
    5. Repeat from step 2 until the requested number of merges is made.

Worked example (Wikipedia's): "aaabdaaabac" (a=97, b=98, c=99, d=100), 3 merges
    counts: (97, 97): 4, (97, 98): 2, others 1
    (97, 97) -> 256    [256, 97, 98, 100, 256, 97, 98, 97, 99]       "aa" = Z
    counts: (256, 97): 2, (97, 98): 2 -- a tie; the smaller pair wins
    (97, 98) -> 257    [256, 257, 100, 256, 257, 97, 99]             "ab" = Y
    (256, 257) -> 258  [258, 100, 258, 97, 99]                       "ZY" = X

Encoding walks the ordered merge list and applies each merge to the chunk
(leftmost non-overlapping occurrences). Decoding expands each token
recursively into the two tokens it was made of, down to bytes.
"""

from __future__ import annotations

import warnings
from collections import Counter

from .pretokenize import GPT2_SPLIT_PATTERN, split_chunks, split_on_specials


def chunk_byte_ids(texts, pattern: str = GPT2_SPLIT_PATTERN, special_tokens=()) -> list[list[int]]:
    """Every chunk of every text as a list of byte values (special strings removed first)."""
    if isinstance(texts, str):
        texts = [texts]
    return [
        list(chunk.encode("utf-8"))
        for text in texts
        for piece in split_on_specials(text, special_tokens)
        for chunk in split_chunks(piece, pattern)
    ]


def count_pairs(chunks: list[list[int]]) -> Counter:
    """How often each adjacent pair occurs: [[1, 2, 3], [1, 2]] -> {(1, 2): 2, (2, 3): 1}."""
    counts = Counter()
    for ids in chunks:
        counts.update(zip(ids, ids[1:]))
    return counts


def most_frequent_pair(counts: Counter) -> tuple[tuple[int, int], int]:
    """The pair with the highest count, the smallest pair among ties, and its count."""
    pair = min(counts, key=lambda p: (-counts[p], p))
    return pair, counts[pair]


def replace_pair(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace the leftmost non-overlapping occurrences of `pair`: [1, 2, 3, 1, 2], (1, 2), 4 -> [4, 3, 4]."""
    out = []
    i = 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def train_merges(texts, num_merges: int, pattern: str = GPT2_SPLIT_PATTERN, special_tokens=()) -> list[tuple[int, int]]:
    """Learn up to `num_merges` merges by recounting all pairs at every step (steps 1-5 above)."""
    chunks = chunk_byte_ids(texts, pattern, special_tokens)
    merges = []
    for k in range(num_merges):
        counts = count_pairs(chunks)
        pair, count = most_frequent_pair(counts) if counts else (None, 0)
        if count < 2:
            warnings.warn(f"no pair occurs twice after {k} merges; stopping early", stacklevel=2)
            break
        new_id = 256 + k
        chunks = [replace_pair(ids, pair, new_id) for ids in chunks]
        merges.append(pair)
    return merges


def encode(text: str, merges: list[tuple[int, int]], pattern: str = GPT2_SPLIT_PATTERN) -> list[int]:
    """Token ids of `text`: each chunk's bytes, then every merge in order, leftmost first."""
    out = []
    for chunk in split_chunks(text, pattern):
        ids = list(chunk.encode("utf-8"))
        for i, pair in enumerate(merges):
            ids = replace_pair(ids, pair, 256 + i)
        out.extend(ids)
    return out


def token_bytes(token: int, merges: list[tuple[int, int]]) -> bytes:
    """The bytes a token stands for, expanded recursively: 256 = (97, 97) -> b"aa"."""
    if token < 256:
        return bytes([token])
    left, right = merges[token - 256]
    return token_bytes(left, merges) + token_bytes(right, merges)


def decode(ids: list[int], merges: list[tuple[int, int]]) -> str:
    """The text of `ids` (invalid UTF-8 becomes U+FFFD)."""
    return b"".join(token_bytes(t, merges) for t in ids).decode("utf-8", errors="replace")
