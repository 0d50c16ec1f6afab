"""The steps around a SentencePiece-style BPE in Hugging Face's tokenizer.json: normalizer, pre-tokenizer, decoder.

Each family writes them differently (transformers' ``convert_slow_tokenizer``)::

    Llama 2, TinyLlama, Mistral v0.1 (legacy):  normalizer Sequence[Prepend("▁"), Replace(" ", "▁")], no pre-tokenizer
    Llama (legacy: false), Mistral later:       no normalizer, Metaspace("▁", prepend_scheme "first", split false)
    Gemma:                                      normalizer Replace(" ", "▁"), no pre-tokenizer (or a Split on " ",
                                                which finds nothing once every space is "▁")
    decoder: Sequence[Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0)] (Gemma: without Strip), or Metaspace

Worked example, Llama 2's "Hi  you": Prepend -> "▁Hi  you", Replace -> "▁Hi▁▁you", one word for the BPE; decoding
its tokens ["▁Hi", "▁", "▁you"]: Replace -> [" Hi", " ", " you"], Fuse -> [" Hi  you"], Strip one " " -> "Hi  you".

A step is a tuple, its kind first; ``normalize``, ``pre_tokenize`` and ``decode_tokens`` apply them as
`tokenizers` does. Anything else is a ValueError naming the part.
"""

from __future__ import annotations

import re
from typing import NamedTuple

PREPEND_SCHEMES = ("first", "always", "never")


class Metaspace(NamedTuple):
    """The Metaspace pre-tokenizer: spaces become ``replacement``; ``prepend_scheme`` puts one before the text
    (``always``: before every piece between added tokens, ``first``: only the one at the text's start);
    ``split`` cuts before each ``replacement`` ("▁a▁▁b" -> "▁a", "▁", "▁b")."""

    replacement: str = "▁"
    prepend_scheme: str = "always"
    split: bool = True


def _kind(part) -> str | None:
    return part.get("type") if isinstance(part, dict) else None


def _parts(part, key: str) -> list:
    if part is None:
        return []
    return part[key] if _kind(part) == "Sequence" and isinstance(part.get(key), list) else [part]


def _string(value, where: str) -> str:
    """A Replace pattern: ``{"String": s}`` (a regex is refused: no file of these families uses one)."""
    if isinstance(value, dict) and isinstance(value.get("String"), str) and value["String"]:
        return value["String"]
    raise ValueError(f"{where}: expected a pattern {{'String': <non-empty text>}}, got {value!r}")


def read_normalizer(normalizer, source: str) -> tuple[tuple, ...]:
    """("prepend", text) and ("replace", pattern, content) steps, in order."""
    steps = []
    for n, part in enumerate(_parts(normalizer, "normalizers")):
        where = f"{source}: normalizer step {n + 1} ({_kind(part)!r})"
        if _kind(part) == "Prepend" and isinstance(part.get("prepend"), str):
            steps.append(("prepend", part["prepend"]))
        elif _kind(part) == "Replace" and isinstance(part.get("content"), str):
            steps.append(("replace", _string(part.get("pattern"), where), part["content"]))
        else:
            raise ValueError(
                f"{where} is not supported; numforge reads Prepend and Replace for SentencePiece-style tokenizers"
            )
    return tuple(steps)


def read_pre_tokenizer(pre_tokenizer, normalizer: tuple, source: str) -> Metaspace | None:
    """Metaspace, or None (the whole piece is one word). A Split on " " after a normalizer that replaces every
    space (Gemma's) finds nothing, so it is None too."""
    if pre_tokenizer is None:
        return None
    kind, where = _kind(pre_tokenizer), f"{source}: pre_tokenizer {_kind(pre_tokenizer)!r}"
    if kind == "Metaspace":
        scheme = pre_tokenizer.get("prepend_scheme", "always")
        if pre_tokenizer.get("add_prefix_space") is False and "prepend_scheme" not in pre_tokenizer:
            scheme = "never"  # files older than tokenizers 0.19
        metaspace = Metaspace(pre_tokenizer.get("replacement", "▁"), scheme, pre_tokenizer.get("split", True))
        if len(metaspace.replacement) != 1 or scheme not in PREPEND_SCHEMES or not isinstance(metaspace.split, bool):
            raise ValueError(f"{where}: expected a one-character replacement, prepend_scheme in {PREPEND_SCHEMES}")
        return metaspace
    spaces_gone = any(step[:2] == ("replace", " ") and " " not in step[2] for step in normalizer)
    pattern = pre_tokenizer.get("pattern") if kind == "Split" else None
    if pattern == {"String": " "} and spaces_gone and not pre_tokenizer.get("invert", False):
        return None
    raise ValueError(f"{where} is not supported; numforge reads Metaspace, or none, for SentencePiece-style tokenizers")


def normalize(text: str, steps: tuple) -> str:
    """``text`` through the normalizer's steps (Prepend adds nothing to an empty text, as in `tokenizers`)."""
    for step in steps:
        if step[0] == "prepend":
            text = step[1] + text if text else text
        else:
            text = text.replace(step[1], step[2])
    return text


def pre_tokenize(text: str, metaspace: Metaspace | None, at_start: bool) -> list[str]:
    """The words of a normalized piece; ``at_start``: the piece begins the text (Metaspace's ``first``)."""
    if not text:
        return []
    if metaspace is None:
        return [text]
    mark = metaspace.replacement
    text = text.replace(" ", mark)
    prepend = metaspace.prepend_scheme == "always" or (metaspace.prepend_scheme == "first" and at_start)
    if prepend and not text.startswith(mark):
        text = mark + text
    if not metaspace.split:
        return [text]
    return [word for word in re.split(f"(?={re.escape(mark)})", text) if word]


def read_decoder(decoder, source: str) -> tuple[tuple, ...]:
    """("replace", pattern, content), ("byte_fallback",), ("fuse",), ("strip", content, start, stop),
    ("metaspace", replacement, prepend_scheme) steps, in order."""
    steps = []
    for n, part in enumerate(_parts(decoder, "decoders")):
        kind, where = _kind(part), f"{source}: decoder step {n + 1} ({_kind(part)!r})"
        if kind == "Replace" and isinstance(part.get("content"), str):
            steps.append(("replace", _string(part.get("pattern"), where), part["content"]))
        elif kind in ("ByteFallback", "Fuse"):
            steps.append((kind.lower().replace("bytefallback", "byte_fallback"),))
        elif kind == "Strip" and isinstance(part.get("content"), str) and len(part["content"]) == 1:
            steps.append(("strip", part["content"], int(part.get("start", 0)), int(part.get("stop", 0))))
        elif kind == "Metaspace":
            steps.append(("metaspace", *read_pre_tokenizer(part, (), source)[:2]))
        else:
            raise ValueError(
                f"{where} is not supported; numforge reads Replace, ByteFallback, Fuse, Strip and Metaspace for "
                "SentencePiece-style tokenizers"
            )
    return tuple(steps)


def decode_tokens(tokens: list[str], steps: tuple) -> str:
    """The text of ``tokens`` (each its string), through the decoder's steps, joined."""
    for step in steps:
        kind = step[0]
        if kind == "replace":
            tokens = [token.replace(step[1], step[2]) for token in tokens]
        elif kind == "byte_fallback":
            tokens = _byte_fallback(tokens)
        elif kind == "fuse":
            tokens = ["".join(tokens)]
        elif kind == "strip":
            tokens = [_strip(token, *step[1:]) for token in tokens]
        else:  # metaspace: the mark is a space, and in the first token it is dropped (prepend_scheme not never)
            mark, scheme = step[1], step[2]
            tokens = [t.replace(mark, "" if i == 0 and scheme != "never" else " ") for i, t in enumerate(tokens)]
    return "".join(tokens)


BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _byte_fallback(tokens: list[str]) -> list[str]:
    """Each run of ``<0xNN>`` tokens becomes the text of its bytes; a run that is not UTF-8 becomes one U+FFFD
    per byte (`tokenizers`' rule, not Python's ``errors="replace"``)."""
    out, run = [], bytearray()
    for token in [*tokens, None]:
        match = BYTE_TOKEN.fullmatch(token) if token is not None else None
        if match is not None:
            run.append(int(match.group(1), 16))
            continue
        if run:
            try:
                out.append(run.decode("utf-8"))
            except UnicodeDecodeError:
                out += ["\ufffd"] * len(run)
            run = bytearray()
        if token is not None:
            out.append(token)
    return out


def _strip(token: str, content: str, start: int, stop: int) -> str:
    """``token`` without up to ``start`` leading and ``stop`` trailing ``content`` characters."""
    left = 0
    while left < min(start, len(token)) and token[left] == content:
        left += 1
    right = len(token)
    while len(token) - right < stop and right > left and token[right - 1] == content:
        right -= 1
    return token[left:right]
