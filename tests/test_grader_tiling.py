"""The tiled-attention exercise grades the tiling: a backward that builds the whole T x T matrix of weights is
right on every small case and told, at a length where that matrix is over budget, what it allocated."""

from numforge.gradcheck.exercise import exercise_source
from numforge.gradcheck.grade import grade, passed, report
from numforge.gradcheck.tiling import BUDGET, SQUARE

PLAIN = """
import numpy as np
q, k, v = cache.q, cache.k, cache.v
T = q.shape[2]
S = np.where(np.tril(np.ones((T, T), dtype=bool)), q @ k.swapaxes(-1, -2) * cache.scale, -np.inf)
P = np.exp(S - cache.lse)  # the whole P: (B,H,T,T)
dP = dout @ v.swapaxes(-1, -2)
dS = P * (dP - (dP * P).sum(axis=-1, keepdims=True))
return dS @ k * cache.scale, dS.swapaxes(-1, -2) @ q * cache.scale, P.swapaxes(-1, -2) @ dout
"""


def test_a_plain_backward_is_right_but_not_tiled(tmp_path):
    source = exercise_source("flash_attention")
    stub = 'raise NotImplementedError("flash_attention_backward: not written yet")'
    path = tmp_path / "mine.py"
    path.write_text(source.replace(stub, "\n    ".join(PLAIN.strip().splitlines())), encoding="utf-8")
    right = grade(path, "flash_attention.causal")
    assert passed(right), report(right)  # the math is right
    memory = grade(path, "flash_attention.memory")
    out = report(memory)
    assert not passed(memory) and memory[0].label == "wrong", out
    assert "your backward allocated " in out and " MiB at T = 2048: a T×T array (2048×2048 float64 = 32 MiB)" in out
    assert "the tiled one holds O(T·B)" in out
    assert SQUARE > BUDGET


def test_the_tiled_backward_fits_the_budget(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(exercise_source("flash_attention", solution=True), encoding="utf-8")
    outcomes = grade(path, "flash_attention.memory")
    assert passed(outcomes), report(outcomes)
