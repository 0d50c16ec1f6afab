"""`numforge train`: a flag for every GPTConfig field, refused on --resume; results on stdout, progress on stderr."""

import argparse

import numpy as np
import pytest

from numforge import checkpoint, cli
from numforge.commands.model_flags import MODEL_FLAGS, RUN_DEFAULTS, add_model_flags, model_options
from numforge.model import GPTConfig
from numforge.model.config import ARCHS, BIAS_SWITCHES

WORDS = "the cat sat on a mat while one dog ran to the old red barn and back".split()
NEW_FLAGS = [
    "--d-ff", "24", "--gelu", "exact", "--no-bias", "--no-tie", "--position", "sinusoidal",
    "--scale-embeddings", "--attention", "plain", "--ln-eps", "1e-4",
]  # fmt: skip


def two_steps(tmp_path, *model_flags: str):
    """Train a 1-layer model for 2 steps on a little random text with these model flags; the run directory."""
    corpus = tmp_path / "corpus.txt"
    rng = np.random.default_rng(0)
    corpus.write_text(" ".join(WORDS[i] for i in rng.integers(0, len(WORDS), 600)), encoding="utf-8")
    out = tmp_path / "run"
    argv = ["train", "--data", str(corpus), "--cache-dir", str(tmp_path), "--vocab-size", "270", "--layers", "1"]
    argv += ["--seq-len", "8", "--batch-size", "2", "--max-steps", "2", "--eval-every", "1", "--out", str(out)]
    assert cli.main([*argv, *model_flags]) == 0
    return out


@pytest.fixture
def small_run(tmp_path, capsys):
    """A 2-step run with every new model flag: (run directory, its stdout, its stderr)."""
    out = two_steps(tmp_path, "--d-model", "8", "--heads", "2", *NEW_FLAGS)
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


# ---------------------------------------------------------------- the modern decoder's flags and --arch


def options_of(*argv: str) -> dict:
    """The GPTConfig fields ``numforge train`` would build from these flags."""
    parser = argparse.ArgumentParser()
    add_model_flags(parser)
    return model_options(parser.parse_args(list(argv)))


def test_arch_llama_sets_the_family_and_every_other_flag_overrides_it():
    assert options_of() == options_of("--arch", "gpt2") == RUN_DEFAULTS  # gpt2: today's defaults
    llama = options_of("--arch", "llama")
    assert llama == RUN_DEFAULTS | ARCHS["llama"]
    config = GPTConfig(vocab_size=300, max_seq_len=16, **llama)
    assert (config.norm, config.position, config.activation, config.tie_weights) == ("rmsnorm", "rope", "swiglu", False)
    assert not any(config.has_bias(switch) for switch in BIAS_SWITCHES) and config.num_kv_heads == config.num_heads
    for before_or_after in (["--norm", "layernorm", "--arch", "llama"], ["--arch", "llama", "--norm", "layernorm"]):
        assert options_of(*before_or_after)["norm"] == "layernorm"  # the flag wins wherever it stands
    assert options_of("--arch", "llama", "--qkv-bias")["qkv_bias"] is True  # Qwen2's biases over Llama
    assert options_of("--arch", "llama", "--kv-heads", "2", "--rope-theta", "5e5")["num_kv_heads"] == 2


def test_each_new_flag_sets_its_field():
    argv = ["--norm", "rmsnorm", "--norm-eps", "1e-6", "--no-norm-weight", "--position", "rope", "--rope-theta", "500",
            "--rope-scaling", '{"rope_type": "linear", "factor": 2}', "--kv-heads", "2", "--head-dim", "8",
            "--qk-norm", "--qk-norm-order", "after_rope", "--no-bias", "--qkv-bias", "--no-out-bias", "--mlp-bias",
            "--no-norm-bias"]  # fmt: skip
    assert options_of(*argv) == RUN_DEFAULTS | {
        "norm": "rmsnorm", "norm_eps": 1e-6, "norm_weight": False, "position": "rope", "rope_theta": 500.0,
        "rope_scaling": {"rope_type": "linear", "factor": 2}, "num_kv_heads": 2, "head_dim": 8, "qk_norm": True,
        "qk_norm_order": "after_rope", "use_bias": False, "qkv_bias": True, "out_bias": False, "mlp_bias": True,
        "norm_bias": False,
    }  # fmt: skip
    assert options_of("--ln-eps", "1e-4")["norm_eps"] == 1e-4  # the older spelling
    window = options_of("--sliding-window", "16", "--window-layers", "0,2")
    assert window["sliding_window"] == 16 and window["window_layers"] == [0, 2]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--rope-scaling", "linear"], "argument --rope-scaling: expected a JSON object, got 'linear'"),
        (["--kv-heads", "0"], "argument --kv-heads: expected an integer >= 1"),
        (["--qk-norm-order", "middle"], "argument --qk-norm-order: invalid choice"),
        (["--arch", "gpt5"], "argument --arch: invalid choice"),
        (["--sliding-window", "0"], "argument --sliding-window: expected an integer >= 1"),
        (["--window-layers", "0,x"], "argument --window-layers: expected layer indices separated by commas"),
        (["--window-layers", "-1"], "argument --window-layers: layer indices start at 0"),
    ],
)
def test_a_bad_new_flag_value_names_the_flag(capsys, argv, message):
    with pytest.raises(SystemExit):
        cli.main(["train", *argv])
    assert message in capsys.readouterr().err


def test_an_impossible_combination_of_flags_names_the_flags(capsys):
    assert cli.main(["train", "--kv-heads", "3"]) == 2  # 4 heads
    assert "--kv-heads (3) must divide --heads (4)" in capsys.readouterr().err
    assert cli.main(["train", "--arch", "llama", "--norm-bias"]) == 2
    assert "--norm-bias=True: --norm 'rmsnorm' has no bias" in capsys.readouterr().err
    assert cli.main(["train", "--window-layers", "0"]) == 2
    assert "--window-layers=[0] names windowed layers, but --sliding-window is None" in capsys.readouterr().err


@pytest.fixture
def llama_run(tmp_path):
    """A 2-step Llama-style run (GQA, QK-norm before the rotation): its directory."""
    return two_steps(tmp_path, "--d-model", "16", "--heads", "4", "--arch", "llama", "--kv-heads", "2", "--qk-norm")


def test_a_llama_run_checkpoints_resumes_and_refuses_model_flags(llama_run, capsys):
    config = checkpoint.load_checkpoint(llama_run).config
    assert {key: config[key] for key in ("norm", "position", "num_kv_heads", "qk_norm", "use_bias")} == {
        "norm": "rmsnorm", "position": "rope", "num_kv_heads": 2, "qk_norm": True, "use_bias": False,
    }  # fmt: skip
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(llama_run), "--max-steps", "3", "--arch", "llama", "--kv-heads=1"]) == 2
    assert "--arch, --kv-heads cannot change when resuming" in capsys.readouterr().err
    assert cli.main(["train", "--resume", str(llama_run), "--max-steps", "3"]) == 0
    assert checkpoint.load_checkpoint(llama_run).state["step"] == 3
