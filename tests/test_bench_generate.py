"""numforge bench generate: a short run prints its speeds and states the KV cache's size; the transformers side
decodes numforge's greedy tokens (Mixtral, Mistral with its window) and tokens that differ fail the bench."""

import re

import pytest

from numforge import cli
from numforge.bench.generate import kv_cache_bytes
from numforge.model import GPT, GPTConfig
from numforge.model.config import ARCHS


def test_the_kv_cache_size_is_measured_on_the_cache_the_model_allocates():
    for kv_heads in (4, 2, 1):
        config = GPTConfig(vocab_size=11, max_seq_len=16, d_model=8, num_heads=4, num_kv_heads=kv_heads, num_layers=3)
        assert kv_cache_bytes(GPT(config)) == 2 * 3 * kv_heads * 16 * 2 * 4  # 2 L H_kv T_max D float32 numbers
        assert kv_cache_bytes(GPT(config), 5) == 2 * 3 * kv_heads * 5 * 2 * 4  # as generate allocates it


def test_a_short_run_states_the_cache(capsys):
    argv = ["bench", "generate", "--layers", "1", "--prompt-tokens", "3", "--new-tokens", "2", "--repeats", "1"]
    assert cli.main([*argv, "--no-transformers"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^numforge +\d+ ms +[0-9.]+", out, flags=re.MULTILINE)
    # 1 layer x 12 heads x 1024 positions x 64 x 2 (keys, values) x 4 bytes = 6 MiB, 6,144 bytes per token
    # 1 layer x 12 heads x 64 x 2 (keys, values) x 4 bytes = 6,144 bytes per position: 30 KiB for 5, 6 MiB for 1024
    assert (
        "KV cache: 2 x 1 layers x 12 key/value heads x 64 x 4 bytes = 6,144 bytes per position; 0.0 MiB for the 5 "
        "positions decoded (what generate allocates), 6.0 MiB for the whole context of 1024"
    ) in out
    assert cli.main([*argv, "--kv-heads", "3"]) == 0  # grouped-query attention: a quarter of the cache
    out = capsys.readouterr().out
    assert (
        "(transformers sits out: this model cannot be saved for transformers: GPT-2 cannot express num_kv_heads" in out
    )
    assert "x 3 key/value heads x 64 x 4 bytes = 1,536 bytes per position;" in out
    assert "1.5 MiB for the whole context of 1024; 3/12 of full attention's 6,144" in out


def test_the_llama_shape_is_smollm2s(capsys):
    argv = ["bench", "generate", "--arch", "llama", "--layers", "1", "--prompt-tokens", "3", "--new-tokens", "2"]
    assert cli.main([*argv, "--repeats", "1", "--no-transformers"]) == 0
    out = capsys.readouterr().out
    assert "SmolLM2-135M shape: 1 layers, d_model 576, 9 heads of 64 (3 key/value heads), swiglu, rmsnorm" in out
    # 1 layer x 3 kv heads x 64 x 2 x 4 bytes = 1,536 bytes per position, a third of 9 heads' 4,608
    assert "x 3 key/value heads x 64 x 4 bytes = 1,536 bytes per position;" in out
    assert "for the whole context of 8192; 3/9 of full attention's 4,608" in out


TINY = dict(vocab_size=97, max_seq_len=48, d_model=32, num_heads=4, num_kv_heads=2, num_layers=2)


@pytest.mark.parametrize(
    "fields, architecture",
    [
        ({**ARCHS["moe"], "d_ff": 24}, "MixtralForCausalLM"),  # 8 experts, top-2
        ({**ARCHS["moe"], "d_ff": 24, "sliding_window": 5}, "MixtralForCausalLM"),  # and a window
        ({**ARCHS["llama"], "sliding_window": 5}, "MistralForCausalLM"),
    ],
)
def test_the_transformers_side_decodes_numforges_greedy_tokens(fields, architecture):
    """The bench's transformers model at a tiny shape: the same weights, the same 20 greedy tokens, decoded
    past the window (a 6-token prompt, W = 5) where there is one, and the window changes them."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("safetensors")
    from numforge.bench.generate import _transformers_side
    from numforge.generate import generate_ids
    from numforge.hf.config import config_to_hf

    config = GPTConfig(**TINY, **fields)
    assert config_to_hf(config, {})[0]["architectures"] == [architecture]
    model, prompt = GPT(config, seed=3), [5, 17, 3, 88, 40, 2]
    ours = list(generate_ids(model, prompt, 20, temperature=0))
    assert _transformers_side(model, prompt)(20) == ours and len(set(ours)) > 3  # not one token repeated
    if config.sliding_window is not None:
        unwindowed = GPT(GPTConfig(**{**TINY, **fields, "sliding_window": None}), seed=3)
        assert list(generate_ids(unwindowed, prompt, 20, temperature=0)) != ours


def test_the_moe_shape_runs_beside_mixtral_and_states_the_same_tokens(capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("safetensors")
    argv = ["bench", "generate", "--arch", "moe", "--layers", "1", "--prompt-tokens", "4", "--new-tokens", "6"]
    assert cli.main([*argv, "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert (
        "small Mixtral shape: 1 layers, d_model 512, 8 heads of 64 (2 key/value heads), 8 swiglu experts of width "
        "1792, top-2, rmsnorm, rope positions, vocabulary 32000; 55,449,088 parameters"
    ) in out  # 32000 x 512 x 2 + 512 x 8 + 8 x 3 x 512 x 1792 + 512 x 768 + 512 x 512 + 3 x 512
    assert re.search(r"^numforge / transformers \(wall clock\): decode tokens/s [0-9.]+x", out, re.MULTILINE)
    assert "same greedy tokens: all 6" in out


def test_tokens_that_differ_are_named_and_fail_the_bench(monkeypatch, capsys):
    from numforge.bench import generate as bench

    monkeypatch.setattr(bench, "_transformers_side", lambda model, prompt: lambda count: [0] * count)
    argv = ["bench", "generate", "--layers", "1", "--prompt-tokens", "3", "--new-tokens", "4", "--repeats", "1"]
    assert cli.main(argv) == 1
    out = capsys.readouterr().out
    assert re.search(r"^DIFFERENT greedy tokens: the same first \d of 4, then \d+ \(numforge\) against 0 ", out,
                     re.MULTILINE)  # fmt: skip


def test_a_windowed_layer_s_cache_is_a_ring_of_W_positions_whatever_the_length(capsys):
    """--window 8 on SmolLM2's shape, 1 layer: 2 x 3 heads x 8 positions x 64 x 4 bytes = 12,288 bytes for the
    20 positions decoded and for 8192 alike; without the window 2 x 3 x 64 x 4 = 1,536 bytes per position."""
    argv = ["bench", "generate", "--arch", "llama", "--layers", "1", "--prompt-tokens", "12", "--new-tokens", "8"]
    assert cli.main([*argv, "--repeats", "1", "--window", "8", "--no-transformers"]) == 0
    out = capsys.readouterr().out
    assert "BLAS threads: 1; a sliding window of 8 on every layer" in out
    assert (
        "KV cache per layer, W = 8 on 1 of 1 layers: a windowed layer holds 12,288 bytes for the 20 positions "
        "decoded, 12,288 for the whole context of 8192 (a ring of 8 positions, 2 x 3 x 8 x 64 x 4 bytes); the same "
        f"layer without the window {20 * 1536:,} and {8192 * 1536:,}: memory grows with W, not the positions"
    ) in out
