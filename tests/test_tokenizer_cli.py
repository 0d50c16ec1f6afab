"""`numforge tokenizer show` and `numforge tokenizer train`; errors through the one handler of `numforge`."""

import signal
from pydoc_data.topics import topics

import pytest
from helpers import signal_at

from numforge import interrupts
from numforge.cli import main
from numforge.data import tokenizers
from numforge.tokenizer import BPETokenizer, _train, bpe_file

DOCS = "".join(topics[key] for key in sorted(topics))


def test_tokenizer_train_then_tokenize(tmp_path, capsys):
    data = tmp_path / "corpus.txt"
    data.write_text(DOCS[:20_000] + "the cat sat on the mat 世界 🙂", encoding="utf-8")
    out = tmp_path / "tok.json"
    assert main(["tokenizer", "train", "--data", str(data), "--vocab-size", "300", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "trained 300 tokens (43 merges, 1 special)" in captured.out
    assert "BPE merges" in captured.err  # the progress bar
    tok = BPETokenizer.load(out)
    assert tok.vocab_size == 300

    assert main(["tokenizer", "show", "the cat 世<|endoftext|>", "--tokenizer", str(out), "--color", "never"]) == 0
    lines = capsys.readouterr().out.splitlines()
    ids = tok.encode("the cat 世<|endoftext|>", allowed_special="all")
    pieces = "".join(f"[{tok.token_bytes(i).decode('utf-8', 'backslashreplace')}]" for i in ids)
    assert lines[0] == pieces
    # 世 occurs once in the corpus: its three bytes stay separate tokens, shown escaped
    assert lines[0].endswith("[\\xe4][\\xb8][\\x96][<|endoftext|>]")
    assert lines[1] == f"22 characters, 24 bytes -> {len(ids)} tokens"
    assert lines[3:] == [f"{i:>7}  {tok.token_bytes(i)!r}" for i in ids]


def test_tokenize_colours_boundaries_when_asked(tmp_path, capsys):
    path = tmp_path / "tok.json"
    BPETokenizer.train("ab ab ab", 259).save(path)  # merges (97, 98), (32, 256)
    assert main(["tokenizer", "show", "ab ab", "--tokenizer", str(path), "--color", "always"]) == 0
    first_line = capsys.readouterr().out.splitlines()[0]
    assert first_line == "\x1b[48;5;153mab\x1b[0m\x1b[48;5;223m ab\x1b[0m"  # two tokens, two colours


def test_show_without_a_tokenizer_trains_the_default_once_then_reads_its_cache(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NUMFORGE_CACHE", str(tmp_path))
    assert main(["tokenizer", "show", "Hello world, 世界 🙂", "--color", "never"]) == 0
    captured = capsys.readouterr()
    assert "training a BPE tokenizer with 2048 tokens" in captured.err
    assert captured.out.splitlines()[0].startswith("[H")
    assert main(["tokenizer", "show", "Hello world, 世界 🙂", "--color", "never"]) == 0
    again = capsys.readouterr()
    assert again.err == "" and again.out == captured.out  # read from the cache: no second training


def test_errors_are_reported_not_raised(tmp_path, capsys):
    missing = tmp_path / "missing.json"
    assert main(["tokenizer", "show", "x", "--tokenizer", str(missing)]) == 2
    assert capsys.readouterr().err == f"numforge tokenizer: No such file or directory: {missing}\n"
    data = tmp_path / "corpus.txt"
    data.write_text("abc")
    assert main(["tokenizer", "train", "--data", str(data), "--vocab-size", "256", "--out", str(tmp_path / "t")]) == 2
    assert "vocab_size=256 is too small" in capsys.readouterr().err


def test_tokenizer_train_refuses_a_missing_output_directory_before_training(tmp_path, capsys):
    data = tmp_path / "d.txt"
    data.write_text("hello hello world", encoding="utf-8")
    out = tmp_path / "missing" / "tok.json"
    assert main(["tokenizer", "train", "--data", str(data), "--vocab-size", "300", "--out", str(out)]) == 2
    assert "no directory" in capsys.readouterr().err


def test_debug_prints_the_traceback(tmp_path):
    import pytest

    with pytest.raises(FileNotFoundError):
        main(["--debug", "tokenizer", "show", "x", "--tokenizer", str(tmp_path / "missing.json")])


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize(
    "phase, hook", [("counting", (tokenizers, "tasks", 1)), ("merging", (_train, "_merge_everywhere", 3))]
)
def test_a_stop_signal_while_training_a_tokenizer_writes_nothing(tmp_path, capsys, monkeypatch, phase, hook, signum):
    data = tmp_path / "corpus.txt"
    data.write_text(DOCS[:20_000], encoding="utf-8")
    signal_at(monkeypatch, *hook, signum)
    argv = ["tokenizer", "train", "--data", str(data), "--vocab-size", "300", "--out", str(tmp_path / "tok.json")]
    assert main([*argv, "--workers", "2"]) == 128 + signum
    assert capsys.readouterr().err.strip().endswith(f"numforge tokenizer: {interrupts.describe(signum)}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt"]


def test_a_stop_signal_while_the_tokenizer_is_saved_ends_the_job_130_with_the_file_whole(tmp_path, monkeypatch):
    data = tmp_path / "corpus.txt"
    data.write_text(DOCS[:20_000], encoding="utf-8")
    signal_at(monkeypatch, bpe_file, "write_text_atomic", 1, signal.SIGINT)
    argv = ["tokenizer", "train", "--data", str(data), "--vocab-size", "300", "--out", str(tmp_path / "tok.json")]
    assert main(argv) == 130  # the signal is not lost; what was being written is complete
    assert BPETokenizer.load(tmp_path / "tok.json").vocab_size == 300
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "tok.json"]
