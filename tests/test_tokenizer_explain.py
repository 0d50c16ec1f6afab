"""`numforge tokenizer explain` and `stats`: the merges step by step, bytes never shown as U+FFFD; chars per token."""

import re
from pydoc_data.topics import topics

import pytest

from numforge.cli import main
from numforge.tokenizer import EOT, BPETokenizer
from numforge.tokenizer.explain import explain, token_text
from numforge.tokenizer.pipeline import Pipeline

DOCS = "".join(topics[key] for key in sorted(topics))[:30_000]
TEXTS = ["", "Hello world, 世界 🙂", "  spaces\n\nand\ttabs  ", f"one{EOT}two {EOT}", "aaaaaaaaaaaa", "x = f(y) + 1"]


def test_wikipedias_example_merge_by_merge():
    tok = BPETokenizer.train("aaabdaaabac", 256 + 3, special_tokens=())  # (a,a)->256, (a,b)->257, (256,257)->258
    [chunk] = explain(tok, "aaabdaaabac")
    assert chunk.start_ids == [97, 97, 97, 98, 100, 97, 97, 97, 98, 97, 99]
    steps = [(m.rank, m.pair, m.new_id) for m in chunk.merges]
    assert steps == [(0, (97, 97), 256), (1, (97, 98), 257), (2, (256, 257), 258)]
    assert [m.ids for m in chunk.merges] == [
        [256, 97, 98, 100, 256, 97, 98, 97, 99],
        [256, 257, 100, 256, 257, 97, 99],
        [258, 100, 258, 97, 99],
    ]


@pytest.fixture(scope="module")
def tok():
    return BPETokenizer.train(DOCS + " 世界" * 300, 420)  # the CJK bytes merge in part: tokens inside a character


@pytest.mark.parametrize("text", TEXTS)
def test_the_steps_end_in_the_tokenizers_own_ids(tok, text):
    chunks = explain(tok, text)
    assert [i for chunk in chunks for i in chunk.ids] == tok.encode(text, allowed_special="all")
    assert "".join(chunk.text for chunk in chunks) == text
    for chunk in chunks:
        ranks = [m.rank for m in chunk.merges]
        assert ranks == sorted(ranks)  # lowest rank first, each rank once


def test_partial_characters_are_shown_as_bytes(tok, tmp_path, capsys):
    assert token_text("世".encode()) == "世" and token_text(b"\xe4\xb8") == "<e4 b8>" and token_text(b"a\n") == "a\\n"
    tok.save(tmp_path / "tok.json")
    assert main(["tokenizer", "explain", "世界 🙂", "--tokenizer", str(tmp_path / "tok.json")]) == 0
    out = capsys.readouterr().out
    assert "\ufffd" not in out
    assert "[<f0>][<9f>][<99>][<82>]" in out  # the emoji, never seen in training: four byte tokens
    assert f"ids: {tok.encode('世界 🙂')}" in out
    assert re.search(r"-> id \d+ .*<[0-9a-f]{2}( [0-9a-f]{2})+>", out)  # a merge inside a character, as its bytes


def test_stats_counts_characters_per_token(tmp_path, capsys):
    data = tmp_path / "corpus.txt"
    data.write_text(DOCS, encoding="utf-8")
    assert (
        main(["tokenizer", "stats", "--data", str(data), "--vocab-sizes", "300,400", "--cache-dir", str(tmp_path)]) == 0
    )
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split() for line in lines[3:6]}  # under the header and its rule
    assert rows["bytes"][2] == f"{len(DOCS.encode('utf-8')):,}"
    for size in (300, 400):
        tok = BPETokenizer.train(DOCS, size)
        tokens = len(tok.encode_ordinary(DOCS))
        assert rows[str(size)][2] == f"{tokens:,}"
        assert rows[str(size)][3] == f"{len(DOCS) / tokens:.2f}"
    assert float(rows["400"][3]) > float(rows["300"][3]) > 1.0  # more merges, longer tokens
    assert main(["tokenizer", "stats", "--vocab-sizes", "100"]) == 2


def test_a_pipelines_steps_and_a_chunk_ignore_merges_keeps_whole(tmp_path, capsys):
    # merges (h, e) -> 256, (t, h) -> 257, (th, e) -> 258: by rank "the" is [t][he], but it is a token itself
    steps = [{"type": "Digits", "individual_digits": True}, {"type": "ByteLevel", "add_prefix_space": False}]
    pipeline = Pipeline(None, {"type": "Sequence", "pretokenizers": steps})
    tok = BPETokenizer([(104, 101), (116, 104), (257, 101)], (), None, pipeline=pipeline, ignore_merges=True)
    tok.save(tmp_path / "tok.json")  # version 3 of numforge's file
    assert main(["tokenizer", "explain", "the 42", "--tokenizer", str(tmp_path / "tok.json")]) == 0
    out = capsys.readouterr().out
    assert "step 1, Digits (each digit alone): 'the ' '4' '2'" in out  # Digits first, then GPT-2's regex
    assert "step 2, ByteLevel (GPT-2's pattern): 'the' ' ' '4' '2'" in out
    assert "ignore_merges: the chunk is itself a token, id 258; merging by rank would give [t][he] [116, 256]" in out
    assert "ids: [258, 32, 52, 50]" in out and tok.encode("the 42") == [258, 32, 52, 50]
