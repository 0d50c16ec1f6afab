"""The windowed tiled backward's known mistakes are named: each a mutant of numforge's own flash_attention.py,
graded on the window cases; the report says that mistake's words under each of q, k, v, and no other's.

The mask left out of the recomputed probabilities; the tiles a mask crosses skipped; the tile the window's left
edge crosses skipped; the window dropped from the seam. The diagnoses are computed on the whole square
(``gradcheck/window_mistakes.py``); the mutants are tiled code: they agree only if both are that mistake.
"""

import numpy as np
import pytest

from numforge.gradcheck import window_mistakes
from numforge.gradcheck.exercise import exercise_source
from numforge.gradcheck.grade import grade, passed, report
from numforge.gradcheck.mistakes import WINDOW_CROSSED, WINDOW_DROPPED, WINDOW_EDGE, WINDOW_UNMASKED
from numforge.ops.flash_attention import flash_attention_backward, flash_attention_forward

SOLUTION = exercise_source("flash_attention", solution=True)
TILE_LOOP = (
    "        for q_start, q_stop, lo, hi, masked in _query_tiles(k_start, k_stop, Tq, Tk, seam, cache.block_q):\n"
)
WINDOW_CASES = "flash_attention.window*"
MUTANTS = {  # name -> (the edit of flash_attention.py, the words)
    "the mask left out of the recomputed P": (
        (
            "seam.add(scores, query_rows, key_rows, offset, masked, LOG2_E)",
            "seam.add(scores, query_rows, key_rows, offset, False, LOG2_E)",
        ),
        WINDOW_UNMASKED,
    ),
    "every crossed tile skipped": (
        (TILE_LOOP, TILE_LOOP + "            if masked:\n                continue\n"),
        WINDOW_CROSSED,
    ),
    "the left edge's tile skipped": (
        (TILE_LOOP, TILE_LOOP + "            if lo > k_start:\n                continue\n"),
        WINDOW_EDGE,
    ),
    "the window dropped from the seam": (
        (
            "seam = cache.seam.part(part, stack)\n        _backward_tiles(",
            "seam = cache.seam._replace(applied=tuple(a for a in cache.seam.applied if a.name != 'window'))"
            ".part(part, stack)\n        _backward_tiles(",
        ),
        WINDOW_DROPPED,
    ),
}
WORDS = [words for _, words in MUTANTS.values()]


@pytest.mark.parametrize("name", MUTANTS)
def test_each_mistake_is_caught_with_its_own_diagnosis(tmp_path, name):
    (old, new), words = MUTANTS[name]
    assert SOLUTION.count(old) == 1, f"the mutant's line is not in flash_attention.py once: {old!r}"
    path = tmp_path / "mine.py"
    path.write_text(SOLUTION.replace(old, new), encoding="utf-8")
    outcomes = grade(path, WINDOW_CASES)
    out = report(outcomes)
    assert not passed(outcomes), out
    assert len(outcomes) == 3 and all(o.label == "wrong (q, k, v)" for o in outcomes), out
    for argument in ("q", "k", "v"):  # each wrong gradient's paragraph, then its notes
        assert f"the gradient of {argument!r}" in out, out
    assert out.count(words) == 3 * len(outcomes), out  # under q, k and v of every case
    for other in WORDS:
        if other != words:
            assert other not in out, f"{name}: diagnosed as another mistake too:\n{out}"


def test_the_right_backward_passes_the_window_cases(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(SOLUTION, encoding="utf-8")
    outcomes = grade(path, WINDOW_CASES)
    assert len(outcomes) == 3 and passed(outcomes), report(outcomes)


def test_the_mistakes_need_a_window_and_differ_from_the_truth():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, 9, 2)) for _ in range(3))
    dout = rng.standard_normal((1, 1, 9, 2))
    _, causal = flash_attention_forward(q, k, v, causal=True, block_q=2, block_k=2)
    mistakes = (window_mistakes.unmasked, window_mistakes.crossed_skipped, window_mistakes.window_dropped)
    assert all(m(dout, causal) is None for m in (*mistakes, window_mistakes.edge_skipped))  # no window: nothing
    _, windowed = flash_attention_forward(q, k, v, causal=False, modifiers=(("window", 4),), block_q=2, block_k=2)
    _, whole = flash_attention_forward(q, k, v, causal=False, modifiers=(("window", 4),), block_q=9, block_k=9)
    true = flash_attention_backward(dout, windowed)
    for mistake in (*mistakes, window_mistakes.edge_skipped):
        wrong = mistake(dout, windowed)
        assert all(np.abs(w - t).max() > 1e-3 for w, t in zip(wrong, true)), mistake.__name__
    assert window_mistakes.edge_skipped(dout, whole) is None  # one tile: no tile starts before its window
