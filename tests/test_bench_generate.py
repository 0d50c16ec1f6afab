"""numforge bench generate: a short run prints its speeds and states the KV cache's size."""

import re

from numforge import cli
from numforge.bench.generate import kv_cache_bytes
from numforge.model import GPT, GPTConfig


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
