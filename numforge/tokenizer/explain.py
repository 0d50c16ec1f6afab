"""How a tokenizer turns one text into ids, step by step: the chunks, each chunk's merges in order, the ids.

``explain(tokenizer, text)`` redoes the encoding the textbook way and keeps
every step: special (and added) tokens are cut out whole; the text between is
cut into chunks by the split pattern, or by a Hugging Face pipeline
(``pipeline_steps`` shows each step's pieces: NFC, a Split, Digits, ByteLevel);
each chunk starts as its UTF-8 bytes, one token per byte; then, while two
neighbours form a learned pair, the pair with the lowest rank (the earliest
learned) is merged, leftmost first. A merge can only create pairs of a higher
rank than its own when each token is made by one merge, so each rank is merged
everywhere in one step (the order ``reference.encode`` applies the merges in); a
file converted from tiktoken makes one token by several merges, and when a
merge creates a pair of lower rank, that pair goes first. With ``ignore_merges``
(Llama 3) a chunk that is itself a token is that token, and its merges are
shown as skipped. The final ids are the tokenizer's own
``encode(text, allowed_special="all")``, which the tests check.

Example, with the merges (97, 97) -> 256, (97, 98) -> 257, (256, 257) -> 258
of ``aaabdaaabac``: the chunk ``aaab`` is ``[a][a][a][b]``; rank 0 gives
``[aa][a][b]``, rank 1 ``[aa][ab]``, rank 2 ``[aaab]``: id 258.
"""

from __future__ import annotations

from typing import NamedTuple

from .bpe_tokenizer import BPETokenizer


class Merge(NamedTuple):
    rank: int  # the merge's place in the learned order: 0 was learned first
    pair: tuple[int, int]  # the two ids joined
    new_id: int  # the id they become
    ids: list[int]  # the chunk's ids after this merge


class Chunk(NamedTuple):
    text: str
    special: bool  # a special or added token, encoded whole as its id
    start_ids: list[int]  # one id per UTF-8 byte (a special token: its id)
    merges: list[Merge]  # in the order they apply
    whole_id: int | None = None  # ignore_merges: the chunk is this token, and the merges are skipped

    @property
    def ids(self) -> list[int]:
        if self.whole_id is not None:
            return [self.whole_id]
        return self.merges[-1].ids if self.merges else self.start_ids


def explain(tokenizer: BPETokenizer, text: str) -> list[Chunk]:
    """Every chunk of ``text`` with its merges, in order; special and added tokens are encoded as their ids."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    _check_byte_level(tokenizer)
    ranks = {pair: rank for rank, pair in enumerate(tokenizer.merges)}  # (p, q) -> rank
    chunks = []
    for piece, token in tokenizer.cut(text):
        if token is not None:
            chunks.append(Chunk(piece, True, [token], []))
        else:
            chunks += [_merge_steps(chunk, tokenizer, ranks) for chunk in tokenizer.chunks(piece)]
    return chunks


def _check_byte_level(tokenizer) -> None:
    if not isinstance(tokenizer, BPETokenizer):
        raise ValueError(
            f"the step-by-step view shows byte-level BPE only, not a {type(tokenizer).__name__} (a SentencePiece-style "
            "tokenizer: Llama 2, TinyLlama, Mistral, Gemma)"
        )


def pipeline_steps(tokenizer: BPETokenizer, text: str) -> list[tuple[str, list[str]]]:
    """(step, the pieces after it) for each step of the tokenizer's pipeline, on each text between special tokens;
    one step for a plain split pattern."""
    _check_byte_level(tokenizer)
    steps = []
    for piece, token in tokenizer.cut(text):
        if token is None:
            found = [("split pattern", tokenizer.chunks(piece))] if tokenizer.pipeline is None else None
            for n, (name, pieces) in enumerate(found or tokenizer.pipeline.pieces_by_step(piece)):
                if n < len(steps):
                    steps[n][1].extend(pieces)
                else:
                    steps.append((name, list(pieces)))
    return steps


def _merge_steps(chunk: str, tokenizer: BPETokenizer, ranks: dict) -> Chunk:
    try:
        data = chunk.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"the text has a lone surrogate {chunk[error.start]!r}, which has no UTF-8 encoding") from None
    tokenizer.check_bytes(data, chunk)
    start_ids = [tokenizer.byte_ids[b] for b in data]
    ids, merges = start_ids, []
    while present := [ranks[pair] for pair in zip(ids, ids[1:]) if pair in ranks]:
        rank = min(present)
        new_id = tokenizer.merge_ids[rank]
        ids = _merge_pair(ids, rank, tokenizer.merges[rank], new_id, ranks)
        merges.append(Merge(rank, tokenizer.merges[rank], new_id, ids))
    return Chunk(chunk, False, start_ids, merges, tokenizer.whole_token(data))


def _merge_pair(ids: list[int], rank: int, pair: tuple[int, int], new_id: int, ranks: dict) -> list[int]:
    """Replace the leftmost non-overlapping occurrences of ``pair`` (as ``reference.replace_pair``), stopping after
    one that forms a pair of lower rank than ``rank`` with a neighbour: that one goes next."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
            neighbours = [(out[-2], new_id)] if len(out) > 1 else []
            neighbours += [(new_id, ids[i])] if i < len(ids) else []
            if any(ranks.get(p, rank) < rank for p in neighbours):
                return out + ids[i:]
        else:
            out.append(ids[i])
            i += 1
    return out


def token_text(data: bytes) -> str:
    """A token's bytes for display: its text when they are whole UTF-8 characters (escaped like ``repr``
    where unprintable, ``\\n``), else every byte in hex, ``<e4 b8>``: never U+FFFD."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "<" + " ".join(f"{b:02x}" for b in data) + ">"
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
