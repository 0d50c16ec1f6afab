"""The quick demos run and say what they promise (the slow sampling demo is left to users)."""

import pathlib
import re
import subprocess
import sys

DEMOS = pathlib.Path(__file__).resolve().parent.parent / "demos"


def run_demo(name: str, *args: str) -> str:
    result = subprocess.run([sys.executable, str(DEMOS / name), *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_bpe_step_by_step_learns_the_wikipedia_merges():
    out = run_demo("bpe_step_by_step.py")
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
