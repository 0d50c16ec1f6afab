"""BPETokenizer: the fast byte-level BPE trainer and encoder, decoding, special tokens.

Vocabulary layout, always: 256 byte tokens, then one token per merge
(``merges[i]`` makes id ``256 + i``), then the special tokens, so
``vocab_size = 256 + len(merges) + len(special_tokens)``. A trained tokenizer
gives byte b the id b; one imported from GPT-2's files keeps the file's ids,
where the byte tokens are a permutation of 0..255 (id 0 is "!").

Encoding: split the text with the pattern, then merge each chunk by rank
(``_merge.merge_chunk``), remembering each distinct chunk's ids in a bounded
cache; code and prose repeat their chunks, so most chunks are a dict lookup.
It gives the same ids as ``reference.encode``, which the tests check.

numforge's own file (``save`` / ``load``; ``to_dict`` is the same content)::

    {"format": "numforge-bpe", "version": 1,
     "pattern": "<split regex>",
     "byte_ids": [id of byte 0, ..., id of byte 255],
     "merges": [[p, q], ...],                     merge i makes id 256 + i
     "special_tokens": {"<|endoftext|>": 8191},
     "tokens": ["<base64 of token 0's bytes>", ...]}   every non-special id, in order

The merges are the model; ``tokens`` stores every token's bytes losslessly for
other readers and is checked against the merges on load. Other tokenizers'
files (GPT-2, tiktoken) are read and written by ``interop.py``.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import json
from collections import Counter
from collections.abc import Iterable
from itertools import chain

from ..atomic import write_text_atomic
from ._files import read_json
from ._merge import merge_chunk
from ._train import learn_merges
from .pretokenize import GPT2_SPLIT_PATTERN, check_pattern_allowed, chunker, special_tokens_regex, split_on_specials

EOT = "<|endoftext|>"  # GPT-2's end-of-text special token: closes every training document
FORMAT_NAME = "numforge-bpe"
FORMAT_VERSION = 1
CACHE_ENTRIES = 1 << 16  # distinct chunks remembered before the cache starts over
CACHE_CHUNK_CHARS = 256  # longer chunks are encoded each time, not remembered


class BPETokenizer:
    """A byte-level BPE tokenizer: ``merges``, ``special_tokens``, the split ``pattern``.

    >>> tok = BPETokenizer.train("aaabdaaabac", 256 + 3, special_tokens=())
    >>> tok.merges
    [(97, 97), (97, 98), (256, 257)]
    >>> tok.encode("aaabdaaabac")
    [258, 100, 258, 97, 99]
    """

    def __init__(self, merges, special_tokens=(), pattern: str = GPT2_SPLIT_PATTERN, byte_ids=None):
        self.merges = _check_merges(merges)
        self.byte_ids = _check_byte_ids(byte_ids)
        self.pattern = pattern
        self._split = chunker(pattern)
        first_special = 256 + len(self.merges)
        self.special_tokens = {name: first_special + j for j, name in enumerate(_check_specials(special_tokens))}
        self.vocab_size = first_special + len(self.special_tokens)
        self._merged = {pair: 256 + i for i, pair in enumerate(self.merges)}  # (p, q) -> id it makes
        self._byte_table = bytes.maketrans(bytes(range(256)), bytes(self.byte_ids))  # byte -> id, ids < 256
        specials_bytes = [name.encode("utf-8") for name in self.special_tokens]
        self._token_bytes = _expand_tokens(self.byte_ids, self.merges) + specials_bytes  # id -> its bytes
        self._cache = _ChunkCache(self._encode_chunk)

    # ---------------------------------------------------------------- training

    @classmethod
    def train(
        cls,
        text_or_texts,
        vocab_size: int,
        special_tokens=(EOT,),
        pattern: str = GPT2_SPLIT_PATTERN,
        progress: bool = False,
    ) -> BPETokenizer:
        """Learn ``vocab_size - 256 - len(special_tokens)`` merges from a text or an iterable of texts.

        Tie rule (as in ``reference.train_merges``): the highest count wins; among
        equal counts the smallest pair (p, q) in id order. Stops early, with a
        warning, when no pair occurs twice. Special strings in the text are cut
        out before counting, so they never take part in a merge. An empty
        corpus is a ``ValueError``: there is nothing to learn from.
        """
        if isinstance(text_or_texts, (bytes, bytearray)) or not isinstance(text_or_texts, (str, Iterable)):
            raise TypeError(f"text_or_texts must be a str or an iterable of str, got {type(text_or_texts).__name__}")
        special_tokens = _check_specials(special_tokens)
        check_vocab_size(vocab_size, special_tokens)
        texts = [text_or_texts] if isinstance(text_or_texts, str) else text_or_texts
        chunk_counts = count_chunks(texts, special_tokens, pattern)
        return cls.train_from_chunk_counts(chunk_counts, vocab_size, special_tokens, pattern, progress)

    @classmethod
    def train_from_chunk_counts(
        cls,
        chunk_counts: dict[str, int],
        vocab_size: int,
        special_tokens=(EOT,),
        pattern: str = GPT2_SPLIT_PATTERN,
        progress: bool = False,
    ) -> BPETokenizer:
        """``train`` from chunk counts already made by ``count_chunks`` (summed over parts of a corpus)."""
        special_tokens = _check_specials(special_tokens)
        smallest = check_vocab_size(vocab_size, special_tokens)
        if not chunk_counts:
            raise ValueError("the training text is empty: a tokenizer needs text to learn from")
        merges = learn_merges(chunk_counts, vocab_size - smallest, progress=progress)
        return cls(merges, special_tokens=special_tokens, pattern=pattern)

    # ---------------------------------------------------------------- encoding

    def encode_ordinary(self, text: str) -> list[int]:
        """Token ids of `text`, treating special-token strings as ordinary text."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return list(chain.from_iterable(map(self._cache.__getitem__, self._split(text))))

    def encode(self, text: str, allowed_special=frozenset(), disallowed_special="all") -> list[int]:
        """Token ids of `text`, with tiktoken's rules for special tokens.

        allowed_special: special strings to encode as their special id (a set, or "all").
        disallowed_special: special strings that must not appear ("all" = every special
        not allowed); finding one raises ValueError. Pass ``disallowed_special=()``
        to encode such strings as plain text.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        allowed = self._special_names(allowed_special, "allowed_special")
        if disallowed_special == "all":
            disallowed = set(self.special_tokens) - allowed
        else:
            disallowed = self._special_names(disallowed_special, "disallowed_special")
        found = special_tokens_regex(tuple(sorted(disallowed)))
        if found is not None and (match := found.search(text)) is not None:
            raise ValueError(
                f"the text contains the special token {match.group()!r} at index {match.start()}, which is "
                f"disallowed; pass allowed_special={{{match.group()!r}}} (or 'all') to encode it as its special "
                f"id, or disallowed_special=() to encode it as plain text"
            )
        finder = special_tokens_regex(tuple(sorted(allowed)))
        if finder is None:
            return self.encode_ordinary(text)
        ids = []
        start = 0
        for match in finder.finditer(text):
            ids += self.encode_ordinary(text[start : match.start()])
            ids.append(self.special_tokens[match.group()])
            start = match.end()
        return ids + self.encode_ordinary(text[start:])

    def _special_names(self, names, argument: str) -> set[str]:
        if names == "all":
            return set(self.special_tokens)
        if isinstance(names, str):
            raise TypeError(f"{argument} must be 'all' or a set of special-token strings, got the string {names!r}")
        names = set(names)
        unknown = names - set(self.special_tokens)
        if unknown:
            raise ValueError(
                f"{argument} names {sorted(unknown)}, which are not special tokens of this tokenizer "
                f"(it has {sorted(self.special_tokens)})"
            )
        return names

    def _encode_chunk(self, chunk: str) -> list[int]:
        try:
            data = chunk.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(
                f"the text has a lone surrogate {chunk[error.start]!r}, which has no UTF-8 encoding"
            ) from None
        return merge_chunk(list(data.translate(self._byte_table)), self._merged)

    # ---------------------------------------------------------------- decoding

    def token_bytes(self, token: int) -> bytes:
        """The bytes token `token` stands for (a special token: its UTF-8 string)."""
        return self.decode_bytes([token])

    def decode_bytes(self, ids) -> bytes:
        """The bytes of `ids` joined: the exact inverse of encoding, before UTF-8 decoding."""
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        try:
            if ids and (min(ids) < 0 or max(ids) >= self.vocab_size):
                bad = next(t for t in ids if not 0 <= t < self.vocab_size)
                raise ValueError(f"token id {bad} is not in the vocabulary (ids 0..{self.vocab_size - 1})")
            return b"".join(map(self._token_bytes.__getitem__, ids))
        except TypeError:
            bad = next((t for t in ids if not hasattr(t, "__index__")), ids)
            raise TypeError(f"token ids must be integers, got {bad!r} ({type(bad).__name__})") from None

    def decode(self, ids, errors: str = "replace") -> str:
        """The text of `ids`; bytes that are not valid UTF-8 become U+FFFD (errors="replace")."""
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    def incremental_decoder(self, errors: str = "replace") -> IncrementalDecoder:
        """A decoder for streaming: feed ids as they are generated, get text as it completes."""
        return IncrementalDecoder(self, errors)

    # ---------------------------------------------------------------- files

    def ordinary_token_bytes(self) -> list[bytes]:
        """The bytes of every non-special token, by id: ``256 + len(merges)`` entries.

        What every file format stores (special tokens are kept by name, or not
        at all). Example: ``BPETokenizer([(97, 97), (256, 98)])`` ->
        ``[b"\\x00", ..., b"\\xff", b"aa", b"aab"]``.
        """
        return self._token_bytes[: 256 + len(self.merges)]

    def to_dict(self) -> dict:
        """The tokenizer as a JSON-serialisable dict: the content of the saved file."""
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "pattern": self.pattern,
            "byte_ids": list(self.byte_ids),
            "merges": [list(pair) for pair in self.merges],
            "special_tokens": dict(self.special_tokens),
            "tokens": [base64.b64encode(data).decode("ascii") for data in self.ordinary_token_bytes()],
        }

    @classmethod
    def from_dict(cls, d: dict, source: str = "tokenizer dict", trust_pattern: bool = False) -> BPETokenizer:
        """The inverse of ``to_dict``; ``source`` names the dict in error messages.

        The split pattern must be one of ``pretokenize.KNOWN_PATTERNS`` unless
        ``trust_pattern`` is True: a pattern is code that runs on every text.
        """
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
        if not isinstance(specials, dict) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in specials.values()
        ):
            raise ValueError(f"{source}: 'special_tokens' must map strings to int ids, got {specials!r}")
        names = sorted(specials, key=lambda name: specials[name])
        check_pattern_allowed(d["pattern"], source, trust_pattern)
        try:
            tok = cls(d["merges"], special_tokens=names, pattern=d["pattern"], byte_ids=d["byte_ids"])
        except (ValueError, TypeError) as error:
            raise ValueError(f"{source}: {error}") from None
        if tok.special_tokens != specials:
            raise ValueError(
                f"{source}: special token ids {specials} must be consecutive after the merges, "
                f"from {256 + len(tok.merges)}"
            )
        tokens, made = d["tokens"], tok.ordinary_token_bytes()
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

    def save(self, path) -> None:
        """Write numforge's JSON tokenizer file atomically (temporary name, then rename)."""
        write_text_atomic(path, json.dumps(self.to_dict(), ensure_ascii=False, indent=1) + "\n")

    @classmethod
    def load(cls, path, trust_pattern: bool = False) -> BPETokenizer:
        """Read numforge's JSON tokenizer file (``trust_pattern``: see ``from_dict``)."""
        return cls.from_dict(read_json(path), source=str(path), trust_pattern=trust_pattern)

    def __repr__(self) -> str:
        return (
            f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)}, "
            f"special_tokens={self.special_tokens})"
        )


def count_chunks(texts, special_tokens=(EOT,), pattern: str = GPT2_SPLIT_PATTERN) -> Counter:
    """How often each chunk occurs in ``texts`` (special strings cut out first): what training learns from.

    Counts of parts of a corpus add up (``Counter.update``) to the counts of the whole,
    as long as no part boundary falls inside a chunk.
    Example: ``count_chunks(["a b a"], ())`` -> ``Counter({"a": 1, " b": 1, " a": 1})``.
    """
    split = chunker(pattern)
    chunk_counts = Counter()
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"training texts must be str, got {type(text).__name__}")
        for piece in split_on_specials(text, special_tokens):
            chunk_counts.update(split(piece))
    return chunk_counts


def check_vocab_size(vocab_size, special_tokens) -> int:
    """The smallest vocabulary with these special tokens; a TypeError / ValueError if ``vocab_size`` is below it."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise TypeError(f"vocab_size must be an int, got {type(vocab_size).__name__}")
    smallest = 256 + len(special_tokens)
    if vocab_size < smallest:
        raise ValueError(
            f"vocab_size={vocab_size} is too small: 256 byte tokens + {len(special_tokens)} special tokens "
            f"need at least {smallest}"
        )
    return smallest


class IncrementalDecoder:
    """Streaming decode: ``decode(ids)`` returns the text that the new ids complete.

    An incomplete UTF-8 sequence at the end is held back until the ids that
    finish it arrive ("🙂" split over two tokens prints once, whole);
    ``flush()`` returns what is still held (as U+FFFD when incomplete) and
    starts over. Concatenating every ``decode`` and the final ``flush`` equals
    ``tokenizer.decode(all_ids)``.
    """

    def __init__(self, tokenizer: BPETokenizer, errors: str = "replace"):
        self._tokenizer = tokenizer
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors=errors)

    def decode(self, ids) -> str:
        return self._utf8.decode(self._tokenizer.decode_bytes(ids))

    def flush(self) -> str:
        return self._utf8.decode(b"", final=True)


class _ChunkCache(dict):
    """chunk text -> its token ids (a tuple); a miss encodes the chunk, and a full cache starts over."""

    def __init__(self, encode_chunk):
        super().__init__()
        self._encode_chunk = encode_chunk

    def __missing__(self, chunk: str) -> tuple[int, ...]:
        ids = tuple(self._encode_chunk(chunk))  # a tuple of ints: the garbage collector stops tracking it
        if len(chunk) <= CACHE_CHUNK_CHARS:
            if len(self) >= CACHE_ENTRIES:
                self.clear()
            self[chunk] = ids
        return ids


def _check_merges(merges) -> list[tuple[int, int]]:
    """Merges as a list of int pairs; merge i may use only ids below 256 + i, and no pair twice."""
    checked = []
    seen = set()
    for i, pair in enumerate(merges):
        if (
            not isinstance(pair, (tuple, list))
            or len(pair) != 2
            or not all(isinstance(t, int) and not isinstance(t, bool) for t in pair)
        ):
            raise ValueError(f"merge {i} must be a pair of ints, got {pair!r}")
        p, q = int(pair[0]), int(pair[1])
        if not (0 <= p < 256 + i and 0 <= q < 256 + i):
            raise ValueError(f"merge {i} is {(p, q)}, but only ids 0..{255 + i} exist before it")
        if (p, q) in seen:
            raise ValueError(f"merge {i} repeats the pair {(p, q)}")
        seen.add((p, q))
        checked.append((p, q))
    return checked


def _check_byte_ids(byte_ids) -> list[int]:
    """The id of each byte value: identity by default, else a permutation of 0..255."""
    if byte_ids is None:
        return list(range(256))
    byte_ids = list(byte_ids)
    if not all(isinstance(b, int) and not isinstance(b, bool) for b in byte_ids) or sorted(byte_ids) != list(
        range(256)
    ):
        raise ValueError("byte_ids must list 256 ids, a permutation of 0..255 (the id of each byte value)")
    return byte_ids


def _check_specials(special_tokens) -> tuple[str, ...]:
    if isinstance(special_tokens, str):
        raise TypeError(f"special_tokens must be a sequence of strings, got the string {special_tokens!r}")
    names = tuple(special_tokens)
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a special token must be a non-empty str, got {name!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"special tokens repeat: {list(names)}")
    return names


def _expand_tokens(byte_ids: list[int], merges: list[tuple[int, int]]) -> list[bytes]:
    """The bytes of every non-special token: bytes first, then each merge as the join of its pair."""
    table = [b""] * 256
    for value, token in enumerate(byte_ids):
        table[token] = bytes([value])
    for p, q in merges:
        table.append(table[p] + table[q])
    return table
