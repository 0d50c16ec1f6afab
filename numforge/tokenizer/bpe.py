"""BPETokenizer: the fast byte-level BPE trainer and encoder, decoding, special tokens.

Vocabulary: 256 byte tokens (``byte_ids[b]`` is the id of byte b), one token
per merge (``merges[i]`` joins two earlier tokens into id ``merge_ids[i]``),
and the special tokens (``special_tokens``: string -> id). numforge's own
layout, what ``train`` makes: byte b has id b, merge i makes ``256 + i``, the
special tokens follow, so ``vocab_size = 256 + len(merges) + len(special_tokens)``.
Files made elsewhere put ids where they like and are loaded with their ids:
GPT-2's byte tokens are a permutation of 0..255 (id 0 is "!"), a tokenizer
trained by Hugging Face's trainer numbers its special tokens first, cl100k
leaves ids unused. ``vocab_size`` is the largest id + 1.

Encoding: split the text with the pattern, then merge each chunk by rank
(``_merge.merge_chunk``), remembering each distinct chunk's ids in a bounded
cache; code and prose repeat their chunks, so most chunks are a dict lookup.
The merging runs on internal ids (byte b is b, merge i makes 256 + i, so an
id is its own rank); a chunk's ids are translated to the file's ids once,
when the chunk enters the cache. It gives the same ids as
``reference.encode``, which the tests check.

numforge's own file (``save`` / ``load``; ``to_dict`` is the same content)::

    {"format": "numforge-bpe", "version": 1,
     "pattern": "<split regex>",
     "byte_ids": [id of byte 0, ..., id of byte 255],
     "merges": [[p, q], ...],                     merge i makes id 256 + i
     "special_tokens": {"<|endoftext|>": 8191},
     "tokens": ["<base64 of token 0's bytes>", ...]}   every non-special id, in order

Version 2, written only for a layout other than numforge's own, adds
``"merge_ids": [id made by merge 0, ...]``, lets the special ids be anything
free, and keys ``tokens`` by id: ``{"5": "<base64>", ...}``. Version 1 files
load as they always did.

The merges are the model; ``tokens`` stores every token's bytes losslessly for
other readers and is checked against the merges on load. Other tokenizers'
files (GPT-2, tiktoken, Hugging Face) are read and written by ``interop.py``.
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
FORMAT_VERSIONS = (1, 2)
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

    def __init__(self, merges, special_tokens=(), pattern: str = GPT2_SPLIT_PATTERN, byte_ids=None, merge_ids=None):
        merges = list(merges)
        self.byte_ids = _check_byte_ids(byte_ids)
        self.merge_ids = _check_merge_ids(merge_ids, len(merges), self.byte_ids)
        self.merges = _check_merges(merges, self.byte_ids, self.merge_ids)
        self.pattern = pattern
        self._split = chunker(pattern)
        ordinary = self.byte_ids + self.merge_ids  # internal id -> id: byte value b is b, merge i makes 256 + i
        self.special_tokens = _special_ids(special_tokens, ordinary)
        self.vocab_size = max(ordinary + list(self.special_tokens.values())) + 1
        # The encoder merges internal ids, where merge i makes 256 + i, so that an id is its own rank
        # (``_merge``); the file's ids replace them once per distinct chunk (none to replace by default).
        internal = {token: i for i, token in enumerate(ordinary)}
        self._merged = {(internal[p], internal[q]): 256 + i for i, (p, q) in enumerate(self.merges)}
        self._external = None if ordinary == list(range(len(ordinary))) else ordinary
        self._token_bytes = _expand_tokens(self.byte_ids, self.merges, self.merge_ids, self.special_tokens)
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
        ids = merge_chunk(list(data), self._merged)  # internal ids
        return ids if self._external is None else list(map(self._external.__getitem__, ids))

    # ---------------------------------------------------------------- decoding

    def token_bytes(self, token: int) -> bytes:
        """The bytes token `token` stands for (a special token: its UTF-8 string)."""
        return self.decode_bytes([token])

    def decode_bytes(self, ids) -> bytes:
        """The bytes of `ids` joined: the exact inverse of encoding, before UTF-8 decoding."""
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        try:
            if ids and (min(ids) < 0 or max(ids) >= self.vocab_size):
                raise IndexError
            return b"".join(map(self._token_bytes.__getitem__, ids))  # an id without a token gives None: TypeError
        except (TypeError, IndexError):
            bad = next((t for t in ids if not hasattr(t, "__index__")), None)
            if bad is not None:
                raise TypeError(f"token ids must be integers, got {bad!r} ({type(bad).__name__})") from None
            bad = next(t for t in ids if not 0 <= t < self.vocab_size or self._token_bytes[t] is None)
            raise ValueError(f"token id {bad} is not in the vocabulary ({self._describe_ids()})") from None

    def _describe_ids(self) -> str:
        gaps = self._token_bytes.count(None)
        return f"ids 0..{self.vocab_size - 1}" + (f", {gaps} of them unused" if gaps else "")

    def has_token(self, token: int) -> bool:
        """Whether id `token` stands for a token (``decode`` accepts it); False for unused and padded ids."""
        return 0 <= token < self.vocab_size and self._token_bytes[token] is not None

    def token_ids(self) -> list[int]:
        """Every id that has a token (ordinary or special), ascending: what ``decode`` accepts."""
        return [token for token, data in enumerate(self._token_bytes) if data is not None]

    def decode(self, ids, errors: str = "replace") -> str:
        """The text of `ids`; bytes that are not valid UTF-8 become U+FFFD (errors="replace")."""
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    def incremental_decoder(self, errors: str = "replace") -> IncrementalDecoder:
        """A decoder for streaming: feed ids as they are generated, get text as it completes."""
        return IncrementalDecoder(self, errors)

    # ---------------------------------------------------------------- files

    def ordinary_tokens(self) -> dict[int, bytes]:
        """id -> bytes of every non-special token, in id order: what every file format stores
        (special tokens are kept by name, or not at all).

        Example: ``BPETokenizer([(97, 97), (256, 98)]).ordinary_tokens()`` ->
        ``{0: b"\\x00", ..., 255: b"\\xff", 256: b"aa", 257: b"aab"}``.
        """
        ordinary = sorted(self.byte_ids + self.merge_ids)
        return {token: self._token_bytes[token] for token in ordinary}

    def ordinary_token_bytes(self) -> list[bytes]:
        """The bytes of every non-special token, in id order (numforge's layout: token i is entry i)."""
        return list(self.ordinary_tokens().values())

    def default_layout(self) -> bool:
        """Whether the ids follow numforge's own layout: bytes 0..255 (any order), merge i makes 256 + i,
        the special tokens next, consecutive. Such a tokenizer is saved in version 1 of the file format."""
        first_special = 256 + len(self.merges)
        return (
            sorted(self.byte_ids) == list(range(256))
            and self.merge_ids == list(range(256, first_special))
            and sorted(self.special_tokens.values()) == list(range(first_special, self.vocab_size))
        )

    def to_dict(self) -> dict:
        """The tokenizer as a JSON-serialisable dict: the content of the saved file (version 1 for
        numforge's own layout, version 2 with ``merge_ids`` and tokens keyed by id for any other)."""
        d = {
            "format": FORMAT_NAME,
            "version": 1,
            "pattern": self.pattern,
            "byte_ids": list(self.byte_ids),
            "merges": [list(pair) for pair in self.merges],
            "special_tokens": dict(self.special_tokens),
            "tokens": [_base64(data) for data in self.ordinary_token_bytes()],
        }
        if not self.default_layout():
            d["version"] = 2
            d["merge_ids"] = list(self.merge_ids)
            d["tokens"] = {str(token): _base64(data) for token, data in self.ordinary_tokens().items()}
        return d

    @classmethod
    def from_dict(cls, d: dict, source: str = "tokenizer dict", trust_pattern: bool = False) -> BPETokenizer:
        """The inverse of ``to_dict`` (either version); ``source`` names the dict in error messages.

        The split pattern must be one of ``pretokenize.KNOWN_PATTERNS`` unless
        ``trust_pattern`` is True: a pattern is code that runs on every text.
        """
        if not isinstance(d, dict):
            raise ValueError(f"{source}: expected a JSON object, got {type(d).__name__}")
        version = d.get("version")
        if d.get("format") != FORMAT_NAME or version not in FORMAT_VERSIONS:
            raise ValueError(
                f"{source}: not a numforge tokenizer (format {d.get('format')!r} version {version!r}; "
                f"expected {FORMAT_NAME!r} version {' or '.join(map(str, FORMAT_VERSIONS))})"
            )
        keys = ("pattern", "byte_ids", "merges", "special_tokens", "tokens") + (("merge_ids",) if version == 2 else ())
        missing = [key for key in keys if key not in d]
        if missing:
            raise ValueError(f"{source}: missing keys {missing}")
        specials = d["special_tokens"]
        if not isinstance(specials, dict) or not all(_is_int(i) for i in specials.values()):
            raise ValueError(f"{source}: 'special_tokens' must map strings to int ids, got {specials!r}")
        check_pattern_allowed(d["pattern"], source, trust_pattern)
        try:
            if version == 1:  # the special tokens are numbered after the merges, in id order
                names = sorted(specials, key=lambda name: specials[name])
                tok = cls(d["merges"], special_tokens=names, pattern=d["pattern"], byte_ids=d["byte_ids"])
            else:
                tok = cls(d["merges"], specials, d["pattern"], byte_ids=d["byte_ids"], merge_ids=d["merge_ids"])
        except (ValueError, TypeError) as error:
            raise ValueError(f"{source}: {error}") from None
        if tok.special_tokens != specials:
            raise ValueError(
                f"{source}: special token ids {specials} must be consecutive after the merges, "
                f"from {256 + len(tok.merges)}"
            )
        _check_stored_tokens(d["tokens"], tok, source)
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


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _check_stored_tokens(tokens, tok: BPETokenizer, source: str) -> None:
    """The file's ``tokens`` must be the bytes the merges make: a list by id (version 1) or a dict
    keyed by id (version 2), of base64 strings."""
    made = tok.ordinary_tokens()
    if isinstance(tokens, dict):
        if set(tokens) != {str(token) for token in made}:
            raise ValueError(f"{source}: 'tokens' must map the {len(made)} ordinary ids to base64 strings")
        pairs = [(str(token), tokens[str(token)], data) for token, data in made.items()]
    else:
        if not isinstance(tokens, list) or len(tokens) != len(made):
            raise ValueError(f"{source}: 'tokens' must list {len(made)} base64 strings")
        pairs = list(zip(map(str, range(len(made))), tokens, made.values()))
    for key, encoded, data in pairs:
        try:
            stored = base64.b64decode(encoded, validate=True)
        except (binascii.Error, TypeError):
            raise ValueError(f"{source}: tokens[{key}] is not base64: {encoded!r}") from None
        if stored != data:
            raise ValueError(f"{source}: tokens[{key}] is {stored!r} but the merges make {data!r}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_byte_ids(byte_ids) -> list[int]:
    """The id of each byte value: identity by default, else 256 distinct ids >= 0."""
    if byte_ids is None:
        return list(range(256))
    byte_ids = list(byte_ids)
    if len(byte_ids) != 256 or not all(_is_int(b) and b >= 0 for b in byte_ids) or len(set(byte_ids)) != 256:
        raise ValueError(
            "byte_ids must list 256 ids, distinct ints >= 0 (the id of each byte value; "
            "a permutation of 0..255 in numforge's own layout)"
        )
    return byte_ids


def _check_merge_ids(merge_ids, num_merges: int, byte_ids: list[int]) -> list[int]:
    """The id each merge makes: by default the ids after the largest byte id (256 + i for 0..255)."""
    if merge_ids is None:
        first = max(byte_ids) + 1
        return list(range(first, first + num_merges))
    merge_ids = list(merge_ids)
    if len(merge_ids) != num_merges or not all(_is_int(t) and t >= 0 for t in merge_ids):
        raise ValueError(f"merge_ids must list {num_merges} ints >= 0 (the id each merge makes), got {merge_ids!r}")
    taken = set(byte_ids)
    for i, token in enumerate(merge_ids):
        if token in taken:
            raise ValueError(f"merge {i} makes id {token}, which a byte or an earlier merge already has")
        taken.add(token)
    return merge_ids


def _check_merges(merges: list, byte_ids: list[int], merge_ids: list[int]) -> list[tuple[int, int]]:
    """Merges as a list of int pairs; merge i may use only byte ids and ids made by merges before it,
    and no pair twice."""
    checked = []
    seen = set()
    known = set(byte_ids)
    contiguous = sorted(byte_ids) == list(range(256)) and merge_ids == list(range(256, 256 + len(merge_ids)))
    for i, pair in enumerate(merges):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not all(map(_is_int, pair)):
            raise ValueError(f"merge {i} must be a pair of ints, got {pair!r}")
        p, q = int(pair[0]), int(pair[1])
        if p not in known or q not in known:
            if contiguous:
                raise ValueError(f"merge {i} is {(p, q)}, but only ids 0..{255 + i} exist before it")
            bad = p if p not in known else q
            raise ValueError(f"merge {i} is {(p, q)}, but {bad} is neither a byte's id nor made by an earlier merge")
        if (p, q) in seen:
            raise ValueError(f"merge {i} repeats the pair {(p, q)}")
        seen.add((p, q))
        checked.append((p, q))
        known.add(merge_ids[i])
    return checked


def _check_specials(special_tokens) -> tuple[str, ...]:
    """Special token names: a sequence of distinct non-empty strings."""
    if isinstance(special_tokens, str):
        raise TypeError(f"special_tokens must be a sequence of strings, got the string {special_tokens!r}")
    names = tuple(special_tokens)
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a special token must be a non-empty str, got {name!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"special tokens repeat: {list(names)}")
    return names


def _special_ids(special_tokens, ordinary: list[int]) -> dict[str, int]:
    """Special token name -> id: a dict as given, or a sequence of names numbered after the ordinary ids."""
    if not isinstance(special_tokens, dict):
        first = max(ordinary) + 1
        return {name: first + j for j, name in enumerate(_check_specials(special_tokens))}
    _check_specials(list(special_tokens))
    taken = set(ordinary)
    for name, token in special_tokens.items():
        if not _is_int(token) or token < 0:
            raise ValueError(f"the special token {name!r} must have an int id >= 0, got {token!r}")
        if token in taken:
            raise ValueError(f"the special token {name!r} has id {token}, which another token already has")
        taken.add(token)
    return dict(special_tokens)


def _expand_tokens(byte_ids: list[int], merges, merge_ids: list[int], special_tokens: dict) -> list:
    """The bytes of every id (None where no token has it): bytes, each merge as the join of its pair,
    the special tokens' UTF-8."""
    table = [None] * (max(byte_ids + merge_ids + list(special_tokens.values())) + 1)
    for value, token in enumerate(byte_ids):
        table[token] = bytes([value])
    for (p, q), token in zip(merges, merge_ids):
        table[token] = table[p] + table[q]
    for name, token in special_tokens.items():
        table[token] = name.encode("utf-8")
    return table
