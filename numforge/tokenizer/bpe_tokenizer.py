"""BPETokenizer: the core BPE (``bpe.py``) inside Hugging Face's pipeline, and saved in numforge's own file.

A Hugging Face tokenizer.json (``hf_json.py``) does more around the merges than numforge's own
tokenizers, which use none of it: added tokens cut out whole (a second pass for the ``normalized``
ones), a pipeline instead of a split pattern, ``ignore_merges``, a prompt template (the class's
docstring says what each does).

Example, ``ignore_merges`` with the merges (h, e) -> 256, (t, h) -> 257, (th, e) -> 258: by rank,
"the" is [t][he], and no merge joins those two; but "the" is a token (258), so with
``ignore_merges`` it is [258]. "thee" is no token: the merges decide, [t][he][e].

``save`` / ``load`` (``to_dict`` / ``from_dict``) are numforge's own file, in ``bpe_file.py``.
"""

from __future__ import annotations

from . import _checks, bpe_file
from .bpe import BPE, ChunkCache
from .byte_chars import gpt2_bytes, spelled_in_bytes
from .pipeline import PROMPT_IDS, Pipeline, Prompt
from .pretokenize import GPT2_SPLIT_PATTERN


class BPETokenizer(BPE):
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
        if (pipeline is None) == (pattern is None):
            raise ValueError("give a split pattern or a pipeline (and pattern=None), not both nor neither")
        super().__init__(merges, special_tokens, pattern, byte_ids, merge_ids, split=pipeline)
        self.pipeline = pipeline
        self.added_tokens = dict(added_tokens or {})
        if both := sorted(set(self.special_tokens) & set(self.added_tokens)):
            raise ValueError(f"tokens cannot be both special and added: {both}")
        self._add_whole_tokens(self.added_tokens)
        self.ignore_merges = bool(ignore_merges)
        self.vocab_specials = _checks.check_names(vocab_specials, self._named, "vocab_specials")
        self._whole = None
        if self.ignore_merges:
            self._whole = self._whole_tokens()
            self._cache = ChunkCache(self._encode_whole_or_merged)  # a chunk that is a token: looked up first
        self.normalized_tokens = _checks.check_names(normalized_tokens, self._named, "normalized_tokens")
        if self.normalized_tokens and pipeline is not None and pipeline.nfc:
            raise ValueError("normalized_tokens are matched after normalization, which numforge does not do")
        if prompt is not None:  # its ids as tuples, each a token
            ids = {name: _checks.check_token_ids(getattr(prompt, name), self.has_token, name) for name in PROMPT_IDS}
            prompt = prompt._replace(**ids)
        self.prompt = prompt

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
        return super().eos_ids if self.prompt is None else self.prompt.eos_ids

    # ---------------------------------------------------------------- encoding

    def encode_ordinary(self, text: str) -> list[int]:
        """Token ids of `text`, treating special-token strings as ordinary text (Hugging Face's
        ``encode_special_tokens``: added tokens that are not special are still cut out whole)."""
        if not isinstance(text, str) or not self.added_tokens:
            return super().encode_ordinary(text)
        return self._ids(self.cut(text, (), as_text=self.special_tokens))

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

    def whole_token(self, data: bytes) -> int | None:
        """With ``ignore_merges``, the token a chunk of these bytes is whole; None when the merges decide."""
        return None if self._whole is None else self._whole.get(data)

    def _encode_whole_or_merged(self, chunk: str) -> list[int]:
        """``ignore_merges``: a chunk that is itself a token is that token; any other is merged."""
        try:
            token = self._whole.get(chunk.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate, which _encode_chunk names
            token = None
        return [token] if token is not None else self._encode_chunk(chunk)

    # ---------------------------------------------------------------- numforge's own file (bpe_file.py)

    def hf_fields(self) -> dict:
        """What a Hugging Face tokenizer.json asked for beyond a split pattern (the keyword arguments of
        ``__init__``), as JSON values; all off for numforge's own tokenizers (``bpe_file.HF_FIELDS``)."""
        prompt = self.prompt
        return {
            "pipeline": None if self.pipeline is None else self.pipeline.to_dict(),
            "ignore_merges": self.ignore_merges,
            "added_tokens": dict(self.added_tokens),
            "normalized_tokens": sorted(self.normalized_tokens),
            "vocab_specials": sorted(self.vocab_specials),
            "prompt": None
            if prompt is None
            else prompt._replace(**{f: list(getattr(prompt, f)) for f in PROMPT_IDS})._asdict(),
        }

    def to_dict(self) -> dict:
        """The tokenizer as a JSON-serialisable dict: the content of the saved file (version 1 for
        numforge's own layout, version 2 with ``merge_ids`` and tokens keyed by id for any other,
        version 3: version 2 and ``hf_fields`` when any is on)."""
        return bpe_file.to_dict(self)

    @classmethod
    def from_dict(cls, d: dict, source: str = "tokenizer dict", trust_pattern: bool = False) -> BPETokenizer:
        """The inverse of ``to_dict`` (any version); ``source`` names the dict in error messages.

        The split pattern must be one of ``pretokenize.KNOWN_PATTERNS`` unless
        ``trust_pattern`` is True: a pattern is code that runs on every text.
        """
        return bpe_file.from_dict(cls, d, source, trust_pattern)

    def save(self, path) -> None:
        """Write numforge's JSON tokenizer file atomically (temporary name, then rename)."""
        bpe_file.save(self, path)

    @classmethod
    def load(cls, path, trust_pattern: bool = False) -> BPETokenizer:
        """Read numforge's JSON tokenizer file (``trust_pattern``: see ``from_dict``)."""
        return bpe_file.load(cls, path, trust_pattern)
