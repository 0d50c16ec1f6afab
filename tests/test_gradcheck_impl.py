"""`numforge gradcheck --impl FILE` grades a learner's backward; `--write-exercise` writes the file to start from."""

import ast

import pytest

from numforge.cli import main
from numforge.gradcheck import all_cases
from numforge.gradcheck.exercise import OPS_DIR, exercise_ops, exercise_source

# A learner's layer norm and linear backward, written plainly (not numforge's code): both right.
CORRECT = """
def layer_norm_backward(dy, cache):
    xhat, rstd = cache.xhat, cache.rstd
    dy_rows = dy.reshape(xhat.shape)
    g = dy_rows * cache.weight
    dx = rstd * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    dbias = dy_rows.sum(axis=0) if cache.has_bias else None
    return dx.reshape(dy.shape), (dy_rows * xhat).sum(axis=0), dbias


def linear_backward(dy, cache):
    x_rows, dy_rows = cache.x.reshape(-1, cache.weight.shape[0]), dy.reshape(-1, cache.weight.shape[1])
    return dy @ cache.weight.T, x_rows.T @ dy_rows, dy_rows.sum(axis=0) if cache.has_bias else None
"""
# The variance path forgotten: dx is wrong, dweight and dbias are right.
BROKEN = CORRECT.replace(" - xhat * (g * xhat).mean(axis=-1, keepdims=True)", "")


def grade(tmp_path, capsys, source: str, *flags: str):
    path = tmp_path / "mine.py"
    path.write_text(source, encoding="utf-8")
    status = main(["gradcheck", "--impl", str(path), *flags])
    return status, capsys.readouterr()


def table_rows(out: str) -> dict:
    """(op, argument) -> {column: cell}, read from the printed table by the spans of its dashed line."""
    lines = out.splitlines()
    dashes = next(i for i, line in enumerate(lines) if line.startswith("---"))
    spans, start = [], 0
    for width in (len(d) for d in lines[dashes].split("  ")):
        spans.append((start, start + width))
        start += width + 2
    header = [lines[dashes - 1][a:b].strip() for a, b in spans]
    rows = {}
    for line in lines[dashes + 1 :]:
        if not line.strip():
            break
        cells = dict(zip(header, (line[a:b].strip() for a, b in spans)))
        rows[cells["op"], cells["argument"]] = cells
    return rows


def test_a_correct_learner_file_passes(tmp_path, capsys):
    status, captured = grade(tmp_path, capsys, CORRECT)
    rows = table_rows(captured.out)
    assert status == 0, captured.out
    assert set(rows) == {
        ("layer_norm", "x"), ("layer_norm", "weight"), ("layer_norm", "bias"),
        ("layer_norm[no bias]", "x"), ("layer_norm[no bias]", "weight"),
        ("linear", "x"), ("linear", "weight"), ("linear", "bias"),
        ("linear[no bias]", "x"), ("linear[no bias]", "weight"),
    }  # fmt: skip
    assert "wrong:" not in captured.out and "10/10 gradients within 1e-07" in captured.out
    for cells in rows.values():
        assert cells["result"] == "pass"
        assert float(cells["vs numforge"]) < 1e-12  # the learner's gradients equal numforge's to rounding


def test_a_broken_learner_file_is_named_and_measured(tmp_path, capsys):
    status, captured = grade(tmp_path, capsys, BROKEN, "--only", "layer_norm")
    assert status == 1
    rows = table_rows(captured.out)
    assert rows["layer_norm", "x"]["result"] == "FAIL"
    assert float(rows["layer_norm", "x"]["max rel error"]) > 1e-2  # the finite-difference error
    assert float(rows["layer_norm", "x"]["vs numforge"]) > 1e-2  # the distance from numforge's own
    assert rows["layer_norm", "weight"]["result"] == rows["layer_norm", "bias"]["result"] == "pass"
    wrong = [line for line in captured.out.splitlines() if line.startswith("wrong:")]
    assert len(wrong) == 1 and "the gradient of 'x'" in wrong[0] and "layer_norm" in wrong[0]
    assert "2/3 gradients within 1e-07" in captured.out


def test_a_backward_that_writes_into_dy_is_caught(tmp_path, capsys):
    source = "def relu_backward(dy, cache):\n    dy[~cache.positive] = 0\n    return dy\n"
    status, captured = grade(tmp_path, capsys, source)
    assert status == 1
    assert "changed 'dy' in place" in captured.out


def test_the_exercise_is_the_op_without_its_backward_bodies(tmp_path, capsys):
    out = tmp_path / "layernorm_exercise.py"
    assert main(["gradcheck", "--write-exercise", "layernorm", "--out", str(out)]) == 0
    assert f"numforge gradcheck --impl {out}" in capsys.readouterr().out
    status, captured = grade(tmp_path, capsys, out.read_text(encoding="utf-8"))
    assert status == 1
    assert captured.out.count("layer_norm_backward is not written yet") == 2  # both layer_norm cases
    assert main(["gradcheck", "--write-exercise", "layernorm", "--out", str(out)]) == 2  # never overwrites
    assert "exists" in capsys.readouterr().err


@pytest.mark.parametrize("op", exercise_ops())
def test_every_exercise_keeps_the_forward_and_stubs_every_backward(op):
    real = ast.parse((OPS_DIR / f"{op}.py").read_text(encoding="utf-8"))
    exercise = ast.parse(exercise_source(op))
    real_functions = {f.name: f for f in real.body if isinstance(f, ast.FunctionDef)}
    exercise_functions = {f.name: f for f in exercise.body if isinstance(f, ast.FunctionDef)}
    assert list(exercise_functions) == list(real_functions)
    backwards = [name for name in real_functions if name.endswith("_backward")]
    assert backwards
    for name, function in exercise_functions.items():
        if name in backwards:
            assert ast.get_docstring(function) == ast.get_docstring(real_functions[name])
            assert isinstance(function.body[-1], ast.Raise) and len(function.body) == 2
        else:
            assert ast.dump(function) == ast.dump(real_functions[name])  # the forward, unchanged


@pytest.mark.parametrize("op", exercise_ops())
def test_every_solution_is_the_real_op_and_passes(tmp_path, capsys, op):
    """The op's own file, made standalone (absolute imports), graded as a learner's file: every case passes."""
    status, captured = grade(tmp_path, capsys, exercise_source(op, solution=True))
    assert status == 0, captured.out
    rows = table_rows(captured.out)
    assert rows and all(float(cells["vs numforge"]) == 0.0 for cells in rows.values())  # same code, same numbers


def test_every_op_case_names_its_backward():
    names = {c.backward for c in all_cases() if c.backward}
    assert {"layer_norm_backward", "linear_backward", "attention_backward", "flash_attention_backward"} <= names


def test_bad_learner_files_are_named(tmp_path, capsys):
    status, captured = grade(tmp_path, capsys, "def unrelated(dy, cache):\n    return dy\n")
    assert status == 2 and "defines none of the backward functions" in captured.err
    status, captured = grade(tmp_path, capsys, "def layer_norm_backward(dy, cache)\n")
    assert status == 2 and "cannot load" in captured.err and "SyntaxError" in captured.err
    assert main(["gradcheck", "--impl", str(tmp_path / "missing.py")]) == 2
    assert main(["gradcheck", "--write-exercise", "layernorm"]) == 2
    assert "needs --out" in capsys.readouterr().err
