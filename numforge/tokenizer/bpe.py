"""BPETokenizer: the fast byte-level BPE trainer and encoder, decoding, special tokens.

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

Encoding: cut out the special (and added) tokens, split the text between with
the pattern (or normalize and pre-tokenize it by a Hugging Face ``pipeline``),
then merge each chunk by rank (``_merge.merge_chunk``), remembering each
distinct chunk's ids in a bounded cache; code and prose repeat their chunks, so
most chunks are a dict lookup.
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
free, and keys ``tokens`` by id: ``{"5": "<base64>", ...}``. Version 3, written
only for a tokenizer read from a Hugging Face tokenizer.json that asks for more
(``hf_fields``: a pipeline, ignore_merges, added tokens, a prompt), is version 2
with those fields; its ``pattern`` is null when a pipeline cuts the text.
Version 1 and 2 files load as they always did.

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
from typing import NamedTuple

from ..atomic import write_text_atomic
from . import _checks
from ._files import read_json
from ._merge import merge_chunk
from ._train import learn_merges
from .byte_chars import gpt2_bytes, spelled_in_bytes
from .pipeline import Pipeline
from .pretokenize import GPT2_SPLIT_PATTERN, check_pattern_allowed, chunker, special_tokens_regex, split_on_specials

EOT = "<|endoftext|>"  # GPT-2's end-of-text special token: closes every training document
FORMAT_NAME = "numforge-bpe"
FORMAT_VERSIONS = (1, 2, 3)
CACHE_ENTRIES = 1 << 16  # distinct chunks remembered before the cache starts over
CACHE_CHUNK_CHARS = 256  # longer chunks are encoded each time, not remembered


class Prompt(NamedTuple):
    """What goes around a prompt and where generation stops, as a Hugging Face directory says.

    ``prefix`` and ``suffix``: the ids the tokenizer's post-processor puts around a text (Llama 3:
    its BOS ``<|begin_of_text|>`` first); ``eos_ids``: the ids ``generate`` stops at
    (generation_config.json's ``eos_token_id``, one id or several); ``split_special_tokens``:
    tokenizer_config.json's flag that encodes special-token strings as text.
    """

    prefix: tuple[int, ...] = ()
    suffix: tuple[int, ...] = ()
    eos_ids: tuple[int, ...] = ()
    split_special_tokens: bool = False


class BPETokenizer:
    """A byte-level BPE tokenizer: ``merges``, ``special_tokens``, the split ``pattern``.

    >>> tok = BPETokenizer.train("aaabdaaabac", 256 + 3, special_tokens=())
    >>> tok.merges
    [(97, 97), (97, 98), (256, 257)]
    >>> tok.encode("aaabdaaabac")
    [258, 100, 258, 97, 99]

    A Hugging Face tokenizer.json (``hf_json``) can ask for more, each keyword-only and off by default:
    ``pipeline`` cuts the text instead of ``pattern`` (which is then None): a normalizer and pre-tokenizer
    steps (``pipeline.Pipeline``); ``ignore_merges``: a chunk that is itself a token of the vocabulary is
    that token, whatever the merges would make of it (Llama 3); ``added_tokens``: name -> id of tokens cut
    out of every text whole but not special (``encode_ordinary`` keeps cutting them);
    ``normalized_tokens``: the special and added tokens Hugging Face looks for in a second pass, after
    the others are cut out (``normalized: true``; only without a normalizer); ``vocab_specials``: the
    special and added tokens that the BPE vocabulary itself holds, which ``ignore_merges`` can make of a
    chunk spelled like one; ``prompt``: what ``encode_prompt`` puts around a text and ``eos_ids``.
    """

    def __init__(
        self,
        merges,
        special_tokens=(),
        pattern: str | None = GPT2_SPLIT_PATTERN,
        byte_ids=None,
        merge_ids=None,
        *,
        pipeline: Pipeline | None = None,
        ignore_merges: bool = False,
        added_tokens: dict[str, int] | None = None,
        normalized_tokens=(),
        vocab_specials=(),
        prompt: Prompt | None = None,
    ):
        merges = list(merges)
        self.byte_ids = _checks.check_byte_ids(byte_ids)
        self.merge_ids = _checks.check_merge_ids(merge_ids, len(merges), self.byte_ids)
        self.merges = _checks.check_merges(merges, self.byte_ids, self.merge_ids)
        if (pipeline is None) == (pattern is None):
            raise ValueError("give a split pattern or a pipeline (and pattern=None), not both nor neither")
        self.pattern, self.pipeline = pattern, pipeline
        self._split = chunker(pattern) if pipeline is None else pipeline
        ordinary = self.byte_ids + self.merge_ids  # internal id -> id: byte value b is b, merge i makes 256 + i
        self.special_tokens = _checks.special_ids(special_tokens, ordinary)
        self.added_tokens = dict(added_tokens or {})
        if both := sorted(set(self.special_tokens) & set(self.added_tokens)):
            raise ValueError(f"tokens cannot be both special and added: {both}")
        self._named = _checks.special_ids({**self.special_tokens, **self.added_tokens}, ordinary)  # ids distinct
        self.vocab_size = max(ordinary + list(self._named.values())) + 1
        self._token_bytes = _checks.expand_tokens(self.byte_ids, self.merges, self.merge_ids, self._named)
        # The encoder merges internal ids, where merge i has rank 256 + i and makes 256 + i (or, when several
        # merges make one token, the id of the first of them), so that an id is its own rank (``_merge``);
        # the file's ids replace them once per distinct chunk (none to replace by default).
        internal = {}
        for i, token in enumerate(ordinary):
            internal.setdefault(token, i)
        self._merged = {(internal[p], internal[q]): 256 + i for i, (p, q) in enumerate(self.merges)}
        made = [internal[token] for token in ordinary]  # rank -> the internal id it makes
        self._made = None if made == list(range(len(made))) else made
        self._external = None if ordinary == list(range(len(ordinary))) else ordinary
        self.ignore_merges = bool(ignore_merges)
        self.vocab_specials = _checks.check_names(vocab_specials, self._named, "vocab_specials")
        self._whole = self._whole_tokens() if self.ignore_merges else None
        self.normalized_tokens = _checks.check_names(normalized_tokens, self._named, "normalized_tokens")
        if self.normalized_tokens and pipeline is not None and pipeline.nfc:
            raise ValueError("normalized_tokens are matched after normalization, which numforge does not do")
        if prompt is not None:  # its ids as tuples, each a token
            ids = {field: _checks.check_token_ids(getattr(prompt, field), self.has_token, field) for field in _ID_LISTS}
            prompt = prompt._replace(**ids)
        self.prompt = prompt
        self._cache = _ChunkCache(self._encode_chunk)

    def _whole_tokens(self) -> dict[bytes, int]:
        """bytes -> id of every token of the BPE vocabulary (``ignore_merges``); a special or added token that
        the vocabulary holds is spelled in GPT-2's byte characters there, so only those are reachable."""
        whole = {data: token for token, data in self.ordinary_tokens().items()}
        for name in self.vocab_specials:
            if all(char in spelled_in_bytes() for char in name):
                whole[gpt2_bytes(name, name)] = self._named[name]
        return whole

    @property
    def bos_id(self) -> int | None:
        """The id a prompt starts with (``encode_prompt``): Llama 3's ``<|begin_of_text|>``; None if none."""
        return self.prompt.prefix[0] if self.prompt and self.prompt.prefix else None

    @property
    def eos_ids(self) -> tuple[int, ...]:
        """The ids generation stops at: a Hugging Face directory's ``eos_token_id`` (one or several), else
        ``<|endoftext|>``'s id if the tokenizer has it, else none."""
        if self.prompt is not None:
            return self.prompt.eos_ids
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
    ) -> BPETokenizer:
        """``train`` from chunk counts already made by ``count_chunks`` (summed over parts of a corpus)."""
        special_tokens = _checks.check_specials(special_tokens)
        smallest = check_vocab_size(vocab_size, special_tokens)
        if not chunk_counts:
            raise ValueError("the training text is empty: a tokenizer needs text to learn from")
        merges = learn_merges(chunk_counts, vocab_size - smallest, progress=progress)
        return cls(merges, special_tokens=special_tokens, pattern=pattern)

    # ---------------------------------------------------------------- encoding

    def encode_ordinary(self, text: str) -> list[int]:
        """Token ids of `text`, treating special-token strings as ordinary text (Hugging Face's
        ``encode_special_tokens``: added tokens that are not special are still cut out whole)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if not self.added_tokens:
            return self._encode_pieces(text)
        return self._ids(self.cut(text, (), as_text=self.special_tokens))

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

    def encode_prompt(self, text: str) -> list[int]:
        """The ids Hugging Face's ``tokenizer(text)["input_ids"]`` gives: ``prompt.prefix`` (Llama 3's BOS), the
        text with its special tokens cut out as themselves, ``prompt.suffix``. Without a ``prompt``: the text's ids."""
        prompt = self.prompt or Prompt()
        ids = self.encode_ordinary(text) if prompt.split_special_tokens else self.encode(text, allowed_special="all")
        return [*prompt.prefix, *ids, *prompt.suffix]

    def cut(self, text: str, allowed_special="all", as_text=()) -> list[tuple[str, int | None]]:
        """``text`` in pieces, each ``(piece, its id)`` for a special or added token cut out whole, or
        ``(piece, None)`` for the text between them, which BPE encodes.

        Cut out: the ``allowed_special`` special tokens and every added token, leftmost first and the longest
        where several start at one place; those in ``normalized_tokens`` in a second pass, in the pieces the
        first leaves (as Hugging Face does). A special token in ``as_text`` is found but left in its piece.
        Example, with the special token ``<s>`` = 0: ``cut("a<s>b")`` -> ``[("a", None), ("<s>", 0), ("b", None)]``.
        """
        allowed = self._special_names(allowed_special, "allowed_special") | set(as_text) | set(self.added_tokens)
        passes = [tuple(sorted(allowed - self.normalized_tokens)), tuple(sorted(allowed & self.normalized_tokens))]
        return self._cut(text, [names for names in passes if names], frozenset(as_text))

    def _cut(self, text: str, passes: list, as_text: frozenset) -> list[tuple[str, int | None]]:
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
        """The chunks BPE encodes one by one: ``text`` split by the pattern, or normalized and cut by the pipeline
        (special tokens are not cut out here: see ``cut``)."""
        return self._split(text)

    def whole_token(self, data: bytes) -> int | None:
        """With ``ignore_merges``, the token a chunk of these bytes is whole; None when the merges decide."""
        return None if self._whole is None else self._whole.get(data)

    def _ids(self, pieces: list[tuple[str, int | None]]) -> list[int]:
        ids = []
        for piece, token in pieces:
            if token is None:
                ids += self._encode_pieces(piece)
            else:
                ids.append(token)
        return ids

    def _encode_pieces(self, text: str) -> list[int]:
        """The ids of text with nothing to cut out: split (or normalize and pre-tokenize), then each chunk's ids."""
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
        try:
            data = chunk.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(
                f"the text has a lone surrogate {chunk[error.start]!r}, which has no UTF-8 encoding"
            ) from None
        if self._whole is not None and (token := self._whole.get(data)) is not None:
            return [token]  # ignore_merges: a chunk that is itself a token
        ids = merge_chunk(list(data), self._merged, self._made)  # internal ids
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
        ordinary = sorted(set(self.byte_ids + self.merge_ids))
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

    def hf_fields(self) -> dict:
        """What a Hugging Face tokenizer.json asked for beyond a split pattern (the keyword arguments of
        ``__init__``), as JSON values; all off for numforge's own tokenizers."""
        prompt = self.prompt
        return {
            "pipeline": None if self.pipeline is None else self.pipeline.to_dict(),
            "ignore_merges": self.ignore_merges,
            "added_tokens": dict(self.added_tokens),
            "normalized_tokens": sorted(self.normalized_tokens),
            "vocab_specials": sorted(self.vocab_specials),
            "prompt": None
            if prompt is None
            else prompt._replace(**{f: list(getattr(prompt, f)) for f in _ID_LISTS})._asdict(),
        }

    def to_dict(self) -> dict:
        """The tokenizer as a JSON-serialisable dict: the content of the saved file (version 1 for
        numforge's own layout, version 2 with ``merge_ids`` and tokens keyed by id for any other,
        version 3: version 2 and ``hf_fields`` when any is on)."""
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
        if self.hf_fields() != _NO_HF_FIELDS:
            d.update(version=3, merge_ids=list(self.merge_ids), **self.hf_fields())
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
        keys = ("pattern", "byte_ids", "merges", "special_tokens", "tokens") + (("merge_ids",) if version > 1 else ())
        missing = [key for key in keys + (tuple(_NO_HF_FIELDS) if version == 3 else ()) if key not in d]
        if missing:
            raise ValueError(f"{source}: missing keys {missing}")
        specials = d["special_tokens"]
        if not isinstance(specials, dict) or not all(_checks.is_int(i) for i in specials.values()):
            raise ValueError(f"{source}: 'special_tokens' must map strings to int ids, got {specials!r}")
        if d["pattern"] is not None or version < 3:
            check_pattern_allowed(d["pattern"], source, trust_pattern)
        try:
            if version == 1:  # the special tokens are numbered after the merges, in id order
                names = sorted(specials, key=lambda name: specials[name])
                tok = cls(d["merges"], special_tokens=names, pattern=d["pattern"], byte_ids=d["byte_ids"])
            else:
                hf = _hf_arguments(d, source, trust_pattern) if version == 3 else {}
                tok = cls(d["merges"], specials, d["pattern"], d["byte_ids"], d["merge_ids"], **hf)
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


_ID_LISTS = ("prefix", "suffix", "eos_ids")
_NO_HF_FIELDS = {
    "pipeline": None,
    "ignore_merges": False,
    "added_tokens": {},
    "normalized_tokens": [],
    "vocab_specials": [],
    "prompt": None,
}


def _hf_arguments(d: dict, source: str, trust_pattern: bool) -> dict:
    """The keyword arguments of ``BPETokenizer`` from a version 3 file's ``hf_fields``."""
    pipeline, prompt, added = d["pipeline"], d["prompt"], d["added_tokens"]
    if pipeline is not None and (not isinstance(pipeline, dict) or set(pipeline) != {"normalizer", "pre_tokenizer"}):
        raise ValueError(
            f"'pipeline' must be null or an object with 'normalizer' and 'pre_tokenizer', got {pipeline!r}"
        )
    if prompt is not None and (not isinstance(prompt, dict) or set(prompt) != set(Prompt._fields)):
        raise ValueError(f"'prompt' must be null or an object with {list(Prompt._fields)}, got {prompt!r}")
    if prompt is not None and (not all(isinstance(prompt[f], list) for f in _ID_LISTS) or
                               not isinstance(prompt["split_special_tokens"], bool)):  # fmt: skip
        raise ValueError(f"'prompt' must hold lists of ids and a bool, got {prompt!r}")
    if not isinstance(added, dict) or not isinstance(d["ignore_merges"], bool):
        raise ValueError("'added_tokens' must be an object and 'ignore_merges' a bool")
    for key in ("normalized_tokens", "vocab_specials"):
        if not isinstance(d[key], list):
            raise ValueError(f"{key!r} must be a list of token strings, got {d[key]!r}")
    return {
        "pipeline": None if pipeline is None else Pipeline(**pipeline, source=source, trust_pattern=trust_pattern),
        "ignore_merges": d["ignore_merges"],
        "added_tokens": added,
        "normalized_tokens": d["normalized_tokens"],
        "vocab_specials": d["vocab_specials"],
        "prompt": None if prompt is None else Prompt(**prompt),
    }


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
