"""Corpus reading, the prepared-token cache, the train/validation split and the batch sampler."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from numforge import data
from numforge.tokenizer import EOT, BPETokenizer


class ByteTokenizer:
    """A stand-in with the tokenizer interface ``encode_documents`` uses: one id per UTF-8 byte."""

    vocab_size = 257
    special_tokens = {EOT: 256}

    def encode_ordinary(self, text):
        return list(text.encode("utf-8"))


def test_default_corpus_is_pydoc_topics_in_sorted_key_order():
    from pydoc_data.topics import topics

    documents = data.load_documents(None)
    assert documents == [topics[k] for k in sorted(topics)]
    assert [piece.text for piece in data.read_pieces(data.as_source(None))] == documents
    assert sum(len(d) for d in documents) > 100_000


def test_read_documents_file_and_directory(tmp_path):
    (tmp_path / "b.txt").write_text("second", encoding="utf-8")
    (tmp_path / "a.txt").write_text("first é", encoding="utf-8")
    (tmp_path / "skip.md").write_text("not a .txt", encoding="utf-8")
    (tmp_path / "empty.txt").write_text("  \n", encoding="utf-8")
    assert data.load_documents(tmp_path) == ["first é", "second"]
    assert data.load_documents(tmp_path / "b.txt") == ["second"]
    assert data.load_documents(tmp_path, glob="*.md") == ["not a .txt"]


@pytest.mark.parametrize(
    "content, message",
    [(b"", "contains no text"), (b"ok \xff\xfe", "not UTF-8 text: byte 3")],
)
def test_read_documents_rejects_empty_and_non_utf8(tmp_path, content, message):
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        data.load_documents(path)


def test_read_documents_missing_path_and_empty_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        data.load_documents(tmp_path / "nope")
    with pytest.raises(ValueError, match="no files matching --glob"):
        data.load_documents(tmp_path)


def test_encode_documents_appends_end_of_text_after_each_document():
    tokens = data.encode_documents(["ab", "c"], ByteTokenizer())
    assert tokens.tolist() == [97, 98, 256, 99, 256]
    assert tokens.dtype == np.uint16


def test_token_dtype_is_uint16_only_when_ids_fit():
    assert data.token_dtype(65536) == np.uint16
    assert data.token_dtype(65537) == np.uint32


def test_prepared_cache_is_reused_and_keyed_by_text_and_tokenizer(tmp_path, monkeypatch):
    from numforge.data import prepare as preparing

    tok = BPETokenizer.train("hello there, hello there, the hero", 262)
    calls = []
    real = preparing.prepare_tokens
    monkeypatch.setattr(preparing, "prepare_tokens", lambda *a, **k: calls.append(a) or real(*a, **k))

    first = data.prepared_for(["hello"], tok, tmp_path, workers=1)
    again = data.prepared_for(["hello"], tok, tmp_path, workers=1)
    assert first == again and len(calls) == 1  # served from the cache
    assert data.open_prepared(first).tokens.tolist() == tok.encode_ordinary("hello") + [tok.special_tokens[EOT]]
    assert not [p for p in (tmp_path / "tokens").iterdir() if p.name.startswith(".")]  # no temporary left behind

    changed = data.prepared_for(["hellO"], tok, tmp_path, workers=1)  # changed corpus: prepared again
    other_tokenizer = data.prepared_for(
        ["hello"], BPETokenizer.train("hello there, hello there, the hero", 260), tmp_path, workers=1
    )
    boundaries = data.prepared_for(["hel", "lo"], tok, tmp_path, workers=1)  # same text, other documents
    assert len({first, changed, other_tokenizer, boundaries}) == 4 and len(calls) == 4


def test_split_is_90_10_and_rejects_short_text():
    tokens = np.arange(100, dtype=np.uint16)
    train, val = data.split_tokens(tokens, seq_len=8)
    assert train.tolist() == list(range(90)) and val.tolist() == list(range(90, 100))
    with pytest.raises(ValueError, match="fewer than seq_len \\+ 1 = 11"):
        data.split_tokens(tokens, seq_len=10)


@given(
    n=st.integers(5, 60),
    batch_size=st.integers(1, 4),
    seq_len=st.integers(1, 4),
    seed=st.integers(0, 2**32),
)
def test_batches_are_shifted_windows_of_the_tokens(n, batch_size, seq_len, seed):
    tokens = (np.arange(n) * 7 % 251).astype(np.uint16)
    sampler = data.BatchSampler(tokens, batch_size, seq_len, seed)
    x, y = sampler.next_batch()
    assert x.shape == y.shape == (batch_size, seq_len) and x.dtype == np.int64
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])
    for row_x, row_y in zip(x, y):
        window = np.concatenate([row_x, row_y[-1:]])
        starts = [s for s in range(n - seq_len) if np.array_equal(tokens[s : s + seq_len + 1], window)]
        assert starts, f"batch row {window} is not a window of the tokens"


def test_every_window_start_can_be_drawn():
    tokens = np.arange(12, dtype=np.uint16)  # seq_len 3: starts 0..8
    sampler = data.BatchSampler(tokens, batch_size=64, seq_len=3, seed=0)
    starts = {int(v) for _ in range(4) for v in sampler.next_batch()[0][:, 0]}
    assert starts == set(range(9))


def test_sampler_state_resumes_the_exact_batch_sequence():
    tokens = np.arange(500, dtype=np.uint16)
    straight = data.BatchSampler(tokens, 3, 5, seed=7)
    expected = [straight.next_batch()[0] for _ in range(6)]

    first = data.BatchSampler(tokens, 3, 5, seed=7)
    got = [first.next_batch()[0] for _ in range(2)]
    state = json.loads(json.dumps(first.state_dict()))  # it travels as JSON in the checkpoint
    resumed = data.BatchSampler(tokens, 3, 5, seed=999)
    resumed.load_state_dict(state)
    got += [resumed.next_batch()[0] for _ in range(4)]
    for a, b in zip(expected, got):
        np.testing.assert_array_equal(a, b)
    assert resumed.batches_drawn == 6


def test_sampler_rejects_bad_sizes():
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        data.BatchSampler(np.arange(10), 0, 2, seed=0)
    with pytest.raises(ValueError, match="at least seq_len \\+ 1 = 11"):
        data.BatchSampler(np.arange(10), 1, 10, seed=0)
