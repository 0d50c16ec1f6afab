"""The MoE exercise's known mistakes are named: each a mutant of numforge's own moe.py, graded on every moe case.

An expert's gradient over all the routed pairs instead of its own run; the top-k choice let carry gradient (the
router gradient of the dense mixture); the renormalisation's Jacobian left out, or its sum S held constant. Each
mutant must come back wrong exactly on the cases where its mistake changes the gradient, and the report must say
the mistake's words under each argument it makes wrong.
"""

import pytest

from numforge.gradcheck.exercise import exercise_source
from numforge.gradcheck.grade import grade, passed, report
from numforge.gradcheck.mistakes import MOE_CONSTANT_S, MOE_NO_JACOBIAN, MOE_OWN_ROWS, MOE_SOFT_CHOICE
from numforge.gradcheck.moe import SETTINGS

MOE = exercise_source("moe", solution=True)
RENORM_LINE = "dchosen = (dgates - (gates * dgates).sum(axis=1, keepdims=True)) / total"
GATES_TO_P = """    dchosen = dgates
    if cache.renormalize:  # forward: g_j = p_{c_j} / S, so dp_{c_j} = (dg_j - sum_i g_i dg_i) / S
        total = xp.take_along_axis(p, cache.chosen, axis=1).sum(axis=1, keepdims=True)  # (N, 1) S
        dchosen = (dgates - (gates * dgates).sum(axis=1, keepdims=True)) / total
    dp = xp.zeros_like(p)  # the experts not chosen: no gate, no gradient
    dp[xp.arange(n)[:, None], cache.chosen] = dchosen  # distinct experts per row: nothing repeats
"""
DENSE_GATES = '''def _dense_dgates(dy, cache):
    """dy . expert_e(h) for every expert e and row (N, E): as if every expert were in the sum."""
    rows = cache.router.x
    outs = [swiglu_forward(rows @ wg, rows @ wu)[0] @ wd for wg, wu, wd in zip(*cache.experts)]
    return get_xp(rows).stack([(o * dy).sum(axis=1) for o in outs], axis=1)


def _check('''
RENORMALIZED = [name for name, (_, options) in SETTINGS.items() if options["renormalize"]]
MUTANTS = {  # name -> (the edits of moe.py, the words, the arguments made wrong, the cases made wrong)
    "an expert's gradient over every routed pair": (
        [
            ("dw_down[e] = cache.act[start:stop].T @ dout[start:stop]", "dw_down[e] = cache.act.T @ dout"),
            ("dw_gate[e] = rows[start:stop].T @ dgate[start:stop]", "dw_gate[e] = rows.T @ dgate"),
            ("dw_up[e] = rows[start:stop].T @ dup[start:stop]", "dw_up[e] = rows.T @ dup"),
        ],
        MOE_OWN_ROWS,
        ("w_gate", "w_up", "w_down"),
        list(SETTINGS),
    ),
    "every expert's gradient over every routed pair, an idle one's too": (
        [
            ("dw_down[e] = cache.act[start:stop].T @ dout[start:stop]", "dw_down[:] = cache.act.T @ dout"),
            ("dw_gate[e] = rows[start:stop].T @ dgate[start:stop]", "dw_gate[:] = rows.T @ dgate"),
            ("dw_up[e] = rows[start:stop].T @ dup[start:stop]", "dw_up[:] = rows.T @ dup"),
        ],
        MOE_OWN_ROWS,
        ("w_gate", "w_up", "w_down"),
        list(SETTINGS),
    ),
    "the choice carries gradient": (
        [
            (
                "dz = _router_backward(dgates, cache, daux)",
                "dz = _router_backward(_dense_dgates(dy, cache), cache, daux)",
            ),
            (GATES_TO_P, "    dp = dgates.copy()  # the choice made soft: every expert's gate gradient\n"),
            ("def _check(", DENSE_GATES),
        ],
        MOE_SOFT_CHOICE,
        ("h", "w_router"),
        list(SETTINGS),
    ),
    "the renormalisation's Jacobian left out": (
        [(RENORM_LINE, "dchosen = dgates")],
        MOE_NO_JACOBIAN,
        ("h", "w_router"),
        RENORMALIZED,
    ),
    "the renormalisation's sum held constant": (
        [(RENORM_LINE, "dchosen = dgates / total")],
        MOE_CONSTANT_S,
        ("h", "w_router"),
        RENORMALIZED,
    ),
}


def notes_under(out: str, case: str, argument: str) -> list[str]:
    """The ``  - `` notes the report prints under the wrong gradient of ``argument`` in ``case``."""
    lines = out.splitlines()
    head = f"wrong: {case}, the gradient of {argument!r}: "
    start = next((i for i, line in enumerate(lines) if line.startswith(head)), None)
    assert start is not None, (case, argument, out)
    notes = []
    for line in lines[start + 1 :]:
        if not line.startswith("  - "):
            break
        notes.append(line[4:])
    return notes


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_each_moe_mistake_is_named_where_it_changes_the_gradient(tmp_path, mutant):
    edits, words, arguments, wrong_cases = MUTANTS[mutant]
    source = MOE
    for old, new in edits:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    path = tmp_path / "my_moe.py"
    path.write_text(source, encoding="utf-8")
    outcomes = grade(path, "moe*")
    out = report(outcomes)
    assert [o.case.name for o in outcomes] == list(SETTINGS), out
    assert [o.case.name for o in outcomes if o.label != "right"] == wrong_cases, out
    for outcome in outcomes:
        if outcome.label == "right":
            continue
        assert outcome.label == f"wrong ({', '.join(arguments)})", out
        for argument in arguments:
            assert notes_under(out, outcome.case.name, argument).count(words) == 1, (outcome.case.name, out)
    assert out.count(words) == len(wrong_cases) * len(arguments), out  # no other argument, no other case


def test_the_right_moe_answer_names_no_mistake(tmp_path):
    path = tmp_path / "my_moe.py"
    path.write_text(MOE, encoding="utf-8")
    outcomes = grade(path, "moe*")
    out = report(outcomes)
    assert passed(outcomes) and len(outcomes) == len(SETTINGS), out
    assert not any(words in out for words in (MOE_OWN_ROWS, MOE_SOFT_CHOICE, MOE_NO_JACOBIAN, MOE_CONSTANT_S))


def test_a_mistake_is_not_named_on_a_gradient_it_does_not_equal(tmp_path):
    """An expert's gradient doubled: wrong, but none of the mistakes above; none is named."""
    old = "dw_down[e] = cache.act[start:stop].T @ dout[start:stop]"
    path = tmp_path / "my_moe.py"
    path.write_text(MOE.replace(old, old.replace(" = ", " = 2 * ")), encoding="utf-8")
    out = report(grade(path, "moe[top2]"))
    assert "wrong: moe[top2], the gradient of 'w_down'" in out, out
    assert MOE_OWN_ROWS not in out, out
