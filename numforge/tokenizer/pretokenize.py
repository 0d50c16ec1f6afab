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
"""

from __future__ import annotations

from functools import lru_cache

import regex

GPT2_SPLIT_PATTERN = (
    r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)


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
    """The chunks of `text` under `pattern`, in order; ``"".join(chunks) == text`` for GPT-2's pattern."""
    return compile_pattern(pattern).findall(text)


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
