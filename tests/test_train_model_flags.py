"""`numforge train`: a flag for every GPTConfig field, refused on --resume; results on stdout, progress on stderr."""

import numpy as np
import pytest

from numforge import checkpoint, cli
from numforge.commands.model_flags import MODEL_FLAGS
from numforge.model import GPTConfig

WORDS = "the cat sat on a mat while one dog ran to the old red barn and back".split()
NEW_FLAGS = [
    "--d-ff", "24", "--gelu", "exact", "--no-bias", "--no-tie", "--position", "sinusoidal",
    "--scale-embeddings", "--attention", "plain", "--ln-eps", "1e-4",
]  # fmt: skip


@pytest.fixture
def small_run(tmp_path, capsys):
    """A 2-step run with every new model flag: (run directory, its stdout, its stderr)."""
    corpus = tmp_path / "corpus.txt"
    rng = np.random.default_rng(0)
    corpus.write_text(" ".join(WORDS[i] for i in rng.integers(0, len(WORDS), 600)), encoding="utf-8")
    out = tmp_path / "run"
    argv = ["train", "--data", str(corpus), "--cache-dir", str(tmp_path), "--vocab-size", "270", "--layers", "1"]
    argv += ["--d-model", "8", "--heads", "2", "--seq-len", "8", "--batch-size", "2", "--max-steps", "2"]
    argv += ["--eval-every", "1", "--out", str(out), *NEW_FLAGS]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    return out, captured.out, captured.err


def test_every_config_field_has_a_flag():
    fields = {field for field, _ in MODEL_FLAGS.values()}
    from_elsewhere = {"vocab_size", "max_seq_len"}  # the tokenizer's size, --seq-len
    assert fields | from_elsewhere == set(GPTConfig.__dataclass_fields__)


def test_the_flags_reach_the_checkpoints_config(small_run):
    out, _, _ = small_run
    config = checkpoint.load_checkpoint(out).config
    assert {key: config[key] for key in ("d_ff", "gelu_approximate", "use_bias", "tie_weights", "position")} == {
        "d_ff": 24,
        "gelu_approximate": "none",
        "use_bias": False,
        "tie_weights": False,
        "position": "sinusoidal",
    }
    assert config["scale_embeddings"] is True and config["attention"] == "plain" and config["norm_eps"] == 1e-4


def test_results_go_to_stdout_and_progress_to_stderr(small_run):
    out, stdout, stderr = small_run
    assert stdout.startswith("corpus: ")
    assert "validation loss by step: 1 " in stdout and ", 2 " in stdout
    assert "after " in stdout and f"checkpoint: {out}" in stdout
    assert "a sample (temperature 0.8):" in stdout
    assert "step 1: train loss" in stderr  # the evaluations as they happen
    assert "a sample" not in stderr and "checkpoint:" not in stderr


def test_resume_refuses_every_new_model_flag(small_run, capsys):
    out, _, _ = small_run
    for flag in ["--no-tie", "--no-bias", "--scale-embeddings", "--position=learned", "--gelu=tanh", "--d-ff=8"]:
        for other in ["--attention=tiled", "--norm-eps=1e-5"]:
            assert cli.main(["train", "--resume", str(out), "--max-steps", "3", flag, other]) == 2
            named = capsys.readouterr().err.split(" cannot change when resuming")[0].split(": ")[-1].split(", ")
            assert sorted(named) == sorted([flag.split("=")[0], other.split("=")[0]])


def test_a_bad_gelu_form_is_named(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--gelu", "erf"])
    assert "argument --gelu: expected one of tanh, exact, got 'erf'" in capsys.readouterr().err
