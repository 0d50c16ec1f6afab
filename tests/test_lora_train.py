"""numforge train --init-from DIR --lora ...: adapter-only checkpoints, exact resume, the frozen base untouched."""

import numpy as np
import pytest
from hf_dirs import llama_fields, write_llama_dir

from numforge import checkpoint, cli
from numforge.checkpoint import load_model
from numforge.training.logs import LOSS_CSV

pytest.importorskip("safetensors")

WORDS = "the cat sat on a mat while one dog ran to the old red barn and back".split()
LORA = ["--lora", "q,v,down", "--lora-rank", "4", "--lora-alpha", "8", "--lora-dropout", "0.1"]


@pytest.fixture
def llama_dir(tmp_path):
    return write_llama_dir(tmp_path / "llama", llama_fields("llama"))[0]


@pytest.fixture
def common(tmp_path):
    rng = np.random.default_rng(0)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(" ".join(WORDS[i] for i in rng.integers(0, len(WORDS), 800)), encoding="utf-8")
    flags = ["--data", str(corpus), "--cache-dir", str(tmp_path), "--seq-len", "16", "--batch-size", "2"]
    return [*flags, "--no-progress", "--eval-every", "2", "--save-every", "2", "--threads", "2"]


def lora_train(base, out, steps: int, common) -> int:
    return cli.main(["train", "--init-from", str(base), "--out", str(out), "--max-steps", str(steps), *LORA, *common])


def test_lora_run_saves_adapters_alone_and_resumes_bit_for_bit(llama_dir, tmp_path, common):
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert lora_train(llama_dir, straight, 4, common) == 0
    assert lora_train(llama_dir, split, 2, common) == 0
    assert cli.main(["train", "--resume", str(split), "--max-steps", "4", "--no-progress"]) == 0
    a, b = checkpoint.load_checkpoint(straight), checkpoint.load_checkpoint(split)
    assert a.params.keys() == b.params.keys() and all(np.array_equal(a.params[n], b.params[n]) for n in a.params)
    for moment in ("m", "v"):
        assert all(np.array_equal(a.optimizer_state[moment][n], b.optimizer_state[moment][n]) for n in a.params)
    assert (straight / LOSS_CSV).read_text() == (split / LOSS_CSV).read_text()
    assert a.state["lora"] == {"rank": 4, "alpha": 8.0, "dropout": 0.1, "targets": ["q", "v", "down"],
                               "base": str(llama_dir.resolve())}  # fmt: skip

    base, _ = load_model(llama_dir)
    tuned, _ = load_model(straight)
    L = base.config.num_layers
    assert sorted(a.params) == sorted(f"layers.{i}.{p}.lora_{t}.{ab}" for i in range(L) for p, t in
                                      (("attn.qkv_proj", "q"), ("attn.qkv_proj", "v"), ("mlp.down_proj", "down"))
                                      for ab in "ab")  # fmt: skip
    assert sum(p.size for p in a.params.values()) < base.num_params() / 10  # small: the adapters alone
    assert all(np.array_equal(tuned.params[n], base.params[n]) for n in base.params)  # the base frozen
    assert all(a.params[n].any() for n in a.params)  # every adapter moved (B from zero too)
    ids = np.arange(12).reshape(1, 12) % base.config.vocab_size
    assert not np.allclose(tuned.logits(ids), base.logits(ids))  # ... and the adapted model differs


def test_convert_writes_a_lora_run_merged_or_as_a_peft_adapter(llama_dir, tmp_path, common, capsys):
    run = tmp_path / "run"
    assert lora_train(llama_dir, run, 2, common) == 0
    assert cli.main(["convert", str(run), str(tmp_path / "merged")]) == 0
    assert cli.main(["convert", str(run), str(tmp_path / "adapter"), "--peft"]) == 0
    written = sorted(p.name for p in (tmp_path / "adapter").iterdir())
    assert written == ["adapter_config.json", "adapter_model.safetensors"]
    adapted, _ = load_model(run, "float64")
    merged, _ = load_model(tmp_path / "merged", "float64")
    assert merged.lora is None and adapted.lora is not None
    ids = np.arange(24).reshape(2, 12) % adapted.config.vocab_size
    np.testing.assert_allclose(merged.logits(ids), adapted.logits(ids), rtol=0, atol=1e-5)  # float32 files
    assert cli.main(["convert", str(llama_dir), str(tmp_path / "numforge")]) == 0
    assert cli.main(["convert", str(tmp_path / "numforge"), str(tmp_path / "x"), "--peft"]) != 0
    assert "--peft writes a LoRA run's adapters" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--lora", "q,x"], "LoRA targets must be distinct names among"),
        (["--lora-rank", "4"], "--lora-rank set LoRA adapters' options: give --lora too"),
    ],
)
def test_bad_lora_flags_are_named(llama_dir, tmp_path, common, capsys, flags, message):
    args = ["train", "--init-from", str(llama_dir), "--out", str(tmp_path / "o"), *flags, *common]
    assert cli.main(args) != 0
    assert message in capsys.readouterr().err


def test_lora_needs_a_pretrained_model(tmp_path, common, capsys):
    assert cli.main(["train", "--out", str(tmp_path / "o"), "--lora", "q", *common]) != 0
    assert "--lora adapts a pretrained model: give it with --init-from" in capsys.readouterr().err
