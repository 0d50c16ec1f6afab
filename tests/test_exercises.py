"""Exercises hide the answer: a learner's file that only calls what its scaffold still holds fails, for every one.

For every exercise and hint level: the scaffold keeps the forward side of the
file unchanged and holds no function of the answer (``scaffold.Parts``); as
written, it fails; filled with the laziest answers (try every function the
scaffold still holds with the arguments received; run the forward from the
backward; call numforge's own function) it fails; the real file, as a
learner's, passes. The slow exercises (the whole model, the tiled attention)
are graded on a few of their cases.
"""

import ast
import inspect
import re

import pytest

from numforge.gradcheck.exercise import _modules, exercise_names, exercise_source, get_exercise, imports_of
from numforge.gradcheck.grade import grade, passed, report
from numforge.gradcheck.scaffold import HINT_LEVELS, STUB, forward_steps, functions
from numforge.ops.flash_attention import flash_attention_backward

FEW_CASES = {"gpt": "model[gelu]", "flash_attention": "flash_attention.causal*", "blocks": "block[gelu]"}

TRY_EVERYTHING = '''

def _try_everything(name, args):
    """The laziest answer: whatever any function this file still holds returns for these arguments."""
    for key, value in list(globals().items()):
        if key.startswith("_try") or key in GRADED or not callable(value):
            continue
        for chosen in (args, args[:1], args[1:], args[:2], args[-1:]):
            try:
                return value(*chosen)
            except Exception:
                pass
    raise RuntimeError(f"{name}: nothing in the scaffold computes it")


def _perturbed(args):
    """A finite-difference "backward" moves an entry of what it was given (here, in place: its first entry)."""
    found = []
    for value in args:
        for item in [value, *getattr(value, "__dict__", {}).values(), *(value if isinstance(value, tuple) else ())]:
            for array in item.values() if isinstance(item, dict) else [item]:
                if hasattr(array, "flat") and array.dtype.kind == "f" and array.size:
                    found.append(array)
    for array in found:
        array.flat[0] += 1e-6
    return found


def _call_the_forwards(args):
    """... then runs the forward."""
    moved = _perturbed(args)
    for key, value in list(globals().items()):
        if "forward" in key and callable(value):
            for count in range(1, 6):  # as many arguments as it takes to enter it
                try:
                    value(*(list(args) * 6)[:count])
                except Exception:
                    pass
    for array in moved:
        array.flat[0] -= 1e-6
'''


def pattern(name: str) -> str:
    return FEW_CASES.get(name, "*")


def with_bodies(source: str, body_of) -> str:
    """``source`` with the stub of every graded function replaced by ``body_of(qualname, params)`` lines."""
    lines = source.splitlines()
    found = functions(ast.parse(source))
    edits = []
    for qualname, node in found.items():
        last = node.body[-1]
        if not (isinstance(last, ast.Raise) and "not written yet" in ast.unparse(last)):
            continue
        params = [a.arg for a in node.args.args]
        body = body_of(qualname, params)
        if body is not None:
            indent = " " * last.col_offset
            edits.append((last.lineno - 1, last.end_lineno, [indent + line for line in body]))
    for start, stop, replacement in sorted(edits, reverse=True):
        lines[start:stop] = replacement
    return "\n".join(lines) + "\n"


def graded_file(tmp_path, name: str, source: str):
    path = tmp_path / f"my_{name}.py"
    path.write_text(source, encoding="utf-8")
    return path


@pytest.mark.parametrize("hints", HINT_LEVELS)
@pytest.mark.parametrize("name", exercise_names())
def test_the_scaffold_keeps_the_forward_side_and_holds_no_part_of_the_answer(name, hints):
    exercise = get_exercise(name)
    parts = exercise.parts()
    real = functions(ast.parse(exercise.path.read_text(encoding="utf-8")))
    scaffold = functions(ast.parse(exercise_source(name, hints=hints)))
    answer = set(parts.exercise) | set(parts.helpers)
    assert set(parts.graded) <= set(scaffold)  # every graded function is there to be written
    for qualname, node in scaffold.items():
        if qualname in answer:
            statements = [s for s in node.body if not isinstance(s, ast.Expr)]  # the docstring aside
            assert len(statements) == 1 and "not written yet" in ast.unparse(statements[0]), qualname
        else:
            assert ast.dump(node) == ast.dump(real[qualname]), f"{qualname} must be the real one"
    assert set(real) - set(scaffold) <= answer  # only parts of the answer are ever removed
    if hints == 0:
        assert set(scaffold) & answer <= set(parts.graded) | parts.kept_references


@pytest.mark.parametrize("hints", (0, 1))
@pytest.mark.parametrize("name", exercise_names())
def test_below_hint_level_2_no_formula_of_the_answer_is_left(name, hints):
    exercise = get_exercise(name)
    source = exercise_source(name, hints=hints)
    tree = ast.parse(exercise.path.read_text(encoding="utf-8"))
    if not exercise.keep_docstrings:  # the real docstrings of the answer state its formulas
        for qualname in (*exercise.parts().exercise, *exercise.parts().helpers):
            for line in (ast.get_docstring(functions(tree)[qualname]) or "").splitlines():
                if len(line.strip()) > 25:
                    assert line.strip() not in source, (
                        f"{qualname}'s docstring line {line.strip()!r} is in the scaffold"
                    )
    module_doc = ast.get_docstring(ast.parse(source)) or ""
    assert not any(p.strip().startswith(("Backward", "Update")) for p in module_doc.split("\n\n"))


@pytest.mark.parametrize("hints", (0, 2))
@pytest.mark.parametrize("name", exercise_names())
def test_the_scaffold_as_written_is_not_written_yet(tmp_path, name, hints):
    path = graded_file(tmp_path, name, exercise_source(name, hints=hints))
    outcomes = grade(path, pattern(name))
    assert outcomes and all(o.label == "not written yet" for o in outcomes), report(outcomes)
    assert not passed(outcomes)


@pytest.mark.parametrize("hints", (0, 2))
@pytest.mark.parametrize("name", exercise_names())
def test_the_laziest_answer_from_what_the_scaffold_holds_fails(tmp_path, name, hints):
    exercise = get_exercise(name)
    source = (
        exercise_source(name, hints=hints)
        + TRY_EVERYTHING
        + f"\nGRADED = {[q.split('.')[-1] for q in exercise.graded]!r}\n"
    )

    def lazy(qualname, params):
        return (
            [f"return _try_everything({qualname!r}, ({', '.join(params)},))"] if qualname in exercise.graded else None
        )

    outcomes = grade(graded_file(tmp_path, name, with_bodies(source, lazy)), pattern(name))
    assert not passed(outcomes) and all(o.label != "right" for o in outcomes), report(outcomes)


@pytest.mark.parametrize("name", [n for n in exercise_names() if any(c.forwards for c in get_exercise(n).cases)])
def test_a_backward_that_runs_the_forward_is_refused(tmp_path, name):
    exercise = get_exercise(name)
    source = (
        exercise_source(name, hints=2)
        + TRY_EVERYTHING
        + f"\nGRADED = {[q.split('.')[-1] for q in exercise.graded]!r}\n"
    )
    forwards = {f for case in exercise.cases for f in case.forwards}

    def runs_the_forward(qualname, params):
        if qualname not in exercise.graded or qualname in forwards:
            return None
        arguments = f"({', '.join(params)},)"
        if "." in qualname:  # a method: its own class's forward, with as many arguments as it takes to enter it
            call = f"self.{next(iter(forwards)).split('.')[-1]}(*(list({arguments}[1:]) * 6)[:count])"
            return [
                f"_perturbed({arguments})",
                f"for count in range(1, 6):\n    try:\n        {call}\n    except Exception:\n        pass",
                f"return _try_everything({qualname!r}, {arguments})",
            ]
        return [f"_call_the_forwards({arguments})", f"return _try_everything({qualname!r}, {arguments})"]

    path = graded_file(tmp_path, name, with_bodies(source, lambda q, p: _lines(runs_the_forward(q, p))))
    outcomes = grade(path, pattern(name))
    refused = [o for o in outcomes if o.label == "refused"]
    assert refused and all("at a perturbation of an array it was given" in o.problem for o in refused), report(outcomes)
    assert not passed(outcomes)


def _lines(body):
    return None if body is None else [line for part in body for line in part.splitlines()]


@pytest.mark.parametrize("name", exercise_names())
def test_calling_numforges_own_answer_is_refused(tmp_path, name):
    exercise = get_exercise(name)
    source = exercise_source(name, hints=2)

    def numforges(qualname, params):
        if qualname not in exercise.graded:
            return None
        owner, _, function = qualname.rpartition(".")
        target = f"getattr(real.{owner}, {function!r})" if owner else f"real.{function}"
        return ["import importlib", f"real = importlib.import_module({exercise.module!r})",
                f"return {target}({', '.join(params)})"]  # fmt: skip

    outcomes = grade(graded_file(tmp_path, name, with_bodies(source, numforges)), pattern(name))
    assert outcomes and all(o.label == "refused" for o in outcomes), report(outcomes)
    assert all("calls numforge's own" in o.problem for o in outcomes)


@pytest.mark.parametrize("name", exercise_names())
def test_the_real_file_as_a_learners_passes(tmp_path, name):
    path = graded_file(tmp_path, name, exercise_source(name, solution=True))
    outcomes = grade(path, pattern(name))
    assert passed(outcomes), report(outcomes)
    for row in (r for o in outcomes for r in o.rows):
        assert getattr(row, "vs_reference", None) in (None, 0.0) or row.vs_reference < 1e-12, row


def test_the_imports_read_from_the_text_are_the_parsed_ones():
    """``imports_of`` reads a file's imports with a regex (parsing every file is slow): it must agree with the parse,
    or a helper another module imports could be taken for one only the backward uses."""
    for module, path in _modules().items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        parsed = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                parent = package[: len(package) - node.level + 1] if node.level else []
                base = ".".join(parent + ([node.module] if node.module else []))
                parsed.extend((base, alias.name) for alias in node.names if base.startswith("numforge"))
        assert sorted(imports_of(module)) == sorted(parsed), module


def test_the_tiled_kernels_loop_over_numforges_own_tiles_is_refused(tmp_path):
    """The issue's shortcut: a backward that only loops over the parts and calls ``_backward_tiles`` (and the other
    helpers of numforge's backward), with no backward math: numforge's own ``flash_attention_backward``, verbatim."""
    shortcut = "\n\n" + inspect.getsource(flash_attention_backward)
    helpers = get_exercise("flash_attention").parts().helpers
    assert "_backward_tiles" in helpers
    scaffold = exercise_source("flash_attention", hints=2)  # its helpers are stubs
    at_level_2 = grade(graded_file(tmp_path, "a", scaffold + shortcut), "flash_attention.causal")
    assert at_level_2[0].label == "not written yet", report(at_level_2)
    assert any(at_level_2[0].problem.startswith(f"{h} is not written yet") for h in helpers)
    imported = f"\nfrom numforge.ops.flash_attention import {', '.join(helpers)}\n" + shortcut
    refused = grade(graded_file(tmp_path, "b", exercise_source("flash_attention") + imported), "flash_attention.causal")
    assert refused[0].label == "refused" and "it calls numforge's own _" in refused[0].problem, report(refused)
    assert STUB.format(name="_backward_tiles") in scaffold


def test_a_registry_is_not_an_exercise_its_ops_are():
    """``ops/norms.py`` and ``model/positions.py`` only list other files' op pairs: no case names them, so they are
    offered as no exercise; the ops they list are, and so is each file of the block (its backward's home)."""
    names = exercise_names()
    assert "norms" not in names and "positions" not in names
    assert {"layernorm", "rmsnorm", "rope", "attention_branch", "mlp_branch", "blocks", "gpt"} <= set(names)
    for name in names:  # every function an exercise's cases substitute is defined in the exercise's own file
        exercise = get_exercise(name)
        substituted = {function for case in exercise.cases for function in case.learner}
        assert substituted <= set(functions(ast.parse(exercise.path.read_text(encoding="utf-8")))), name


@pytest.mark.parametrize("name", exercise_names())
def test_the_chain_rule_steps_are_whole_forward_equations_not_the_answer(name):
    """Hint level 1 lists the forward lines the backward reverses: each a whole equation (no sentence cut off at
    the comment's line end), none of them the transposed one the backward computes (rope's ``dx = ...``)."""
    exercise = get_exercise(name)
    real = exercise.path.read_text(encoding="utf-8").splitlines()
    nodes = functions(ast.parse("\n".join(real)))
    for qualname in (*exercise.parts().exercise, *exercise.parts().helpers):
        for step in forward_steps(real, nodes[qualname]):
            assert "=" in step and "transposed" not in step, (qualname, step)
            assert not re.search(r"(^|[\s(,])d[a-z]\w* =", step), (qualname, step)  # no dx = ..., dq = ...
            last = step.split()[-1]
            assert last not in {"a", "an", "the", "of", "to", "by", "with", "over", "and", "its", "head"}, step
