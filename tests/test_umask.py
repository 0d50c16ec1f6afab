"""Every file and folder numforge writes follows the user's umask, whichever command writes it.

Under umask 027 a file is 0640 and a folder 0750: a temporary file kept as it was made (``mkstemp``: 0600), a
file another library creates with its own mode (safetensors: 0600) or a folder made 0700 would show here.
The commands: prepare, tokenizer train, train (checkpoints, loss.csv, loss.png, state.json), train --init-from
with --lora, convert both ways and to a PEFT adapter, inspect's page, and an exercise file.
"""

import os

import numpy as np
import pytest
from hf_dirs import llama_fields, write_llama_dir

from numforge import cli

pytest.importorskip("safetensors")

UMASK = 0o027
WORDS = "the cat sat on a mat while one dog ran to the old red barn and back".split()


def modes_under(root) -> dict[str, str]:
    """``{path: mode}`` of ``root`` and everything under it."""
    return {p.relative_to(root.parent).as_posix(): oct(p.stat().st_mode & 0o777) for p in [root, *root.rglob("*")]}


def expected(modes: dict[str, str], root) -> dict[str, str]:
    folder, file = oct(0o777 & ~UMASK), oct(0o666 & ~UMASK)
    return {name: folder if (root.parent / name).is_dir() else file for name in modes}


@pytest.fixture
def under_umask():
    previous = os.umask(UMASK)
    try:
        yield
    finally:
        os.umask(previous)


def test_every_file_numforge_writes_follows_the_umask(tmp_path, under_umask, capsys):
    rng = np.random.default_rng(0)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(" ".join(WORDS[i] for i in rng.integers(0, len(WORDS), 800)), encoding="utf-8")
    hf_dir = write_llama_dir(tmp_path / "llama", llama_fields("llama"))[0]
    out = tmp_path / "out"
    common = ["--cache-dir", str(tmp_path / "cache"), "--seq-len", "16", "--batch-size", "2", "--no-progress"]
    commands = [
        ["tokenizer", "train", "--data", str(corpus), "--vocab-size", "300", "--out", str(out / "tok.json")],
        ["prepare", "--data", str(corpus), "--tokenizer", str(out / "tok.json"), "--out", str(out / "tokens")],
        ["train", "--data", str(corpus), "--out", str(out / "run"), "--max-steps", "2", "--eval-every", "1",
         "--save-every", "1", "--vocab-size", "300", "--layers", "1", "--d-model", "16", "--heads", "2", *common],
        ["train", "--init-from", str(hf_dir), "--data", str(corpus), "--out", str(out / "lora"), "--max-steps", "1",
         "--lora", "q,v", *common],
        ["convert", str(hf_dir), str(out / "as-numforge")],
        ["convert", str(out / "as-numforge"), str(out / "back-to-hf")],
        ["convert", str(out / "lora"), str(out / "adapter"), "--peft"],
        ["inspect", "--checkpoint", str(out / "run"), "--prompt", "the cat", "--out", str(out / "page.html")],
        ["gradcheck", "--write-exercise", "rmsnorm", "--out", str(out / "my_rmsnorm.py")],
    ]  # fmt: skip
    out.mkdir()
    for command in commands:
        assert cli.main(command) == 0, command
    capsys.readouterr()
    written = modes_under(out)
    for name in ("out/run/loss.csv", "out/adapter/adapter_model.safetensors", "out/back-to-hf/model.safetensors"):
        assert name in written, sorted(written)
    assert written == expected(written, out)
