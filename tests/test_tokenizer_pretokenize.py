"""The fast GPT-2 chunker (ASCII stretches in `re`) against the plain `regex` findall."""

import inspect
import json.decoder
from pydoc_data.topics import topics

from hypothesis import given
from hypothesis import strategies as st

from numforge.tokenizer.pretokenize import GPT2_SPLIT_PATTERN, chunker, split_chunks

DOCS = "".join(topics[key] for key in sorted(topics))
CODE = inspect.getsource(json.decoder)

# every kind of character the pattern distinguishes, and the whitespace on which `re`
# and `regex` disagree (\x1c-\x1f are whitespace to str.isspace, not to `regex`);
# NBSP, NEL and U+2028 are non-ASCII whitespace
ALPHABET = list("aZ1 \n\r\t\x0b\x0c\x1c\x1f'sdlvetr.-_") + ["é", "世", "🙂", "\u00a0", "\x85", "\u2028", "²", "\u0301"]
fast = chunker(GPT2_SPLIT_PATTERN)


@given(st.text(st.sampled_from(ALPHABET), max_size=60))
def test_fast_chunker_equals_regex(text):
    assert fast(text) == split_chunks(text)


AROUND_CUTS = ["x\n", "y", "  \n", "\n", "é", " 世", "'s", "\n\n", "  ", "\r\n", "def f():"]


@given(st.lists(st.sampled_from(AROUND_CUTS), max_size=30))
def test_fast_chunker_equals_regex_around_cuts(pieces):
    # many "x\ny" cut points next to non-ASCII characters and whitespace runs
    text = "".join(pieces)
    assert fast(text) == split_chunks(text)


def test_fast_chunker_equals_regex_on_real_text():
    for text in (DOCS, CODE, CODE + "# café\n" + CODE + "  \nπ = 3\n  \n" + DOCS[:5000]):
        assert fast(text) == split_chunks(text)


def test_other_patterns_use_regex_directly():
    pattern = r"\p{L}+|\S|\s+"
    assert chunker(pattern)("héllo  wörld!") == ["héllo", "  ", "wörld", "!"]
