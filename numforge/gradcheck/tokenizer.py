"""The tokenizer exercise's cases: a learner's BPE steps against ``tokenizer/reference.py`` on hidden texts.

Nothing here is differentiated: each step's output is compared exactly with
the textbook algorithm's, on texts the scaffold does not show (pieces of this
Python's documentation, runs of one letter whose pairs overlap, ties, bytes
of characters outside ASCII, an empty text). The steps, as the reference
names them: ``count_pairs``, ``most_frequent_pair`` (the tie rule),
``replace_pair`` (a merge: leftmost, no overlaps), ``train_merges``,
``encode``. The learner's ``train_merges`` and ``encode`` use the learner's
own steps.
"""

from __future__ import annotations

import functools
import random
import warnings
from collections import Counter

from ..tokenizer import reference
from .cases import Case
from .check import MatchResult

NUM_MERGES = 24
SPECIAL = "<|endoftext|>"


@functools.cache
def hidden_texts() -> tuple[str, ...]:
    """The texts the steps are graded on: the same every run, none of them in the scaffold."""
    from pydoc_data.topics import topics  # this Python's documentation, as in the default corpus

    rng = random.Random(24)
    keys = sorted(topics)
    prose = [topics[keys[i]][:600] for i in (3, 41)]
    letters = "".join(rng.choice("aab ") for _ in range(240))
    return (*prose, letters, "aaaa aaa aaaaa baaa", "naïve café: 世界世界 🙂🙂 é", "")


@functools.cache
def _merges() -> tuple:
    """The merges ``encode`` is graded with: learned from two of the hidden texts."""
    return tuple(reference.train_merges(hidden_texts()[0] + hidden_texts()[2], NUM_MERGES))


def _first_difference(mine: list, true: list) -> str:
    for i, (a, b) in enumerate(zip(mine, true)):
        if a != b:
            return f"at position {i} yours has {a!r}, the reference {b!r} (yours: {len(mine)} items, its: {len(true)})"
    return f"yours has {len(mine)} items, the reference {len(true)}"


def _counts(mine, true: Counter) -> MatchResult:
    if not isinstance(mine, dict):
        return MatchResult("", "", False, f"count_pairs must return a Counter (a dict), got {type(mine).__name__}")
    wrong = sorted(p for p in set(mine) | set(true) if mine.get(p, 0) != true.get(p, 0))
    if not wrong:
        return MatchResult("", "", True)
    pair = wrong[0]
    notes = ()
    if pair[0] == pair[1] and mine.get(pair, 0) < true.get(pair, 0):
        notes = ("overlapping pairs each count: a run 'aaa' holds the pair (a, a) twice",)
    detail = f"{len(wrong)} pairs counted wrong, e.g. {pair}: yours {mine.get(pair, 0)}, the reference {true[pair]}"
    return MatchResult("", "", False, detail, notes)


def _text_label(i: int, text: str) -> str:
    return f"hidden text {i + 1} ({len(text)} characters)"


def _check(step: str, learner) -> list[MatchResult]:
    """The learner's ``step`` on every hidden text, against the reference's."""
    mine = getattr(learner, step)
    rows = []
    merges = list(_merges())
    for i, text in enumerate(hidden_texts()):
        chunks = reference.chunk_byte_ids(text)
        counts = reference.count_pairs(chunks)
        if step == "count_pairs":
            row = _counts(mine(chunks), counts)
        elif step == "most_frequent_pair":
            if not counts:
                continue
            tied = Counter({pair: max(counts.values()) for pair in sorted(counts)[-3:]}) + counts  # a three-way tie
            got, want = mine(tied), reference.most_frequent_pair(tied)
            top = sorted(p for p, c in tied.items() if c == want[1])
            note = (
                (f"a tie at {want[1]} between {top}: the smallest pair wins",) if got != want and len(top) > 1 else ()
            )
            row = MatchResult("", "", tuple(got) == tuple(want), f"yours {got}, the reference {want}", note)
        elif step == "replace_pair":
            ids = [b for chunk in chunks for b in chunk]
            if not counts:
                continue
            pair = reference.most_frequent_pair(counts)[0]
            got, want = mine(ids, pair, 256), reference.replace_pair(ids, pair, 256)
            note = ("occurrences never overlap and the leftmost goes first: 'aaa' with (a, a) gives [256, a]",)
            row = MatchResult("", "", got == want, _first_difference(got, want), note if pair[0] == pair[1] else ())
        elif step == "train_merges":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "no pair occurs twice": short texts stop early, in both
                got, want = mine(text, NUM_MERGES), reference.train_merges(text, NUM_MERGES)
            row = MatchResult("", "", list(got) == list(want), _first_difference(list(got), want))
        else:  # encode
            got, want = mine(text, merges), reference.encode(text, merges)
            note = ("apply the merges in the order they were learned, each to the whole chunk",)
            row = MatchResult("", "", list(got) == list(want), _first_difference(list(got), want), note)
        rows.append(MatchResult(f"tokenizer.{step}", _text_label(i, text), row.passed,
                                "" if row.passed else row.detail, () if row.passed else row.notes))  # fmt: skip
    return rows + ([_with_special_tokens(mine)] if step == "train_merges" else [])


def _with_special_tokens(train_merges) -> MatchResult:
    """``train_merges`` on texts joined by a special token: no merge may cross it nor take its bytes."""
    text = SPECIAL.join(hidden_texts()[:3])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = list(train_merges(text, NUM_MERGES, special_tokens=(SPECIAL,)))
    want = reference.train_merges(text, NUM_MERGES, special_tokens=(SPECIAL,))
    note = (f"with special_tokens, each {SPECIAL!r} is cut out of the text before the chunks are counted",)
    label = f"hidden texts 1-3 joined by {SPECIAL!r}, special_tokens=({SPECIAL!r},)"
    ok = got == list(want)
    return MatchResult(
        "tokenizer.train_merges", label, ok, "" if ok else _first_difference(got, want), () if ok else note
    )


def _run(step: str):
    def run(learner=None) -> list[MatchResult]:
        return _check(step, reference if learner is None else learner)

    return run


STEPS = ("count_pairs", "most_frequent_pair", "replace_pair", "train_merges", "encode")
CASES = [
    Case(
        f"tokenizer.{step}",
        _run(step),
        module=reference.__name__,
        learner=(step,),
        exercise="tokenizer",
        keep_docstrings=True,
        scope=("numforge.tokenizer",),
    )
    for step in STEPS
]
