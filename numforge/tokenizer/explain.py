"""How a tokenizer turns one text into ids, step by step: the chunks, each chunk's merges in order, the ids.

``explain(tokenizer, text)`` redoes the encoding the textbook way and keeps
every step: the text is cut by the split pattern (special tokens first cut
out whole); each chunk starts as its UTF-8 bytes, one token per byte; then,
while two neighbours form a learned pair, the pair with the lowest rank (the
earliest learned) is merged everywhere in the chunk, left to right. That is
the order ``reference.encode`` applies the merges in (a merge can only create
pairs of a higher rank than its own), so the final ids are the tokenizer's
own ``encode(text, allowed_special="all")``, which the tests check.

Example, with the merges (97, 97) -> 256, (97, 98) -> 257, (256, 257) -> 258
of ``aaabdaaabac``: the chunk ``aaab`` is ``[a][a][a][b]``; rank 0 gives
``[aa][a][b]``, rank 1 ``[aa][ab]``, rank 2 ``[aaab]``: id 258.
"""

from __future__ import annotations

from typing import NamedTuple

from .bpe import BPETokenizer
from .pretokenize import chunker, special_tokens_regex
from .reference import replace_pair


class Merge(NamedTuple):
    rank: int  # the merge's place in the learned order: 0 was learned first
    pair: tuple[int, int]  # the two ids joined
    new_id: int  # the id they become
    ids: list[int]  # the chunk's ids after this merge


class Chunk(NamedTuple):
    text: str
    special: bool  # a special token, encoded whole as its id
    start_ids: list[int]  # one id per UTF-8 byte (a special token: its id)
    merges: list[Merge]  # in the order they apply

    @property
    def ids(self) -> list[int]:
        return self.merges[-1].ids if self.merges else self.start_ids


def explain(tokenizer: BPETokenizer, text: str) -> list[Chunk]:
    """Every chunk of ``text`` with its merges, in order; special tokens are encoded as their ids."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    ranks = {pair: rank for rank, pair in enumerate(tokenizer.merges)}  # (p, q) -> rank; merge r makes 256 + r
    finder = special_tokens_regex(tuple(sorted(tokenizer.special_tokens)))
    pieces = []  # (text, is special)
    start = 0
    for match in [] if finder is None else finder.finditer(text):
        pieces += [(text[start : match.start()], False), (match.group(), True)]
        start = match.end()
    pieces.append((text[start:], False))
    split, chunks = chunker(tokenizer.pattern), []
    for piece, special in pieces:
        if special:
            chunks.append(Chunk(piece, True, [tokenizer.special_tokens[piece]], []))
            continue
        for chunk in split(piece):
            chunks.append(_merge_steps(chunk, tokenizer, ranks))
    return chunks


def _merge_steps(chunk: str, tokenizer: BPETokenizer, ranks: dict) -> Chunk:
    try:
        data = chunk.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"the text has a lone surrogate {chunk[error.start]!r}, which has no UTF-8 encoding") from None
    start_ids = [tokenizer.byte_ids[b] for b in data]
    ids, merges = start_ids, []
    while True:
        present = [ranks[pair] for pair in zip(ids, ids[1:]) if pair in ranks]
        if not present:
            return Chunk(chunk, False, start_ids, merges)
        rank = min(present)
        pair = tokenizer.merges[rank]
        ids = replace_pair(ids, pair, 256 + rank)
        merges.append(Merge(rank, pair, 256 + rank, ids))


def token_text(data: bytes) -> str:
    """A token's bytes for display: its text when they are whole UTF-8 characters (escaped like ``repr``
    where unprintable, ``\\n``), else every byte in hex, ``<e4 b8>``: never U+FFFD."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "<" + " ".join(f"{b:02x}" for b in data) + ">"
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
