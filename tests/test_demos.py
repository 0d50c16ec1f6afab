"""Every demo runs (the slow ones in their quick mode) and shows what it promises.

``test_every_demo_is_run_here`` keeps the list whole: a new ``demos/*.py``
needs a test below (``_*.py`` are helpers, not demos).
"""

import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest

DEMOS = pathlib.Path(__file__).resolve().parent.parent / "demos"


def run_demo(name: str, *args: str) -> str:
    env = {**os.environ, "NUMFORGE_DEMO_QUICK": "1", "OPENBLAS_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    result = subprocess.run(
        [sys.executable, str(DEMOS / name), *args], capture_output=True, text=True, timeout=300, env=env
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def numbers_after(label: str, out: str) -> list[float]:
    return [float(m) for m in re.findall(re.escape(label) + r"\s*(-?\d+\.?\d*(?:e[-+]\d+)?)", out)]


def test_every_demo_is_run_here():
    source = pathlib.Path(__file__).read_text()
    demos = sorted(p.name for p in DEMOS.glob("*.py") if not p.name.startswith("_"))
    assert demos and all(f'run_demo("{name}"' in source for name in demos), demos


def test_every_demo_is_in_cell_format():
    for path in DEMOS.glob("*.py"):
        if not path.name.startswith("_"):
            assert "\n# %%\n" in path.read_text(), f"{path.name} has no `# %%` cell marker"


@pytest.mark.parametrize("name", sorted(p.name for p in DEMOS.glob("*.py") if not p.name.startswith("_")))
def test_every_demo_answers_help_with_its_docstring_and_runs_nothing(name):
    result = subprocess.run([sys.executable, str(DEMOS / name), "-h"], capture_output=True, text=True, timeout=120)
    first_line = ast.get_docstring(ast.parse((DEMOS / name).read_text())).splitlines()[0]
    assert result.returncode == 0 and result.stdout.startswith("usage: ") and first_line in result.stdout
    assert len(result.stdout.splitlines()) < 60  # the help, not the demo's output


def test_bpe_step_by_step_learns_the_wikipedia_merges():
    out = run_demo("bpe_step_by_step.py")
    assert "sequence: 11 -> 9 tokens (counted 4 times: overlapping pairs count twice, replaced 2)" in out
    assert "merges: [(97, 97), (97, 98), (256, 257)]" in out
    assert "[258, 100, 258, 97, 99]" in out
    assert "the fast trainer learns the same merges: True" in out


def test_gradcheck_by_hand_passes_every_row():
    out = run_demo("gradcheck_by_hand.py")
    rows = [line for line in out.splitlines() if line.startswith("layer_norm ")]
    assert len(rows) == 3
    assert all(line.split()[-1] == "pass" for line in rows)


def test_train_step_by_hand_learns_to_count():
    out = run_demo("train_step_by_hand.py")
    losses = [float(m) for m in re.findall(r"loss (\d+\.\d+)", out)]
    assert losses[-1] < 0.2 < losses[0]
    assert "after 0 1 2 3 the model predicts 4" in out


def test_flash_attention_demo_agrees_with_plain_attention():
    out = run_demo("flash_attention_memory.py", "256")
    differences = [float(m) for m in re.findall(r"max \|plain - tiled\| in \w+: (\S+)", out)]
    assert len(differences) == 4
    assert max(differences) < 1e-4  # float32 rounding, values of order 1


def test_sample_from_scratch_quick_mode_trains_samples_and_keeps_the_cache_exact():
    out = run_demo("sample_from_scratch.py")  # quick mode: NUMFORGE_DEMO_QUICK=1
    assert "identical tokens with and without the cache:" in out
    kept = {
        label: int(n) for label, n in re.findall(r"(top-k 3|top-p 0\.5|temperature 1\.0) .*\(tokens kept: (\d+)\)", out)
    }
    assert kept["top-k 3"] == 3 and 1 <= kept["top-p 0.5"] < kept["temperature 1.0"]


def test_optimizer_by_hand_matches_numforge_and_its_derivation():
    out = run_demo("optimizer_by_hand.py")
    assert numbers_after("max |numforge - by hand| after 3 AdamW steps:", out)[0] < 1e-12
    assert "first step, |change of each bias coordinate| / lr: 1.000000 .. 1.000000" in out
    assert numbers_after("decoupled decay:", out) == [0.999]  # 1 - lr wd = 1 - 0.1 * 0.01
    assert numbers_after("decay added to the gradient:", out) == [0.9]  # 1 - lr
    assert "after 1.000000; cosine(before, after) = 1.000000" in out


def test_attention_scale_experiment_shows_variance_d_and_saturation():
    out = run_demo("exp_attention_scale.py")
    rows = re.findall(r"^\s*(\d+)\s+(1/sqrt\(D\)|1 \(none\))\s+(\S+)\s+(\S+)\s+(\d+)%", out, re.M)
    assert len(rows) == 6
    for D, scale, variance, _, saturated in rows:
        expected_variance = 1.0 if scale == "1/sqrt(D)" else int(D)
        assert abs(float(variance) / expected_variance - 1) < 0.15
        assert (int(saturated) == 0) == (scale == "1/sqrt(D)") or int(D) == 16  # at D = 16 few rows saturate
    entropies = {(int(D), scale): float(e) for D, scale, _, e, _ in rows}
    assert entropies[(256, "1 (none)")] < entropies[(64, "1 (none)")] < entropies[(16, "1 (none)")] < 3
    assert all(abs(entropies[(D, "1/sqrt(D)")] - entropies[(16, "1/sqrt(D)")]) < 0.1 for D in (64, 256))


def test_no_position_experiment_order_stops_mattering_for_one_layer_only():
    out = run_demo("exp_no_position.py")
    change = {
        label.strip(): float(x) for label, x in re.findall(r"^\s+(\d layers?,\s+[\w ]+?)\s+(\S+e[-+]\d+)$", out, re.M)
    }
    assert change["1 layer,  no positions"] < 1e-12
    assert min(change["1 layer,  learned positions"], change["2 layers, no positions"]) > 1e-3


def test_untied_experiment_counts_parameters_and_adds_the_two_paths():
    out = run_demo("exp_untied.py")
    counts = [int(n) for n in re.findall(r"(\d+) parameters, V\*C = 12288", out)]
    assert "another model: numforge gradcheck's tiny one (V = 13, C = 8" in out  # the two paths, on its own model
    assert counts[1] - counts[0] == 12288
    assert numbers_after("max |tied gradient - (input side + output side)| =", out)[0] < 1e-12
    assert len(re.findall(r"validation \d+\.\d+", out)) == 2


def test_activations_experiment_compares_at_equal_parameters():
    out = run_demo("exp_activations.py")
    mlp = [int(n) for n in re.findall(r"MLP parameters per layer\s+(\d+)", out)]
    assert len(mlp) == 3 and max(mlp) - min(mlp) <= 64  # equal weights; SwiGLU has F more biases
    assert len(re.findall(r"validation \d+\.\d+", out)) == 3


def test_rope_relative_experiment_scores_depend_only_on_the_distance():
    out = run_demo("exp_rope_relative.py")
    assert numbers_after("largest spread along one distance m - n (over 127 distances):", out)[0] < 1e-12
    low, high = (float(x) for x in re.search(r"scores across distances: from (\S+) to (\S+)", out).groups())
    assert high - low > 1.0  # the distance does change the score
    assert numbers_after("max |HF layout (renumbered) - interleaved rotation|:", out)[0] < 1e-14
    ratios = {int(i): float(r) for i, r in re.findall(r"^\s+(\d+)\s+\S+\s+\S+\s+\S+\s+(\d+\.\d+)$", out, re.M)}
    assert ratios[0] == ratios[16] == 1.0 and ratios[63] == 8.0  # llama3: short waves kept, long ones x8
    assert 1.0 < ratios[31] < 8.0  # and the ones between blended


def test_qk_norm_order_experiment_commutes_only_without_a_weight_or_with_paired_halves():
    out = run_demo("exp_qk_norm_order.py")
    assert numbers_after("no weight", out)[0] < 1e-14
    assert numbers_after("w[i] = w[i + D/2]", out)[0] < 1e-14
    assert numbers_after("a random weight", out)[0] > 0.1
    assert numbers_after("max relative change", out)[0] < 1e-14
    assert numbers_after("max |dx (norm first) - dx (rope first)|:", out)[0] < 1e-14
