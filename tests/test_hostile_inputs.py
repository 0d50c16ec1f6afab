"""Hostile and meaningless inputs, class by class (issue 16): each gets one clear error that names the file or
the flag, before any work starts where it can be found then; no file can hang numforge, exhaust its memory or
run code. The property-based corruption of every file a run writes is in ``test_hostile_files.py``."""

import errno
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
from helpers import make_tiny_run, reseal

from numforge import checkpoint, cli, resources
from numforge.data import load_documents, open_prepared, prepared_for
from numforge.tokenizer import BPETokenizer, pretokenize
from numforge.training import resume_run, train
from numforge.training.logs import read_loss_csv

EVIL_PATTERN = r"(?:a|aa)+$"  # catastrophic backtracking: about 1.6^n steps on n "a"s and a "!"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_run(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def run_copy(tiny, tmp_path):
    """A copy of the tiny run (its corpus and caches stay where they are) and its checkpoint directory."""
    shutil.copytree(tiny, tmp_path / "run")
    return tmp_path / "run", checkpoint.latest_checkpoint_dir(tmp_path / "run")


def cache_of(tiny):
    return tiny.parent / "cache"


def craft(directory, name, content):
    """Replace a checkpoint file and record it in checksums.json, as a hostile file would come."""
    path = directory / name
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(json.dumps(content))
    reseal(directory)


def edit_json(directory, name, change):
    data = json.loads((directory / name).read_text())
    change(data)
    craft(directory, name, data)


def error_of(capsys, argv):
    """The exit status and stderr of ``numforge argv`` (argparse's usage errors included)."""
    try:
        status = cli.main(argv)
    except SystemExit as exit_info:
        status = exit_info.code
    return status, capsys.readouterr().err


# ---------------------------------------------------------------- 1. raw library errors from damaged files


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 truncated", b"not a zip at all"])
def test_a_broken_array_archive_names_the_file(run_copy, content):
    # before: EOFError / zipfile.BadZipFile tracebacks
    _, directory = run_copy
    craft(directory, "params.npz", content)
    with pytest.raises(ValueError, match=r"params\.npz"):
        checkpoint.load_model(directory)


def test_latest_holding_binary_junk_names_the_file(run_copy):
    # before: "'utf-8' codec can't decode byte 0xff" without a file name
    run_dir, _ = run_copy
    (run_dir / "LATEST").write_bytes(b"\xff\xfe\x00junk")
    with pytest.raises(ValueError, match="LATEST"):
        checkpoint.load_checkpoint(run_dir)


def test_a_pickled_or_truncated_token_cache_is_rebuilt(tiny, tmp_path):
    # before: "Object arrays cannot be loaded" / "Failed to read all data", naming no file
    corpus = tiny.parent / "corpus.txt"
    tokenizer = checkpoint.load_model(tiny)[1]
    shutil.copytree(cache_of(tiny), tmp_path / "cache")
    prepared = prepared_for(corpus, tokenizer, tmp_path / "cache")
    expected = np.array(open_prepared(prepared).tokens)
    path = prepared / "tokens.npy"
    for damage in (lambda: np.save(path, np.array([{"x": 1}], dtype=object)), lambda: path.write_bytes(b"\x93NUMPY")):
        damage()
        np.testing.assert_array_equal(
            open_prepared(prepared_for(corpus, tokenizer, tmp_path / "cache")).tokens, expected
        )


def test_a_loss_log_that_is_not_numforges_names_the_file(tmp_path):
    # before: "invalid literal for int() with base 10" / KeyError, naming no file
    path = tmp_path / "loss.csv"
    for text in ("step,train_loss,val_loss,lr\nx,1,,0.1\n", "a,b\n1,2\n", "step,train_loss,val_loss,lr\n1,1\n"):
        path.write_text(text)
        with pytest.raises(ValueError, match=r"loss log .*loss\.csv is damaged"):
            read_loss_csv(path, 10)


# ---------------------------------------------------------------- 2. sizes checked before allocation


def test_a_config_claiming_a_huge_width_is_compared_with_the_arrays_before_anything_is_built(run_copy):
    # before: GPT(config) tried to allocate terabytes before load_params compared shapes
    _, directory = run_copy
    edit_json(directory, "config.json", lambda config: config.update(d_model=1_000_000, d_ff=4_000_000))
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"config\.json and params\.npz disagree: config\.json makes"):
            checkpoint.load_model(directory)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**24  # the files read (a tiny run's), never the 10**12-scalar model the config claims


def test_an_array_header_claiming_more_than_its_member_holds_is_refused_unread(run_copy):
    _, directory = run_copy
    with zipfile.ZipFile(directory / "params.npz", "w") as archive:  # 10**12 float32s "in" 80 bytes of header
        header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }"
        archive.writestr(
            "token_embedding.npy", b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode()
        )
    reseal(directory)
    with pytest.raises(ValueError, match=r"params\.npz: .*claims shape \(1000000000000,\)"):
        checkpoint.load_checkpoint(directory)


@pytest.mark.parametrize("options", [{}, {"activation": "swiglu"}, {"tie_weights": False, "use_bias": False}])
def test_the_parameter_count_of_the_estimate_is_the_models(options):
    from numforge.model import GPT, GPTConfig
    from numforge.training.memory_plan import count_params

    config = GPTConfig(vocab_size=300, max_seq_len=16, d_model=32, num_heads=4, num_layers=3, **options)
    assert count_params(config) == GPT(config).num_params()


def test_memory_is_estimated_and_refused_with_the_limit(monkeypatch):
    monkeypatch.setattr(resources, "memory_limit", lambda: (2**30, "physical memory"))
    resources.check_fits(2**29, "a job")
    with pytest.raises(ValueError, match=r"a job needs about 3\.0 GiB of memory, more than .* 1\.0 GiB \(physical"):
        resources.check_fits(3 * 2**30, "a job")


def test_a_huge_batch_is_refused_with_an_estimate_before_the_corpus_is_read(tmp_path, capsys):
    # before: --batch-size 1000000000 reached the allocator (MemoryError traceback)
    argv = ["train", "--batch-size", "1000000000", "--data", str(tmp_path / "never-read.txt")]
    status, err = error_of(capsys, [*argv, "--cache-dir", str(tmp_path), "--out", str(tmp_path / "run")])
    assert status == 2 and "needs about" in err and "of memory, more than this machine's" in err


# ---------------------------------------------------------------- 3. state files validated


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda s: s.update(step=-1), "'step' must be an integer >= 0"),
        (lambda s: s.update(step="4"), "'step' must be an integer >= 0"),
        (lambda s: s.update(step=4.0), "'step' must be an integer >= 0"),
        (lambda s: s.pop("sampler"), "the file must be an object with the fields .* got the fields"),
        (lambda s: s["sampler"].update(batches_drawn="x"), "'sampler.batches_drawn' must be"),
        (lambda s: s["sampler"].update(bit_generator={"bit_generator": "nope"}), "'sampler.bit_generator'"),
        (lambda s: s["settings"].update(lr="fast"), "'settings': lr must be a finite number"),
        (lambda s: s["settings"].pop("lr"), "'settings' must be"),
        (lambda s: s["data"].update(tokens_sha256=None), "'data.tokens_sha256' must be"),
        (lambda s: s.update(world_size=0), "'world_size' must be a positive integer"),
    ],
)
def test_state_json_is_validated_field_by_field(tiny, run_copy, change, field):
    # before: KeyError / "invalid literal for int()" / TypeError tracebacks, naming no file
    run_dir, directory = run_copy
    edit_json(directory, "state.json", change)
    with pytest.raises(ValueError, match=r"state\.json: .*" + field.replace("(", r"\(").replace(")", r"\)")):
        resume_run(run_dir, cache_dir=cache_of(tiny))


def test_optimizer_json_of_another_step_is_named(tiny, run_copy):
    run_dir, directory = run_copy
    edit_json(directory, "optimizer.json", lambda o: o.update(step=3))
    with pytest.raises(ValueError, match=r"optimizer\.json: 'step' is 3, but the checkpoint is at step 4"):
        resume_run(run_dir, cache_dir=cache_of(tiny))


# ---------------------------------------------------------------- 4. output paths, checked before the work


@pytest.fixture
def corpus(tiny):
    return str(tiny.parent / "corpus.txt")


def test_train_output_paths_are_checked_before_the_corpus_is_read(tmp_path, capsys):
    # before: FileExistsError / NotADirectoryError tracebacks after the tokenizer was trained
    a_file = tmp_path / "file"
    a_file.write_text("x")
    never = str(tmp_path / "never-read.txt")  # a missing corpus: any path error must come first
    cases = [
        (["--out", str(a_file)], "--out .*file exists and is not a directory"),
        (["--out", str(a_file / "run")], "cannot create --out .*file is a file, not a directory"),
        (["--out", str(tmp_path / "run"), "--cache-dir", str(a_file)], "--cache-dir .*file exists and is not a dir"),
        (["--out", str(tmp_path / "run"), "--tokenizer", str(tmp_path)], "--tokenizer .* is a directory"),
        (["--resume", str(a_file)], "--resume .*file exists and is not a directory"),
    ]
    for flags, message in cases:
        status, err = error_of(capsys, ["train", "--data", never, "--cache-dir", str(tmp_path / "c"), *flags])
        assert status == 2 and re.search(message, err), (flags, err)


def test_tokenizer_output_and_input_paths_are_checked(tmp_path, capsys, corpus):
    # before: IsADirectoryError after training
    status, err = error_of(
        capsys, ["tokenizer", "train", "--data", corpus, "--vocab-size", "300", "--out", str(tmp_path)]
    )
    assert status == 2 and "--out" in err and "is a directory; give a file name" in err
    status, err = error_of(capsys, ["tokenizer", "show", "x", "--tokenizer", str(tmp_path)])
    assert status == 2 and "--tokenizer" in err and "is a directory" in err


def test_study_output_files_are_checked_before_the_model_is_loaded(tmp_path, capsys):
    missing = str(tmp_path / "no-checkpoint")  # the path error must come first
    for argv in (
        ["inspect", "--prompt", "x", "--out", str(tmp_path)],
        ["attention", "--prompt", "x", "--out", str(tmp_path)],
        ["trace", "--prompt", "x", "--dump", str(tmp_path)],
    ):
        status, err = error_of(capsys, [*argv, "--checkpoint", missing])
        assert status == 2 and "is a directory; give a file name" in err, err


def _without_root_powers() -> list[str] | None:
    """A command prefix that runs a process without the power to ignore permission bits, or None."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    probe = subprocess.run([setpriv, "--bounding-set", "-dac_override,-dac_read_search", "true"], capture_output=True)
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search"] if probe.returncode == 0 else None


def test_a_read_only_output_directory_is_refused_before_the_work(tmp_path, corpus):
    # before: PermissionError traceback (when the checkpoint was first written)
    prefix = _without_root_powers()
    if prefix is None:
        pytest.skip("running as root without setpriv: permission bits would be ignored")
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    read_only.chmod(0o555)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for argv in (
        ["train", "--data", corpus, "--out", str(read_only / "run"), "--cache-dir", str(tmp_path / "cache")],
        ["tokenizer", "train", "--data", corpus, "--vocab-size", "260", "--out", str(read_only / "tok.json")],
    ):
        done = subprocess.run(
            [*prefix, sys.executable, "-m", "numforge", *argv], capture_output=True, text=True, env=env
        )
        assert done.returncode == 2, done.stderr
        assert "no permission to write in" in done.stderr and str(read_only) in done.stderr
        assert "Traceback" not in done.stderr and "training" not in done.stderr  # refused before any work
    assert not list((tmp_path / "cache").rglob("*.json"))  # no tokenizer was trained or cached


def test_a_full_disk_says_which_checkpoint_was_kept(tiny, tmp_path, monkeypatch):
    # before: "OSError: [Errno 28] No space left on device" traceback
    shutil.copytree(tiny.parent, tmp_path / "t")
    run_dir = tmp_path / "t" / "run"
    run = resume_run(run_dir, {"max_steps": 8}, cache_dir=tmp_path / "t" / "cache")

    def full_disk(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(checkpoint, "_write_checkpoint_files", full_disk)
    with pytest.raises(OSError, match=r"checkpoint step 6 could not be written .*disk full.*the last complete "
                       r"checkpoint is step 4") as error:  # fmt: skip
        train(run, progress=False, say=lambda _: None)
    assert cli.describe_error(error.value) == str(error.value)  # printed as it is, one line
    assert checkpoint.latest_checkpoint_dir(run_dir).name == "ckpt-00000004"
    checkpoint.load_model(run_dir)  # still whole
    assert not [p for p in run_dir.iterdir() if p.name.startswith(".")]  # no half-written directory left


# ---------------------------------------------------------------- 5. split patterns: known or trusted, and timed


def _tokenizer_file(path, pattern):
    data = BPETokenizer.train("hello world " * 20, 260, special_tokens=()).to_dict()
    data["pattern"] = pattern
    path.write_text(json.dumps(data))
    return path


def test_a_pattern_from_a_file_must_be_known_or_trusted(tmp_path):
    # before: any pattern in a file was compiled and run
    for known in pretokenize.KNOWN_PATTERNS:
        assert BPETokenizer.load(_tokenizer_file(tmp_path / "ok.json", known)).pattern == known
    path = _tokenizer_file(tmp_path / "evil.json", EVIL_PATTERN)
    with pytest.raises(ValueError, match=r"evil\.json: its split pattern .* is not one numforge knows.*trust_pattern"):
        BPETokenizer.load(path)
    assert BPETokenizer.load(path, trust_pattern=True).pattern == EVIL_PATTERN


@pytest.mark.parametrize("budget", [0.1, None])  # a short budget, and the real one
def test_a_trusted_catastrophic_pattern_is_stopped_in_bounded_time(tmp_path, monkeypatch, budget):
    # before: "numforge tokenizer show" on this pattern and a line of "a"s never returned
    if budget is not None:
        monkeypatch.setattr(pretokenize, "MATCH_SECONDS", budget)
    tok = BPETokenizer.load(_tokenizer_file(tmp_path / "evil.json", EVIL_PATTERN), trust_pattern=True)
    text = "a" * 2000 + "!"
    limit = pretokenize.match_budget(len(text))
    started = time.process_time()  # the budget is processor time: what `regex` measures, whatever the load
    with pytest.raises(ValueError, match=r"took more than .* s of processor time on 2,001 characters and was stopped"):
        tok.encode(text)
    assert time.process_time() - started < limit + 1


ADVERSARIAL = {
    "spaces, then a letter": " " * 100_000 + "x",
    "spaces and tabs": " \t" * 50_000,
    "newlines after spaces": "  \n" * 33_000,
    "carriage returns": "\r\n" * 50_000,
    "apostrophes": "'" * 100_000,
    "digits": "7" * 100_000,
    "symbols, then spaces": "!?" * 50_000 + " " * 1000,
    "letters and marks": "e\u0301" * 50_000,
    # against Llama 3's and Qwen2's \s*[\r\n]+, which scans a whitespace run back to its last newline
    "a newline, then spaces": "\n" + " " * 100_000 + "x",
    "spaces, a newline, spaces": " " * 50_000 + "\n" + " " * 50_000 + "x",
    "spaces and newlines": " \n" * 50_000 + "x",
    "tabs, then a newline": "\t" * 100_000 + "\r\n",
    # against [^\r\n\p{L}\p{N}]?\p{L}+ and ?[^\s\p{L}\p{N}]+[\r\n]*: a symbol before each letter, symbols then newlines
    "a symbol before each letter": "!a" * 50_000,
    "symbols, then newlines": "!" * 50_000 + "\r\n" * 25_000,
    "contractions": "'S" * 50_000,
    "digits among letters": "a1" * 50_000,
}


@pytest.mark.parametrize("pattern", list(pretokenize.KNOWN_PATTERNS), ids=list(pretokenize.KNOWN_PATTERNS.values()))
def test_the_known_patterns_run_in_linear_time_on_adversarial_runs(pattern):
    # They run without the budget, so their bound is their structure: 100,000 characters of any run take
    # milliseconds; a quadratic pattern would take 10^10 steps (minutes).
    for name, text in ADVERSARIAL.items():
        started = time.process_time()
        chunks = pretokenize.split_chunks(text, pattern)
        assert time.process_time() - started < 2, name
        assert "".join(chunks) == text, name


def test_the_command_line_asks_before_running_a_pattern_and_bounds_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(pretokenize, "MATCH_SECONDS", 0.1)
    path = str(_tokenizer_file(tmp_path / "evil.json", EVIL_PATTERN))
    status, err = error_of(capsys, ["tokenizer", "show", "a" * 500 + "!", "--tokenizer", path])
    assert status == 2 and "--trust-pattern" in err
    status, err = error_of(capsys, ["tokenizer", "show", "a" * 500 + "!", "--tokenizer", path, "--trust-pattern"])
    assert status == 2 and "was stopped" in err


def test_a_checkpoint_tokenizer_with_an_unknown_pattern_needs_trust(run_copy):
    _, directory = run_copy
    edit_json(directory, "tokenizer.json", lambda t: t.update(pattern=r"\w+|\W"))
    with pytest.raises(ValueError, match=r"tokenizer\.json: its split pattern"):
        checkpoint.load_model(directory)
    assert checkpoint.load_model(directory, trust_pattern=True)[1].pattern == r"\w+|\W"


# ---------------------------------------------------------------- 6. pieces that do not fit together


def test_a_tokenizer_larger_than_the_models_vocabulary_is_named(tiny, run_copy):
    # before: more tokens than the model failed only on some prompts
    _, directory = run_copy
    text = (tiny.parent / "corpus.txt").read_text()
    craft(directory, "tokenizer.json", BPETokenizer.train(text, 275).to_dict())
    with pytest.raises(ValueError, match=r"tokenizer\.json has 275 tokens but config\.json's vocab_size is 270"):
        checkpoint.load_model(directory)


def test_a_model_vocabulary_padded_beyond_the_tokenizer_loads_and_samples_only_its_ids(tiny, run_copy):
    # a padded vocabulary (nanoGPT pads GPT-2's 50257 to 50304) loads (issue 11); before, fewer tokens
    # sampled ids the tokenizer could not decode: now sampling never draws them
    from numforge.generate import generate

    _, directory = run_copy
    text = (tiny.parent / "corpus.txt").read_text()
    craft(directory, "tokenizer.json", BPETokenizer.train(text, 265).to_dict())
    model, tokenizer = checkpoint.load_model(directory)
    assert (model.config.vocab_size, tokenizer.vocab_size) == (270, 265)
    for seed in range(3):
        ids = generate(model, tokenizer, "the", 40, temperature=3.0, seed=seed).ids
        assert all(i < 265 for i in ids)


def test_a_token_cache_with_ids_past_the_vocabulary_is_refused_and_rebuilt(tiny, tmp_path):
    # before: an uncaught ValueError deep in the embedding lookup
    corpus = tiny.parent / "corpus.txt"
    tokenizer = checkpoint.load_model(tiny)[1]
    prepared = prepared_for(corpus, tokenizer, tmp_path)
    expected = np.array(open_prepared(prepared).tokens)
    np.save(prepared / "tokens.npy", np.full(len(expected), 60000, dtype=np.uint16))  # same length and type
    with pytest.raises(ValueError, match=r"tokens\.npy holds id 60000, past the vocabulary of 270"):
        open_prepared(prepared, 270)
    np.testing.assert_array_equal(open_prepared(prepared_for(corpus, tokenizer, tmp_path)).tokens, expected)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_parameter_holding_nan_or_infinity_is_refused_for_sampling(run_copy, capsys, bad):
    # before: it loaded, and sampling failed with "Probabilities contain NaN"
    _, directory = run_copy
    params = dict(np.load(directory / "params.npz"))
    params["layers.0.mlp.up_proj.weight"][1, 2] = bad
    with open(directory / "params.npz", "wb") as f:
        np.savez(f, **params)
    reseal(directory)
    with pytest.raises(ValueError, match=r"params\.npz: parameter 'layers\.0\.mlp\.up_proj\.weight' holds 1 NaN"):
        checkpoint.load_model(directory)
    for command in (["sample", "--prompt", "the"], ["trace", "--prompt", "the"]):
        status, err = error_of(capsys, [*command, "--checkpoint", str(directory)])
        assert status == 2 and "up_proj.weight' holds 1 NaN or infinite" in err


# ---------------------------------------------------------------- 7. inputs that mean nothing


def test_an_empty_corpus_is_an_error_everywhere(tmp_path, capsys):
    # before: "tokenizer train" on an empty file wrote a 257-token tokenizer and only warned
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    argv = ["tokenizer", "train", "--data", str(empty), "--vocab-size", "300", "--out", str(tmp_path / "t.json")]
    status, err = error_of(capsys, argv)
    assert status == 2 and "empty.txt contains no text" in err and not (tmp_path / "t.json").exists()
    with pytest.raises(ValueError, match="the training text is empty"):
        BPETokenizer.train(["", ""], 300)
    (tmp_path / "dir").mkdir()
    for data in (empty, tmp_path / "dir"):
        with pytest.raises(ValueError, match="contains no|has no files"):
            load_documents(data)


def test_an_empty_path_is_an_error_not_the_current_directory(tmp_path, capsys, monkeypatch):
    # before: "train --data ''" trained on whatever .txt files were in the current directory
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("not a corpus " * 100)
    with pytest.raises(ValueError, match="the data path is empty"):
        load_documents("")
    for argv in (["train", "--data", ""], ["train", "--out", ""], ["sample", "--checkpoint", ""]):
        status, err = error_of(capsys, argv)
        assert status == 2 and f"argument {argv[1]}: expected a path, got ''" in err


def test_a_wrong_type_names_the_argument():
    # before: "'NoneType' object is not iterable"
    with pytest.raises(TypeError, match="text_or_texts must be a str or an iterable of str, got NoneType"):
        BPETokenizer.train(None, 260)
    with pytest.raises(TypeError, match="text_or_texts .* got bytes"):
        BPETokenizer.train(b"bytes", 260)


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["train", "--seed", "-1"], "--seed"),
        (["train", "--batch-size", "0"], "--batch-size"),
        (["train", "--max-steps", "ten"], "--max-steps"),
        (["train", "--lr", "inf"], "--lr"),
        (["train", "--vocab-size", "100"], "--vocab-size"),
        (["sample", "--checkpoint", "x", "--top-k", "0"], "--top-k"),
        (["sample", "--checkpoint", "x", "--top-p", "1.5"], "--top-p"),
        (["sample", "--checkpoint", "x", "--temperature", "nan"], "--temperature"),
        (["sample", "--checkpoint", "x", "--seed", "-3"], "--seed"),
        (["tokenizer", "train", "--data", "x", "--out", "y", "--vocab-size", "-5"], "--vocab-size"),
    ],
)
def test_every_flag_error_names_the_flag(capsys, argv, flag):
    # before: "--seed -1" was refused as "expected non-negative integer", naming no flag
    status, err = error_of(capsys, argv)
    assert status == 2 and f"argument {flag}: expected" in err


def test_a_settings_error_found_later_speaks_in_flags(tmp_path, capsys):
    argv = ["train", "--d-model", "30", "--heads", "4", "--data", str(tmp_path / "x"), "--out", str(tmp_path / "r")]
    status, err = error_of(capsys, [*argv, "--cache-dir", str(tmp_path)])
    assert status == 2 and "--d-model (30) must be divisible by --heads (4)" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["tokenizer", "show", "caf\udce9"],
        ["sample", "--checkpoint", "x", "--prompt", "caf\udce9"],
        ["trace", "--prompt", "caf\udce9"],
        ["attention", "--prompt", "caf\udce9"],
        ["inspect", "--prompt", "caf\udce9", "--out", "x.html"],
        ["tokenizer", "train", "--data", "x", "--vocab-size", "300", "--out", "y", "--special-token", "caf\udce9"],
    ],
)
def test_text_that_is_not_utf8_is_refused_the_same_way_in_every_command(capsys, argv):
    # "caf\udce9" is how Python receives the Latin-1 bytes b"caf\xe9" on a UTF-8 command line.
    # before: a traceback in one command, a clear error in another
    status, err = error_of(capsys, argv)
    assert status == 2 and "expected UTF-8 text, got byte 0xe9 at position 3" in err


def test_a_path_in_non_utf8_bytes_works_and_prints(tmp_path, capsys, corpus):
    out = str(tmp_path) + "/tok-\udce9.json"
    assert cli.main(["tokenizer", "train", "--data", corpus, "--vocab-size", "260", "--out", out]) == 0
    assert "tok-\\udce9.json" in capsys.readouterr().out
    assert BPETokenizer.load(out).vocab_size == 260
