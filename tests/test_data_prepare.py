"""numforge prepare: the same bytes for any number of workers, the in-memory oracle's ids, atomic output,
Ctrl-C, training on the memory map, and resume refusing other token files."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from pydoc_data.topics import topics

import numpy as np
import pytest
from helpers import signal_at, subprocess_env

from numforge import atomic, checkpoint, cli, interrupts
from numforge.data import (
    encode_documents,
    load_documents,
    load_or_train_tokenizer,
    open_prepared,
    prepare,
    prepare_tokens,
    prepared_for,
    sources,
    token_dtype,
    train_tokenizer,
)
from numforge.data.tokens import TokenWriter
from numforge.tokenizer import EOT, BPETokenizer

DOCS = [topics[key] for key in sorted(topics)]
PHASE_HOOK = str(Path(__file__).resolve().parent / "phase_hook.py")
WORDS = "the cat sat on a mat while one dog ran to the old red barn and back".split()


@pytest.fixture(scope="module")
def tokenizer():
    return BPETokenizer.train(DOCS[:40], 600)


@pytest.fixture
def corpus(tmp_path):
    """A directory: pydoc topics as .txt files (one of them long, one empty), and a .md file the glob skips."""
    root = tmp_path / "corpus"
    (root / "nested").mkdir(parents=True)
    for i, text in enumerate(DOCS[:30]):
        (root / ("nested" if i % 3 else "") / f"{i:02d}.txt").write_text(text, encoding="utf-8")
    (root / "long.txt").write_text("\n".join(DOCS[30:60]) + "\n世界 🙂", encoding="utf-8")
    (root / "empty.txt").write_text(" \n\n", encoding="utf-8")
    (root / "skip.md").write_text("not read", encoding="utf-8")
    return root


def test_same_bytes_from_1_and_3_workers_and_the_ids_of_the_in_memory_oracle(tmp_path, corpus, tokenizer, monkeypatch):
    monkeypatch.setattr(sources, "PIECE_BYTES", 3000)  # long.txt is cut into many pieces
    monkeypatch.setattr(sources, "TASK_BYTES", 5000)  # many tasks in flight on 3 workers
    prepare_tokens(corpus, tokenizer, tmp_path / "one", workers=1)
    index = prepare_tokens(corpus, tokenizer, tmp_path / "three", workers=3)
    for name in ("tokens.npy", "index.json", "tokenizer.json"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "three" / name).read_bytes()

    expected = encode_documents(load_documents(corpus), tokenizer)  # whole documents, in memory
    prepared = open_prepared(tmp_path / "three")
    assert isinstance(prepared.tokens, np.memmap) and prepared.tokens.dtype == np.uint16
    np.testing.assert_array_equal(prepared.tokens, expected)
    assert index["documents"] == 31 and index["empty_documents"] == 1
    assert index["num_tokens"] == len(expected) and np.sum(expected == tokenizer.special_tokens[EOT]) == 31
    train, val = prepared.split(seq_len=8)
    assert len(train) == round(0.9 * len(expected)) and len(train) + len(val) == len(expected)


def test_the_embedded_corpus_prepares_as_the_old_cache_did(tmp_path, tokenizer):
    prepare_tokens(None, tokenizer, tmp_path / "p", workers=2)
    np.testing.assert_array_equal(open_prepared(tmp_path / "p").tokens, encode_documents(DOCS, tokenizer))


def test_uint32_files_round_trip_through_the_memory_map(tmp_path):
    assert token_dtype(2**16) == np.dtype("<u2") and token_dtype(2**16 + 1) == np.dtype("<u4")
    with TokenWriter(tmp_path / "t.npy", token_dtype(100_000)) as writer:
        for part in [np.array([0, 99_999, 70_000]), np.array([], dtype=np.int64), np.array([5])]:
            writer.write(part)
        writer.finish()
    loaded = np.load(tmp_path / "t.npy", mmap_mode="r")
    assert loaded.dtype == np.dtype("<u4") and loaded.tolist() == [0, 99_999, 70_000, 5]


def test_streamed_tokenizer_training_learns_the_merges_of_the_whole_text(tmp_path, corpus, monkeypatch):
    monkeypatch.setattr(sources, "PIECE_BYTES", 3000)
    monkeypatch.setattr(sources, "TASK_BYTES", 5000)
    whole = BPETokenizer.train(load_documents(corpus), 700)
    for workers in (1, 3):
        assert train_tokenizer(corpus, 700, workers=workers).merges == whole.merges
    first = "".join(load_documents(corpus))[:7000]
    assert train_tokenizer(corpus, 400, max_bytes=len(first.encode()), workers=1).merges == (
        BPETokenizer.train(first, 400).merges
    )


def test_an_existing_output_is_refused_and_nothing_partial_is_left_on_error(tmp_path, tokenizer):
    (tmp_path / "taken").mkdir()
    with pytest.raises(ValueError, match="already exists"):
        prepare_tokens(["text"], tokenizer, tmp_path / "taken", workers=1)
    (tmp_path / "bad.txt").write_bytes(b"fine text\n" * 10 + b"\xff")
    with pytest.raises(ValueError, match="byte 100"):
        prepare_tokens(tmp_path / "bad.txt", tokenizer, tmp_path / "out", workers=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.txt", "taken"]  # no out, no hidden temporary


def word_salad(path, megabytes, seed=0):
    """About ``megabytes`` MB of lines of random words, written a block at a time."""
    rng = np.random.default_rng(seed)
    block = " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), 200_000))
    block = "\n".join(block[i : i + 79] for i in range(0, len(block), 79)) + "\n"
    with open(path, "w", encoding="utf-8") as handle:
        for _ in range(max(1, round(megabytes * 1e6 / len(block)))):
            handle.write(block)
    return path


PHASES = {  # (module or class, function, call): where a stop signal arrives
    "starting": (prepare, "tasks", 1),  # before the first task is encoded
    "encoding": (TokenWriter, "write", 2),  # the first task's ids written, more to come
    "finishing": (prepare, "write_index", 1),  # every file written, the directory not yet renamed
}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("phase", PHASES)
def test_a_stop_signal_in_each_phase_of_prepare_leaves_nothing(
    tmp_path, corpus, tokenizer, monkeypatch, capsys, phase, signum
):
    monkeypatch.setattr(sources, "TASK_BYTES", 5000)  # many tasks
    tokenizer.save(tmp_path / "tok.json")
    signal_at(monkeypatch, *PHASES[phase], signum)
    argv = ["prepare", "--data", str(corpus), "--tokenizer", str(tmp_path / "tok.json"), "--out", str(tmp_path / "p")]
    assert cli.main([*argv, "--workers", "2", "--no-progress"]) == 128 + signum
    assert capsys.readouterr().err.strip() == f"numforge prepare: {interrupts.describe(signum)}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "tok.json"]  # no output, no temporary


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_from_outside_during_prepare_ends_it_130_or_143_with_nothing_left(tmp_path, tokenizer, signum):
    data = word_salad(tmp_path / "big.txt", 0.5)
    tokenizer.save(tmp_path / "tok.json")
    out, reached = tmp_path / "prepared", tmp_path / "encoding"
    hook = [sys.executable, PHASE_HOOK, "wait", "numforge.data.tokens:TokenWriter.write", "1", str(reached)]
    argv = ["prepare", "--data", str(data), "--tokenizer", str(tmp_path / "tok.json"), "--out", str(out)]
    child = subprocess.Popen(
        [*hook, *argv, "--workers", "2", "--no-progress"], env=subprocess_env(), stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while not reached.exists():  # the job's own progress: it is writing the first task's ids, on 2 workers
        assert child.poll() is None and time.monotonic() < deadline, "prepare ended before it could be interrupted"
        time.sleep(0.01)
    child.send_signal(signum)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 128 + signum, err
    assert err.strip().endswith(f"numforge prepare: {interrupts.describe(signum)}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.txt", "encoding", "tok.json"]  # no output, no temporary
    with pytest.raises(FileNotFoundError):
        open_prepared(out)


def test_what_a_killed_prepare_left_is_removed_and_what_a_live_one_writes_is_not(tmp_path, tokenizer):
    (tmp_path / ".p.0123abcd.tmp").mkdir()  # a prepare of p killed outright
    (tmp_path / ".p.0123abcd.tmp" / "tokens.npy").write_bytes(b"half")
    with atomic.atomic_directory(tmp_path / "q") as writing:  # another prepare, of q, running now
        prepare_tokens(["some text"], tokenizer, tmp_path / "p", workers=1)
        assert writing.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p", "q"]


def test_what_killed_runs_left_in_the_caches_is_removed_when_a_run_reads_them(tmp_path, tokenizer):
    cache = tmp_path / "cache"
    debris = {"tokens": ".0123456789abcdef0123456789abcdef.0123abcd.tmp", "tokenizers": ".k.json.0123abcd.tmp"}
    for part, name in debris.items():
        (cache / part).mkdir(parents=True)
        (cache / part / name).write_text("half")  # of another corpus: removed all the same
    load_or_train_tokenizer(["some text " * 50], 260, cache_dir=cache, say=lambda _: None)
    prepared_for(["some text " * 50], tokenizer, cache, workers=1)
    assert [p.name for p in cache.rglob("*") if p.name.endswith(".tmp")] == []


def test_train_on_prepared_tokens_and_resume_refuses_other_token_files(tmp_path, corpus, tokenizer, capsys):
    tokenizer.save(tmp_path / "tok.json")
    prepare = ["prepare", "--tokenizer", str(tmp_path / "tok.json"), "--no-progress", "--workers", "2"]
    assert cli.main([*prepare, "--data", str(corpus), "--out", str(tmp_path / "p")]) == 0
    assert "prepared 31 documents (1 empty skipped)" in capsys.readouterr().out
    small = ["--layers", "1", "--d-model", "16", "--heads", "2", "--seq-len", "16", "--batch-size", "2"]
    run = str(tmp_path / "run")
    argv = ["train", "--tokens", str(tmp_path / "p"), *small, "--max-steps", "2", "--no-progress", "--out", run]
    assert cli.main(argv) == 0
    recorded = checkpoint.load_checkpoint(run).state["data"]
    index = json.loads((tmp_path / "p" / "index.json").read_text())
    assert recorded["tokens_dir"] == str((tmp_path / "p").resolve()) and recorded["files"] == ["tokens.npy"]
    assert recorded["tokens_sha256"] == index["tokens_sha256"]
    assert cli.main(["train", "--resume", run, "--max-steps", "3", "--no-progress"]) == 0
    capsys.readouterr()

    (corpus / "00.txt").write_text("changed text", encoding="utf-8")
    assert cli.main([*prepare, "--data", str(corpus), "--out", str(tmp_path / "q")]) == 0
    assert cli.main(["train", "--resume", run, "--tokens", str(tmp_path / "q"), "--max-steps", "4"]) == 2
    assert "changed since" in capsys.readouterr().err
    os.rename(tmp_path / "p", tmp_path / "old")
    os.rename(tmp_path / "q", tmp_path / "p")  # the recorded directory now holds other tokens
    assert cli.main(["train", "--resume", run, "--max-steps", "4", "--no-progress"]) == 2
    assert "a resumed run reads the token files it trained on" in capsys.readouterr().err
    assert cli.main(["train", "--resume", run, "--tokens", str(tmp_path / "old"), "--max-steps", "4"]) == 0
    assert cli.main(["train", "--tokens", str(tmp_path / "p"), "--data", str(corpus)]) == 2
    assert "--data cannot go with --tokens" in capsys.readouterr().err


LIMITED_CHILD = """
import resource, sys
import numpy as np
from numforge import cli

cli.build_parser()  # every command imported, OpenBLAS's buffers allocated, the plotter loaded: before the baseline
np.ones((64, 64)) @ np.ones((64, 64))
try:
    import matplotlib.pyplot
except ImportError:
    pass
base = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmData:"))
limit = base + int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))  # heap, anonymous maps, thread stacks: not file maps
data, tok, out, run = sys.argv[2:]
assert cli.main(["prepare", "--data", data, "--tokenizer", tok, "--out", out, "--workers", "2", "--no-progress"]) == 0
small = ["--layers", "1", "--d-model", "16", "--heads", "2", "--seq-len", "16", "--batch-size", "2"]
assert cli.main(["train", "--tokens", out, *small, "--max-steps", "2", "--eval-every", "2", "--out", run]) == 0
try:
    np.load(out + "/tokens.npy")  # the same tokens read into memory: the limit must refuse them
except MemoryError:
    print("loading the tokens whole: MemoryError")
"""


def test_a_corpus_larger_than_the_memory_limit_prepares_and_trains(tmp_path):
    """RLIMIT_DATA caps what the process may allocate (not the token file's read-only map) at 48 MB above
    its baseline (two worker threads' stacks take 16 of them); the corpus (54 MB) and its token file (~53 MB)
    are each larger, and a list of their ids would be 4x larger still."""
    headroom = 48 << 20
    data = word_salad(tmp_path / "big.txt", 54)
    BPETokenizer.train(data.read_text(encoding="utf-8")[:30_000], 280).save(tmp_path / "tok.json")
    out, run = tmp_path / "p", tmp_path / "run"
    argv = [
        sys.executable,
        "-c",
        LIMITED_CHILD,
        str(headroom),
        str(data),
        str(tmp_path / "tok.json"),
        str(out),
        str(run),
    ]
    # one training thread: each more takes a stack and an OpenBLAS buffer of its own (measured: 32 MB more)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "NUMFORGE_THREADS": "1"}
    child = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert child.returncode == 0, child.stderr[-3000:]
    assert "loading the tokens whole: MemoryError" in child.stdout  # the limit bites: what fits is the streaming
    assert data.stat().st_size > headroom and (out / "tokens.npy").stat().st_size > headroom
    assert checkpoint.load_checkpoint(run).state["step"] == 2
