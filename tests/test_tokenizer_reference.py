"""The textbook BPE in tokenizer/reference.py, checked against worked examples by hand."""

import warnings

import pytest

from numforge.tokenizer import reference
from numforge.tokenizer.pretokenize import GPT2_SPLIT_PATTERN, split_chunks, split_on_specials


def test_wikipedia_example_merge_by_merge():
    # "aaabdaaabac": aa occurs 4 times -> Z; then (Z, a) and (a, b) tie at 2 and the
    # smaller pair (97, 98) wins -> Y (Wikipedia's "ab" = Y); then ZY -> X.
    merges = reference.train_merges("aaabdaaabac", 3)
    assert merges == [(97, 97), (97, 98), (256, 257)]
    assert reference.encode("aaabdaaabac", merges) == [258, 100, 258, 97, 99]
    assert reference.decode([258, 100, 258, 97, 99], merges) == "aaabdaaabac"
    assert reference.token_bytes(258, merges) == b"aaab"


def test_replace_pair_is_leftmost_and_non_overlapping():
    assert reference.replace_pair([1, 2, 3, 1, 2], (1, 2), 4) == [4, 3, 4]
    assert reference.replace_pair([7, 7, 7], (7, 7), 9) == [9, 7]
    assert reference.replace_pair([7, 7, 7, 7], (7, 7), 9) == [9, 9]
    assert reference.replace_pair([], (7, 7), 9) == []


def test_tie_rule_takes_the_smallest_pair():
    # every pair occurs exactly twice: (99, 100) < (100, 32)... the smallest is (97, 98)
    assert reference.most_frequent_pair(reference.count_pairs([[99, 100], [97, 98], [99, 100], [97, 98]])) == (
        (97, 98),
        2,
    )


def test_training_stops_early_with_a_warning_when_no_pair_repeats():
    with pytest.warns(UserWarning, match="no pair occurs twice after 1 merges"):
        merges = reference.train_merges("abab", 5)
    assert merges == [(97, 98)]


def test_pairs_never_cross_chunks():
    # " a" and "a" are separate chunks of "a a": no pair (97, 32)
    assert split_chunks("a a") == ["a", " a"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert reference.train_merges("a a", 3) == []


def test_split_pattern_keeps_every_character_and_cuts_like_gpt2():
    text = "Hello world's  2 cats\r\n\tend "
    chunks = split_chunks(text, GPT2_SPLIT_PATTERN)
    assert "".join(chunks) == text
    # whitespace before a word gives up its last character: "\r\n\t" + "end" -> "\r\n", "\t", "end"
    assert chunks == ["Hello", " world", "'s", " ", " 2", " cats", "\r\n", "\t", "end", " "]


def test_special_strings_are_cut_out_before_training():
    assert split_on_specials("a<|endoftext|>b", ("<|endoftext|>",)) == ["a", "b"]
    assert split_on_specials("a<|x|>b", ()) == ["a<|x|>b"]


def test_step_by_step_demo_runs(capsys, monkeypatch):
    import runpy
    from pathlib import Path

    demos = Path(__file__).parent.parent / "demos"
    monkeypatch.syspath_prepend(str(demos))  # as when run as a script: its folder's helpers import (_demo.py)
    monkeypatch.setattr("sys.argv", ["bpe_step_by_step.py"])
    runpy.run_path(str(demos / "bpe_step_by_step.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "tie at 2 between [(97, 98), (256, 97)]: the smallest pair wins" in out
    assert "encode('aaabdaaabac') = [258, 100, 258, 97, 99]" in out
    assert "the fast trainer learns the same merges: True" in out
