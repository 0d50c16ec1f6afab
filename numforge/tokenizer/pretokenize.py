"""Pre-tokenization: cut text into chunks that BPE never merges across.

GPT-2 first splits text with one regular expression, so that a merge never
joins a letter to a space after it, a word to a digit, and so on; BPE then
works inside each chunk. The pattern, alternative by alternative:

    '(?:[sdmt]|ll|ve|re)   English contractions: 's 'd 'm 't 'll 've 're
     ?\\p{L}+              a word, with at most one leading space
     ?\\p{N}+              a number, with at most one leading space
     ?[^\\s\\p{L}\\p{N}]+    punctuation and symbols, with at most one leading space
    \\s+(?!\\S)             whitespace, except the last space before a word
    \\s+                   any remaining whitespace

Example: "Hello world's  2 cats" -> ["Hello", " world", "'s", " ", " 2", " cats"].

The chunks always concatenate back to the input, so no text is lost. A
tokenizer may carry another pattern (for example cl100k's); it is stored in
the tokenizer's file.

``split_chunks`` is the plain way (the `regex` package, which knows \\p{L});
``chunker`` returns a faster function with the same result for GPT-2's
pattern, checked against ``split_chunks`` in the tests.

A pattern is code: a regular expression that backtracks catastrophically
(``(?:a|aa)+$`` on a line of ``a``s) can take longer than the age of the
universe on a short line. So a pattern read from a file is used only if it
is one of ``KNOWN_PATTERNS`` (GPT-2's, cl100k's, Llama 3's, Qwen2's) unless
the caller trusts it (``check_pattern_allowed``), and every other pattern runs
under a time budget (``match_budget``: a second of processor time plus 10 us a
character, about 100x what the known patterns need; `regex` counts processor
time, so a busy machine stretches it in wall-clock time), past which it stops
with a ``ValueError``. The known patterns run without the budget, which would
halve their speed: their time is linear by construction. Each alternative is
a run of one character class (GPT-2's `` ?\\p{L}+``, cl100k's possessive ``?+``
and ``++``, Llama 3's ``[^\\r\\n\\p{L}\\p{N}]?\\p{L}+``) with at most one optional
character before it and nothing after it that can fail (``[\\r\\n]*``), which
backtracks at most one character, or a bounded one (a contraction,
``\\p{N}{1,3}``); a whitespace run backtracks one character for ``(?!\\S)``; and
an alternative that fails scans at most the run that the next one consumes:
Llama 3's and Qwen2's ``\\s*[\\r\\n]+`` scans a whitespace run back to its last
newline and fails only on a run without one, which ``\\s+(?!\\S)`` then takes
whole but its last character. The tests time them on long adversarial runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

import regex

GPT2_SPLIT_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# GPT-4's (tiktoken's cl100k_base): case-insensitive contractions, numbers in groups of up to 3 digits
CL100K_SPLIT_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]"""
    r"""|\s+(?!\S)|\s+"""
)
# Llama 3's, as its tokenizer.json writes it (GPT-4-style, no possessive quantifiers, numbers in groups
# of up to 3 digits), and Qwen2's (the same with each digit alone)
LLAMA3_SPLIT_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"""
    r"""|\s+(?!\S)|\s+"""
)
QWEN2_SPLIT_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"""
    r"""|\s+(?!\S)|\s+"""
)
KNOWN_PATTERNS = {  # trusted in any file
    GPT2_SPLIT_PATTERN: "GPT-2's",
    CL100K_SPLIT_PATTERN: "cl100k's",
    LLAMA3_SPLIT_PATTERN: "Llama 3's",
    QWEN2_SPLIT_PATTERN: "Qwen2's",
}
MATCH_SECONDS = 1.0  # the budget of one split: this much,
MATCH_SECONDS_PER_CHAR = 1e-5  # plus this much per character (the known patterns need about 0.1 us)


def match_budget(num_chars: int) -> float:
    """Seconds one split of ``num_chars`` characters may take before it is stopped."""
    return MATCH_SECONDS + MATCH_SECONDS_PER_CHAR * num_chars


def check_pattern_allowed(pattern: str, source: str, trust: bool = False) -> str:
    """``pattern`` if it is one of ``KNOWN_PATTERNS`` or ``trust`` is True; else a ``ValueError`` naming ``source``."""
    if not isinstance(pattern, str):
        raise ValueError(f"{source}: 'pattern' must be a string, got {type(pattern).__name__}")
    if pattern not in KNOWN_PATTERNS and not trust:
        raise ValueError(
            f"{source}: its split pattern {pattern[:80]!r}{'...' if len(pattern) > 80 else ''} is not one numforge "
            f"knows ({', '.join(KNOWN_PATTERNS.values())}). A pattern is code that runs on every text; use it only "
            f"if you trust the file: trust_pattern=True in Python, --trust-pattern on the command line"
        )
    return pattern


@lru_cache(maxsize=16)
def compile_pattern(pattern: str) -> regex.Pattern:
    """The split pattern compiled with the `regex` package (which knows \\p{L} and \\p{N})."""
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be a str, got {type(pattern).__name__}")
    try:
        return regex.compile(pattern)
    except regex.error as error:
        raise ValueError(f"pattern {pattern!r} is not a valid regular expression: {error}") from None


def split_chunks(text: str, pattern: str = GPT2_SPLIT_PATTERN) -> list[str]:
    """The chunks of `text` under `pattern`, in order; ``"".join(chunks) == text`` for GPT-2's pattern.

    The plain way (``regex`` findall, within ``match_budget``): the reference, and what every other pattern uses.
    """
    return _bounded(pattern)(text)


@lru_cache(maxsize=16)
def _bounded(pattern: str) -> Callable[[str], list[str]]:
    """``findall`` of ``pattern``; for a pattern not in ``KNOWN_PATTERNS``, stopped with a ``ValueError`` after
    ``match_budget(len(text))`` seconds of processor time. The known patterns run unwatched: their time is
    linear by construction (see the module's docstring), and the watch would halve their speed."""
    findall = compile_pattern(pattern).findall
    if pattern in KNOWN_PATTERNS:
        return findall

    def split(text: str) -> list[str]:
        try:
            return findall(text, **_budget(text))
        except TimeoutError:
            raise _stopped(pattern, text) from None

    return split


def match_spans(pattern: str, text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every match of ``pattern`` in ``text``, in order; a pattern not in ``KNOWN_PATTERNS``
    runs within ``match_budget``. A match of the empty string is a ``ValueError``: regex engines disagree on
    where such matches fall, so a split by them could not be reproduced."""
    finditer = compile_pattern(pattern).finditer
    try:
        spans = [m.span() for m in finditer(text, **({} if pattern in KNOWN_PATTERNS else _budget(text)))]
    except TimeoutError:
        raise _stopped(pattern, text) from None
    empty = next((start for start, end in spans if start == end), None)
    if empty is not None:
        raise ValueError(f"the split pattern {pattern[:80]!r} matches the empty string (at character {empty})")
    return spans


def _budget(text: str) -> dict:
    return {"timeout": match_budget(len(text))}


def _stopped(pattern: str, text: str) -> ValueError:
    return ValueError(
        f"the split pattern {pattern[:80]!r} took more than {match_budget(len(text)):.1f} s of processor "
        f"time on {len(text):,} characters and was stopped: it backtracks catastrophically on this text"
    )


# The fast path for GPT-2's pattern. On ASCII text, \p{L} is [A-Za-z], \p{N} is [0-9]
# and \s (in `regex`) is [\t\n\v\f\r ]; written that way the pattern runs in the
# standard library's `re`, which is faster (ops/WHY_FAST.md; `numforge bench tokenizer` measures encoding).
_ASCII_SPACE = r"\t\n\x0b\x0c\r "
_GPT2_ASCII = re.compile(
    rf"""'(?:[sdmt]|ll|ve|re)| ?[A-Za-z]+| ?[0-9]+| ?[^{_ASCII_SPACE}A-Za-z0-9]+"""
    rf"""|[{_ASCII_SPACE}]+(?![^{_ASCII_SPACE}])|[{_ASCII_SPACE}]+"""
)
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
# A cut that changes no chunk: "x\ny" with x, y printable ASCII other than space. A "\n"
# is only ever in a chunk of whitespace, so chunks end before and after it and one
# starts at y; and that "\n" alone is a chunk whether y or the end of text follows
# (a longer whitespace run before y would give up its last character, see above).
_CUT = re.compile(r"[!-~]\n(?=[!-~])")


def chunker(pattern: str = GPT2_SPLIT_PATTERN) -> Callable[[str], list[str]]:
    """The fastest function that gives ``split_chunks(text, pattern)``.

    For GPT-2's pattern: ASCII stretches of the text go through the ASCII form of
    the pattern in `re`, and each stretch holding a non-ASCII character, cut at the
    nearest safe "x\\ny" points around it, through `regex`.
    """
    full = _bounded(pattern)
    if pattern != GPT2_SPLIT_PATTERN:
        return full
    ascii_only = _GPT2_ASCII.findall

    def split(text: str) -> list[str]:
        if text.isascii():
            return ascii_only(text)
        chunks = []
        done = 0  # text[:done] is split
        while (match := _NON_ASCII.search(text, done)) is not None:  # the next non-ASCII past the split part
            start = _last_cut(text, done, match.start())
            cut = _CUT.search(text, match.end())
            end = cut.end() if cut else len(text)
            chunks += ascii_only(text[done:start])
            chunks += full(text[start:end])
            done = end
        chunks += ascii_only(text[done:])
        return chunks

    return split


def _last_cut(text: str, low: int, high: int) -> int:
    """The last safe cut p with low < p <= high (text[p-2:p+1] matches _CUT), else low."""
    j = text.rfind("\n", low, high)
    while j > low:
        if j + 1 < len(text) and "!" <= text[j - 1] <= "~" and "!" <= text[j + 1] <= "~":
            return j + 1
        j = text.rfind("\n", low, j)
    return low


def last_safe_cut(text: str, pattern: str = GPT2_SPLIT_PATTERN) -> int:
    """The last p > 0 with ``split_chunks(text) == split_chunks(text[:p]) + split_chunks(text[p:])``, else 0.

    Lets a long text be encoded piece by piece with the ids of the whole. Known
    only for GPT-2's pattern (a "x\\ny" point, as in ``chunker``); 0 for any other.
    """
    return _last_cut(text, 0, len(text)) if pattern == GPT2_SPLIT_PATTERN else 0


@lru_cache(maxsize=64)
def special_tokens_regex(names: tuple[str, ...]) -> regex.Pattern | None:
    """A pattern matching any of the special-token strings `names` (longest first), or None if none."""
    names = sorted(set(names), key=len, reverse=True)
    if not names:
        return None
    return regex.compile("|".join(regex.escape(name) for name in names))


def split_on_specials(text: str, names) -> list[str]:
    """The pieces of `text` between occurrences of the special strings `names` (specials dropped).

    Training uses this so that a special token such as ``<|endoftext|>`` in the
    corpus never takes part in a merge.
    """
    finder = special_tokens_regex(tuple(names))
    return [text] if finder is None else finder.split(text)
