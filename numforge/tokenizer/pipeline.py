"""Hugging Face's pipeline, read as data: how a tokenizer.json cuts text before BPE, and what goes around the ids.

numforge's own tokenizers cut text with one regular expression (``pretokenize``). A
tokenizer.json chains steps instead; each cuts every piece the one before left. The steps
the Llama 3, Qwen2 and SmolLM2 families use are read here:

    normalizer  NFC                     Qwen2: "e" + U+0301 becomes "é" before anything is cut
    Split       a regex, a behavior     Llama 3, Qwen2: a GPT-4-style pattern, each match a piece ("Isolated")
    Digits      individual_digits       SmolLM2: every digit a piece of its own
    ByteLevel   use_regex               the last step: with its regex it cuts as GPT-2 (``GPT2_SPLIT_PATTERN``);
                                        its byte alphabet is what every byte-level BPE uses
    Sequence    of these                the steps in order

Example, SmolLM2's Digits(individual) then ByteLevel on "a  42": Digits gives "a  ", "4", "2";
ByteLevel's regex cuts "a  " into "a", "  " (a run of spaces that ends its piece stays whole):
"a", "  ", "4", "2". GPT-2's regex on the whole text gives "a", " ", " 42".

A Split (Hugging Face's ``SplitDelimiterBehavior``): the regex's matches and the gaps between
them are pieces; "Isolated" keeps each, "Removed" drops the matches, "MergedWithPrevious" /
"MergedWithNext" join each match to the piece before / after it, "Contiguous" joins adjacent
matches; ``invert`` swaps which pieces count as matches; empty pieces are dropped. Digits is a
Split on ``\\p{N}`` (Rust's ``char::is_numeric``: Nd, Nl, No), "Isolated" or "Contiguous".
The tests check every behavior against `tokenizers`.

What is not here is refused by name, with the file: other normalizers (NFKC, Lowercase,
Replace, ...), other pre-tokenizers (Metaspace, Whitespace, ...), a ByteLevel that adds a
prefix space or is not the last step. A Split regex must be one of ``KNOWN_PATTERNS`` unless
trusted; one that matches the empty string is stopped (``pretokenize.match_spans``).

After BPE, a post-processor's TemplateProcessing puts tokens around the text (Llama 3: its BOS
first): ``Prompt``, with the ids generation stops at. What the tokenizer does with these, and
with added tokens and ``ignore_merges``, is ``BPETokenizer``'s (``bpe_tokenizer.py``).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from typing import NamedTuple

import regex

from .pretokenize import GPT2_SPLIT_PATTERN, KNOWN_PATTERNS, check_pattern_allowed, chunker, match_spans

BEHAVIORS = ("Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous")
DIGIT = r"\p{N}"
SENTENCEPIECE = ("Metaspace", "Prepend", "Replace")  # what a sentencepiece-style tokenizer.json is made of


def sentencepiece_refusal(source: str, part: str) -> ValueError:
    """The error for a sentencepiece-style tokenizer (Llama 2's, TinyLlama's, Mistral's); `part` gave it away."""
    return ValueError(
        f"{source}: {part}: a sentencepiece-style step (as Llama 2, TinyLlama, Mistral and Gemma use) in a "
        "byte-level pipeline; numforge reads such steps only in a SentencePiece-style tokenizer (spm_bpe.py)"
    )


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


PROMPT_IDS = ("prefix", "suffix", "eos_ids")  # the fields of a Prompt that list ids


class Step(NamedTuple):
    name: str  # what it does, for ``numforge tokenizer explain``: "Split(Llama 3's pattern, Isolated)"
    cut: Callable[[str], list[str]]  # one piece -> its pieces, none empty


class Pipeline:
    """A tokenizer.json's ``normalizer`` and ``pre_tokenizer``: ``pipeline(text)`` is the list of pieces BPE sees.

    The two JSON objects are kept as read (``to_dict``), so that the tokenizer writes them back.
    """

    def __init__(self, normalizer, pre_tokenizer, source: str = "pipeline", trust_pattern: bool = False):
        self.nfc = _is_nfc(normalizer, source)
        self.steps = _steps(pre_tokenizer, source, trust_pattern)
        self.normalizer, self.pre_tokenizer = normalizer, pre_tokenizer

    def normalize(self, text: str) -> str:
        return unicodedata.normalize("NFC", text) if self.nfc else text

    def pieces_by_step(self, text: str) -> list[tuple[str, list[str]]]:
        """(step name, the pieces after it) for each step, the normalizer first if there is one."""
        pieces, steps = [text] if text else [], []
        if self.nfc:
            pieces = [self.normalize(text)] if text else []
            steps.append(("NFC", pieces))
        for step in self.steps:
            pieces = [part for piece in pieces for part in step.cut(piece)]
            steps.append((step.name, pieces))
        return steps

    def __call__(self, text: str) -> list[str]:
        pieces = [self.normalize(text)] if text else []
        for step in self.steps:
            pieces = [part for piece in pieces for part in step.cut(piece)]
        return pieces

    def to_dict(self) -> dict:
        return {"normalizer": self.normalizer, "pre_tokenizer": self.pre_tokenizer}

    def __eq__(self, other) -> bool:
        return isinstance(other, Pipeline) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"Pipeline({'NFC, ' if self.nfc else ''}{', '.join(step.name for step in self.steps)})"


def _kind(part) -> str | None:
    return part.get("type") if isinstance(part, dict) else None


def _flatten(part, key: str) -> list:
    """The parts of a (nested) ``Sequence`` in order; any other part alone."""
    if _kind(part) != "Sequence":
        return [part]
    inner = part.get(key)
    if not isinstance(inner, list):
        raise ValueError(f"a Sequence must list its parts under {key!r}, got {part!r}"[:300])
    return [leaf for item in inner for leaf in _flatten(item, key)]


def _is_nfc(normalizer, source: str) -> bool:
    """True for NFC or a Sequence of NFCs, False for none; any other normalizer is refused by name."""
    parts = [] if normalizer is None else _flatten(normalizer, "normalizers")
    for part in parts:
        if _kind(part) in SENTENCEPIECE:
            raise sentencepiece_refusal(source, f"normalizer {_kind(part)!r}")
        if _kind(part) != "NFC":
            raise ValueError(
                f"{source}: normalizer {_kind(part) or part!r} is not supported; numforge reads NFC (Qwen2's), "
                "a Sequence of NFC, or none"
            )
    return bool(parts)


def _steps(pre_tokenizer, source: str, trust_pattern: bool) -> tuple[Step, ...]:
    parts = [] if pre_tokenizer is None else _flatten(pre_tokenizer, "pretokenizers")
    if not parts or _kind(parts[-1]) != "ByteLevel":
        found = _kind(pre_tokenizer) if pre_tokenizer is not None else "none"
        if any(_kind(part) == "Metaspace" for part in parts):
            raise sentencepiece_refusal(source, "pre_tokenizer 'Metaspace'")
        raise ValueError(
            f"{source}: pre_tokenizer {found!r} does not end with a ByteLevel step; numforge reads byte-level BPE: "
            "ByteLevel, or a Sequence of Split / Digits steps ending with a ByteLevel"
        )
    steps = []
    for n, part in enumerate(parts):
        kind, where = _kind(part), f"{source}: pre_tokenizer step {n + 1} ({_kind(part) or part!r})"
        if kind == "ByteLevel":
            if n != len(parts) - 1:
                raise ValueError(f"{where}: a ByteLevel step must be the last (the steps after it would see bytes)")
            if part.get("add_prefix_space", False):
                raise ValueError(f"{where}: add_prefix_space is true; numforge supports only false")
            if part.get("use_regex", True):
                steps.append(Step("ByteLevel (GPT-2's pattern)", chunker(GPT2_SPLIT_PATTERN)))
        elif kind == "Split":
            steps.append(_split_step(part, where, trust_pattern))
        elif kind == "Digits":
            individual = part.get("individual_digits", False)
            if not isinstance(individual, bool):
                raise ValueError(f"{where}: individual_digits must be true or false, got {individual!r}")
            name = "Digits (each digit alone)" if individual else "Digits (runs of digits)"
            steps.append(Step(name, _cutter(DIGIT, "Isolated" if individual else "Contiguous", False)))
        elif kind in SENTENCEPIECE:
            raise sentencepiece_refusal(source, f"pre_tokenizer {kind!r}")
        else:
            raise ValueError(f"{where} is not supported; numforge reads ByteLevel, Split, Digits and Sequence")
    return tuple(steps)


def _split_step(part: dict, where: str, trust_pattern: bool) -> Step:
    """A Split by a ``{"Regex": ...}`` (known or trusted) or a ``{"String": ...}`` (any literal)."""
    pattern, behavior, invert = part.get("pattern"), part.get("behavior"), part.get("invert", False)
    if behavior not in BEHAVIORS:
        raise ValueError(f"{where}: behavior {behavior!r} is not one of {', '.join(BEHAVIORS)}")
    if not isinstance(invert, bool):
        raise ValueError(f"{where}: invert must be true or false, got {invert!r}")
    if isinstance(pattern, dict) and set(pattern) == {"String"} and isinstance(pattern["String"], str):
        if not pattern["String"]:
            raise ValueError(f"{where}: the String pattern is empty")
        regex_text, name = regex.escape(pattern["String"]), repr(pattern["String"])
    elif isinstance(pattern, dict) and set(pattern) == {"Regex"}:
        regex_text = check_pattern_allowed(pattern["Regex"], where, trust_pattern)
        name = f"{KNOWN_PATTERNS[regex_text]} pattern" if regex_text in KNOWN_PATTERNS else repr(regex_text[:40])
    else:
        raise ValueError(f"{where}: pattern must be {{'Regex': ...}} or {{'String': ...}}, got {pattern!r}"[:300])
    name = f"Split({name}, {behavior}{', inverted' if invert else ''})"
    if regex_text in KNOWN_PATTERNS and behavior == "Isolated":
        return Step(name, chunker(regex_text))  # every character is in a match, so the matches are the pieces
    return Step(name, _cutter(regex_text, behavior, invert))


def _cutter(pattern: str, behavior: str, invert: bool) -> Callable[[str], list[str]]:
    """A piece -> its pieces under a Split by ``pattern``: the matches and the gaps, then the behavior."""

    def cut(piece: str) -> list[str]:
        spans, start = [], 0  # (start, end, is a match)
        for begin, end in match_spans(pattern, piece):
            if start < begin:
                spans.append((start, begin, invert))
            spans.append((begin, end, not invert))
            start = end
        if start < len(piece):
            spans.append((start, len(piece), invert))
        return [piece[begin:end] for begin, end in _JOIN[behavior](spans)]

    return cut


def _merged_with_previous(spans: list) -> list[tuple[int, int]]:
    """Each match joins the piece before it, unless that piece is a match too."""
    out, previous_match = [], False
    for begin, end, match in spans:
        if match and not previous_match and out:
            out[-1] = (out[-1][0], end)
        else:
            out.append((begin, end))
        previous_match = match
    return out


def _merged_with_next(spans: list) -> list[tuple[int, int]]:
    """Each match joins the piece after it, unless that piece is a match too: the mirror image."""
    mirrored = [(-end, -begin, match) for begin, end, match in reversed(spans)]
    return [(-end, -begin) for begin, end in reversed(_merged_with_previous(mirrored))]


def _contiguous(spans: list) -> list[tuple[int, int]]:
    """Neighbours that are both matches (or both not) join."""
    out, previous_match = [], None
    for begin, end, match in spans:
        if match == previous_match:
            out[-1] = (out[-1][0], end)
        else:
            out.append((begin, end))
        previous_match = match
    return out


_JOIN = {
    "Isolated": lambda spans: [(begin, end) for begin, end, _ in spans],
    "Removed": lambda spans: [(begin, end) for begin, end, match in spans if not match],
    "MergedWithPrevious": _merged_with_previous,
    "MergedWithNext": _merged_with_next,
    "Contiguous": _contiguous,
}


def template_processing(prompt: Prompt | None, named: dict[str, int]) -> dict | None:
    """tokenizer.json's TemplateProcessing post-processor with ``prompt``'s tokens around the text (and around a
    second text), each named as ``named`` (name -> id) names it; None when the prompt adds no token."""
    prompt = prompt or Prompt()
    if not prompt.prefix and not prompt.suffix:
        return None
    names = {i: name for name, i in named.items()}
    labels = [names.get(i, f"<id {i}>") for i in prompt.prefix + prompt.suffix]

    def around(sequence: str, type_id: int) -> list:
        special = [{"SpecialToken": {"id": label, "type_id": type_id}} for label in labels]
        return [
            *special[: len(prompt.prefix)],
            {"Sequence": {"id": sequence, "type_id": type_id}},
            *special[len(prompt.prefix) :],
        ]

    tokens = {
        label: {"id": label, "ids": [i], "tokens": [label]} for label, i in zip(labels, prompt.prefix + prompt.suffix)
    }
    return {"type": "TemplateProcessing", "single": around("A", 0), "pair": around("A", 0) + around("B", 1),
            "special_tokens": tokens}  # fmt: skip
