"""Packed chat rows (data/chat.py): several conversations a row, each computing what it would alone, through the
real training step and evaluation; the layout, truncation and refusals."""

import json

import numpy as np
import pytest
from chat_templates import chat_directory, write_chat_jsonl
from hypothesis import given
from hypothesis import strategies as st

from numforge.backend import asarray, to_numpy
from numforge.data.chat import ChatRows, ChatSampler, chat_rows, first_fit_decreasing
from numforge.model import GPT, GPTConfig
from numforge.model.config import ARCHS
from numforge.tokenizer.hf_dir import load_hf_tokenizer
from numforge.training import TrainSettings
from numforge.training.loop import evaluate, train_step
from numforge.training.parallel import DataParallel, SingleProcess
from numforge.training.run import Run
from numforge.training.threads import Threads

pytest.importorskip("jinja2")

T = 96  # Llama 3's template: 11 training examples of 21 to 35 tokens, 4 packed rows


@pytest.fixture(scope="module")
def llama3(tmp_path_factory):
    """(directory, tokenizer, chat file) of Llama 3's template and 12 conversations."""
    tmp = tmp_path_factory.mktemp("llama3")
    directory = chat_directory(tmp / "model", "llama3")
    return directory, load_hf_tokenizer(directory), write_chat_jsonl(tmp / "chat.jsonl")


def test_first_fit_decreasing_examples():
    assert first_fit_decreasing([3, 5, 2, 4], 8) == [[0, 1], [2, 3]]  # 5 + 3, then 4 + 2
    assert first_fit_decreasing([4, 4, 5, 3], 8) == [[2, 3], [0, 1]]  # in file order: [4 4] [5 3]; ties keep order
    assert first_fit_decreasing([2, 6, 5, 3], 8) == [[0, 1], [2, 3]]  # in order, first fit would need 3 rows
    assert first_fit_decreasing([8, 1], 8) == [[0], [1]]  # a full row takes nothing more


@given(st.lists(st.integers(1, 16), min_size=1, max_size=40), st.integers(16, 40))
def test_first_fit_decreasing_places_each_once_within_capacity_and_no_row_could_join_an_earlier(lengths, capacity):
    rows = first_fit_decreasing(lengths, capacity)
    assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
    loads = [sum(lengths[i] for i in row) for row in rows]
    assert max(loads) <= capacity
    for later in range(1, len(rows)):  # first fit: a later row's shortest did not fit in any earlier row
        shortest = min(lengths[i] for i in rows[later])
        assert all(load + shortest > capacity for load in loads[:later])


def unpacked_pieces(rows: ChatRows):
    """Each unpacked row's example ``(inputs, targets)`` of its ``filled`` length."""
    return [(rows.inputs[r, :n], rows.targets[r, :n]) for r, n in enumerate(rows.filled)]


def packed_pieces(rows: ChatRows):
    """Each packed row's examples ``(inputs, targets)``, its padding checked to be ignored and left out."""
    pieces = []
    for r, n in enumerate(rows.filled):
        ids = rows.segments[r]
        assert (np.diff(ids) >= 0).all() and ids[0] == 0
        assert (rows.targets[r, n:] == -1).all() and (rows.segments[r, n:] == ids[n - 1] + 1).all()
        for s in range(ids[n - 1] + 1):
            where = np.flatnonzero(ids == s)
            pieces.append((rows.inputs[r, where], rows.targets[r, where]))
    return pieces


def same_pieces(a, b) -> bool:
    key = lambda piece: (piece[0].tolist(), piece[1].tolist())  # noqa: E731
    return sorted(map(key, a)) == sorted(map(key, b))


def test_packed_rows_hold_the_unpacked_examples_whole_in_fewer_rows(llama3):
    directory, tokenizer, chat = llama3
    (packed, _), (unpacked, _) = (chat_rows(chat, directory, tokenizer, T, pack=pack) for pack in (True, False))
    assert unpacked.segments is None and (len(unpacked), unpacked.examples) == (11, 11)
    assert (len(packed), packed.examples) == (4, 11)
    assert same_pieces(packed_pieces(packed), unpacked_pieces(unpacked))
    assert packed.filled.sum() == unpacked.filled.sum()
    assert round(packed.padding(), 3) == 0.229 and round(unpacked.padding(), 3) == 0.720  # the figures in chat.py
    assert packed.layout() == (
        "11 examples packed into 4 rows of 96 positions (11 unpacked): 74.0 tokens a row, padding 23% (72% unpacked)"
    )
    assert unpacked.layout().startswith("11 examples, one a row of 96 positions (--no-pack; packed: 4 rows)")


def test_an_example_longer_than_a_row_is_truncated_and_fills_a_row_alone():
    ids = np.arange(1, 31)  # (30,): 29 positions
    trained = np.zeros(30, dtype=bool)
    trained[[5, 25]] = True  # targets 4 and 24
    late = np.zeros(30, dtype=bool)
    late[20] = True  # its only trained target (19) lies past the row
    short = (np.arange(40, 45), np.ones(5, dtype=bool))  # 4 positions
    rows = ChatRows.from_examples([(ids, trained), short, (ids, late), short], seq_len=12, pack=True)
    assert len(rows) == 2 and rows.examples == 3  # the late one dropped: nothing of it trains
    assert (rows.inputs[0] == ids[:12]).all() and (rows.segments[0] == 0).all() and rows.filled[0] == 12
    assert rows.targets[0].tolist() == [-1] * 4 + [6] + [-1] * 7  # the cut: target 24 is gone
    assert rows.segments[1].tolist() == [0] * 4 + [1] * 4 + [2] * 4  # the short two, then the padding


def test_bad_packing_input_is_refused_with_what_to_do(llama3, tmp_path):
    directory, tokenizer, _ = llama3
    with pytest.raises(ValueError, match="no assistant token fits in a row of 4 tokens"):
        ChatRows.from_examples([(np.arange(1, 9), np.arange(8) > 5)], seq_len=4, pack=True)
    path = tmp_path / "chat.jsonl"
    talk = {"messages": [{"role": "user", "content": "x " * 200}, {"role": "assistant", "content": "y"}]}
    short = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    path.write_text(json.dumps(talk) + "\n" + json.dumps(short) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no assistant token of the training conversations fits in --seq-len 96"):
        chat_rows(path, directory, tokenizer, T, pack=True)
    path.write_text(json.dumps(short) + '\n{"messages": [{"role": "user", "content": "hi"}]}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="chat.jsonl:2: the conversation has no assistant message"):
        chat_rows(path, directory, tokenizer, T, pack=True)


class RecordingOptimizer:
    """AdamW's place in ``train_step``: keeps a copy of the gradients it is given, changes nothing."""

    lr = 0.0

    def step(self, grads):
        self.grads = {name: np.array(to_numpy(g)) for name, g in grads.items()}


def model_for(tokenizer):
    config = GPTConfig(
        **{**ARCHS["llama"], "vocab_size": tokenizer.vocab_size, "max_seq_len": T, "num_layers": 2, "d_model": 16}
        | {"num_heads": 4, "num_kv_heads": 2}
    )
    return GPT(config, seed=3, dtype="float64")


def alone(model, pieces):
    """The sum over ``pieces`` of each one's loss and gradients run alone (its own batch of one), times its count
    of trained targets: the packed batch's, times its count, must equal it."""
    loss, grads = 0.0, {}
    for x, y in pieces:
        one, cache = model.forward(asarray(x[None]), asarray(y[None]))
        count = int((y != -1).sum())
        loss += float(one) * count
        for name, g in model.backward(cache).items():
            grads[name] = grads.get(name, 0.0) + to_numpy(g) * count
    return loss, grads


@pytest.mark.parametrize("threads, grad_accum", [(1, 1), (2, 1), (1, 2), (3, 1)])
def test_a_packed_training_step_is_the_sum_of_its_conversations_alone(llama3, threads, grad_accum):
    directory, tokenizer, chat = llama3
    train, val = chat_rows(chat, directory, tokenizer, T, pack=True)
    model, settings = model_for(tokenizer), TrainSettings(batch_size=6, seq_len=T, grad_clip=1e9)
    run = Run(None, model, RecordingOptimizer(), tokenizer, ChatSampler(train, 6, seed=4), val, settings, {})
    x, y, segments = ChatSampler(train, 6, seed=4).next_batch()  # the batch train_step draws
    assert (segments[:, -1] > 1).all()  # each row packs several conversations
    parallel = DataParallel(SingleProcess(), model, grad_accum, Threads(threads))
    loss, _ = train_step(run, parallel)
    expected_loss, expected = alone(model, segments_of(x, y, segments))
    count = int((y != -1).sum())
    assert loss * count == pytest.approx(expected_loss, rel=1e-12)
    for name, g in run.optimizer.grads.items():
        scale = np.abs(expected[name]).max()
        np.testing.assert_allclose(g * count, expected[name], rtol=0, atol=1e-12 * scale, err_msg=name)


def segments_of(x, y, segments):
    """``(inputs, targets)`` of every segment of every row of ``x, y, segments (B,T)``, padding segments included
    (their targets are all ignored: they add nothing)."""
    return [(x[r, segments[r] == s], y[r, segments[r] == s]) for r in range(len(x)) for s in np.unique(segments[r])]


def test_packed_validation_is_the_mean_over_every_conversation_alone(llama3):
    directory, tokenizer, chat = llama3
    train, _ = chat_rows(chat, directory, tokenizer, T, pack=True)
    model = model_for(tokenizer)
    settings = TrainSettings(batch_size=2, seq_len=T, eval_batches=2)
    parallel = DataParallel(SingleProcess(), model, threads=Threads(2))
    loss = evaluate(model, train, settings, parallel)  # 4 rows, 2 batches of 2
    expected, _ = alone(model, packed_pieces(train))
    assert loss == pytest.approx(expected / int((train.targets != -1).sum()), rel=1e-12)
    unsegmented = evaluate(model, ChatRows(train.inputs, train.targets, None, train.filled), settings, parallel)
    # the segments matter: without them the conversations see each other (a random model: by 1e-5 of the loss)
    assert unsegmented != pytest.approx(loss, rel=1e-8)
