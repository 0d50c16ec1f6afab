"""SentencePiece-style BPE (Llama 2, TinyLlama, Mistral v0.1, Gemma) from Hugging Face's tokenizer.json.

The same BPE as the byte-level core (``_merge.merge_chunk``: the pair of lowest rank first, the leftmost
among equals), but the base symbols are characters, not bytes: a word starts as one token per character.
A character the vocabulary lacks becomes, with ``byte_fallback``, its UTF-8 bytes' tokens ``<0xNN>``;
without it (or when a byte token is missing too), the ``unk`` token, a run of them one ``unk`` with
``fuse_unk``. Example, vocabulary {"▁": 3, "h": 4, "i": 5, "▁h": 6, "▁hi": 7, "<0xF0>": ..., ...} and the
merges ("▁", "h"), ("▁h", "i"): "▁hi🙂" starts as [3, 4, 5, <0xF0>, <0x9F>, <0x99>, <0x82>], merges to
[7, <0xF0>, <0x9F>, <0x99>, <0x82>]; decoding joins the four bytes back into "🙂".

Around the BPE (``spm_pipeline``): special and added tokens are cut out of the text first, each piece
between them is normalized and pre-tokenized into words, each word merged (remembered in a cache).

Cutting a word where no merge can join its two sides leaves its ids as they are, and gives short, repeated
parts the caches remember: first before each "▁" run (``_safe_cut``, a regex), then, for a part not yet in the
cache, between two characters with tokens that stand side by side in no piece of the vocabulary
(``safe_cuts``). Why no merge joins them: a merge makes the token whose piece is its two pieces joined, so a
token over characters x and y holds "xy". Example: no piece holds "a▁", so "ba▁c" is "ba" + "▁c"; "a▁" in one
piece, and it stays whole.

What is lossless: ``decode(encode(text))`` is ``text`` for Gemma's pipeline and for Llama's when the text
holds no "▁" (U+2581: it is the space's stand-in, so it comes back as a space), no character that falls to
``unk``, and no special token (Llama's ``Prepend`` gives each piece after one a "▁" that decodes as a space).
"""

from __future__ import annotations

import json
import re
from itertools import compress, count, islice, repeat

from ..atomic import write_text_atomic
from . import spm_file
from ._merge import merge_chunk
from .bpe import ChunkCache
from .pipeline import Prompt
from .pretokenize import special_tokens_regex
from .spm_pipeline import BYTE_TOKEN, Metaspace, decode_tokens, normalize, pre_tokenize

MARK = "▁"  # SentencePiece's stand-in for a space (U+2581)


class SentencePieceBPE:
    """A BPE over characters: ``vocab`` (piece -> id), ``merges`` ((left, right) pieces, in rank order), the
    steps of ``spm_pipeline`` (``normalizer``, ``pre_tokenizer``, ``decoder``), ``byte_fallback``,
    ``unk_token`` and ``fuse_unk``, ``ignore_merges`` (a word that is a token is that token), special and
    added tokens (name -> id, cut out whole), and the ``prompt`` (the post-processor's BOS / EOS).

    What the house asks of a byte-level ``BPETokenizer`` and this one has nothing of: no split ``pattern`` (a
    long text is encoded whole), no byte-level ``pipeline``, no added token matched after normalization."""

    pattern = None
    pipeline = None
    normalized_tokens = frozenset()

    def __init__(
        self,
        vocab: dict[str, int],
        merges,
        *,
        normalizer: tuple = (),
        pre_tokenizer: Metaspace | None = None,
        decoder: tuple = (),
        byte_fallback: bool = False,
        unk_token: str | None = None,
        fuse_unk: bool = False,
        ignore_merges: bool = False,
        special_tokens: dict[str, int] | None = None,
        added_tokens: dict[str, int] | None = None,
        prompt: Prompt | None = None,
        vocab_name: str = "model.vocab",
    ):
        self.vocab, self.merges = dict(vocab), [tuple(pair) for pair in merges]
        self.normalizer, self.pre_tokenizer, self.decoder = normalizer, pre_tokenizer, decoder
        self.byte_fallback, self.fuse_unk, self.ignore_merges = bool(byte_fallback), bool(fuse_unk), ignore_merges
        if unk_token is not None and unk_token not in self.vocab:
            raise ValueError(f"{vocab_name}: the unk_token {unk_token!r} is not in the vocabulary")
        self.unk_token, self.unk_id = unk_token, None if unk_token is None else self.vocab[unk_token]
        self.special_tokens, self.added_tokens = dict(special_tokens or {}), dict(added_tokens or {})
        self.prompt = prompt
        self._merged, self._made = _ranks(self.vocab, self.merges, vocab_name)
        self._byte_ids = [self.vocab.get(f"<0x{b:02X}>") for b in range(256)]  # (256,) None where missing
        self._tokens = {i: piece for piece, i in {**self.vocab, **self.special_tokens, **self.added_tokens}.items()}
        self.vocab_size = max(self._tokens, default=-1) + 1
        self._cache = ChunkCache(self._encode_part)  # a part of a word (``_cut``) -> its ids
        self._words = ChunkCache(self._encode_word)  # a part of one (``safe_cuts``) -> its ids
        self._cut = None if ignore_merges else _safe_cut(self.vocab)
        self._chars = frozenset(piece for piece in self.vocab if len(piece) == 1)  # characters with a token
        self._apart = None if ignore_merges else _side_by_side(self.vocab)

    # ---------------------------------------------------------------- encoding

    def encode(self, text: str, allowed_special="all") -> list[int]:
        """Token ids of ``text``; the ``allowed_special`` special tokens ("all" or a set of names) and every
        added token are cut out whole (Hugging Face's ``encode(text, add_special_tokens=False)``)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        names = set(self.special_tokens) if allowed_special == "all" else set(allowed_special)
        if unknown := sorted(names - set(self.special_tokens)):
            raise ValueError(f"allowed_special names {unknown}, which are not special tokens of this tokenizer")
        named = {name: i for name, i in {**self.special_tokens, **self.added_tokens}.items() if name in names or
                 name in self.added_tokens}  # fmt: skip
        ids, start = [], 0
        found = special_tokens_regex(tuple(sorted(named)))
        for match in found.finditer(text) if found is not None else ():
            ids += self._encode_piece(text[start : match.start()], at_start=start == 0)
            ids.append(named[match.group()])
            start = match.end()
        return ids + self._encode_piece(text[start:], at_start=start == 0)

    def encode_ordinary(self, text: str) -> list[int]:
        """Token ids of ``text`` with special-token strings as text (added tokens are still cut out)."""
        return self.encode(text, allowed_special=set())

    def encode_prompt(self, text: str) -> list[int]:
        """Hugging Face's ``tokenizer(text)["input_ids"]``: the post-processor's BOS / EOS around the text's ids."""
        prompt = self.prompt or Prompt()
        ids = self.encode_ordinary(text) if prompt.split_special_tokens else self.encode(text)
        return [*prompt.prefix, *ids, *prompt.suffix]

    def _encode_piece(self, piece: str, at_start: bool) -> list[int]:
        """The ids of text between added tokens: normalized, cut into words, each word merged."""
        ids = []
        for word in pre_tokenize(normalize(piece, self.normalizer), self.pre_tokenizer, at_start):
            for part in [word] if self._cut is None else self._cut.split(word):
                ids += self._cache[part]
        return ids

    def _encode_part(self, part: str) -> list[int]:
        """A part's ids: the ids of its pieces between ``safe_cuts`` (each remembered), or, with ``ignore_merges``,
        of the part whole."""
        if self._apart is None:
            return self._encode_word(part)
        ids, cuts = [], safe_cuts(part, self._apart, self._chars)
        for start, end in zip([0, *cuts], [*cuts, len(part)], strict=True):
            ids += self._words[part[start:end]]
        return ids

    def _encode_word(self, word: str) -> list[int]:
        """One word's ids: its characters' tokens (bytes or unk for those without one), merged by rank."""
        if self.ignore_merges and word in self.vocab:
            return [self.vocab[word]]
        return merge_chunk(self.symbols(word), self._merged, self._made)

    def symbols(self, word: str) -> list[int]:
        """The ids a word starts as: each character's token when all have one, else ``symbols_by_character``."""
        ids = list(map(self.vocab.get, word))
        return ids if None not in ids else self.symbols_by_character(word)

    def symbols_by_character(self, word: str) -> list[int]:
        """The ids a word starts as, `tokenizers`' rule: a character's token; else, with ``byte_fallback``, its
        bytes' tokens if all exist; else ``unk``, which waits until the next known character (or the end) and,
        with ``fuse_unk``, absorbs the unknown characters after it. Without ``unk`` such a character is refused
        (`tokenizers` would drop it silently)."""
        symbols, waiting = [], None  # waiting: an unk not yet placed
        for char in word:
            token = self.vocab.get(char)
            if token is not None:
                symbols += [token] if waiting is None else [waiting, token]
                waiting = None
                continue
            try:
                data = char.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"the text has a lone surrogate {char!r}, which has no UTF-8 encoding") from None
            fallback = [self._byte_ids[b] for b in data] if self.byte_fallback else [None]
            if None not in fallback:
                symbols += fallback
            elif self.unk_id is not None:
                if waiting is not None and not self.fuse_unk:
                    symbols.append(waiting)
                waiting = self.unk_id
            else:
                raise ValueError(
                    f"the text has {char!r} (U+{ord(char):04X}), which this tokenizer has no token for, and no "
                    "byte fallback or unk token: it cannot be encoded"
                )
        return symbols if waiting is None else [*symbols, waiting]

    # ---------------------------------------------------------------- decoding

    def decode(self, ids) -> str:
        """The text of ``ids``, special tokens as their names, through the decoder's steps (Hugging Face's
        ``decode(ids, skip_special_tokens=False)``)."""
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        if bad := [i for i in ids if not self.has_token(i)]:
            raise ValueError(f"token id {bad[0]!r} is not in the vocabulary (ids 0..{self.vocab_size - 1})")
        return decode_tokens([self._tokens[i] for i in ids], self.decoder)

    def incremental_decoder(self) -> IncrementalDecoder:
        """A decoder for streaming: feed ids as they are generated, get text as it completes."""
        return IncrementalDecoder(self)

    def token_piece(self, token: int) -> str:
        """The piece id ``token`` stands for, as the vocabulary writes it ("▁the", "<0x0A>", "<s>")."""
        return self._tokens[token]

    def token_bytes(self, token: int) -> bytes:
        """The bytes token ``token`` stands for in text: a ``<0xNN>`` token its byte, a special or added token its
        name, any other its piece with "▁" as a space ("▁the" -> b" the")."""
        piece = self._tokens[token]
        match = BYTE_TOKEN.fullmatch(piece) if self.byte_fallback and token == self.vocab.get(piece) else None
        if match is not None:
            return bytes([int(match.group(1), 16)])
        if token != self.vocab.get(piece):
            return piece.encode("utf-8")
        mark = MARK if self.pre_tokenizer is None else self.pre_tokenizer.replacement
        return piece.replace(mark, " ").encode("utf-8")

    def has_token(self, token) -> bool:
        """Whether id ``token`` stands for a token."""
        return type(token) is int and token in self._tokens

    def token_ids(self) -> list[int]:
        return sorted(self._tokens)

    @property
    def bos_id(self) -> int | None:
        return self.prompt.prefix[0] if self.prompt and self.prompt.prefix else None

    @property
    def eos_ids(self) -> tuple[int, ...]:
        return () if self.prompt is None else self.prompt.eos_ids

    def to_dict(self) -> dict:
        """numforge's tokenizer file, version 4 (``spm_file``): tokenizer.json and the prompt; read back by
        ``hf_json.sentencepiece_from_dict`` (``load_tokenizer`` reads the saved file)."""
        return spm_file.to_dict(self)

    def save(self, path) -> None:
        """Write numforge's tokenizer file atomically."""
        write_text_atomic(path, json.dumps(self.to_dict(), ensure_ascii=False, indent=1) + "\n")

    def __repr__(self) -> str:
        return f"SentencePieceBPE(vocab_size={self.vocab_size}, merges={len(self.merges)})"


class IncrementalDecoder:
    """Streaming decode: ``decode(ids)`` returns the text the new ids complete; ``flush()`` what is held back.

    The text of the ids so far, less the run of byte tokens at their end, begins with the text already given, so
    each call gives what is new; the run is given when a token that is not a byte ends it (or at ``flush``):
    ``ByteFallback`` makes a run that is not UTF-8 one U+FFFD per byte, every byte of it, so until the run ends
    no byte of it is known to stand for itself (``<0x6F>`` is "o", but ``<0x6F><0x90>`` is two U+FFFD).
    Concatenating every ``decode`` and the ``flush`` equals ``tokenizer.decode(ids)``.
    """

    def __init__(self, tokenizer: SentencePieceBPE):
        self._tokenizer, self._ids, self._given = tokenizer, [], ""

    def decode(self, ids) -> str:
        self._ids += ids.tolist() if hasattr(ids, "tolist") else list(ids)
        held = 0  # the byte tokens at the end
        while held < len(self._ids) and self._is_byte(self._ids[-1 - held]):
            held += 1
        return self._give(self._tokenizer.decode(self._ids[: len(self._ids) - held]))

    def _is_byte(self, token) -> bool:
        tok = self._tokenizer
        return tok.has_token(token) and BYTE_TOKEN.fullmatch(tok.token_piece(token)) is not None

    def flush(self) -> str:
        text = self._give(self._tokenizer.decode(self._ids))
        self._ids, self._given = [], ""
        return text

    def _give(self, text: str) -> str:
        new, self._given = text[len(self._given) :], text
        return new


def _safe_cut(vocab: dict[str, int]) -> re.Pattern | None:
    """Where a word may be cut without changing its ids: before each run of "▁" that follows another character,
    when no token of the vocabulary has "▁" after another character (none can straddle such a cut, so the merges
    on each side are the merges on the whole) and "▁" is a token (an unk waiting is placed before it). None when
    the vocabulary has such a token: the word is merged whole. Cut, a word without pre-tokenizer (Llama 2's whole
    text) is mostly short, repeated parts, which the cache remembers.
    Example: "▁Hi▁▁you" -> "▁Hi", "▁▁you"."""
    if MARK not in vocab or any(MARK in piece.lstrip(MARK) for piece in vocab):
        return None
    return re.compile(f"(?<=[^{MARK}])(?={MARK})")


def _side_by_side(vocab: dict[str, int]) -> dict[tuple[str, str], bool]:
    """Every two characters that stand side by side in a piece of the vocabulary, each mapped to False (not a cut).
    Example: {"▁a": 0, "ab": 1} -> {("▁", "a"): False, ("a", "b"): False}."""
    return {pair: False for piece in vocab for pair in zip(piece, piece[1:])}


def safe_cuts(word: str, apart: dict[tuple[str, str], bool], chars: frozenset) -> list[int]:
    """The positions i (ascending) where ``word[i - 1]`` and ``word[i]`` both have a token (in ``chars``) and no
    piece holds them side by side (not a key of ``apart``, ``_side_by_side``): no merge joins word[:i] and word[i:].
    A character without a token (bytes or unk) is cut on neither side. Example, pieces "a", "b", "ab", "c":
    safe_cuts("abcab", ...) -> [2, 3]."""
    cuts = list(compress(count(1), map(apart.get, zip(word, islice(word, 1, None)), repeat(True))))
    if chars.issuperset(word):
        return cuts
    return [i for i in cuts if word[i - 1] in chars and word[i] in chars]


def _ranks(vocab: dict[str, int], merges: list, vocab_name: str) -> tuple[dict, list[int]]:
    """(``merged``: (left id, right id) -> rank, ``made``: rank -> the id it makes), as ``merge_chunk`` takes them."""
    merged, made = {}, []
    for rank, (left, right) in enumerate(merges):
        for piece in (left, right, left + right):
            if piece not in vocab:
                raise ValueError(f"{vocab_name}: merge {rank} ({left!r}, {right!r}) needs {piece!r}, which it lacks")
        pair = (vocab[left], vocab[right])
        if pair in merged:
            raise ValueError(f"{vocab_name}: merge {rank} ({left!r}, {right!r}) repeats merge {merged[pair]}")
        merged[pair] = rank
        made.append(vocab[left + right])
    return merged, made
