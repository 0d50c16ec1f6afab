"""The grader judges a backward by what it computes: the shortcuts to a passing grade are refused, whatever
their names and files, and a right answer built from a legitimate block (RoPE's inverse rotation) passes.

Each shortcut below passed before the guard knew functions by their code (issue 34): numforge's finite
differences called from a backward, numforge's source ``exec``'d under another file name, a method's code
renamed with ``__code__.replace``, a Jacobian probed with the forward all at once or entry by entry.
"""

import pytest

from numforge.gradcheck.exercise import PACKAGE_DIR, exercise_source
from numforge.gradcheck.grade import grade, passed, report


def scaffold_with(name: str, function: str, body: str, hints: int = 0) -> str:
    """The exercise's scaffold with ``function``'s stub replaced by ``body`` (indented 4)."""
    source = exercise_source(name, hints=hints)
    stub = f'raise NotImplementedError("{function}: not written yet")'
    assert source.count(stub) == 1, function
    lines = body.strip("\n").splitlines()
    return source.replace(stub, "\n    ".join(lines))


def graded(tmp_path, source: str, pattern: str, file_name: str = "mine.py"):
    path = tmp_path / file_name
    path.write_text(source, encoding="utf-8")
    return grade(path, pattern)


def assert_refused(outcomes, words: str):
    assert outcomes and all(o.label == "refused" for o in outcomes), report(outcomes)
    assert all(words in o.problem for o in outcomes), report(outcomes)
    assert not passed(outcomes)


ROPE_INVERSE = "return rope_forward(dy, cache.cos, -cache.sin)[0]  # the inverse rotation rope.md derives"


def test_ropes_inverse_rotation_by_its_forward_passes(tmp_path):
    outcomes = graded(tmp_path, scaffold_with("rope", "rope_backward", ROPE_INVERSE), "rope*")
    assert len(outcomes) == 5 and passed(outcomes), report(outcomes)


NUMERIC_GRADIENT_RMSNORM = """
import numpy as np
from numforge.gradcheck.check import numeric_gradient
x, weight = cache.x.copy(), cache.weight.copy()
objective = lambda: float((rms_norm_forward(x, weight)[0] * dy).sum())
return tuple(numeric_gradient(objective, a, np.arange(a.size)).reshape(a.shape) for a in (x, weight))
"""

NUMERIC_GRADIENT_FLASH = """
import numpy as np
from numforge.gradcheck.check import numeric_gradient
q, k, v = (a.copy() for a in (cache.q, cache.k, cache.v))
run = lambda: flash_attention_forward(q, k, v, causal=True, block_q=cache.block_q, block_k=cache.block_k)[0]
objective = lambda: float((run() * dout).sum())
return tuple(numeric_gradient(objective, a, np.arange(a.size)).reshape(a.shape) for a in (q, k, v))
"""


def test_numforges_finite_differences_in_a_backward_are_refused(tmp_path):
    rms = graded(tmp_path, scaffold_with("rmsnorm", "rms_norm_backward", NUMERIC_GRADIENT_RMSNORM), "rms_norm")
    assert_refused(rms, "it calls numforge's finite differences (numeric_gradient)")
    source = scaffold_with("flash_attention", "flash_attention_backward", NUMERIC_GRADIENT_FLASH)
    flash = graded(tmp_path, source, "flash_attention.causal")
    assert_refused(flash, "it calls numforge's finite differences (numeric_gradient)")


HAND_ROLLED = """
import numpy as np
x, weight, h = cache.x.copy(), cache.weight.copy(), 1e-6
grads = []
for a in (x, weight):
    g = np.zeros(a.size)
    for i in range(a.size):
        a.flat[i] += h
        up = float((rms_norm_forward(x, weight)[0] * dy).sum())
        a.flat[i] -= 2 * h
        down = float((rms_norm_forward(x, weight)[0] * dy).sum())
        a.flat[i] += h
        g[i] = (up - down) / (2 * h)
    grads.append(g.reshape(a.shape))
return tuple(grads)
"""


def test_hand_rolled_differences_of_the_forward_are_refused(tmp_path):
    outcomes = graded(tmp_path, scaffold_with("rmsnorm", "rms_norm_backward", HAND_ROLLED), "rms_norm")
    # seen twice: the learner's code holds x with one entry nudged, then runs the forward there
    assert_refused(outcomes, "rms_norm_backward holds 'x', an array it was given with 1 of its 30 entries moved")


# The forward's formula written out in the learner's own code, differenced by hand: no forward is called.
INLINE_DIFFERENCES = """
import numpy as np
x, weight, h = cache.x.copy(), cache.weight.copy(), 1e-6
def objective():
    return float((x / np.sqrt((x * x).mean(-1, keepdims=True) + cache.eps) * weight * dy).sum())
grads = []
for a in (x, weight):
    g = np.zeros(a.size)
    for i in range(a.size):
        a.flat[i] += h
        up = objective()
        a.flat[i] -= 2 * h
        down = objective()
        a.flat[i] += h
        g[i] = (up - down) / (2 * h)
    grads.append(g.reshape(a.shape))
return tuple(grads)
"""

# The same formula at a complex step: exact to rounding, no subtraction, still a difference.
COMPLEX_STEP = """
import numpy as np
h = 1e-30
def objective(x, weight):
    return (x / np.sqrt((x * x).mean(-1, keepdims=True) + cache.eps) * weight * dy).sum()
grads = []
for which in (0, 1):
    a = (cache.x, cache.weight)[which]
    g = np.zeros(a.size)
    for i in range(a.size):
        probe = a.astype(complex)
        probe.flat[i] += 1j * h
        args = [cache.x, cache.weight]
        args[which] = probe
        g[i] = objective(*args).imag / h
    grads.append(g.reshape(a.shape))
return tuple(grads)
"""


def test_the_forwards_formula_inline_with_differences_by_hand_is_refused(tmp_path):
    source = scaffold_with("rmsnorm", "rms_norm_backward", INLINE_DIFFERENCES)
    assert_refused(graded(tmp_path, source, "rms_norm"), "an array it was given with 1 of its")
    source = scaffold_with("rmsnorm", "rms_norm_backward", COMPLEX_STEP)
    assert_refused(graded(tmp_path, source, "rms_norm"), "an imaginary step")


def test_a_copy_of_the_forward_under_another_name_is_the_forward(tmp_path):
    """The forward's own code, renamed and re-made from its code object: still the forward (a step of 1, too
    large to be seen as a nudge, so that the forward's check is the one that speaks)."""
    body = HAND_ROLLED.replace("rms_norm_forward(", "my_norm(").replace("1e-6", "1.0")
    code = "rms_norm_forward.__code__.replace(co_name='my_norm')"
    prelude = f"import types\nmy_norm = types.FunctionType({code}, globals(), None, rms_norm_forward.__defaults__)\n"
    outcomes = graded(tmp_path, scaffold_with("rmsnorm", "rms_norm_backward", prelude + body), "rms_norm")
    assert_refused(outcomes, "at a perturbation of an array it was given")


EXEC_SOURCE = """
path = {path!r}
namespace = {{"__name__": "numforge.ops.my_notes", "__package__": "numforge.ops"}}
exec(compile(open(path, encoding="utf-8").read(), {file_name!r}, "exec"), namespace)
return namespace["rms_norm_backward"](dy, cache)
"""


@pytest.mark.parametrize("fake", ["my_notes.py", "mine.py"])
def test_numforges_source_run_under_another_file_name_is_refused(tmp_path, fake):
    """Under a made-up name, or the learner's own file's name: the code is numforge's, compiled from its text."""
    file_name = str(tmp_path / fake)
    body = EXEC_SOURCE.format(path=str(PACKAGE_DIR / "ops" / "rmsnorm.py"), file_name=file_name)
    outcomes = graded(tmp_path, scaffold_with("rmsnorm", "rms_norm_backward", body), "rms_norm")
    assert_refused(outcomes, "it calls numforge's own rms_norm_backward (or a copy of it)")


RENAMED_STEP = """
import types
from numforge import optim
code = optim.AdamW.step.__code__.replace(co_name="my_step", co_qualname="Mine.my_step")
return types.FunctionType(code, optim.__dict__)(self, grads)
"""


def test_adamws_step_with_its_code_renamed_is_refused(tmp_path):
    source = exercise_source("adamw", hints=0)
    stub = 'raise NotImplementedError("AdamW.step: not written yet")'
    assert source.count(stub) == 1
    source = source.replace(stub, "\n        ".join(RENAMED_STEP.strip().splitlines()))
    outcomes = graded(tmp_path, source, "adamw*")
    assert_refused(outcomes, "it calls numforge's own AdamW.step (or a copy of it)")


PROBED_AT_ONCE = """
import numpy as np
n = dy.size
basis = np.eye(n).reshape(n, *dy.shape)  # every unit vector at once
jacobian = rope_forward(basis, cache.cos, cache.sin)[0].reshape(n, n)  # row i: the forward of e_i
return (jacobian @ dy.reshape(-1)).reshape(dy.shape)
"""

PROBED_ONE_BY_ONE = """
import numpy as np
dx = np.zeros(dy.size)
for i in range(dy.size):
    e = np.zeros(dy.size)
    e[i] = 1.0
    dx[i] = float((rope_forward(e.reshape(dy.shape), cache.cos, cache.sin)[0] * dy).sum())
return dx.reshape(dy.shape)
"""


def test_a_jacobian_probed_with_the_forward_is_refused(tmp_path):
    """A linear forward needs no perturbation: its Jacobian is its output on unit vectors (all at once, or one by
    one). Either is finite differences with a step of 1."""
    at_once = graded(tmp_path, scaffold_with("rope", "rope_backward", PROBED_AT_ONCE), "rope")
    assert_refused(at_once, "runs the forward rope_forward on an array of 2304 numbers, more than any it was given")
    one_by_one = graded(tmp_path, scaffold_with("rope", "rope_backward", PROBED_ONE_BY_ONE), "rope")
    assert_refused(one_by_one, "runs the forward rope_forward 5 times in one backward (at most 4)")
