"""`numforge gradcheck --impl FILE` grades a learner's functions and says what is wrong; `--write-exercise`,
`--show` and `numforge course` around it."""

import os
import subprocess
import sys

import pytest

from numforge.cli import main
from numforge.gradcheck import all_cases
from numforge.gradcheck.exercise import exercise_names, exercise_source

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

# The four mistakes the issue names, made in numforge's own code (the solution of each exercise).
LAYER_NORM = exercise_source("layernorm", solution=True)
ATTENTION = exercise_source("attention", solution=True)
MISTAKES = {
    "scaled by 2": LAYER_NORM.replace("    dx *= rstd\n", "    dx *= 2 * rstd\n"),
    "sign flipped": LAYER_NORM.replace("    dx *= rstd\n", "    dx *= -rstd\n"),
    "no mean path": LAYER_NORM.replace("    dx -= g_mean\n", ""),
    "transposed dv": ATTENTION.replace("xp.matmul(weights.swapaxes(-1, -2), dout)", "xp.matmul(weights, dout)"),
}


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
        rows[cells[header[0]], cells[header[1]]] = cells
    return rows


def paragraph(out: str, start: str) -> list[str]:
    """The line that starts with ``start`` and the indented lines under it."""
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(start))
    found = [lines[first]]
    for line in lines[first + 1 :]:
        if not line.startswith("  "):
            break
        found.append(line)
    return found


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


def test_a_broken_learner_file_is_named_measured_and_diagnosed(tmp_path, capsys):
    status, captured = grade(tmp_path, capsys, BROKEN, "--only", "layer_norm")
    assert status == 1
    rows = table_rows(captured.out)
    assert rows["layer_norm", "x"]["result"] == "FAIL"
    assert float(rows["layer_norm", "x"]["max rel error"]) > 1e-2  # the finite-difference error
    assert float(rows["layer_norm", "x"]["vs numforge"]) > 1e-2  # the distance from numforge's own
    assert rows["layer_norm", "weight"]["result"] == rows["layer_norm", "bias"]["result"] == "pass"
    report = paragraph(captured.out, "wrong: layer_norm, the gradient of 'x'")
    assert "  - still true of yours: each row of dx sums to 0" in report
    assert any(
        "orthogonal to xhat (up to eps / (var + eps)) for the true gradient" in line
        and "the variance path's term" in line
        for line in report
    )
    assert "2/3 gradients within 1e-07" in captured.out


def test_a_layer_norm_backward_scaled_by_2_is_called_a_scale(tmp_path, capsys):
    status, captured = grade(tmp_path, capsys, MISTAKES["scaled by 2"], "--only", "layer_norm")
    report = paragraph(captured.out, "wrong: layer_norm, the gradient of 'x'")
    assert status == 1
    assert "  - yours is 2 times the true one (cosine 1.000000): a factor too many or missing" in report
    assert any(line.startswith("  - the worst coordinate is (") and "yours" in line for line in report)
    assert "  - still true of yours: each row of dx sums to 0" in report  # the structure is right, the size is not


def test_a_layer_norm_backward_with_its_sign_flipped_points_the_opposite_way(tmp_path, capsys):
    status, captured = grade(tmp_path, capsys, MISTAKES["sign flipped"], "--only", "layer_norm")
    report = paragraph(captured.out, "wrong: layer_norm, the gradient of 'x'")
    assert status == 1
    assert "  - it points the opposite way: yours is -1 times the true one (a flipped sign)" in report


def test_a_layer_norm_backward_without_the_mean_path_is_told_the_rows_do_not_sum_to_zero(tmp_path, capsys):
    status, captured = grade(tmp_path, capsys, MISTAKES["no mean path"], "--only", "layer_norm")
    report = paragraph(captured.out, "wrong: layer_norm, the gradient of 'x'")
    assert status == 1
    assert any(line.startswith("  - not a scale factor: the cosine with the true one is") for line in report)
    missing = [line for line in report if line.startswith("  - each row of dx sums to 0 for the true gradient")]
    assert len(missing) == 1 and "but yours gives" in missing[0] and "the mean path's term" in missing[0]
    assert "  - still true of yours: each row of dx is orthogonal to xhat (up to eps / (var + eps))" in report


def test_an_attention_backward_with_a_transposed_dv_is_told_on_which_shapes_it_fails(tmp_path, capsys):
    status, captured = grade(tmp_path, capsys, MISTAKES["transposed dv"], "--only", "attention.*")
    rows = table_rows(captured.out)
    assert status == 1
    cases = [c for c in all_cases() if c.name.startswith("attention.")]
    square = [c.name for c in cases if c.features()[0]["Tq"] == c.features()[0]["Tk"]]
    assert {"attention.causal", "attention.masked_causal", "attention.dropout"} <= set(square)
    for case in square:
        assert rows[case, "v"]["result"] == "FAIL" and rows[case, "q"]["result"] == rows[case, "k"]["result"] == "pass"
    pattern = paragraph(captured.out, "by case, attention_backward:")
    assert pattern[1] == f"  wrong (v) on {len(square)} cases where Tq = Tk: " + ", ".join(square)
    others = len(cases) - len(square)
    assert pattern[2].startswith(f"  raises ValueError on {others} cases where Tq != Tk: attention.full, ")
    assert "not checked: attention.causal_tq<tk: attention_backward failed: ValueError: matmul" in captured.out


def test_a_gradient_of_the_wrong_shape_names_its_axes(tmp_path, capsys):
    source = ATTENTION.replace("xp.matmul(weights.swapaxes(-1, -2), dout)", "dout")  # (Tq, Dv) where v has (Tk, Dv)
    status, captured = grade(tmp_path, capsys, source, "--only", "attention.causal_tq<tk")
    assert status == 1
    assert "its shape is (1, 2, 2, 3), the input's (1, 2, 6, 3)" in captured.out
    assert "its axis 2 has 2 entries, the size of Tq, where v's is Tk = 6" in captured.out


def test_an_embedding_backward_that_drops_repeated_ids_is_told_which_rows(tmp_path, capsys):
    source = (
        "def embedding_backward(dout, cache):\n"
        "    dtable = dout.sum() * 0 + __import__('numpy').zeros(cache.table_shape)\n"
        "    dtable[cache.ids] += dout  # a repeated id keeps only one of its rows\n"
        "    return dtable\n"
    )
    status, captured = grade(tmp_path, capsys, source)
    assert status == 1
    assert "exactly ids that occur more than once (id 1 3 times): each occurrence must add its row" in captured.out


def test_the_fused_loss_is_graded_with_the_learners_own_forward(tmp_path, capsys):
    source = exercise_source("cross_entropy", solution=True).replace(
        "    return loss, TiedCrossEntropyGrads(dh_of_sum,", "    return loss * 2, TiedCrossEntropyGrads(dh_of_sum,"
    )
    status, captured = grade(tmp_path, capsys, source, "--only", "tied_cross_entropy_and_grads")
    assert status == 1
    assert "tied_cross_entropy_with_grads returns" in captured.out and "where numforge's forward gives" in captured.out


def test_an_adamw_step_without_bias_correction_is_a_scale_and_a_decayed_bias_is_found_by_case(tmp_path, capsys):
    adamw = exercise_source("adamw", solution=True)
    uncorrected = adamw.replace("step_size = lr / correction1", "step_size = lr").replace(
        "buf *= 1.0 / math.sqrt(correction2)", "pass"
    )
    status, captured = grade(tmp_path, capsys, uncorrected, "--only", "adamw[1 step]")
    report = paragraph(captured.out, "wrong: adamw[1 step], the update of 'weight'")
    assert status == 1 and "  - yours is 0.447 = 1/sqrt(5) times the true one (cosine 1.000000)" in report[1]
    status, captured = grade(tmp_path, capsys, adamw.replace("if p.ndim >= 2 and decay != 1.0:", "if decay != 1.0:"))
    pattern = paragraph(captured.out, "by case, AdamW.step:")
    assert status == 1 and "  wrong (bias) on 1 case where weight_decay > 0: adamw[5 steps, weight decay]" in pattern


def test_a_pair_count_that_skips_overlaps_is_told_so(tmp_path, capsys):
    tokenizer = exercise_source("tokenizer", solution=True)
    skipping = tokenizer.replace(
        "        counts.update(zip(ids, ids[1:]))",
        "        counts.update(set(zip(ids, ids[1:])))  # each pair once per chunk",
    )
    status, captured = grade(tmp_path, capsys, skipping, "--only", "tokenizer.count_pairs")
    assert status == 1
    assert "wrong: tokenizer.count_pairs on hidden text" in captured.out
    assert "  - overlapping pairs each count: a run 'aaa' holds the pair (a, a) twice" in captured.out


def test_a_backward_that_writes_into_dy_is_caught(tmp_path, capsys):
    source = "def relu_backward(dy, cache):\n    dy[~cache.positive] = 0\n    return dy\n"
    status, captured = grade(tmp_path, capsys, source)
    assert status == 1
    assert "changed 'dy' in place" in captured.out


def test_a_finite_difference_backward_is_refused(tmp_path, capsys):
    """It would pass every check: the grader refuses a backward that runs the forward around its inputs."""
    source = LAYER_NORM.replace(
        "def layer_norm_backward(dy, cache: LayerNormCache):",
        "def layer_norm_backward(dy, cache: LayerNormCache):\n"
        "    x = cache.x.copy()\n"
        "    x.flat[0] += 1e-6  # (a finite-difference gradient starts so)\n"
        "    layer_norm_forward(x, cache.weight)",
    )
    status, captured = grade(tmp_path, capsys, source, "--only", "layer_norm")
    assert status == 1
    assert (
        "refused: layer_norm: layer_norm_backward holds 'x', an array it was given with 1 of its 30 entries moved "
        "by up to 1.0e-06 (a difference's step): a finite difference" in captured.out
    )
    again = LAYER_NORM.replace(
        "def layer_norm_backward(dy, cache: LayerNormCache):",
        "def layer_norm_backward(dy, cache: LayerNormCache):\n    layer_norm_forward(cache.x, cache.weight)",
    )
    status, captured = grade(tmp_path, capsys, again, "--only", "layer_norm")
    assert status == 0, captured.out  # the forward once more on the same inputs computes no difference: allowed


def test_the_exercise_is_written_never_over_a_file(tmp_path, capsys):
    out = tmp_path / "layernorm_exercise.py"
    assert main(["gradcheck", "--write-exercise", "layernorm", "--out", str(out)]) == 0
    assert f"numforge gradcheck --impl {out}" in capsys.readouterr().out
    assert out.read_text(encoding="utf-8").startswith("# numforge exercise: layernorm (hints 0)\n")
    status, captured = grade(tmp_path, capsys, out.read_text(encoding="utf-8"))
    assert status == 1
    assert captured.out.count("layer_norm_backward is not written yet") == 2  # both layer_norm cases
    assert main(["gradcheck", "--write-exercise", "layernorm", "--out", str(out)]) == 2  # never overwrites
    assert "exists" in capsys.readouterr().err


@pytest.mark.parametrize("hints", ("0", "1", "2"))
def test_hint_levels_add_the_steps_then_the_formulas(tmp_path, capsys, hints):
    out = tmp_path / f"ln{hints}.py"
    assert main(["gradcheck", "--write-exercise", "layernorm", "--out", str(out), "--hints", hints]) == 0
    text = out.read_text(encoding="utf-8")
    assert ("1. y = xhat * weight + bias" in text) == (hints == "1")  # the chain-rule steps
    assert ("dx      = rstd * (g - mean(g) - xhat * mean(g * xhat))" in text) == (hints == "2")  # the formula
    assert "In the check 'layer_norm': x 2x3x5, weight 5, bias 5" in text or hints == "2"  # the shapes


def test_every_exercise_names_the_functions_it_grades():
    names = set(exercise_names())
    assert {"linear", "layernorm", "attention", "flash_attention", "blocks", "gpt", "tokenizer", "adamw"} <= names
    backwards = {name for c in all_cases() for name in c.learner}
    assert {"layer_norm_backward", "attention_backward", "block_backward", "GPT.backward"} <= backwards


def test_show_prints_both_gradients_and_the_row_sums(capsys):
    assert main(["gradcheck", "--show", "layer_norm"]) == 0
    out = capsys.readouterr().out
    assert "layer_norm, the gradient of 'x' (2x3x5), row by row: finite differences | numforge's backward" in out
    assert "  [0, 0] " in out
    sums = [line for line in out.splitlines() if line.startswith("  each row of dx sums to 0: finite differences")]
    assert len(sums) == 1 and "| numforge's backward" in sums[0]
    numeric = [v.strip(",") for v in sums[0].split("differences")[1].split("|")[0].split() if v != "..."]
    assert numeric and all(abs(float(v)) < 1e-7 for v in numeric)  # zero, to the rounding of finite differences


def test_show_with_a_learners_file_shows_yours(tmp_path, capsys):
    path = tmp_path / "mine.py"
    path.write_text(MISTAKES["no mean path"], encoding="utf-8")
    assert main(["gradcheck", "--show", "layer_norm", "--impl", str(path)]) == 1
    out = capsys.readouterr().out
    sums = next(line for line in out.splitlines() if line.startswith("  each row of dx sums to 0"))
    assert abs(float(sums.split("| yours ")[1].split(",")[0])) > 1e-3  # yours do not sum to 0


def test_course_shows_what_the_files_here_pass(tmp_path, monkeypatch, capsys):
    (tmp_path / "my_linear.py").write_text(exercise_source("linear", solution=True), encoding="utf-8")
    (tmp_path / "my_embedding.py").write_text(exercise_source("embedding"), encoding="utf-8")
    (tmp_path / "notes.py").write_text("print('not an exercise')\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["course"]) == 1  # not every exercise is passed
    out = capsys.readouterr().out
    rows = {line.split()[1]: line for line in out.splitlines()[2:] if line.strip() and len(line.split()) > 2}
    assert "my_linear.py" in rows["linear"] and "passed (2 cases" in rows["linear"]
    assert "my_embedding.py" in rows["embedding"] and "not written yet: 1 of 1 cases" in rows["embedding"]
    assert "not started: numforge gradcheck --write-exercise gpt --out my_gpt.py" in rows["gpt"]
    assert rows["linear"].split()[0] == "3"  # the lesson that sets it (demos/course.md)
    assert out.rstrip().endswith(f"1/{len(exercise_names())} exercises passed")


def test_bad_learner_files_are_named(tmp_path, capsys):
    status, captured = grade(tmp_path, capsys, "def unrelated(dy, cache):\n    return dy\n")
    assert status == 2 and "defines none of the functions numforge grades" in captured.err
    status, captured = grade(tmp_path, capsys, "def layer_norm_backward(dy, cache)\n")
    assert status == 2 and "cannot load" in captured.err and "SyntaxError" in captured.err
    assert main(["gradcheck", "--impl", str(tmp_path / "missing.py")]) == 2
    assert main(["gradcheck", "--write-exercise", "layernorm"]) == 2
    assert "needs --out" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["gradcheck", "--list"], ["params"]])
def test_a_closed_output_pipe_ends_the_command_quietly(command):
    """`numforge params | head`: the reader went away; no `[Errno 32] Broken pipe`, the status of a SIGPIPE."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    child = subprocess.Popen(
        [sys.executable, "-m", "numforge", *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    child.stdout.close()  # before the child has written anything: its first write finds the pipe closed
    error = child.stderr.read()
    assert child.wait(timeout=120) == 141 and error == b""


def test_only_that_matches_no_case_says_so(tmp_path, capsys):
    status, captured = grade(tmp_path, capsys, exercise_source("gpt", solution=True), "--only", "model[gelu")
    assert status == 2 and "--only 'model[gelu' matches no case (see: numforge gradcheck --list --impl" in captured.err
    assert "defines none of the functions" not in captured.err


def test_debug_goes_before_or_after_the_command(tmp_path, capsys):
    for flags in (["--debug", "gradcheck", "--only", "zzz"], ["gradcheck", "--only", "zzz", "--debug"]):
        with pytest.raises(ValueError, match="no gradient-check case matches 'zzz'"):  # the error itself, raised
            main(flags)
    assert main(["gradcheck", "--only", "zzz"]) == 2  # without: one line


def test_course_lists_the_exercises_in_lesson_order(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main(["course"])
    lines = capsys.readouterr().out.splitlines()[2:]
    rows = [line.split() for line in lines if line[:1] and line[0] in "0123456789-" and "exercises passed" not in line]
    lessons = [float(r[0]) if r[0] != "-" else float("inf") for r in rows]
    assert len(rows) == len(exercise_names()) and lessons == sorted(lessons), rows


def test_a_train_merges_that_ignores_special_tokens_is_caught(tmp_path, capsys):
    tokenizer = exercise_source("tokenizer", solution=True)
    line = "    chunks = chunk_byte_ids(texts, pattern, special_tokens)\n"
    assert tokenizer.count(line) == 1
    source = tokenizer.replace(line, "    chunks = chunk_byte_ids(texts, pattern)\n")
    status, captured = grade(tmp_path, capsys, source, "--only", "tokenizer.train_merges")
    assert status == 1
    assert "wrong: tokenizer.train_merges on hidden texts 1-3 joined by '<|endoftext|>'" in captured.out
    assert "each '<|endoftext|>' is cut out of the text before the chunks are counted" in captured.out


@pytest.mark.parametrize("name", ["tokenizer", "adamw"])
def test_the_exercises_with_nothing_to_differentiate_speak_of_no_gradient(tmp_path, capsys, name):
    header = exercise_source(name).split('"""')[0]
    assert "gradient" not in header and "finite differences" not in header, header
    path = tmp_path / "mine.py"
    path.write_text(exercise_source(name, solution=True), encoding="utf-8")
    case = "adamw[1 step]" if name == "adamw" else "tokenizer.encode"
    assert main(["gradcheck", "--show", case, "--impl", str(path)]) == 0
    out = capsys.readouterr().out
    assert "gradient" not in out and "finite differences" not in out, out


def test_a_long_grading_says_how_far_it_is(tmp_path):
    """A line every few seconds (here: every call), on stderr, so the whole model's 20 s are never silent."""
    import io

    from numforge.gradcheck.grade import Ticker
    from numforge.gradcheck.grade import grade as grade_file

    path = tmp_path / "mine.py"
    path.write_text(exercise_source("rope", solution=True), encoding="utf-8")
    stream = io.StringIO()
    outcomes = grade_file(path, "rope*", Ticker(" of mine.py", stream, every=0.0))
    lines = stream.getvalue().splitlines()
    assert len(outcomes) == 5 and lines[0] == "graded 0 of 5 cases of mine.py; now rope" and len(lines) == 5
    quiet = io.StringIO()
    grade_file(path, "rope*", Ticker("", quiet, every=3600.0))
    assert quiet.getvalue() == ""


def test_progress_is_numforge_course(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["gradcheck", "--progress"]) == main(["course"]) == 1
    first, second = capsys.readouterr().out.split("exercises passed")[:2]
    assert first.strip() and first.strip() == second.strip(), (first, second)  # the table, not the gradient checks
