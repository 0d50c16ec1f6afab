"""Hugging Face's pre-tokenizer steps as numforge reads them: worked examples by hand, every Split behavior against
`tokenizers` (when installed), the known patterns cutting every character, refusals by name."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numforge.tokenizer.pipeline import BEHAVIORS, Pipeline
from numforge.tokenizer.pretokenize import KNOWN_PATTERNS, LLAMA3_SPLIT_PATTERN, QWEN2_SPLIT_PATTERN, split_chunks

BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}


def steps(*parts, normalizer=None, trust=False) -> Pipeline:
    return Pipeline(normalizer, {"type": "Sequence", "pretokenizers": [*parts, BYTE_LEVEL]}, trust_pattern=trust)


def split(pattern, behavior="Isolated", invert=False, string=False) -> dict:
    return {
        "type": "Split",
        "pattern": {"String" if string else "Regex": pattern},
        "behavior": behavior,
        "invert": invert,
    }


def test_smollm2s_digits_then_byte_level_by_hand():
    # the module's example: Digits cuts "a  42" into "a  ", "4", "2"; GPT-2's regex leaves a run of spaces that
    # ends its piece whole; on the whole text it would give "a", " ", " 42"
    digits = {"type": "Digits", "individual_digits": True}
    pipeline = Pipeline(None, {"type": "Sequence", "pretokenizers": [digits, {"type": "ByteLevel"}]})
    assert pipeline("a  42") == ["a", "  ", "4", "2"] and split_chunks("a  42") == ["a", " ", " 42"]
    runs = Pipeline(None, {"type": "Sequence", "pretokenizers": [{**digits, "individual_digits": False}, BYTE_LEVEL]})
    assert runs("x2024y ½7") == ["x", "2024", "y ", "½7"]  # ½ is a number (No) as Rust's char::is_numeric says


def test_each_split_behavior_by_hand():
    # "a-b--c" split on "-": matches "-", "-", "-" (each its own match), gaps "a", "b", "c"
    cases = {
        "Isolated": ["a", "-", "b", "-", "-", "c"],
        "Removed": ["a", "b", "c"],
        "MergedWithPrevious": ["a-", "b-", "-", "c"],
        "MergedWithNext": ["a", "-b", "-", "-c"],
        "Contiguous": ["a", "-", "b", "--", "c"],
    }
    for behavior, expected in cases.items():
        assert steps(split("-", behavior, string=True))("a-b--c") == expected, behavior
    assert steps(split("-", "Removed", invert=True, string=True))("a-b--c") == ["-", "-", "-"]


def test_nfc_comes_first_and_the_known_patterns_cut_as_tiktoken():
    qwen = steps(split(QWEN2_SPLIT_PATTERN), normalizer={"type": "NFC"})
    assert qwen("cafe\u0301 123") == ["caf\u00e9", " ", "1", "2", "3"]  # Qwen2: each digit alone
    assert steps(split(LLAMA3_SPLIT_PATTERN))("I'LL pay 12345!\n\n") == ["I", "'LL", " pay", " ", "123", "45", "!\n\n"]
    assert steps(split(LLAMA3_SPLIT_PATTERN))("") == []


ALPHABET = list("aZ1٣½ \t\n\r'sLl.-_!?") + ["é", "e\u0301", "世", "🙂", "\u00a0", "\u2028", "\x85", "'S", "'ll"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(ALPHABET), max_size=60))
def test_the_known_patterns_cut_every_character_and_never_the_empty_string(pieces):
    # so their matches (findall) are exactly Hugging Face's "Isolated" split, which keeps the gaps too
    text = "".join(pieces)
    for pattern in KNOWN_PATTERNS:
        chunks = split_chunks(text, pattern)
        assert "".join(chunks) == text and "" not in chunks


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from(ALPHABET + ["--", "-"]), max_size=40),
    st.sampled_from([r"-", r"\s+", r"\p{N}", r"[a-z]+|-", LLAMA3_SPLIT_PATTERN]),
    st.sampled_from(BEHAVIORS),
    st.booleans(),
)
def test_every_split_behavior_equals_tokenizers(pieces, pattern, behavior, invert):
    tokenizers = pytest.importorskip("tokenizers")
    text = "".join(pieces)
    snake = re.sub(r"(?<!^)([A-Z])", r"_\1", behavior).lower()  # the Python binding's names: merged_with_next
    theirs = tokenizers.pre_tokenizers.Split(tokenizers.Regex(pattern), behavior=snake, invert=invert)
    ours = steps(split(pattern, behavior, invert), trust=True)(text)
    assert ours == [piece for piece, _ in theirs.pre_tokenize_str(text)]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(ALPHABET + ["2024", "٣٤٥"]), max_size=40), st.booleans())
def test_digits_equal_tokenizers(pieces, individual):
    tokenizers = pytest.importorskip("tokenizers")
    text = "".join(pieces)
    ours = steps({"type": "Digits", "individual_digits": individual})(text)
    theirs = tokenizers.pre_tokenizers.Digits(individual_digits=individual).pre_tokenize_str(text)
    assert ours == [piece for piece, _ in theirs]


def test_a_pattern_that_matches_the_empty_string_is_stopped():
    pipeline = steps(split(r"x|(?=b)"), trust=True)
    assert pipeline("axx") == ["a", "x", "x"]
    with pytest.raises(
        ValueError, match=r"the split pattern 'x\|\(\?=b\)' matches the empty string \(at character 1\)"
    ):
        pipeline("ab")


@pytest.mark.parametrize(
    "normalizer, pre_tokenizer, match",
    [
        ({"type": "NFD"}, BYTE_LEVEL, "normalizer 'NFD' is not supported; numforge reads NFC"),
        (None, {"type": "Sequence", "pretokenizers": [{"type": "UnicodeScripts"}, BYTE_LEVEL]},
         r"step 1 \('UnicodeScripts'\) is not supported"),
        (None, {"type": "Sequence", "pretokenizers": [split("a", "Mixed"), BYTE_LEVEL]}, "behavior 'Mixed' is not"),
        (None, {"type": "Sequence", "pretokenizers": [split(r"(?:a|aa)+$"), BYTE_LEVEL]},
         r"its split pattern '\(\?:a\|aa\)\+\$' is not one numforge knows \(GPT-2's, cl100k's, Llama 3's, Qwen2's\)"),
        (None, {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": "yes"}, BYTE_LEVEL]},
         "individual_digits must be true or false"),
        (None, None, "pre_tokenizer 'none' does not end with a ByteLevel step"),
    ],
)  # fmt: skip
def test_what_numforge_cannot_reproduce_is_refused_by_name(normalizer, pre_tokenizer, match):
    with pytest.raises(ValueError, match=match):
        Pipeline(normalizer, pre_tokenizer, source="tokenizer.json")
