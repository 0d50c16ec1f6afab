"""The command line on Hugging Face directories: sample, trace, convert both ways, train --init-from."""

import json
import os
import re
import sys

import numpy as np
import pytest
from hf_dirs import llama_fields, write_gpt2_dir, write_llama_dir

from numforge import backend, checkpoint, cli
from numforge.checkpoint import load_model
from numforge.hf import load_pretrained

pytest.importorskip("safetensors")

WORDS = "the cat sat on a mat while one dog ran to the old red barn and back".split()


@pytest.fixture(params=["gpt2", "llama", "qwen3"])
def hf_dir(tmp_path, request):
    """GPT-2, Llama (GQA) and Qwen3 (QK-norm, head_dim 6 of a 16-wide model) directories of the same size."""
    if request.param == "gpt2":
        return write_gpt2_dir(tmp_path / "gpt2")[0]
    return write_llama_dir(tmp_path / request.param, llama_fields(request.param))[0]


@pytest.fixture
def corpus(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "corpus.txt"
    path.write_text(" ".join(WORDS[i] for i in rng.integers(0, len(WORDS), 800)), encoding="utf-8")
    return path


def same_params(a, b) -> bool:
    return a.keys() == b.keys() and all(
        np.array_equal(backend.to_numpy(a[name]), backend.to_numpy(b[name])) for name in a
    )


def test_sample_and_trace_read_a_hugging_face_directory(hf_dir, capsys):
    args = ["sample", "--checkpoint", str(hf_dir), "--prompt", "The", "--max-new-tokens", "8", "--temperature", "0"]
    assert cli.main(args) == 0
    printed = capsys.readouterr().out
    model, tokenizer = load_pretrained(hf_dir)
    greedy = []
    for _ in range(8):  # greedy by hand, without the KV cache: the argmax of the last position's logits
        ids = tokenizer.encode("The") + greedy
        logits = backend.to_numpy(model.logits(backend.asarray(np.array([ids]))))[0, -1]
        greedy.append(int(np.argmax(logits[: tokenizer.vocab_size])))  # the ids past it are padding, never sampled
    end = tokenizer.special_tokens["<|endoftext|>"]
    expected = tokenizer.decode(greedy[: greedy.index(end)] if end in greedy else greedy)
    assert printed == "The" + expected + "\n"
    assert cli.main(["trace", "--checkpoint", str(hf_dir), "--prompt", "Hello", "--backward", "--lens"]) == 0
    out = capsys.readouterr().out
    assert "predictions at each position" in out and "logit lens" in out and "backward pass" in out
    assert cli.main(["attention", "--checkpoint", str(hf_dir), "--prompt", "Hello there", "--layer", "1"]) == 0
    assert "layer 1" in capsys.readouterr().out
    page = hf_dir.parent / "page.html"
    assert cli.main(["inspect", "--checkpoint", str(hf_dir), "--prompt", "Hello", "--out", str(page)]) == 0
    assert page.stat().st_size > 0
    assert cli.main(["params", "--checkpoint", str(hf_dir)]) == 0
    assert f"total {model.num_params():,}" in " ".join(capsys.readouterr().out.split())


def test_convert_both_ways_keeps_the_model(hf_dir, tmp_path, capsys):
    run_dir, back = tmp_path / "as-numforge", tmp_path / "back-to-hf"
    assert cli.main(["convert", str(hf_dir), str(run_dir)]) == 0
    original, tokenizer = load_pretrained(hf_dir)
    converted, converted_tokenizer = load_model(run_dir)
    assert same_params(original.params, converted.params)
    assert converted_tokenizer.to_dict() == tokenizer.to_dict()
    assert cli.main(["convert", str(run_dir), str(back)]) == 0
    assert same_params(load_pretrained(back)[0].params, original.params)
    capsys.readouterr()
    assert cli.main(["convert", str(run_dir), str(back)]) == 2
    assert "back-to-hf already exists" in capsys.readouterr().err
    assert cli.main(["train", "--resume", str(run_dir), "--max-steps", "2"]) == 2
    assert (
        "holds a converted model, not a training run: start a run from it with --init-from" in capsys.readouterr().err
    )


def test_converted_files_follow_the_umask(hf_dir, tmp_path, capsys):
    """Under umask 022 every file convert writes, both ways, is 0644 and every folder 0755 (safetensors makes its
    file 0600 by itself)."""
    previous = os.umask(0o022)
    try:
        run_dir, back = tmp_path / "as-numforge", tmp_path / "back-to-hf"
        assert cli.main(["convert", str(hf_dir), str(run_dir)]) == 0
        assert cli.main(["convert", str(run_dir), str(back)]) == 0
    finally:
        os.umask(previous)
    written = [p for d in (run_dir, back) for p in [d, *d.rglob("*")]]
    assert any(p.name == "model.safetensors" for p in written)
    modes = {p.relative_to(tmp_path).as_posix(): oct(p.stat().st_mode & 0o777) for p in written}
    assert modes == {name: "0o755" if (tmp_path / name).is_dir() else "0o644" for name in modes}


def test_train_init_from_fine_tunes_and_resumes(hf_dir, tmp_path, corpus, capsys):
    common = ["--data", str(corpus), "--cache-dir", str(tmp_path), "--seq-len", "16", "--batch-size", "2"]
    common += ["--no-progress", "--eval-every", "2", "--save-every", "2"]
    out = tmp_path / "tuned"
    assert cli.main(["train", "--init-from", str(hf_dir), "--out", str(out), "--max-steps", "2", *common]) == 0
    tuned = checkpoint.load_checkpoint(out)
    original, tokenizer = load_pretrained(hf_dir)
    assert tuned.config == original.config.to_dict() and tuned.tokenizer == tokenizer.to_dict()
    assert tuned.state["step"] == 2
    changed = [n for n, p in original.params.items() if not np.array_equal(tuned.params[n], backend.to_numpy(p))]
    assert len(changed) == len(original.params)  # every parameter moved
    assert cli.main(["train", "--resume", str(out), "--max-steps", "3", "--no-progress"]) == 0
    assert checkpoint.load_checkpoint(out).state["step"] == 3


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--d-model", "32"], "--d-model 32 disagrees with .*whose d_model is 16"),
        (["--layers", "3"], "--layers 3 disagrees with .*whose num_layers is 2"),
        (["--seq-len", "64"], "--seq-len 64 exceeds the 32 positions of"),
        (["--vocab-size", "500"], "--init-from uses the pretrained model's tokenizer"),
        (["--resume", "x"], "cannot be combined with --resume"),
    ],
)
def test_train_init_from_refuses_flags_that_disagree(hf_dir, tmp_path, corpus, capsys, flags, message):
    args = ["train", "--init-from", str(hf_dir), "--data", str(corpus), "--out", str(tmp_path / "o"), *flags]
    assert cli.main(args) == 2
    assert re.search(message, capsys.readouterr().err)


def test_train_init_from_sets_dropout(hf_dir, tmp_path, corpus):
    args = ["train", "--init-from", str(hf_dir), "--data", str(corpus), "--out", str(tmp_path / "o"), "--seq-len", "16"]
    assert cli.main([*args, "--dropout", "0.1", "--max-steps", "1", "--batch-size", "2", "--no-progress"]) == 0
    assert checkpoint.load_checkpoint(tmp_path / "o").config["drop_prob"] == 0.1


def test_a_command_without_safetensors_says_how_to_install(hf_dir, capsys, monkeypatch):
    for name in ("safetensors", "safetensors.numpy"):
        monkeypatch.setitem(sys.modules, name, None)
    assert cli.main(["sample", "--checkpoint", str(hf_dir), "--prompt", "The", "--max-new-tokens", "2"]) == 2
    assert 'pip install -e ".[hf]"' in capsys.readouterr().err


def test_not_a_model_directory_is_named(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    assert cli.main(["sample", "--checkpoint", str(tmp_path), "--prompt", "x"]) == 2
    assert "config.json: model_type is 'bert'; numforge loads 'gpt2', 'llama'," in capsys.readouterr().err
    assert cli.main(["sample", "--checkpoint", str(tmp_path / "nothing"), "--prompt", "x"]) == 2
    assert "no checkpoint in" in capsys.readouterr().err
