"""numforge.study.next_token, equations and views: the studio's numbers, checked without a server."""

import math

import numpy as np
import pytest
from helpers import STUDY_PROMPT, STUDY_TEXT, make_tiny_run, tiny_model

from numforge.backend import asarray, to_numpy
from numforge.generate import decodable_ids, generate
from numforge.model.config import ARCHS
from numforge.ops.norms import NORMS
from numforge.study import views
from numforge.study.backward import backward_stages
from numforge.study.equations import stage_equation
from numforge.study.next_token import next_token
from numforge.study.prompt import run_prompt
from numforge.study.trace import at_position, forward_stages
from numforge.tokenizer import BPETokenizer
from numforge.training.logs import read_loss_csv


@pytest.fixture(scope="module")
def tokenizer():
    return BPETokenizer.train(STUDY_TEXT, 256 + 12)


def model_softmax(model, ids, tau, position=-1):
    """softmax(z / tau) of the model's own logits (``GPT.logits``, not the study cache), written out here."""
    z = to_numpy(model.logits(asarray(np.array([ids])))).astype(np.float64)[0, position]  # (V,)
    p = np.exp((z - z.max()) / tau)
    return z, p / p.sum()


@pytest.mark.parametrize("tau", [0.3, 1.0, 2.5])
def test_the_distribution_is_softmax_of_the_logits_over_tau(tokenizer, tau):
    model = tiny_model(tokenizer)
    prompt = run_prompt(model, tokenizer, STUDY_PROMPT)
    nt = next_token(prompt, temperature=tau)
    z, p = model_softmax(model, list(prompt.ids), tau)
    np.testing.assert_allclose(nt.logits, z, rtol=1e-5, atol=1e-6)  # the cache's rows = the model's logits
    np.testing.assert_allclose(nt.probs, p, rtol=1e-4)
    np.testing.assert_array_equal(nt.kept, nt.probs)  # no top-k, no top-p: every token kept
    assert nt.chosen == int(np.argmax(z)) and nt.greedy and nt.position == len(prompt.ids) - 1
    np.testing.assert_allclose(nt.hidden, to_numpy(prompt.cache.loss.rows[-1]))


def test_top_k_and_top_p_keep_what_numforge_sample_keeps(tokenizer):
    model = tiny_model(tokenizer)
    prompt = run_prompt(model, tokenizer, STUDY_PROMPT)
    nt = next_token(prompt, temperature=1.0, top_k=5)
    assert np.count_nonzero(nt.kept) == 5 and nt.kept.sum() == pytest.approx(1.0)
    best = np.argsort(-nt.probs, kind="stable")[:5]
    np.testing.assert_allclose(nt.kept[best], nt.probs[best] / nt.probs[best].sum())
    nt = next_token(prompt, temperature=1.0, top_p=0.3)
    order = np.argsort(-nt.probs, kind="stable")
    before = np.cumsum(nt.probs[order]) - nt.probs[order]
    assert set(np.flatnonzero(nt.kept)) == set(order[before < 0.3])


@pytest.mark.parametrize("seed", [0, 1, 7, 12345])
def test_a_sampled_token_is_the_first_that_numforge_sample_draws(tokenizer, seed):
    model = tiny_model(tokenizer)
    prompt = run_prompt(model, tokenizer, STUDY_PROMPT)
    nt = next_token(prompt, temperature=1.7, top_k=50, greedy=False, seed=seed)
    drawn = generate(model, tokenizer, STUDY_PROMPT, 1, temperature=1.7, top_k=50, seed=seed)
    assert [nt.chosen] == drawn.ids and nt.kept[nt.chosen] > 0 and not nt.greedy


def test_an_earlier_position_and_a_padded_vocabulary(tokenizer):
    model = tiny_model(tokenizer, vocab_size=tokenizer.vocab_size + 5)  # 5 ids the tokenizer cannot decode
    prompt = run_prompt(model, tokenizer, STUDY_PROMPT)
    allowed = decodable_ids(tokenizer, model.config.vocab_size)
    nt = next_token(prompt, 1, temperature=1.0, allowed=allowed)
    assert nt.position == 1 and np.all(nt.probs[~allowed] == 0) and nt.probs.sum() == pytest.approx(1.0)
    z, _ = model_softmax(model, list(prompt.ids), 1.0, position=1)
    np.testing.assert_allclose(nt.logits, z, rtol=1e-5, atol=1e-6)  # the logits before the mask
    for bad, words in ((len(prompt.ids), "position must be an integer in"), (True, "position must be an integer")):
        with pytest.raises(ValueError, match=words):
            next_token(prompt, bad)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        next_token(prompt, temperature=0)


LLAMA = ARCHS["llama"]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"activation": "swiglu"},
        {"activation": "relu", "tie_weights": False},
        {"use_bias": False, "position": "sinusoidal"},
        {**LLAMA, "num_kv_heads": 1},
        {**LLAMA, "qk_norm": True},
        {**LLAMA, "qk_norm": True, "qk_norm_order": "after_rope"},
    ],
    ids=["gelu", "swiglu", "relu-untied", "no-bias-sinusoidal", "llama-mqa", "qwen3-qk-norm", "nanochat-qk-norm"],
)
def test_every_stage_has_its_equation(tokenizer, options):
    model = tiny_model(tokenizer, **options)
    prompt = run_prompt(model, tokenizer, STUDY_PROMPT)
    for stage in forward_stages(model, prompt):
        assert stage_equation(stage.kind, model.config, stage.layer)
    for stage in backward_stages(model, prompt)[0]:
        assert stage_equation(stage.kind, model.config, stage.layer, backward=True)
    assert "silu(g) * u" in stage_equation("MLP activation (down_proj input)", model.config, 1) or (
        options.get("activation") != "swiglu"
    )
    title = NORMS[model.config.norm].title
    assert stage_equation("pre-attention norm output", model.config, 0) == f"h = {title}(x)"
    assert stage_equation("magic", model.config, 0) is None


def test_at_position_reads_one_position_of_each_layout(tokenizer):
    model = tiny_model(tokenizer)
    prompt = run_prompt(model, tokenizer, STUDY_PROMPT)
    T = len(prompt.ids)
    rows = np.arange(T * 3.0).reshape(T, 3)
    np.testing.assert_array_equal(at_position(rows, 2, T), rows[2])  # (N,X), N = T
    np.testing.assert_array_equal(at_position(rows[None], 2, T), rows[2])  # (1,T,X)
    heads = np.arange(2 * T * 4.0).reshape(1, 2, T, 4)
    np.testing.assert_array_equal(at_position(heads, 1, T), heads[0, :, 1])  # (1,H,T,D) -> (H,D)
    assert at_position(np.float32(1.0), 0, T) is None  # the loss: no position


def test_the_tokenizer_view_is_the_encoding_step_by_step(tokenizer):
    text = "the cat sat on the mat, 世界 <|endoftext|> the"
    view = views.tokenizer_view(tokenizer, text)
    ids = [t["id"] for t in view["tokens"]]
    assert ids == tokenizer.encode(text, allowed_special="all")
    assert [i for chunk in view["chunks"] for i in chunk["ids"]] == ids
    assert "".join(chunk["text"] for chunk in view["chunks"]) == text
    for chunk in view["chunks"]:
        ranks = [m["rank"] for m in chunk["merges"]]
        assert ranks == sorted(ranks) and (not chunk["merges"] or chunk["merges"][-1]["ids"] == chunk["ids"])
    assert view["labels"]["228"] == "<e4>" and view["bytes"] == len(text.encode())
    assert any(chunk["special"] for chunk in view["chunks"])
    with pytest.raises(ValueError, match="merge steps to show"):
        views.tokenizer_view(tokenizer, "the" * 150_000)


def test_the_training_view_reads_loss_csv(tmp_path):
    run = make_tiny_run(tmp_path)
    answer = views.training_view(run, None)
    rows = read_loss_csv(run / "loss.csv", math.inf)
    assert answer["rows"] == [
        [int(r["step"]), float(r["train_loss"]), float(r["val_loss"]) if r["val_loss"] else None, float(r["lr"])]
        for r in rows
    ]
    assert [r[0] for r in answer["rows"]] == [1, 2, 3, 4] and answer["rows"][1][2] is not None
