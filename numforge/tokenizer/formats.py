"""Tokenizer files: numforge's own JSON, GPT-2's encoder.json + vocab.bpe, tiktoken rank files.

numforge's file (``save_tokenizer`` / ``load_tokenizer``, the same content as
``tokenizer_to_dict``)::

    {"format": "numforge-bpe", "version": 1,
     "pattern": "<split regex>",
     "byte_ids": [id of byte 0, ..., id of byte 255],
     "merges": [[p, q], ...],                     merge i makes id 256 + i
     "special_tokens": {"<|endoftext|>": 8191},
     "tokens": ["<base64 of token 0's bytes>", ...]}   every non-special id, in order

The merges are the model; ``tokens`` stores every token's bytes losslessly for
other readers and is checked against the merges on load.

GPT-2's files write bytes as printable characters (``byte_to_unicode``): byte
0x20 (space) is "Ġ", so " the" is "Ġthe". encoder.json maps those strings to
ids (the byte tokens are not in byte order: id 0 is "!"); vocab.bpe lists the
merges, one "left right" per line after a "#version" line. A tiktoken rank file
has one "base64-bytes rank" per line and no merges: merge r is recovered by
encoding token r's bytes with the merges below r, which must leave two tokens.

Only local paths are read. A malformed file is a ValueError naming the file
and the line (or JSON key). Every file is written atomically.
"""

from __future__ import annotations

import base64
import binascii
import json
from functools import lru_cache
from pathlib import Path

from ..atomic import write_text_atomic
from ._merge import merge_chunk
from .bpe import BPETokenizer
from .pretokenize import GPT2_SPLIT_PATTERN

FORMAT_NAME = "numforge-bpe"
FORMAT_VERSION = 1


def ordinary_token_bytes(tok: BPETokenizer) -> list[bytes]:
    """The bytes of every non-special token, by id: ``256 + len(merges)`` entries.

    What every file format stores (special tokens are kept by name, or not
    at all). Example: ``BPETokenizer([(97, 97), (256, 98)])`` ->
    ``[b"\\x00", ..., b"\\xff", b"aa", b"aab"]``.
    """
    return [tok.token_bytes(i) for i in range(256 + len(tok.merges))]


# ------------------------------------------------------------------ numforge's own file


def tokenizer_to_dict(tok: BPETokenizer) -> dict:
    """The tokenizer as a JSON-serialisable dict (see the module docstring)."""
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "pattern": tok.pattern,
        "byte_ids": list(tok.byte_ids),
        "merges": [list(pair) for pair in tok.merges],
        "special_tokens": dict(tok.special_tokens),
        "tokens": [base64.b64encode(data).decode("ascii") for data in ordinary_token_bytes(tok)],
    }


def tokenizer_from_dict(d: dict, source: str = "tokenizer dict") -> BPETokenizer:
    """Rebuild a tokenizer from ``tokenizer_to_dict``'s dict; `source` names it in error messages."""
    if not isinstance(d, dict):
        raise ValueError(f"{source}: expected a JSON object, got {type(d).__name__}")
    if d.get("format") != FORMAT_NAME or d.get("version") != FORMAT_VERSION:
        raise ValueError(
            f"{source}: not a numforge tokenizer (format {d.get('format')!r} version {d.get('version')!r}; "
            f"expected {FORMAT_NAME!r} version {FORMAT_VERSION})"
        )
    missing = [key for key in ("pattern", "byte_ids", "merges", "special_tokens", "tokens") if key not in d]
    if missing:
        raise ValueError(f"{source}: missing keys {missing}")
    specials = d["special_tokens"]
    if not isinstance(specials, dict) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                 for i in specials.values()):
        raise ValueError(f"{source}: 'special_tokens' must map strings to int ids, got {specials!r}")
    names = sorted(specials, key=lambda name: specials[name])
    try:
        tok = BPETokenizer(d["merges"], special_tokens=names, pattern=d["pattern"], byte_ids=d["byte_ids"])
    except (ValueError, TypeError) as error:
        raise ValueError(f"{source}: {error}") from None
    if tok.special_tokens != specials:
        raise ValueError(
            f"{source}: special token ids {specials} must be consecutive after the merges, from {256 + len(tok.merges)}"
        )
    tokens, made = d["tokens"], ordinary_token_bytes(tok)
    if not isinstance(tokens, list) or len(tokens) != len(made):
        raise ValueError(f"{source}: 'tokens' must list {len(made)} base64 strings")
    for i, (encoded, data) in enumerate(zip(tokens, made)):
        try:
            stored = base64.b64decode(encoded, validate=True)
        except (binascii.Error, TypeError):
            raise ValueError(f"{source}: tokens[{i}] is not base64: {encoded!r}") from None
        if stored != data:
            raise ValueError(f"{source}: tokens[{i}] is {stored!r} but the merges make {data!r}")
    return tok


def save_tokenizer(tok: BPETokenizer, path) -> None:
    """Write numforge's JSON file atomically."""
    write_text_atomic(path, json.dumps(tokenizer_to_dict(tok), ensure_ascii=False, indent=1) + "\n")


def load_tokenizer(path) -> BPETokenizer:
    """Read numforge's JSON file."""
    return tokenizer_from_dict(_read_json(path), source=str(path))


# ------------------------------------------------------------------ GPT-2: encoder.json + vocab.bpe


@lru_cache(maxsize=1)
def byte_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte: printable Latin-1 bytes stand for themselves,
    the other 68 (controls, space, ...) become chr(256), chr(257), ... in byte order.

    Examples: 0x21 "!" -> "!", 0x00 -> "Ā" (chr 256), 0x20 " " -> "Ġ" (chr 288).
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {b: chr(b) for b in printable}
    others = [b for b in range(256) if b not in mapping]
    mapping.update({b: chr(256 + n) for n, b in enumerate(others)})
    return mapping


def _gpt2_string(data: bytes) -> str:
    table = byte_to_unicode()
    return "".join(table[b] for b in data)


@lru_cache(maxsize=1)
def _unicode_to_byte() -> dict[str, int]:
    return {char: b for b, char in byte_to_unicode().items()}


def _gpt2_bytes(text: str, where: str) -> bytes:
    inverse = _unicode_to_byte()
    try:
        return bytes(inverse[char] for char in text)
    except KeyError as error:
        raise ValueError(f"{where}: {error.args[0]!r} is not one of GPT-2's 256 byte characters") from None


def load_gpt2(encoder_json_path, vocab_bpe_path, pattern: str = GPT2_SPLIT_PATTERN) -> BPETokenizer:
    """A tokenizer from GPT-2's encoder.json and vocab.bpe, keeping the file's ids.

    encoder.json must give the 256 byte tokens ids 0..255, merge i (line order in
    vocab.bpe) id 256 + i, and any further entries (GPT-2: "<|endoftext|>" = 50256)
    the ids after that; those become the special tokens.
    """
    encoder = _read_json(encoder_json_path)
    if not isinstance(encoder, dict) or not all(type(i) is int for i in encoder.values()):
        raise ValueError(f"{encoder_json_path}: expected a JSON object mapping token strings to int ids")
    for b, char in byte_to_unicode().items():
        if char not in encoder:
            raise ValueError(f"{encoder_json_path}: no entry for byte {b} (written {char!r})")
    byte_ids = [encoder[byte_to_unicode()[b]] for b in range(256)]
    merges = []
    for line_number, line in _merge_lines(vocab_bpe_path):
        where = f"{vocab_bpe_path}: line {line_number}"
        parts = line.split(" ")
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"{where}: expected two tokens separated by one space, got {line!r}")
        left, right = parts
        _gpt2_bytes(left + right, where)
        for token in (left, right, left + right):
            if token not in encoder:
                raise ValueError(f"{where}: {token!r} is not in {encoder_json_path}")
        new_id = 256 + len(merges)
        if encoder[left + right] != new_id:
            raise ValueError(
                f"{where}: the merge makes {left + right!r}, whose id in {encoder_json_path} is "
                f"{encoder[left + right]}; numforge needs merge {len(merges)} to make id {new_id}"
            )
        merges.append((encoder[left], encoder[right]))
    first_special = 256 + len(merges)
    specials = sorted((name for name, i in encoder.items() if i >= first_special), key=encoder.get)
    if [encoder[name] for name in specials] != list(range(first_special, first_special + len(specials))):
        raise ValueError(
            f"{encoder_json_path}: the ids after the {len(merges)} merges must be consecutive from {first_special}, "
            f"got {[encoder[name] for name in specials]}"
        )
    if len(encoder) != first_special + len(specials):
        raise ValueError(
            f"{encoder_json_path}: {len(encoder)} entries, but 256 bytes + {len(merges)} merges + "
            f"{len(specials)} special tokens make {first_special + len(specials)} (repeated ids?)"
        )
    try:
        return BPETokenizer(merges, special_tokens=specials, pattern=pattern, byte_ids=byte_ids)
    except ValueError as error:
        raise ValueError(f"{encoder_json_path}, {vocab_bpe_path}: {error}") from None


def _merge_lines(path):
    """(line number, line) for each merge line of vocab.bpe: skips a first "#version" line and blank lines."""
    for line_number, line in enumerate(_read_text(path).split("\n"), start=1):
        line = line.rstrip("\r")
        if (line_number == 1 and line.startswith("#version")) or not line:
            continue
        yield line_number, line


def export_gpt2(tok: BPETokenizer, encoder_json_path, vocab_bpe_path) -> None:
    """Write GPT-2's encoder.json and vocab.bpe for `tok` (atomically, each)."""
    strings = [_gpt2_string(data) for data in ordinary_token_bytes(tok)]
    _check_distinct(strings, "GPT-2 files")
    encoder = {string: i for i, string in enumerate(strings)} | dict(tok.special_tokens)
    merge_lines = [f"{strings[p]} {strings[q]}\n" for p, q in tok.merges]
    write_text_atomic(encoder_json_path, json.dumps(encoder, ensure_ascii=False) + "\n")
    write_text_atomic(vocab_bpe_path, "#version: 0.2\n" + "".join(merge_lines))


# ------------------------------------------------------------------ tiktoken rank files


def load_tiktoken(path, special_tokens=(), pattern: str = GPT2_SPLIT_PATTERN) -> BPETokenizer:
    """A tokenizer from a tiktoken rank file ("base64-bytes rank" per line); ids are the ranks.

    Ranks must be 0..N-1 with the 256 single bytes at 0..255; `special_tokens`
    (strings) get the ids after N, in order.
    """
    rank_bytes: dict[int, bytes] = {}
    for line_number, line in enumerate(_read_text(path).split("\n"), start=1):
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
    _check_distinct(list(rank_bytes.values()), str(path))
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
    """Write a tiktoken rank file for `tok`'s non-special tokens (rank = id), atomically."""
    tokens = ordinary_token_bytes(tok)
    _check_distinct(tokens, "a tiktoken rank file")
    lines = [f"{base64.b64encode(data).decode('ascii')} {i}\n" for i, data in enumerate(tokens)]
    write_text_atomic(path, "".join(lines))


# ------------------------------------------------------------------ helpers


def _check_distinct(tokens: list, target: str) -> None:
    """Both file formats key tokens by their bytes, so two ids with the same bytes cannot be written."""
    seen = {}
    for i, token in enumerate(tokens):
        if token in seen:
            raise ValueError(f"{target}: ids {seen[token]} and {i} have the same bytes {token!r}")
        seen[token] = i


def _read_text(path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None


def _read_json(path):
    try:
        return json.loads(_read_text(path))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: line {error.lineno} column {error.colno}: {error.msg}") from None


