"""numforge.study.attention: weights kept (plain) or rebuilt from the log-sum-exp (tiled), equal; the command."""

import numpy as np
import pytest
from helpers import STUDY_PROMPT, STUDY_TEXT, randn, tiny_model, tiny_run

from numforge.cli import main
from numforge.ops.attention import attention_forward
from numforge.ops.flash_attention import flash_attention_forward
from numforge.study.attention import (
    attention_scores,
    attention_weights,
    format_matrix,
    model_attention_weights,
    plain_twin,
)
from numforge.study.prompt import run_prompt
from numforge.tokenizer import BPETokenizer

TOLERANCE = {"float32": 1e-6, "float64": 1e-12}


@pytest.fixture(scope="module")
def tokenizer():
    return BPETokenizer.train(STUDY_TEXT, 256 + 12)


@pytest.mark.parametrize("dtype", sorted(TOLERANCE))
def test_tiled_weights_rebuilt_from_the_log_sum_exp_equal_the_plain_ones(dtype):
    """Many tiles (3 x 5 over T = 11), causal; the plain op's kept P is the oracle."""
    q, k, v = (randn(2, 3, 11, 4, dtype=dtype, seed=s) for s in (1, 2, 3))
    _, plain = attention_forward(q, k, v, causal=True)
    _, tiled = flash_attention_forward(q, k, v, causal=True, block_q=3, block_k=5)
    rebuilt = attention_weights(tiled)
    assert rebuilt.dtype == np.dtype(dtype)
    np.testing.assert_allclose(rebuilt, attention_weights(plain), rtol=0, atol=TOLERANCE[dtype])
    assert np.all(np.triu(rebuilt, k=1) == 0)  # masked: exactly zero
    np.testing.assert_allclose(rebuilt.sum(axis=-1), 1.0, atol=10 * TOLERANCE[dtype])


@pytest.mark.parametrize("modifiers", [(), ("alibi",)])
def test_tiled_weights_apply_the_kernels_score_modifiers(modifiers):
    """With ALiBi the rebuilt weights must carry its bias too: each row sums to 1 and equals the plain kernel's P
    (Tq = 4 queries after 5 cached keys, grouped-query heads)."""
    q, k, v = randn(2, 4, 4, 3, seed=1), randn(2, 2, 9, 3, seed=2), randn(2, 2, 9, 3, seed=3)
    _, plain = attention_forward(q, k, v, causal=True, modifiers=modifiers)
    _, tiled = flash_attention_forward(q, k, v, causal=True, block_q=3, block_k=2, modifiers=modifiers)
    rebuilt = attention_weights(tiled)
    np.testing.assert_allclose(rebuilt.sum(axis=-1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(rebuilt, attention_weights(plain), rtol=0, atol=1e-12)
    assert np.all(np.triu(rebuilt, k=9 - 4 + 1) == 0)  # the causal mask, bottom-right: exactly zero


@pytest.mark.parametrize("position", ["learned", "alibi"])
def test_a_model_s_study_weights_sum_to_one_and_are_the_plain_kernels(tokenizer, position):
    model = tiny_model(tokenizer, dtype="float64", position=position)
    tiled = model_attention_weights(run_prompt(model, tokenizer, STUDY_PROMPT).cache)
    plain = model_attention_weights(run_prompt(plain_twin(model), tokenizer, STUDY_PROMPT).cache)
    for a, b in zip(tiled, plain):
        np.testing.assert_allclose(a.sum(axis=-1), 1.0, rtol=0, atol=1e-12)
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_grouped_query_caches_give_every_query_head_its_weights_and_scores(kv_heads):
    # 4 query heads on 1 or 2 kv heads: the caches hold k of H_kv heads, the weights are per query head
    q, k, v = randn(2, 4, 7, 3, seed=1), randn(2, kv_heads, 7, 3, seed=2), randn(2, kv_heads, 7, 3, seed=3)
    _, plain = attention_forward(q, k, v, causal=True)
    _, tiled = flash_attention_forward(q, k, v, causal=True, block_q=3, block_k=2)
    assert attention_weights(tiled).shape == (2, 4, 7, 7)
    np.testing.assert_allclose(attention_weights(tiled), attention_weights(plain), rtol=0, atol=1e-12)
    expected = np.einsum("bhid,bhjd->bhij", np.asarray(q), np.repeat(np.asarray(k), 4 // kv_heads, axis=1))
    for cache in (plain, tiled):
        np.testing.assert_allclose(attention_scores(cache), expected / np.sqrt(3), rtol=1e-13)


@pytest.mark.parametrize("dtype", sorted(TOLERANCE))
def test_a_tiled_model_and_its_plain_twin_give_the_same_weights(tokenizer, dtype):
    model = tiny_model(tokenizer, dtype=dtype)  # tiled by default
    twin = plain_twin(model)
    assert model.config.attention == "tiled" and twin.config.attention == "plain" and twin.params is model.params
    tiled = model_attention_weights(run_prompt(model, tokenizer, STUDY_PROMPT).cache)
    plain = model_attention_weights(run_prompt(twin, tokenizer, STUDY_PROMPT).cache)
    T = len(tokenizer.encode(STUDY_PROMPT))
    assert [w.shape for w in tiled] == [(1, 2, T, T)] * 2
    for a, b in zip(tiled, plain):
        np.testing.assert_allclose(a, b, rtol=0, atol=TOLERANCE[dtype])


def test_scores_are_scaled_dot_products_before_the_mask():
    q, k, v = (randn(1, 2, 5, 4, seed=s) for s in (4, 5, 6))
    _, cache = flash_attention_forward(q, k, v, causal=True)
    qn, kn = np.asarray(q), np.asarray(k)
    expected = np.einsum("bhid,bhjd->bhij", qn, kn) / 2.0  # s = 1/sqrt(D) = 1/2
    np.testing.assert_allclose(attention_scores(cache), expected, rtol=1e-13)


def test_format_matrix_blanks_the_mask_and_sums_rows():
    weights = np.array([[1.0, 0.0], [0.25, 0.75]])
    text = format_matrix(weights, ["a", "b"], np.triu(np.ones((2, 2), dtype=bool), k=1))
    header, _, first, second = text.splitlines()  # the header, its rule, two rows
    assert "row sum" in header and "0.000" not in first and first.split() == ["a", "1.000", "1.0000"]
    assert second.split() == ["b", "0.250", "0.750", "1.0000"]
    assert "row sum" not in format_matrix(weights, ["a", "b"])


def test_cli(tmp_path, capsys):
    run = tiny_run(tmp_path)
    capsys.readouterr()
    assert main(["attention", "--checkpoint", str(run), "--prompt", STUDY_PROMPT, "--head", "1"]) == 0
    out = capsys.readouterr().out
    assert "P = exp(S - L)" in out and "layer 0, head 1: attention weights" in out and "head 0" not in out
    difference = float(out.split("max |P - P_plain| = ")[1].split()[0])
    assert difference < 1e-6
    assert main(["attention", "--checkpoint", str(run), "--prompt", STUDY_PROMPT, "--scores"]) == 0
    assert "scores s q.k, before the mask" in capsys.readouterr().out
    assert main(["attention", "--checkpoint", str(run), "--prompt", STUDY_PROMPT, "--layer", "1"]) == 2
    assert "--layer must be in [0, 0], got 1" in capsys.readouterr().err
    pytest.importorskip("matplotlib")
    png = tmp_path / "attn.png"
    assert main(["attention", "--checkpoint", str(run), "--prompt", STUDY_PROMPT, "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "drew 2 heatmaps" in capsys.readouterr().out
