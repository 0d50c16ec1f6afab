"""Hugging Face's tokenizer.json, in and out, for byte-level BPE (GPT-2's kind of tokenizer).

The file is plain JSON (no ``tokenizers`` package needed). What numforge reads::

    {"added_tokens": [{"id": 50256, "content": "<|endoftext|>", "special": true, ...}],
     "normalizer": null,
     "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
     "model": {"type": "BPE", "vocab": {"!": 0, ...}, "merges": ["Ġ t", ...] or [["Ġ", "t"], ...]},
     ...}

``model.vocab`` and ``model.merges`` are GPT-2's vocab.json and merges.txt
(tokens in GPT-2's byte characters, merges in rank order), so both load
through ``interop.from_gpt2_strings``. The pre-tokenizer is ByteLevel with
GPT-2's split pattern, or a ``Sequence`` of a ``Split`` by another regex
(cl100k-style) and a ByteLevel without its own regex. Every added token is a
special token of numforge's (``encode(text, allowed_special="all")`` cuts them
out as Hugging Face's ``encode`` does). Anything that would encode differently
(a normalizer, ``add_prefix_space``, BPE dropout, ``ignore_merges``, added
tokens that strip spaces, ...) is a ValueError naming the field.
"""

from __future__ import annotations

import json

from ..atomic import write_text_atomic
from ._files import read_json
from .bpe import BPETokenizer
from .interop import from_gpt2_strings, gpt2_vocabulary
from .pretokenize import GPT2_SPLIT_PATTERN, check_pattern_allowed

# BPE model fields that must have these values (absent is fine) for byte-level BPE as numforge encodes it
MODEL_MUST_BE = {
    "dropout": (None,),
    "continuing_subword_prefix": (None, ""),
    "end_of_word_suffix": (None, ""),
    "byte_fallback": (False, None),
    "ignore_merges": (False, None),
}


def load_tokenizer_json(path, trust_pattern: bool = False) -> BPETokenizer:
    """A tokenizer from Hugging Face's tokenizer.json (a byte-level BPE model), with the file's ids.

    A Split regex that is not one of ``pretokenize.KNOWN_PATTERNS`` is refused
    unless ``trust_pattern``: a pattern is code that runs on every text.
    """
    d = read_json(path)
    if not isinstance(d, dict) or not isinstance(d.get("model"), dict):
        raise ValueError(f"{path}: expected a JSON object with a 'model' object (a Hugging Face tokenizer.json)")
    model = d["model"]
    if model.get("type", "BPE") != "BPE":
        raise ValueError(f"{path}: model.type is {model['type']!r}; numforge reads only 'BPE' models")
    for field, allowed in MODEL_MUST_BE.items():
        if model.get(field) not in allowed:
            raise ValueError(f"{path}: model.{field} is {model[field]!r}; numforge supports only {allowed[0]!r}")
    if d.get("normalizer") is not None:
        raise ValueError(f"{path}: normalizer {_kind(d['normalizer'])} is not supported (byte-level BPE has none)")
    pattern = check_pattern_allowed(_pattern(d.get("pre_tokenizer"), path), f"{path} (pre_tokenizer)", trust_pattern)
    vocab, merges = model.get("vocab"), model.get("merges")
    if not isinstance(vocab, dict) or not all(type(i) is int for i in vocab.values()):
        raise ValueError(f"{path}: model.vocab must map token strings to int ids")
    if not isinstance(merges, list):
        raise ValueError(f"{path}: model.merges must be a list")
    return from_gpt2_strings(
        vocab, [_merge(m, f"{path}: model.merges[{i}]") for i, m in enumerate(merges)], pattern,
        f"{path} (model.vocab)", special_tokens=_added_tokens(d.get("added_tokens", []), path),
    )  # fmt: skip


def _kind(part) -> str:
    return repr(part.get("type")) if isinstance(part, dict) else repr(part)


def _merge(merge, where: str) -> tuple[str, str, str]:
    """``"left right"`` (older files) or ``["left", "right"]`` -> (where, left, right)."""
    parts = merge.split(" ") if isinstance(merge, str) else merge
    if not isinstance(parts, list) or len(parts) != 2 or not all(isinstance(p, str) and p for p in parts):
        raise ValueError(f"{where}: expected 'left right' or [left, right], got {merge!r}")
    return where, parts[0], parts[1]


def _pattern(pre_tokenizer, path) -> str:
    """The split regex of a ByteLevel pre-tokenizer, or of a Split followed by a ByteLevel without regex."""
    steps = pre_tokenizer.get("pretokenizers") if _kind(pre_tokenizer) == "'Sequence'" else [pre_tokenizer]
    byte_level = steps[-1] if isinstance(steps, list) and steps else None
    if _kind(byte_level) != "'ByteLevel'" or len(steps) > 2:
        raise ValueError(
            f"{path}: pre_tokenizer {_kind(pre_tokenizer)} is not supported; numforge reads ByteLevel, "
            "or a Sequence of a Split by a regex and a ByteLevel"
        )
    if byte_level.get("add_prefix_space", False):
        raise ValueError(f"{path}: pre_tokenizer ByteLevel add_prefix_space is true; numforge supports only false")
    if len(steps) == 1:
        if not byte_level.get("use_regex", True):
            raise ValueError(f"{path}: a ByteLevel pre-tokenizer without a regex splits nothing; not supported")
        return GPT2_SPLIT_PATTERN
    split = steps[0]
    regex = split.get("pattern", {}).get("Regex") if isinstance(split, dict) else None
    if (
        _kind(split) != "'Split'"
        or not isinstance(regex, str)
        or split.get("behavior") != "Isolated"
        or split.get("invert", False)
        or byte_level.get("use_regex", True)
    ):
        raise ValueError(
            f"{path}: pre_tokenizer Sequence must be [Split(Regex, behavior 'Isolated'), "
            f"ByteLevel(use_regex false)], got {pre_tokenizer!r}"[:400]
        )
    return regex


def _added_tokens(added, path) -> dict[str, int]:
    """content -> id of every added token; one that strips spaces or matches only whole words is refused."""
    if not isinstance(added, list):
        raise ValueError(f"{path}: added_tokens must be a list")
    specials = {}
    for i, token in enumerate(added):
        if not isinstance(token, dict) or not isinstance(token.get("content"), str) or type(token.get("id")) is not int:
            raise ValueError(f"{path}: added_tokens[{i}] must have a string 'content' and an int 'id'")
        for flag in ("lstrip", "rstrip", "single_word"):
            if token.get(flag):
                raise ValueError(
                    f"{path}: added_tokens[{i}] ({token['content']!r}) has {flag} true; numforge supports only false"
                )
        specials[token["content"]] = token["id"]
    return specials


def tokenizer_json(tok: BPETokenizer) -> dict:
    """Hugging Face's tokenizer.json for `tok` (the inverse of ``load_tokenizer_json``)."""
    vocab, merges = gpt2_vocabulary(tok)
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    if tok.pattern == GPT2_SPLIT_PATTERN:
        pre_tokenizer = byte_level
    else:
        split = {"type": "Split", "pattern": {"Regex": tok.pattern}, "behavior": "Isolated", "invert": False}
        pre_tokenizer = {"type": "Sequence", "pretokenizers": [split, {**byte_level, "use_regex": False}]}
    added = [
        {"id": i, "content": name, "single_word": False, "lstrip": False, "rstrip": False}
        | {"normalized": False, "special": True}
        for name, i in sorted(tok.special_tokens.items(), key=lambda item: item[1])
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": {**byte_level, "trim_offsets": False},
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [f"{left} {right}" for left, right in merges],
        },
    }


def export_tokenizer_json(tok: BPETokenizer, path) -> None:
    """Write Hugging Face's tokenizer.json for `tok`, atomically."""
    write_text_atomic(path, json.dumps(tokenizer_json(tok), ensure_ascii=False, indent=1) + "\n")
