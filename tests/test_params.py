"""`numforge params` and model/flops.py: parameters and training FLOPs per component."""

import re
from dataclasses import replace

import numpy as np
import pytest

from numforge import checkpoint
from numforge.cli import main
from numforge.gradcheck.model import OPTIONS, TINY
from numforge.model import GPT, GPTConfig, KVCache
from numforge.model.flops import flops_per_token, parameter_counts

DEFAULT_RUN = GPTConfig(vocab_size=2048, max_seq_len=64, d_model=96, num_heads=4, num_layers=3)


@pytest.mark.parametrize("option", list(OPTIONS))
def test_the_components_add_up_to_the_models_parameters(option):
    config = GPTConfig(**{**TINY, **OPTIONS[option]})
    assert sum(parameter_counts(config).values()) == GPT(config).num_params()


def test_the_default_run_by_hand():
    V, T, C, L, F = 2048, 64, 96, 3, 384
    counts = parameter_counts(DEFAULT_RUN)
    assert counts == {
        "token table": V * C,
        "position table": T * C,
        "attention": L * (C * 3 * C + 3 * C + C * C + C),
        "mlp": L * (C * F + F + F * C + C),
        "norms": (2 * L + 1) * 2 * C,
        "lm_head": 0,
    }
    # 6 FLOPs per matrix weight (the tied table once, as the unembedding) and 12 L T C for Q K^T and P V
    assert flops_per_token(DEFAULT_RUN) == 6 * (L * (4 * C * C + 2 * C * F) + V * C) + 12 * L * T * C == 3_391_488
    assert flops_per_token(DEFAULT_RUN, seq_len=128) - flops_per_token(DEFAULT_RUN) == 12 * L * 64 * C


@pytest.mark.parametrize(
    "flags, shown",
    [([], "gelu (tanh), "), (["--gelu", "exact"], "gelu (exact), "), (["--activation", "relu"], "relu, ")],
)
def test_params_names_the_activations_form(capsys, flags, shown):
    assert main(["params", *flags]) == 0
    assert f"d_ff {4 * 96}, {shown}vocabulary" in capsys.readouterr().out


def test_params_prints_the_default_train_model(capsys):
    assert main(["params"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^token table +196,608 +36\.5% ", out, flags=re.MULTILINE)  # 196,608 / 538,464
    totals = re.findall(r"^total +([\d,]+) +100\.0%", out, flags=re.MULTILINE)
    assert totals == ["538,464", "3,391,488"]


def test_params_takes_trains_model_flags(capsys):
    flags = ["--no-tie", "--activation", "swiglu", "--position", "sinusoidal", "--no-bias", "--d-ff", "200"]
    assert main(["params", "--vocab-size", "500", "--seq-len", "32", "--layers", "2", *flags]) == 0
    out = capsys.readouterr().out
    config = GPTConfig(
        vocab_size=500, max_seq_len=32, d_model=96, num_heads=4, num_layers=2, d_ff=200,
        activation="swiglu", tie_weights=False, position="sinusoidal", use_bias=False,
    )  # fmt: skip
    totals = re.findall(r"^total +([\d,]+) +100\.0%", out, flags=re.MULTILINE)  # parameters, then FLOPs
    assert totals[0] == f"{GPT(config).num_params():,}"
    assert re.search(r"^lm_head +48,000 ", out, flags=re.MULTILINE)  # V x C = 500 x 96
    assert re.search(r"^position table +0 ", out, flags=re.MULTILINE)


def test_params_reads_a_checkpoints_config(tmp_path, capsys):
    config = GPTConfig(vocab_size=40, max_seq_len=16, d_model=8, num_heads=2, num_layers=1, tie_weights=False)
    model = GPT(config)
    moments = {name: p * 0 for name, p in model.params.items()}
    checkpoint.save_checkpoint(
        tmp_path, step=1, params=model.params, optimizer_state={"step": 1, "hyper": {}, "m": moments, "v": moments},
        config=config.to_dict(), tokenizer={}, state={"step": 1},
    )  # fmt: skip
    assert main(["params", "--checkpoint", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"{model.num_params():,}  100.0%" in out and "untied unembedding" in out
    assert main(["params", "--checkpoint", str(tmp_path), "--layers", "2"]) == 2
    assert "--layers cannot be given with --checkpoint" in capsys.readouterr().err


def test_params_takes_every_new_model_flag(capsys):
    flags = ["--arch", "llama", "--kv-heads", "2", "--head-dim", "32", "--qk-norm", "--qk-norm-order", "after_rope",
             "--no-norm-weight", "--qkv-bias", "--rope-theta", "5e5", "--norm-eps", "1e-6"]  # fmt: skip
    assert main(["params", "--vocab-size", "500", "--seq-len", "32", *flags]) == 0
    out = capsys.readouterr().out
    config = GPTConfig(
        vocab_size=500, max_seq_len=32, d_model=96, num_heads=4, num_layers=3, norm="rmsnorm", position="rope",
        activation="swiglu", use_bias=False, tie_weights=False, num_kv_heads=2, head_dim=32, qk_norm=True,
        qk_norm_order="after_rope", norm_weight=False, qkv_bias=True, rope_theta=5e5, norm_eps=1e-6,
    )  # fmt: skip
    totals = re.findall(r"^total +([\d,]+) +100\.0%", out, flags=re.MULTILINE)
    assert totals[0] == f"{sum(parameter_counts(config).values()):,}"
    assert re.search(r"^norms +0 ", out, flags=re.MULTILINE)  # parameter-free norms
    # 3 layers x (qkv_proj 96 x (4 + 2 x 2) 32 = 24,576, its bias 256, out_proj 4 x 32 x 96 = 12,288)
    assert re.search(r"^attention +111,360 .* 3 layers x 37,120 ", out, flags=re.MULTILINE)
    assert "biases only: qkv_bias" in out and "2 key/value heads" in out and "QK-norm after rope" in out
    assert "2 x L x H_kv x D = 384 values per token" in out and "2/4 of full attention's 768 values" in out


def test_a_sliding_window_bounds_the_score_flops_and_the_kv_cache(capsys):
    """Layers 0 and 2 of 4 see 16 keys, the others all 64: the scores count 12 H D per key seen, and the KV
    cache's windowed layers keep 16 positions (model/kv_cache.py), by hand."""
    H, D, L, T, W = 4, 24, 4, 64, 16
    unwindowed = replace(DEFAULT_RUN, num_layers=L)
    windowed = replace(unwindowed, sliding_window=W, window_layers=(0, 2))
    assert flops_per_token(unwindowed) - flops_per_token(windowed) == 12 * H * D * 2 * (T - W)
    assert KVCache(np, 1, windowed, np.float32).keys[0].shape == (1, H, W, D)
    flags = ["--layers", "4", "--sliding-window", "16", "--window-layers", "0,2"]
    assert main(["params", *flags]) == 0
    out = capsys.readouterr().out
    assert "sliding window 16 on layers 0, 2" in out
    kept = 4 * 2 * H * D * (W + T + W + T)  # float32 bytes: a key and a value per position kept, per layer
    assert f"{kept:,} bytes for the whole context of 64 (2 windowed layers keep a ring of 16)" in out
