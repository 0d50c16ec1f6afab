"""The mixture-of-experts MLP in the model: its config fields, its parameters and init, the `--arch moe` preset,
the loss with the layers' auxiliary losses. (The model's gradients with experts are checked with every other option:
``gradcheck/model.py``'s ``moe_*`` cases against finite differences, the textbook model and torch autograd.)"""

import json
import math

import numpy as np
import pytest

from numforge.backend import asarray, default_rng, to_numpy
from numforge.cli import main
from numforge.gradcheck.model import DROPOUT_SEED, OPTIONS, randomized_model, tiny_batch
from numforge.model import GPT, GPTConfig, parameter_shapes
from numforge.model.config import ARCHS
from numforge.model.flops import flop_counts, parameter_counts
from numforge.training.logs import read_loss_csv, write_loss_csv

TINY = dict(vocab_size=50, max_seq_len=16, d_model=32, num_heads=4, num_layers=2)
EXPERTS = dict(**ARCHS["llama"], num_experts=4, experts_top_k=2, d_ff=24)


def test_the_expert_fields_round_trip_and_default_to_a_dense_mlp():
    assert GPTConfig(**TINY).num_experts == 0 and GPTConfig(**TINY).mlp_kind == "dense"
    config = GPTConfig(**TINY, **{**EXPERTS, "experts_renormalize": False, "router_aux_loss_coef": 0.5},
                       router_z_loss_coef=1e-3)  # fmt: skip
    assert config.mlp_kind == "experts"
    assert GPTConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert config.experts_options() == {"top_k": 2, "renormalize": False, "balance_coef": 0.5, "z_coef": 1e-3}
    old = GPTConfig(**TINY).to_dict()
    for name in ("num_experts", "experts_top_k", "experts_renormalize", "router_aux_loss_coef", "router_z_loss_coef"):
        del old[name]  # a config.json written before experts existed
    assert GPTConfig.from_dict(old) == GPTConfig(**TINY)


@pytest.mark.parametrize(
    "fields, error, message",
    [
        ({"num_experts": -1}, ValueError, "num_experts"),
        ({"num_experts": 2.0}, ValueError, "num_experts"),
        ({"experts_top_k": 5}, ValueError, r"experts_top_k must be an integer in \[1, 4\], got 5"),
        ({"experts_top_k": 0}, ValueError, "experts_top_k"),
        ({"experts_renormalize": 1}, TypeError, "experts_renormalize"),
        ({"router_aux_loss_coef": -0.1}, ValueError, "router_aux_loss_coef must be a finite number >= 0"),
        ({"router_z_loss_coef": math.nan}, ValueError, "router_z_loss_coef"),
        ({"activation": "gelu"}, ValueError, r"the experts are swiglu MLPs, got activation='gelu'"),
        ({"mlp_bias": True}, ValueError, "the experts have no biases"),
        ({"use_bias": True}, ValueError, "the experts have no biases"),
    ],
)
def test_a_bad_expert_field_is_named(fields, error, message):
    with pytest.raises(error, match=message):
        GPTConfig(**TINY, **{**EXPERTS, **fields})


@pytest.mark.parametrize("field, value", [("experts_top_k", 1), ("router_aux_loss_coef", 0.1),
                                          ("experts_renormalize", False), ("router_z_loss_coef", 0.1)])  # fmt: skip
def test_an_expert_option_without_experts_is_refused(field, value):
    with pytest.raises(ValueError, match=f"{field} set, but num_experts is 0"):
        GPTConfig(**TINY, **{field: value})


def test_the_experts_parameters_are_declared_in_the_layout():
    config = GPTConfig(**TINY, **EXPERTS)
    shapes = parameter_shapes(config)
    C, E, F = 32, 4, 24
    assert [(name, shape) for name, shape in shapes.items() if name.startswith("layers.1.mlp.")] == [
        ("layers.1.mlp.router.weight", (C, E)),
        ("layers.1.mlp.experts.gate_proj.weight", (E, C, F)),
        ("layers.1.mlp.experts.up_proj.weight", (E, C, F)),
        ("layers.1.mlp.experts.down_proj.weight", (E, F, C)),
    ]
    assert "layers.1.pre_mlp_norm.weight" in shapes and not any(name.endswith(".bias") for name in shapes)
    counts = parameter_counts(config)
    assert counts["mlp"] == 2 * (C * E + 3 * E * C * F)
    # a token passes through the router and 2 of the 4 experts: 6 FLOPs per weight it meets
    assert flop_counts(config)["mlp"] == 6 * 2 * (C * E + 2 * 3 * C * F)


def test_the_experts_are_initialised_as_gpt2_with_the_residual_output_scaled():
    config = GPTConfig(**{**TINY, "d_model": 64, "num_layers": 8}, **{**EXPERTS, "num_experts": 8, "d_ff": 256})
    params = GPT(config, seed=0, dtype="float64").params
    for name in ("mlp.router.weight", "mlp.experts.gate_proj.weight", "mlp.experts.up_proj.weight"):
        assert params[f"layers.3.{name}"].std() == pytest.approx(0.02, rel=0.03), name
    down = params["layers.3.mlp.experts.down_proj.weight"]
    assert down.std() == pytest.approx(0.02 / math.sqrt(2 * 8), rel=0.03)
    assert abs(float(np.corrcoef(down[0].ravel(), down[1].ravel())[0, 1])) < 0.05  # each expert its own draw


def test_params_shows_the_experts(capsys):
    assert main(["params", "--arch", "moe"]) == 0
    out = capsys.readouterr().out
    assert "(router, experts.gate_proj, experts.up_proj, experts.down_proj: 8 experts of width 128, top-2" in out
    assert "6 x the MLP's weights (top-2 experts per token)" in out
    assert main(["params", "--arch", "moe", "--experts-top-k", "1", "--no-experts-renormalize"]) == 0
    assert "top-1, not renormalised" in capsys.readouterr().out
    assert main(["params", "--experts", "4"]) == 2  # GPT-2's GELU MLP cannot be split into SwiGLU experts
    assert "num_experts=4: the experts are swiglu MLPs, got activation='gelu'" in capsys.readouterr().err


# ---------------------------------------------------------------- the layer in the model


def test_the_loss_adds_every_layers_aux_loss_in_training_and_in_evaluation():
    options = OPTIONS["moe_top2_aux"]
    model = randomized_model(options)
    ids, targets = tiny_batch(model.config.vocab_size)
    loss, cache = model.forward(ids, targets)
    aux = [float(block.aux_loss) for block in cache.blocks]
    assert len(aux) == model.config.num_layers and min(aux) > 0.1  # each layer's, large enough to be seen
    without = GPT(GPTConfig(**{**model.config.to_dict(), "router_aux_loss_coef": 0.0, "router_z_loss_coef": 0.0}),
                  dtype="float64", params=model.params)  # fmt: skip
    cross_entropy = float(without.forward(ids, targets)[0])
    assert float(loss) == pytest.approx(cross_entropy + sum(aux), rel=1e-14)
    assert float(model.forward(ids, targets, for_backward=False)[0]) == pytest.approx(float(loss), rel=1e-14)
    moe = cache.blocks[0].mlp.moe
    by_hand = 0.5 * moe.balance_loss + 0.25 * moe.z_loss  # AUX's coefficients
    assert aux[0] == pytest.approx(float(by_hand), rel=1e-14)


def test_a_float32_model_with_experts_stays_float32_and_matches_float64():
    options = {**TINY, **EXPERTS, "router_aux_loss_coef": 0.01, "router_z_loss_coef": 0.001}
    model32, model64 = GPT(GPTConfig(**options), seed=1), GPT(GPTConfig(**options), seed=1, dtype="float64")
    ids = asarray(np.random.default_rng(0).integers(0, 50, size=(3, 12)))
    targets = asarray(np.random.default_rng(1).integers(0, 50, size=(3, 12)))
    loss32, cache32 = model32.forward(ids, targets)
    loss64, cache64 = model64.forward(ids, targets)
    assert loss32.dtype == np.float32 and float(loss32) == pytest.approx(float(loss64), rel=1e-5)
    grads32, grads64 = model32.backward(cache32), model64.backward(cache64)
    for name, g in grads32.items():
        assert g.dtype == np.float32, name
        scale = float(np.abs(to_numpy(grads64[name])).max())
        np.testing.assert_allclose(to_numpy(g), to_numpy(grads64[name]), atol=1e-4 * scale, err_msg=name)


@pytest.mark.parametrize("option", [name for name in OPTIONS if OPTIONS[name].get("num_experts")])
def test_the_model_gradient_checks_keep_clear_of_the_choices_jumps(option):
    """A finite difference that moved a row's k-th and (k+1)-th expert past each other would measure a jump: every
    row of every layer of the checked model keeps a gap at its cut that no step of the check can close."""
    model = randomized_model(OPTIONS[option])
    ids, targets = tiny_batch(model.config.vocab_size)
    _, cache = model.forward(ids, targets, rng=default_rng(DROPOUT_SEED))
    k = model.config.experts_top_k
    for block in cache.blocks:
        ranked = -np.sort(-np.log(to_numpy(block.mlp.moe.probs)), axis=1)  # (N, E) logits less lse, decreasing
        assert (ranked[:, k - 1] - ranked[:, k]).min() > 1e-3  # measured: 0.015 at the least


# ---------------------------------------------------------------- training: the per-expert load


def test_train_logs_the_per_expert_load_and_resumes_with_it(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    words = "the cat sat on a mat while one dog ran to the old red barn and back".split()
    rng = np.random.default_rng(0)
    corpus.write_text(" ".join(words[i] for i in rng.integers(0, len(words), 600)), encoding="utf-8")
    out = tmp_path / "run"
    argv = ["train", "--data", str(corpus), "--cache-dir", str(tmp_path), "--vocab-size", "270", "--layers", "2",
            "--seq-len", "8", "--batch-size", "2", "--eval-every", "1", "--out", str(out), "--d-model", "16",
            "--heads", "2", "--arch", "moe", "--experts", "3", "--d-ff", "8"]  # fmt: skip
    assert main([*argv, "--max-steps", "2"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "expert load" in line]
    assert len(lines) == 2  # one per evaluation
    shares = [float(share) for share in lines[-1].split(": ")[-1].split()]
    assert len(shares) == 3 and sum(shares) == pytest.approx(1.0, abs=2e-4) and min(shares) > 0
    rows = read_loss_csv(out / "loss.csv", up_to_step=10)
    assert list(rows[0]) == ["step", "train_loss", "val_loss", "lr", "expert_load"]
    assert [float(share) for share in rows[-1]["expert_load"].split()] == shares
    assert main(["train", "--resume", str(out), "--max-steps", "3"]) == 0  # the log with its column reads back
    assert len(read_loss_csv(out / "loss.csv", up_to_step=10)) == 3
    capsys.readouterr()
    assert main(["trace", "--checkpoint", str(out), "--prompt", "the cat", "--backward"]) == 0  # the study tool
    traced = capsys.readouterr().out
    assert "layer 1 router probabilities (N,E)" in traced and "layer 1 gates of the chosen experts (N,k)" in traced
    assert "layers.1.mlp.experts.gate_proj.weight" in traced and "layers.0.mlp.router.weight" in traced
    assert main(["convert", str(out), str(tmp_path / "hf")]) == 0  # a Mixtral (tests/test_hf_moe_transformers.py)
    written = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (written["model_type"], written["num_local_experts"], written["num_experts_per_tok"]) == ("mixtral", 3, 2)


def test_a_dense_models_loss_log_has_no_load_column_and_a_bad_load_is_named(tmp_path):
    path = tmp_path / "loss.csv"
    write_loss_csv(path, [{"step": 1, "train_loss": "5.0", "val_loss": "5.1", "lr": "0.001"}])
    assert path.read_text().splitlines()[0] == "step,train_loss,val_loss,lr"
    path.write_text("step,train_loss,val_loss,lr,expert_load\n1,5.0,5.1,0.001,0.5 half\n")
    with pytest.raises(ValueError, match="line 2: expert_load '0.5 half' is not numbers separated by spaces"):
        read_loss_csv(path, up_to_step=1)
