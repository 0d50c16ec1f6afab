"""numforge.trace: the stages, in order, read from the forward's cache; and `numforge trace`."""

import numpy as np
import pytest

from numforge.backend import asarray, to_numpy
from numforge.cli import main
from numforge.model import GPT, GPTConfig
from numforge.study.trace import format_trace, trace
from numforge.tokenizer import BPETokenizer

TEXT = "the cat sat on the mat. the dog sat on the log. " * 5
PROMPT = "the cat sat on"


@pytest.fixture(scope="module")
def tokenizer():
    return BPETokenizer.train(TEXT, 256 + 12)


def tiny_model(tokenizer, activation="gelu", num_layers=2):
    config = GPTConfig(
        vocab_size=tokenizer.vocab_size,
        max_seq_len=16,
        d_model=8,
        num_heads=2,
        num_layers=num_layers,
        activation=activation,
    )
    return GPT(config, seed=0)


MLP_STAGES = {  # ffn -> the MLP stages between the pre-MLP norm and the residual, with their widths F
    "gelu": [("MLP pre-activation", 32), ("MLP activation", 32)],
    "swiglu": [("MLP gate (pre-activation)", 64), ("MLP up (pre-activation)", 64), ("MLP activation", 64)],
    "relu": [("MLP activation", 32)],  # ReLU's cache keeps only a mask: no pre-activation stage
}


@pytest.mark.parametrize("ffn", sorted(MLP_STAGES))
def test_stages_in_data_flow_order_with_their_shapes(tokenizer, ffn):
    model = tiny_model(tokenizer, ffn)
    T = len(tokenizer.encode(PROMPT))
    expected = [("token ids", (1, T)), ("embedding sum", (1, T, 8))]
    for i in range(2):
        expected += [
            (f"layer {i} pre-attention norm", (1, T, 8)),
            (f"layer {i} q", (1, 2, T, 4)),
            (f"layer {i} k", (1, 2, T, 4)),
            (f"layer {i} v", (1, 2, T, 4)),
            (f"layer {i} attention output", (1, T, 8)),
            (f"layer {i} residual after attention", (1, T, 8)),
            (f"layer {i} pre-MLP norm", (1, T, 8)),
        ]
        expected += [(f"layer {i} {name}", (1, T, F)) for name, F in MLP_STAGES[ffn]]
        expected += [(f"layer {i} residual after MLP", (1, T, 8))]
    expected += [("final norm", (1, T, 8)), ("loss", ()), ("next token (top 5)", (tokenizer.vocab_size,))]
    stages = trace(model, tokenizer, PROMPT)
    assert [(s.name, s.shape) for s in stages] == expected
    assert stages[0].tokens == tuple((i, tokenizer.decode([i])) for i in tokenizer.encode(PROMPT))


def test_numbers_are_those_of_the_arrays_named(tokenizer):
    """Recomputed here by plain indexing: the embedding sum, and layer norm outputs' mean 0, std ~1."""
    model = tiny_model(tokenizer)
    ids = tokenizer.encode(PROMPT)
    stages = {s.name: s for s in trace(model, tokenizer, PROMPT)}
    table, positions = to_numpy(model.params["token_embedding"]), to_numpy(model.params["position_embedding"])
    embedded = table[ids] + positions[: len(ids)]  # (T,C)
    stage = stages["embedding sum"]
    np.testing.assert_allclose(
        [stage.mean, stage.std, stage.min, stage.max],
        [embedded.mean(), embedded.std(), embedded.min(), embedded.max()],
        rtol=1e-5,
    )
    np.testing.assert_allclose(stage.last, embedded[-1, :4], rtol=1e-6)
    assert stages["token ids"].last == (ids[-1],)
    for name in ("layer 0 pre-attention norm", "layer 1 pre-MLP norm", "final norm"):
        assert abs(stages[name].mean) < 1e-6 and 0.9 < stages[name].std < 1.0  # unit weight, zero bias


def test_loss_stage_is_the_cross_entropy_of_predicting_each_next_token(tokenizer):
    model = tiny_model(tokenizer)
    ids = tokenizer.encode(PROMPT)
    logits = to_numpy(model.logits(asarray(np.array([ids])))).astype(np.float64)[
        0, :-1
    ]  # (T-1,V): positions with a target
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    expected = -log_probs[np.arange(len(ids) - 1), ids[1:]].mean()
    (stage,) = [s for s in trace(model, tokenizer, PROMPT) if s.name == "loss"]
    assert stage.mean == pytest.approx(expected, rel=1e-5)  # float32 model vs a float64 loss of its logits


def test_top5_predictions_are_sorted_probabilities_of_the_last_position(tokenizer):
    model = tiny_model(tokenizer)
    ids = tokenizer.encode(PROMPT)
    stage = trace(model, tokenizer, PROMPT)[-1]
    probs = list(stage.last)
    assert len(probs) == 5 and probs == sorted(probs, reverse=True)
    assert 0 < sum(probs) <= 1
    logits = to_numpy(model.logits(asarray(np.array([ids])))).astype(np.float64)[0, -1]  # full (T,V), last row
    softmax = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    top_ids = [token_id for token_id, _ in stage.tokens]
    np.testing.assert_allclose(probs, softmax[top_ids], rtol=1e-5)
    assert top_ids[0] == int(np.argmax(softmax))
    assert [text for _, text in stage.tokens] == [tokenizer.decode([t]) for t in top_ids]


def test_one_token_has_no_loss_and_bad_text_is_refused(tokenizer):
    model = tiny_model(tokenizer, num_layers=1)
    names = [s.name for s in trace(model, tokenizer, "the")]
    assert "loss" not in names and names[-1] == "next token (top 5)"
    with pytest.raises(ValueError, match="no tokens"):
        trace(model, tokenizer, "")
    with pytest.raises(ValueError, match="max_seq_len 16"):
        trace(model, tokenizer, "xyz " * 20)
    with pytest.raises(TypeError, match="str"):
        trace(model, tokenizer, [1, 2])


def test_format_trace_has_a_line_per_stage(tokenizer):
    stages = trace(tiny_model(tokenizer, num_layers=1), tokenizer, PROMPT)
    text = format_trace(stages)
    for stage in stages:
        assert stage.name in text
    assert repr(tokenizer.decode([stages[-1].tokens[0][0]])) in text


def test_cli_on_a_tiny_checkpoint_and_without_one(tmp_path, capsys):
    data = tmp_path / "corpus.txt"
    data.write_text(TEXT * 4, encoding="utf-8")
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--data",
                str(data),
                "--vocab-size",
                "270",
                "--cache-dir",
                str(tmp_path / "cache"),
                "--out",
                str(run),
                "--max-steps",
                "2",
                "--save-every",
                "2",
                "--eval-every",
                "2",
                "--no-progress",
                "--layers",
                "1",
                "--d-model",
                "8",
                "--heads",
                "2",
                "--seq-len",
                "8",
                "--batch-size",
                "2",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["trace", "--checkpoint", str(run), "--prompt", PROMPT]) == 0
    out = capsys.readouterr().out
    assert f"checkpoint: {run}" in out and "layer 0 q" in out and "layer 1" not in out
    assert "next token (top 5)" in out
    assert main(["trace", "--prompt", "The standard function"]) == 0
    out = capsys.readouterr().out
    assert "untrained model" in out and "layer 1 residual after MLP" in out
    assert main(["trace", "--checkpoint", str(tmp_path / "missing"), "--prompt", PROMPT]) == 2
