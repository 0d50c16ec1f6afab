"""Streamed sources: JSON lines, Parquet, long files cut into pieces, bad UTF-8 named or replaced and counted."""

import json
from pydoc_data.topics import topics

import pytest

from numforge.data import sources
from numforge.data.sources import Piece, ReadStats, as_source, first_bytes, load_documents, read_pieces, source_hash
from numforge.tokenizer import BPETokenizer
from numforge.tokenizer.pretokenize import last_safe_cut

DOCS = "".join(topics[key] for key in sorted(topics))


def test_jsonl_documents_in_order_and_empty_ones_skipped_and_counted(tmp_path):
    path = tmp_path / "corpus.jsonl"
    records = [{"body": "first 🙂"}, {"body": ""}, {"body": "  \n"}, {"body": None}, {"body": "second"}]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n", encoding="utf-8")
    stats = ReadStats()
    pieces = list(read_pieces(as_source(path, text_field="body"), stats))
    assert pieces == [Piece("first 🙂", True), Piece("second", True)]
    assert (stats.documents, stats.empty, stats.bytes) == (2, 3, len("first 🙂second".encode()) + 3)


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"text": "a"}\n{"body": "b"}\n', "line 2 has no field 'text'"),
        ('{"text": "a"}\n{oops\n', "line 2 is not JSON"),
    ],
)
def test_jsonl_errors_name_the_line(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(line, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load_documents(path)


def test_parquet_rows_are_documents(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "shard.parquet"
    texts = [f"document {i} 世界" for i in range(2500)] + ["", None, "last"]
    pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), path, row_group_size=700)
    stats = ReadStats()
    assert load_documents(path) == [t for t in texts if t]
    assert list(read_pieces(as_source(tmp_path, glob="*.parquet"), stats))[-1] == Piece("last", True)
    assert stats.empty == 2
    with pytest.raises(ValueError, match="no column 'body'"):
        load_documents(path, text_field="body")


def test_a_long_file_is_read_in_pieces_cut_where_no_chunk_crosses(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "PIECE_BYTES", 257)  # many blocks, many cuts; multi-byte characters straddle blocks
    text = DOCS[:60_000] + "\n世界 🙂 end"
    (tmp_path / "one.txt").write_text(text, encoding="utf-8")
    tok = BPETokenizer.train(DOCS[:20_000], 400)
    pieces = list(read_pieces(as_source(tmp_path / "one.txt"), cut=lambda t: last_safe_cut(t, tok.pattern)))
    assert len(pieces) > 100
    assert [p.ends_document for p in pieces] == [False] * (len(pieces) - 1) + [True]
    assert "".join(p.text for p in pieces) == text
    assert sum((tok.encode_ordinary(p.text) for p in pieces), []) == tok.encode_ordinary(text)  # the whole's ids


def test_non_utf8_is_an_error_naming_the_file_and_byte_even_past_the_first_block(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "PIECE_BYTES", 64)
    path = tmp_path / "bad.txt"
    path.write_bytes("é".encode() * 100 + b"ok \xff tail")
    with pytest.raises(ValueError, match=r"bad.txt is not UTF-8 text: byte 203 is b'\\xff'"):
        load_documents(path)


def test_errors_replace_counts_each_bad_sequence_but_not_real_replacement_characters(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "PIECE_BYTES", 64)
    path = tmp_path / "mixed.txt"
    path.write_bytes(b"a\xffb" + "\ufffd".encode() + b"x" * 100 + b"\xe2\x82 c \xc3")  # 3 bad sequences, 1 real U+FFFD
    stats = ReadStats()
    (piece,) = read_pieces(as_source(path, errors="replace"), stats)
    assert piece.text == path.read_bytes().decode("utf-8", errors="replace")
    assert stats.replaced == 3


def test_source_hash_sees_text_and_boundaries_not_how_it_is_stored(tmp_path):
    (tmp_path / "a.txt").write_text("hel", encoding="utf-8")
    (tmp_path / "b.txt").write_text("lo", encoding="utf-8")
    (tmp_path / "c.jsonl").write_text('{"text": "hel"}\n{"text": "lo"}\n', encoding="utf-8")
    assert source_hash(as_source(tmp_path)) == source_hash(as_source(["hel", "lo"]))
    assert source_hash(as_source(tmp_path / "c.jsonl")) == source_hash(as_source(["hel", "lo"]))
    assert source_hash(as_source(["hello"])) != source_hash(as_source(["hel", "lo"]))


def test_first_bytes_stops_at_the_limit_on_a_character_boundary():
    pieces = [Piece("ab", True), Piece("cé", False), Piece("fg", True)]
    assert list(first_bytes(pieces, 3)) == [Piece("ab", True), Piece("c", True)]
    assert list(first_bytes(pieces, 4)) == [Piece("ab", True), Piece("c", True)]  # "é" is 2 bytes: not cut
    assert list(first_bytes(pieces, 100)) == pieces


def test_bad_source_arguments():
    with pytest.raises(ValueError, match="errors must be one of"):
        as_source("x", errors="ignore")
    with pytest.raises(TypeError, match="data must be a path"):
        as_source(3)
