"""Other tokenizers' files, in and out: GPT-2's encoder.json + vocab.bpe, tiktoken rank files.

Hugging Face's vocab.json + merges.txt are GPT-2's two files under other names;
its tokenizer.json is read and written by ``hf_json.py`` on top of this module.

numforge's own file belongs to ``BPETokenizer`` (``save`` / ``load``, ``bpe_file.py``);
this module imports the class, never the reverse.

GPT-2's files write bytes as printable characters (``byte_to_unicode``): byte
0x20 (space) is "Ġ", so " the" is "Ġthe". encoder.json maps those strings to
ids (the byte tokens are not in byte order: id 0 is "!"; other files put their
special tokens first); vocab.bpe lists the merges, one "left right" per line
after a "#version" line, in rank order. A tiktoken rank file
has one "base64-bytes rank" per line and no merges: merge r is recovered by
encoding token r's bytes with the merges below r, which must leave two tokens.

Only local paths are read. A malformed file is a ValueError naming the file
and the line (or JSON key). Every file is written atomically.
"""

from __future__ import annotations

import base64
import binascii
import json

from ..atomic import write_text_atomic
from ..files import read_json, read_text
from ._merge import merge_chunk
from .bpe_tokenizer import BPETokenizer
from .byte_chars import byte_to_unicode, gpt2_bytes, gpt2_string
from .pretokenize import GPT2_SPLIT_PATTERN

# ------------------------------------------------------------------ GPT-2: encoder.json + vocab.bpe


def load_gpt2(encoder_json_path, vocab_bpe_path, pattern: str = GPT2_SPLIT_PATTERN) -> BPETokenizer:
    """A tokenizer from GPT-2's encoder.json and vocab.bpe (Hugging Face: vocab.json and merges.txt),
    keeping the file's ids.

    Merge i is line i of vocab.bpe (its rank); every entry of encoder.json is a
    byte token, the result of a merge, or else a special token
    (GPT-2: "<|endoftext|>" = 50256).
    """
    encoder = read_json(encoder_json_path)
    if not isinstance(encoder, dict) or not all(type(i) is int for i in encoder.values()):
        raise ValueError(f"{encoder_json_path}: expected a JSON object mapping token strings to int ids")
    merges = []
    for line_number, line in _merge_lines(vocab_bpe_path):
        parts = line.split(" ")
        if len(parts) != 2 or not all(parts):
            raise ValueError(
                f"{vocab_bpe_path}: line {line_number}: expected two tokens separated by one space, got {line!r}"
            )
        merges.append((f"{vocab_bpe_path}: line {line_number}", *parts))
    return from_gpt2_strings(encoder, merges, pattern, str(encoder_json_path))


def from_gpt2_strings(
    vocab: dict, merges, pattern: str | None, vocab_name: str, special_tokens=None, **options
) -> BPETokenizer:
    """A tokenizer from a vocabulary written in GPT-2's byte characters and its merges, with the vocabulary's ids.

    vocab: token string -> id; merges: ``(where, left, right)`` in rank order,
    ``where`` naming the merge's line in errors; special_tokens: name -> id, or
    None to take every vocabulary entry that is neither a byte nor a merge's
    result as a special token; options: ``BPETokenizer``'s keyword arguments
    (``added_tokens`` are placed like special tokens). Shared by GPT-2's files and
    Hugging Face's tokenizer.json.
    """
    if len(set(vocab.values())) != len(vocab):
        seen = {}
        name, token = next((name, i) for name, i in vocab.items() if seen.setdefault(i, name) != name)
        raise ValueError(f"{vocab_name}: {seen[token]!r} and {name!r} have the same id {token}")
    # a byte without an entry (StarCoder2's 0xC0, 0xC1, 0xF1, 0xF5..0xFF) is None: a text needing it is refused
    byte_ids = [vocab.get(byte_to_unicode()[b]) for b in range(256)]
    pairs, merge_ids = [], []
    for where, left, right in merges:
        gpt2_bytes(left + right, where)
        for token in (left, right, left + right):
            if token not in vocab:
                raise ValueError(f"{where}: {token!r} is not in {vocab_name}")
        pairs.append((vocab[left], vocab[right]))
        merge_ids.append(vocab[left + right])
    ordinary = set(byte_ids) | set(merge_ids)
    rest = {name: i for name, i in vocab.items() if i not in ordinary}
    if special_tokens is None:
        special_tokens = rest
    elif unexplained := sorted(set(rest) - set(special_tokens) - set(options.get("added_tokens") or ()), key=rest.get):
        raise ValueError(
            f"{vocab_name}: {len(unexplained)} entries are neither a byte, a merge's result nor an added token "
            f"(first: {unexplained[0]!r} = {rest[unexplained[0]]}); numforge cannot place them"
        )
    try:
        tok = BPETokenizer(pairs, special_tokens, pattern, byte_ids=byte_ids, merge_ids=merge_ids, **options)
    except ValueError as error:
        raise ValueError(f"{vocab_name}: {error}") from None
    return tok


def _merge_lines(path):
    """(line number, line) for each merge line of vocab.bpe: skips a first "#version" line and blank lines."""
    for line_number, line in enumerate(read_text(path).split("\n"), start=1):
        line = line.rstrip("\r")
        if (line_number == 1 and line.startswith("#version")) or not line:
            continue
        yield line_number, line


def gpt2_vocabulary(tok: BPETokenizer) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """``(vocab, merges)`` of `tok` in GPT-2's byte characters: token string -> id for every token
    (special and added tokens as themselves), by id, and each merge as ``(left, right)`` in rank order."""
    strings = {token: gpt2_string(data) for token, data in tok.ordinary_tokens().items()}
    strings.update({token: name for name, token in {**tok.special_tokens, **tok.added_tokens}.items()})
    vocab = {string: token for token, string in sorted(strings.items())}
    if len(vocab) != len(strings):
        _check_distinct(strings, "GPT-2's vocabulary")
    return vocab, [(strings[p], strings[q]) for p, q in tok.merges]


def export_gpt2(tok: BPETokenizer, encoder_json_path, vocab_bpe_path) -> None:
    """Write GPT-2's encoder.json and vocab.bpe for `tok` (atomically, each), with its ids."""
    vocab, merges = gpt2_vocabulary(tok)
    write_text_atomic(encoder_json_path, json.dumps(vocab, ensure_ascii=False) + "\n")
    write_text_atomic(vocab_bpe_path, "#version: 0.2\n" + "".join(f"{left} {right}\n" for left, right in merges))


# ------------------------------------------------------------------ tiktoken rank files


def load_tiktoken(path, special_tokens=(), pattern: str = GPT2_SPLIT_PATTERN) -> BPETokenizer:
    """A tokenizer from a tiktoken rank file ("base64-bytes rank" per line); ids are the ranks.

    Ranks must be 0..N-1 with the 256 single bytes at 0..255; `special_tokens`
    are strings that get the ids after N, in order, or a dict of string -> id
    (cl100k's, for example, leave ids unused).
    """
    rank_bytes: dict[int, bytes] = {}
    for line_number, line in enumerate(read_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}: line {line_number}"
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            raise ValueError(f"{where}: expected 'base64-bytes rank', got {line!r}")
        try:
            data = base64.b64decode(parts[0], validate=True)
        except binascii.Error:
            raise ValueError(f"{where}: {parts[0]!r} is not base64") from None
        rank = int(parts[1])
        if rank in rank_bytes:
            raise ValueError(f"{where}: rank {rank} appears twice")
        rank_bytes[rank] = data
    if sorted(rank_bytes) != list(range(len(rank_bytes))):
        raise ValueError(f"{path}: ranks must be 0..{len(rank_bytes) - 1} with none missing")
    _check_distinct(rank_bytes, str(path))
    singles = {data[0]: rank for rank, data in rank_bytes.items() if len(data) == 1}
    if len(singles) != 256 or max(singles.values()) != 255:
        raise ValueError(f"{path}: the 256 single bytes must have ranks 0..255")
    byte_ids = [singles[b] for b in range(256)]
    byte_table = bytes.maketrans(bytes(range(256)), bytes(byte_ids))
    merged: dict[tuple[int, int], int] = {}
    merges = []
    for rank in range(256, len(rank_bytes)):
        parts = merge_chunk(list(rank_bytes[rank].translate(byte_table)), merged)
        if len(parts) != 2:
            raise ValueError(
                f"{path}: the token of rank {rank}, {rank_bytes[rank]!r}, is not the merge of two tokens of "
                f"lower rank (the merges below it leave {len(parts)} pieces)"
            )
        merged[parts[0], parts[1]] = rank
        merges.append((parts[0], parts[1]))
    return BPETokenizer(merges, special_tokens=special_tokens, pattern=pattern, byte_ids=byte_ids)


def export_tiktoken(tok: BPETokenizer, path) -> None:
    """Write a tiktoken rank file for `tok`'s non-special tokens (rank = id), atomically.

    A rank is also a merge's priority, so the ids must rise with the merge
    order, above every byte's id; otherwise a ValueError.
    """
    if tok.missing_bytes:
        raise ValueError(
            f"a tiktoken rank file needs a token for every byte; this tokenizer has none for "
            f"{len(tok.missing_bytes)} (first: 0x{min(tok.missing_bytes):02X})"
        )
    rising = tok.merge_ids == sorted(set(tok.merge_ids))  # and no token made by two merges
    if not rising or (tok.merges and min(tok.merge_ids) < max(tok.byte_ids)):
        raise ValueError(
            "a tiktoken rank file needs ids that rise with the merge order, above the bytes' ids, one merge each"
        )
    tokens = tok.ordinary_tokens()
    _check_distinct(tokens, "a tiktoken rank file")
    lines = [f"{base64.b64encode(data).decode('ascii')} {i}\n" for i, data in tokens.items()]
    write_text_atomic(path, "".join(lines))


# ------------------------------------------------------------------ helpers


def _check_distinct(tokens: dict, target: str) -> None:
    """The file formats key tokens by their bytes (or strings), so two ids with the same cannot be written."""
    seen = {}
    for i, token in tokens.items():
        if token in seen:
            raise ValueError(f"{target}: ids {seen[token]} and {i} have the same bytes {token!r}")
        seen[token] = i
