"""The grader never crashes on a learner's file, and says what is wrong with a wrong answer, for every exercise.

For every exercise and every hint level: the scaffold, its answer filled in from numforge's own file
(the helpers too, where the level removed them), then every graded function made wrong (its arrays doubled,
its numbers moved by one; a step in place taken twice). Graded on the exercise's smallest cases, each case
must come back wrong, with a diagnosis printed under it. Then the crash of issue 34: the tied sum left out of
GPT.backward, graded on cases whose options hold a dict (``rope_scaling``), told on which cases it fails.
"""

import ast
import textwrap

import pytest

from numforge.gradcheck.exercise import exercise_names, exercise_source, get_exercise
from numforge.gradcheck.grade import Outcome, grade, passed, pattern_lines, report
from numforge.gradcheck.model import CASES as MODEL_CASES
from numforge.gradcheck.scaffold import HINT_LEVELS, functions

FEW_CASES = {  # the smallest cases of the slow exercises (the whole model: about 1 s a case)
    "gpt": "model[gelu]",
    "flash_attention": "flash_attention.causal",
    "attention": "attention.causal",
    "blocks": "block[gelu]",
    "attention_branch": "attention_branch[gpt2]",
    "mlp_branch": "mlp_branch[gelu]",
    "moe": "moe[*",
}

MAKE_WRONG = '''

import functools as _functools

import numpy as _np


def _wrong(value):
    """A wrong answer of the right type: arrays doubled (or moved by one where zero), numbers moved."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, _np.ndarray):
        if value.dtype.kind == "f":
            return value * 2 if _np.any(value) else value + 1
        return value + 1
    if isinstance(value, (int, float)):
        return value + 1 if isinstance(value, int) else value * 2 + 1
    if isinstance(value, dict):
        return {k: _wrong(v) for k, v in value.items()}
    if isinstance(value, tuple):
        items = [_wrong(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [_wrong(v) for v in value]
    return value * 2


def _made_wrong(function):
    @_functools.wraps(function)
    def wrong(*args, **kwargs):
        out = function(*args, **kwargs)
        if out is None:  # in place (AdamW.step): one step taken twice
            function(*args, **kwargs)
            return None
        return _wrong(out)

    return wrong
'''


def answered(name: str, hints: int) -> str:
    """The scaffold at ``hints`` with numforge's own answer in it (every stub, every removed helper restored)."""
    exercise = get_exercise(name)
    parts = exercise.parts()
    real = exercise_source(name, solution=True)
    real_lines, real_nodes = real.splitlines(), functions(ast.parse(real))
    scaffold = exercise_source(name, hints=hints)
    lines, nodes = scaffold.splitlines(), functions(ast.parse(scaffold))

    def span(node):
        return min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1, node.end_lineno

    edits, appended = [], []
    for qualname in (*parts.exercise, *parts.helpers):
        start, stop = span(real_nodes[qualname])
        source = real_lines[start:stop]
        if qualname in nodes:
            edits.append((*span(nodes[qualname]), source))
        elif "." in qualname:  # a method the level removed: put back on its class
            owner, method = qualname.split(".")
            appended += [textwrap.dedent("\n".join(source)), f"{owner}.{method} = {method}"]
        else:
            appended.append("\n".join(source))
    for start, stop, replacement in sorted(edits, reverse=True):
        lines[start:stop] = replacement
    return "\n".join(lines) + "\n\n" + "\n\n".join(appended) + "\n"


def made_wrong(name: str, hints: int) -> str:
    source = answered(name, hints) + MAKE_WRONG
    for qualname in get_exercise(name).graded:
        owner, _, method = qualname.rpartition(".")
        if owner:
            source += f"\n{owner}.{method} = _made_wrong({owner}.__dict__[{method!r}])\n"
        else:
            source += f"\n{method} = _made_wrong({method})\n"
    return source


def diagnosis(out: str, outcome: Outcome) -> list[str]:
    """What the report says under ``outcome``'s case: its ``wrong:`` notes, or why it was not checked."""
    name, lines, said = outcome.case.name, out.splitlines(), []
    for i, line in enumerate(lines):
        if line.startswith((f"wrong: {name}, ", f"wrong: {name} on ")):
            said.append(line.split(": ", 2)[-1])
            said += [n for n in lines[i + 1 :] if n.startswith("  - ")][:1]
        elif line.startswith((f"not checked: {name}: ", f"refused: {name}: ")):
            said.append(line)
    return said


@pytest.mark.parametrize("hints", HINT_LEVELS)
@pytest.mark.parametrize("name", exercise_names())
def test_the_answer_restored_in_every_scaffold_passes(tmp_path, name, hints):
    """The wrong answers below are numforge's answer made wrong: first, that answer in the scaffold passes."""
    path = tmp_path / f"my_{name}.py"
    path.write_text(answered(name, hints), encoding="utf-8")
    outcomes = grade(path, FEW_CASES.get(name, "*"))
    assert passed(outcomes), report(outcomes)


@pytest.mark.parametrize("hints", HINT_LEVELS)
@pytest.mark.parametrize("name", exercise_names())
def test_a_wrong_answer_is_diagnosed_in_every_exercise(tmp_path, name, hints):
    path = tmp_path / f"my_{name}.py"
    path.write_text(made_wrong(name, hints), encoding="utf-8")
    outcomes = grade(path, FEW_CASES.get(name, "*"))
    out = report(outcomes)
    assert outcomes and not passed(outcomes)
    for outcome in outcomes:
        assert outcome.label != "right", out
        said = diagnosis(out, outcome)
        assert said and all(len(s) > 20 for s in said), (outcome.case.name, out)
        if outcome.rows and hasattr(outcome.rows[0], "max_rel_error"):  # a gradient: its scale is named
            assert any(s.startswith("  - ") for s in said), out


TIED = "grads[TOKEN_EMBEDDING] = dtoken_embedding + dunembedding"


def test_the_tied_sum_left_out_is_graded_case_by_case_not_a_crash(tmp_path):
    """Issue 34: ``unhashable type: 'dict'`` (a case's rope_scaling) in place of the report."""
    source = exercise_source("gpt", solution=True)
    assert source.count(TIED) == 1
    path = tmp_path / "my_gpt.py"
    path.write_text(source.replace(TIED, "grads[TOKEN_EMBEDDING] = dtoken_embedding"), encoding="utf-8")
    outcomes = grade(path, "model[[][gu][en][lt]*")  # untied: right; gelu, gelu_exact (tied): wrong
    assert [o.case.name for o in outcomes] == ["model[gelu]", "model[gelu_exact]", "model[untied]"]
    assert [o.label for o in outcomes] == ["wrong (token_embedding)"] * 2 + ["right"], report(outcomes)
    out = report(outcomes)
    assert "  wrong (token_embedding) on 2 cases where tie_weights: model[gelu], model[gelu_exact]" in out, out
    assert "  right on 1 case where not tie_weights: model[untied]" in out, out
    assert out.count("  - yours is the input side only (the lookup's rows): the table is tied") == 2, out


def test_the_fail_pattern_takes_options_that_hold_a_dict():
    """Every model case's features, rope_scaling's dict among them, compared without a crash."""
    cases = [c for c in MODEL_CASES if c.name in ("model[rope_linear]", "model[rope_llama3]", "model[gelu]")]
    assert any(isinstance(v, dict) for c in cases for v in c.features()[1].values())
    outcomes = [Outcome(c, [], None, "wrong" if "rope" in c.name else "right") for c in cases]
    lines = pattern_lines(outcomes)
    assert lines[0] == "by case, GPT.backward:" and len(lines) == 3, lines


# ---------------------------------------------------------------- the mistakes named, each computed


def stubbed(name: str, function: str, body: str) -> str:
    source = exercise_source(name)
    stub = f'raise NotImplementedError("{function}: not written yet")'
    assert source.count(stub) == 1
    return source.replace(stub, "\n    ".join(body.strip().splitlines()))


RMS_WITH_MEAN = """
g = dy.reshape(cache.xhat.shape) * cache.weight
dx = cache.rstd * (g - g.mean(-1, keepdims=True) - cache.xhat * (g * cache.xhat).mean(-1, keepdims=True))
return dx.reshape(dy.shape), (dy.reshape(cache.xhat.shape) * cache.xhat).sum(axis=0)
"""
BLOCK = exercise_source("blocks", solution=True)
NO_MLP_SKIP = ("    dx = dx + mlp.dx\n", "    dx = mlp.dx\n")
NO_ATTENTION_SKIP = ("ResidualStep(attention, dx + attention.dx)", "ResidualStep(attention, attention.dx)")
assert all(BLOCK.count(line) == 1 for line, _ in (NO_MLP_SKIP, NO_ATTENTION_SKIP))
NAMED = {  # mistake -> (exercise file, --only, the words the report must hold)
    "rope's forward rotation": (
        stubbed("rope", "rope_backward", "return rope_forward(dy, cache.cos, cache.sin)[0]"),
        "rope*",
        "yours is the forward's rotation of dy (by +angle, sin as it is): the backward is its transpose",
    ),
    "rmsnorm with layernorm's mean": (
        stubbed("rmsnorm", "rms_norm_backward", RMS_WITH_MEAN),
        "rms_norm",
        "yours has LayerNorm's mean term (- mean(g)): RMSNorm subtracts no mean from x",
    ),
    "the block without its skips": (
        BLOCK.replace(*NO_MLP_SKIP).replace(*NO_ATTENTION_SKIP),
        "block*",
        "yours leaves out the gradient of both skips: each residual sum x + f(x) passes dy on unchanged",
    ),
    "the block without the skip around the MLP": (
        BLOCK.replace(*NO_MLP_SKIP),
        "block*",
        "yours leaves out the gradient of the skip around the MLP",
    ),
    "the block without the skip around attention": (
        BLOCK.replace(*NO_ATTENTION_SKIP),
        "block*",
        "yours leaves out the gradient of the skip around attention",
    ),
}


@pytest.mark.parametrize("mistake", list(NAMED))
def test_each_known_mistake_is_named(tmp_path, mistake):
    source, only, words = NAMED[mistake]
    path = tmp_path / "mine.py"
    path.write_text(source, encoding="utf-8")
    outcomes = grade(path, only)
    out = report(outcomes)
    assert outcomes and all(o.label.startswith("wrong") for o in outcomes), out
    named = [line for line in out.splitlines() if line.startswith("  - " + words)]
    assert len(named) == len(outcomes), out  # on every case, once
    assert "norm = None" not in out  # the llama block is no different for a skip left out


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("raise SystemExit(3)", "rope_backward failed: SystemExit: 3"),
        ("return 'dx'", "the gradient of 'x' must be an array, got str"),
        ("return {'x': dy}", "the gradient of 'x' must be an array, got dict"),
        ("return rope_backward(dy, cache)", "failed: RecursionError"),
    ],
)
def test_whatever_a_backward_does_is_a_report_naming_the_case(tmp_path, body, words):
    path = tmp_path / "mine.py"
    path.write_text(stubbed("rope", "rope_backward", body), encoding="utf-8")
    outcomes = grade(path, "rope")
    out = report(outcomes)
    assert [o.label.split()[0] for o in outcomes] == ["raises"], out
    assert out.startswith("not checked: rope: ") and words in out, out
