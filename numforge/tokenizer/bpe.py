"""The core of byte-level BPE: merges, ids, training, encoding, decoding (minbpe's base class, made fast).

A merge joins two adjacent tokens into a new one. Merging the pair (1, 2) into id 4::

    ids = [1, 2, 3, 1, 2], pair = (1, 2), new id 4  ->  [4, 3, 4]

Training learns the merges from a corpus, most frequent pair first (``_train.learn_merges``);
encoding cuts a text into chunks by the split pattern, then applies the merges to each chunk's
UTF-8 bytes, the earliest learned first (``_merge.merge_chunk``); decoding joins the tokens'
bytes. ``reference.py`` is the same algorithm written plainly; the tests check they agree.

Vocabulary: 256 byte tokens (``byte_ids[b]`` is the id of byte b), the tokens
the merges make (``merges[i]`` joins two tokens into id ``merge_ids[i]``; in a
file converted from tiktoken, Llama 3's, several merges make one token), and the
special tokens (``special_tokens``: string -> id). numforge's own
layout, what ``train`` makes: byte b has id b, merge i makes ``256 + i``, the
special tokens follow, so ``vocab_size = 256 + len(merges) + len(special_tokens)``.
Files made elsewhere put ids where they like and are loaded with their ids:
GPT-2's byte tokens are a permutation of 0..255 (id 0 is "!"), a tokenizer
trained by Hugging Face's trainer numbers its special tokens first, cl100k
leaves ids unused. ``vocab_size`` is the largest id + 1.

Encoding cuts out the special tokens, splits the text between them, and merges
each chunk by rank, remembering each distinct chunk's ids in a bounded cache;
code and prose repeat their chunks, so most chunks are a dict lookup.
The merging runs on internal ids (byte b is b, merge i makes 256 + i, so an
id is its own rank); a chunk's ids are translated to the file's ids once,
when the chunk enters the cache.

What is not here: ``BPETokenizer`` (``bpe_tokenizer.py``) is this class with what a Hugging Face
tokenizer.json adds around it (a pipeline, added tokens, ``ignore_merges``, a prompt template);
its ``save`` / ``load`` write and read numforge's own file (``bpe_file.py``).
"""

from __future__ import annotations

import codecs
from collections import Counter
from collections.abc import Callable, Iterable
from itertools import chain

from ..checks import is_int
from . import _checks
from ._merge import internal_ids, merge_chunk
from ._train import learn_merges
from .pretokenize import GPT2_SPLIT_PATTERN, chunker, special_tokens_regex, split_on_specials

EOT = "<|endoftext|>"  # GPT-2's end-of-text special token: closes every training document
CACHE_ENTRIES = 1 << 16  # distinct chunks remembered before the cache starts over
CACHE_CHUNK_CHARS = 256  # longer chunks are encoded each time, not remembered


class BPE:
    """A byte-level BPE: ``merges``, ``special_tokens``, the split ``pattern``.

    >>> tok = BPE.train("aaabdaaabac", 256 + 3, special_tokens=())
    >>> tok.merges
    [(97, 97), (97, 98), (256, 257)]
    >>> tok.encode("aaabdaaabac")
    [258, 100, 258, 97, 99]
    >>> tok.decode([258, 100])
    'aaabd'

    ``split`` (keyword-only) cuts a text into chunks instead of ``chunker(pattern)``: ``BPETokenizer``
    passes a Hugging Face pipeline there, with ``pattern`` None.
    """

    def __init__(
        self,
        merges,
        special_tokens=(),
        pattern: str | None = GPT2_SPLIT_PATTERN,
        byte_ids=None,
        merge_ids=None,
        *,
        split: Callable[[str], list[str]] | None = None,
    ):
        merges = list(merges)
        self.byte_ids = _checks.check_byte_ids(byte_ids)
        self.merge_ids = _checks.check_merge_ids(merge_ids, len(merges), self.byte_ids)
        self.merges = _checks.check_merges(merges, self.byte_ids, self.merge_ids)
        self.pattern = pattern
        self._split = chunker(pattern) if split is None else split  # text -> its chunks
        self.special_tokens = _checks.special_ids(special_tokens, self.byte_ids + self.merge_ids)
        self._named: dict[str, int] = {}  # every token cut out of a text whole: name -> id
        self._token_bytes = _checks.expand_tokens(self.byte_ids, self.merges, self.merge_ids)  # id -> bytes or None
        self.missing_bytes = frozenset(b for b, token in enumerate(self.byte_ids) if token is None)  # no token
        self._add_whole_tokens(self.special_tokens)
        # merge_chunk works on internal ids, each its own rank; a chunk's ids become the file's once, in the cache
        self._merged, self._made, self._external = internal_ids(self.byte_ids, self.merge_ids, self.merges)
        self._cache = ChunkCache(self._encode_chunk)

    def _add_whole_tokens(self, tokens: dict[str, int]) -> None:
        """Make each ``name -> id`` of ``tokens`` a token that texts are cut at, its bytes the name's UTF-8."""
        self._named = _checks.special_ids({**self._named, **tokens}, self.byte_ids + self.merge_ids)  # ids distinct
        for name, token in tokens.items():
            self._token_bytes += [None] * (token + 1 - len(self._token_bytes))
            self._token_bytes[token] = name.encode("utf-8")
        self.vocab_size = len(self._token_bytes)  # the largest id + 1

    @property
    def eos_ids(self) -> tuple[int, ...]:
        """The ids generation stops at: ``<|endoftext|>``'s id if the tokenizer has it, else none."""
        return (self.special_tokens[EOT],) if EOT in self.special_tokens else ()

    # ---------------------------------------------------------------- training

    @classmethod
    def train(
        cls,
        text_or_texts,
        vocab_size: int,
        special_tokens=(EOT,),
        pattern: str = GPT2_SPLIT_PATTERN,
        progress: bool = False,
    ) -> BPE:
        """Learn ``vocab_size - 256 - len(special_tokens)`` merges from a text or an iterable of texts.

        Tie rule (as in ``reference.train_merges``): the highest count wins; among
        equal counts the smallest pair (p, q) in id order. Stops early, with a
        warning, when no pair occurs twice. Special strings in the text are cut
        out before counting, so they never take part in a merge. An empty
        corpus is a ``ValueError``: there is nothing to learn from.
        """
        if isinstance(text_or_texts, (bytes, bytearray)) or not isinstance(text_or_texts, (str, Iterable)):
            raise TypeError(f"text_or_texts must be a str or an iterable of str, got {type(text_or_texts).__name__}")
        special_tokens = _checks.check_specials(special_tokens)
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
    ) -> BPE:
        """``train`` from chunk counts already made by ``count_chunks`` (summed over parts of a corpus)."""
        special_tokens = _checks.check_specials(special_tokens)
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
        return self._encode_pieces(text)

    def encode(self, text: str, allowed_special=frozenset(), disallowed_special="all") -> list[int]:
        """Token ids of `text`, with tiktoken's rules for special tokens.

        allowed_special: special strings to encode as their special id (a set, or "all").
        disallowed_special: special strings that must not appear ("all" = every special
        not allowed); finding one raises ValueError. Pass ``disallowed_special=()``
        to encode such strings as plain text. ``encode(text, allowed_special="all")`` is
        Hugging Face's ``tokenizer.encode(text)`` without the post-processor's tokens.
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
        return self._ids(self.cut(text, allowed))

    def cut(self, text: str, allowed_special="all") -> list[tuple[str, int | None]]:
        """``text`` in pieces, each ``(piece, its id)`` for an ``allowed_special`` special token cut out whole
        (leftmost first, the longest where several start at one place), or ``(piece, None)`` for the text
        between them, which BPE encodes.

        Example, with the special token ``<s>`` = 0: ``cut("a<s>b")`` -> ``[("a", None), ("<s>", 0), ("b", None)]``.
        """
        names = tuple(sorted(self._special_names(allowed_special, "allowed_special")))
        return self._cut(text, [names] if names else [], frozenset())

    def _cut(self, text: str, passes: list, as_text: frozenset) -> list[tuple[str, int | None]]:
        """``cut`` by the names of ``passes[0]``, the text between them by the later passes; a name in
        ``as_text`` is found but left in its piece (one pass and none here: see ``BPETokenizer.cut``)."""
        if not passes:
            return [(text, None)] if text else []
        pieces, start = [], 0
        for match in special_tokens_regex(passes[0]).finditer(text):
            if match.group() not in as_text:
                pieces += self._cut(text[start : match.start()], passes[1:], as_text)
                pieces.append((match.group(), self._named[match.group()]))
                start = match.end()
        return pieces + self._cut(text[start:], passes[1:], as_text)

    def chunks(self, text: str) -> list[str]:
        """The chunks BPE encodes one by one: ``text`` split by the pattern, or by ``split`` (a Hugging Face
        pipeline normalizes and cuts it); special tokens are not cut out here: see ``cut``."""
        return self._split(text)

    def _ids(self, pieces: list[tuple[str, int | None]]) -> list[int]:
        ids = []
        for piece, token in pieces:
            if token is None:
                ids += self._encode_pieces(piece)
            else:
                ids.append(token)
        return ids

    def _encode_pieces(self, text: str) -> list[int]:
        """The ids of text with nothing to cut out: split, then each chunk's ids (from the cache)."""
        return list(chain.from_iterable(map(self._cache.__getitem__, self._split(text))))

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
        """One chunk's ids: its UTF-8 bytes merged by rank (what the cache remembers)."""
        try:
            data = chunk.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(
                f"the text has a lone surrogate {chunk[error.start]!r}, which has no UTF-8 encoding"
            ) from None
        self.check_bytes(data, chunk)
        ids = merge_chunk(list(data), self._merged, self._made)  # internal ids
        return ids if self._external is None else list(map(self._external.__getitem__, ids))

    def check_bytes(self, data: bytes, chunk: str) -> None:
        """A ValueError naming the first byte of ``data`` (``chunk``'s UTF-8) that has no token: such a text cannot
        be encoded. (Hugging Face's ``tokenizers`` drops the byte silently, so its ids do not decode to the text.)"""
        if self.missing_bytes and not self.missing_bytes.isdisjoint(data):
            b = next(b for b in data if b in self.missing_bytes)
            char = next(c for c in chunk if b in c.encode("utf-8"))
            raise ValueError(
                f"the text needs the byte 0x{b:02X} (in {char!r}, U+{ord(char):04X}), which this tokenizer's "
                "vocabulary has no token for: it cannot encode that character"
            )

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

    # ---------------------------------------------------------------- the vocabulary, as files store it

    def ordinary_tokens(self) -> dict[int, bytes]:
        """id -> bytes of every non-special token, in id order: what every file format stores
        (special tokens are kept by name, or not at all).

        Example: ``BPE([(97, 97), (256, 98)]).ordinary_tokens()`` ->
        ``{0: b"\\x00", ..., 255: b"\\xff", 256: b"aa", 257: b"aab"}``.
        """
        ordinary = sorted(set(_checks.present(self.byte_ids + self.merge_ids)))
        return {token: self._token_bytes[token] for token in ordinary}

    def ordinary_token_bytes(self) -> list[bytes]:
        """The bytes of every non-special token, in id order (numforge's layout: token i is entry i)."""
        return list(self.ordinary_tokens().values())

    def default_layout(self) -> bool:
        """Whether the ids follow numforge's own layout: bytes 0..255 (any order), merge i makes 256 + i,
        the special tokens next, consecutive. Such a tokenizer is saved in version 1 of the file format."""
        first_special = 256 + len(self.merges)
        return (
            not self.missing_bytes
            and sorted(self.byte_ids) == list(range(256))
            and self.merge_ids == list(range(256, first_special))
            and sorted(self.special_tokens.values()) == list(range(first_special, self.vocab_size))
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(vocab_size={self.vocab_size}, merges={len(self.merges)}, "
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
    if not is_int(vocab_size):
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

    def __init__(self, tokenizer: BPE, errors: str = "replace"):
        self._tokenizer = tokenizer
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors=errors)

    def decode(self, ids) -> str:
        return self._utf8.decode(self._tokenizer.decode_bytes(ids))

    def flush(self) -> str:
        return self._utf8.decode(b"", final=True)


class ChunkCache(dict):
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
