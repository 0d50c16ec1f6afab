"""numforge.study.predictions: per-position predictions and the logit lens, checked against the model's logits."""

import numpy as np
import pytest
from helpers import STUDY_PROMPT, STUDY_TEXT, tiny_model

from numforge.backend import asarray, to_numpy
from numforge.study import predictions
from numforge.study.predictions import format_lens, format_predictions, logit_lens, position_predictions
from numforge.study.prompt import run_prompt
from numforge.tokenizer import BPETokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return BPETokenizer.train(STUDY_TEXT, 256 + 12)


def softmax_of_model_logits(model, ids):
    logits = to_numpy(model.logits(asarray(np.array([ids])))).astype(np.float64)[0]  # (T,V)
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    return exp / exp.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("cap", [None, 0.02])  # Gemma 2's final-logit soft cap, near the tiny model's logits
@pytest.mark.parametrize("dtype, rel", [("float32", 1e-5), ("float64", 1e-12)])
def test_per_position_losses_average_to_the_loss(tokenizer, dtype, rel, cap):
    model = tiny_model(tokenizer, dtype=dtype, logit_softcap=cap)
    prompt = run_prompt(model, tokenizer, STUDY_PROMPT)
    rows = position_predictions(prompt, k=3)
    ids = list(prompt.ids)
    assert [r.token for r in rows] == ids and [r.target for r in rows] == ids[1:] + [None]
    assert np.mean([r.loss for r in rows[:-1]]) == pytest.approx(prompt.loss, rel=rel)
    probs = softmax_of_model_logits(model, ids)  # the model's own logits, softmax here
    for r in rows[:-1]:
        assert r.target_prob == pytest.approx(probs[r.position, r.target], rel=100 * rel)
        assert r.loss == pytest.approx(-np.log(probs[r.position, r.target]), rel=100 * rel)
    for r in rows:
        assert [i for i, _ in r.top] == list(np.argsort(-probs[r.position], kind="stable")[:3])
    assert rows[-1].loss is None and rows[-1].target_prob is None


@pytest.mark.parametrize("cap", [None, 0.02])
def test_lens_at_the_last_stream_is_the_models_prediction(tokenizer, cap):
    model = tiny_model(tokenizer, dtype="float64", logit_softcap=cap)
    prompt = run_prompt(model, tokenizer, STUDY_PROMPT)
    lens = logit_lens(model, prompt, k=4)
    assert [r.name for r in lens] == [
        "embedding sum x = e + p", "layer 0 after attention", "layer 0 after MLP", "layer 1 after attention",
        "layer 1 after MLP",
    ]  # fmt: skip
    probs = softmax_of_model_logits(model, list(prompt.ids))
    for t, top in enumerate(lens[-1].top):
        ids = [i for i, _ in top]
        assert ids == list(np.argsort(-probs[t], kind="stable")[:4])
        np.testing.assert_allclose([p for _, p in top], probs[t, ids], rtol=1e-12)


def test_lens_at_the_embeddings_is_the_final_norm_of_tok_plus_pos_unembedded(tokenizer):
    """By hand, in float64: layer norm with the final norm's weight and bias, then the tied table."""
    model = tiny_model(tokenizer, dtype="float64")
    prompt = run_prompt(model, tokenizer, STUDY_PROMPT)
    p = {name: to_numpy(a) for name, a in model.params.items()}
    x = p["token_embedding"][list(prompt.ids)] + p["position_embedding"][: len(prompt.ids)]  # (T,C)
    h = (x - x.mean(axis=1, keepdims=True)) / np.sqrt(x.var(axis=1, keepdims=True) + 1e-5)
    logits = (h * p["final_norm.weight"] + p["final_norm.bias"]) @ p["token_embedding"].T
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    first = logit_lens(model, prompt, k=2)[0]
    for t, top in enumerate(first.top):
        np.testing.assert_allclose([q for _, q in top], np.sort(probs[t])[::-1][:2], rtol=1e-12)


def test_chunks_change_nothing(tokenizer, monkeypatch):
    model = tiny_model(tokenizer, dtype="float64")
    prompt = run_prompt(model, tokenizer, STUDY_PROMPT)
    whole, lens = position_predictions(prompt), logit_lens(model, prompt)
    monkeypatch.setattr(predictions, "CHUNK_ROWS", 2)  # the prompt's 5 rows in 3 chunks
    for a, b in zip(position_predictions(prompt), whole):
        assert [i for i, _ in a.top] == [i for i, _ in b.top]
        np.testing.assert_allclose(
            [p for _, p in a.top] + [a.loss or 0], [p for _, p in b.top] + [b.loss or 0], rtol=1e-12
        )
    for a, b in zip(logit_lens(model, prompt), lens):
        assert [[i for i, _ in top] for top in a.top] == [[i for i, _ in top] for top in b.top]


def test_formats(tokenizer):
    model = tiny_model(tokenizer)
    prompt = run_prompt(model, tokenizer, STUDY_PROMPT)
    rows = position_predictions(prompt)
    text = format_predictions(rows, tokenizer)
    assert len(text.splitlines()) == 2 + len(rows) + 1 and "(none: the end)" in text
    assert f"{np.mean([r.loss for r in rows[:-1]]):.6f}" in text
    lens = format_lens(logit_lens(model, prompt), prompt, tokenizer)
    assert "layer 1 after MLP" in lens and "last position" in lens


@pytest.mark.parametrize("seed", range(6))
def test_top_k_is_the_stable_sorts_first_k_ties_and_all(seed):
    rng = np.random.default_rng(seed)
    row = np.log(rng.dirichlet(np.ones(300)))
    row[rng.choice(300, 6, replace=False)] = np.sort(row)[-3]  # six ties from the 3rd place on: k = 4 cuts them
    for k in (1, 3, 4, 10, 300, 400):
        oracle = np.argsort(-row, kind="stable")[:k]  # the plain way: sort everything
        assert [i for i, _ in predictions.top_k(row, k)] == list(oracle)
