"""The studio's attention overview (``/api/attention/overview``) and scores mode (``/api/attention/scores``) equal
an independent float64 NumPy forward of a tiny model (``tests/numpy_forward.py``, no code shared with numforge).

The overview: every layer's and head's weights pooled by block means to at most 32 x 32 cells, with the mean
row entropy, attended distance, weight on the first and on the previous token, here pooled and summed by plain
loops over the reference's weights. The scores mode: one head's ``S = s q k^T``, the terms the mask adds, ``S'``
and the cached q and k (of the key/value head the query head reads), each equal to the reference's, and
``q_i . k_j s`` equal to the cell's score. Two models: GPT-2's parts on the plain kernel and Llama's with 4 query
heads over 2 key/value heads and a window of 3 keys on the tiled one, each at 7 tokens (one cell per entry) and at
75 (cells of 2 or 3 positions a side); ALiBi and a soft cap checked against their formulas written here.
"""

import base64
import math

import numpy as np
import pytest
from helpers import GPT2_TINY, IDS, LLAMA_TINY, Letters, sharp_model
from numpy_forward import reference

from numforge.study.studio import Studio

MODELS = {"gpt2": GPT2_TINY, "llama-gqa-window": LLAMA_TINY}
LONG = [(7 * n + 3) % 30 for n in range(75)]  # 75 tokens: bins of 2 or 3 positions


def decoded(b64: str, dtype: str, shape) -> np.ndarray:
    return np.frombuffer(base64.b64decode(b64), dtype=dtype).astype(np.float64).reshape(shape)


def studio_of(options, ids):
    model = sharp_model(dict(options, max_seq_len=80))
    return Studio(model, Letters(), "a tiny sharp model"), reference(model, ids)


def pooled_by_hand(P: np.ndarray, n: int) -> np.ndarray:
    """``(T,T)`` -> ``(n,n)`` block means, bin ``a`` the positions ``a T // n .. (a+1) T // n - 1``."""
    T = len(P)
    cut = [a * T // n for a in range(n + 1)]
    return np.array([[P[cut[a] : cut[a + 1], cut[b] : cut[b + 1]].mean() for b in range(n)] for a in range(n)])


def summaries_by_hand(P: np.ndarray) -> dict:
    T = len(P)
    rows = [[(p, j) for j, p in enumerate(P[i])] for i in range(T)]
    return {
        "entropy": np.mean([-sum(p * math.log(p) for p, _ in row if p > 0) for row in rows]),
        "distance": np.mean([sum(p * (i - j) for p, j in row) for i, row in enumerate(rows)]),
        "first": np.mean([P[i, 0] for i in range(T)]),
        "previous": np.mean([P[i, i - 1] for i in range(1, T)]) if T > 1 else None,
    }


@pytest.mark.parametrize("ids", [IDS, LONG], ids=["7-tokens", "75-tokens"])
@pytest.mark.parametrize("options", MODELS.values(), ids=MODELS.keys())
def test_the_overview_pools_and_sums_up_the_reference_weights(options, ids):
    studio, ours = studio_of(options, ids)
    c, T = studio.model.config, len(ids)
    answer = studio.attention_overview({"ids": ids})
    n = min(T, 32)
    assert answer["cells"] == n and answer["edges"][0] == 0 and answer["edges"][-1] == T
    assert answer["layers"] == c.num_layers and answer["heads"] == c.num_heads
    assert answer["kv_head_of"] == [h // (c.num_heads // c.num_kv_heads) for h in range(c.num_heads)]
    assert len(answer["thumbs"]) == len(answer["summaries"]) == c.num_layers
    for layer in range(c.num_layers):
        weights = ours[(layer, "softmax")]  # (H,T,T)
        for head in range(c.num_heads):
            thumb = decoded(answer["thumbs"][layer][head], "<f2", (n, n))
            np.testing.assert_allclose(thumb, pooled_by_hand(weights[head], n), rtol=2**-11, atol=6e-8)
            want, got = summaries_by_hand(weights[head]), answer["summaries"][layer][head]
            assert set(got) == set(want)
            for name, value in want.items():
                assert got[name] == pytest.approx(value, rel=5.1e-6, abs=1e-12), (layer, head, name)
    if options is LLAMA_TINY and T == 75:  # the window of 3: no weight more than 2 positions back
        assert max(s["distance"] for layer in answer["summaries"] for s in layer) <= 2


@pytest.mark.parametrize("ids", [IDS, LONG], ids=["7-tokens", "75-tokens"])
@pytest.mark.parametrize("options", MODELS.values(), ids=MODELS.keys())
def test_the_scores_mask_and_q_k_are_the_references(options, ids):
    studio, ours = studio_of(options, ids)
    c, T, D = studio.model.config, len(ids), studio.model.config.head_dim
    rope = c.position == "rope"
    for layer, head in ((0, 0), (1, c.num_heads - 1), (1, 1)):
        answer = studio.attention_scores({"ids": ids, "layer": layer, "head": head})
        kv = head // (c.num_heads // c.num_kv_heads)
        assert (answer["layer"], answer["head"], answer["kv_head"], answer["T"]) == (layer, head, kv, T)
        got = {name: decoded(answer[name], "<f4", (T, T)) for name in ("raw", "capped", "terms", "modified")}
        scores, masked = ours[(layer, "scores")][head], ours[(layer, "mask")][head]  # (T,T), -inf hidden
        np.testing.assert_allclose(got["raw"], scores, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(got["capped"], got["raw"])  # no soft cap
        np.testing.assert_array_equal(got["terms"], np.where(np.isinf(masked), -np.inf, 0))
        np.testing.assert_array_equal(np.isinf(got["modified"]), np.isinf(masked))
        np.testing.assert_allclose(got["modified"][np.isfinite(masked)], masked[np.isfinite(masked)], rtol=1e-6)
        q, k = decoded(answer["q"], "<f4", (T, D)), decoded(answer["k"], "<f4", (T, D))
        np.testing.assert_allclose(q, ours[(layer, "q after rope" if rope else "q")][head], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(k, ours[(layer, "k after rope" if rope else "k")][kv], rtol=1e-6, atol=1e-6)
        for i, j in ((T - 1, 0), (T - 1, T - 2), (2, 2), (1, 5)):  # (1, 5): a masked cell has its score too
            assert q[i] @ k[j] * answer["scale"] == pytest.approx(got["raw"][i, j], rel=1e-5, abs=1e-6)
        assert answer["scale"] == pytest.approx(1 / math.sqrt(D), rel=1e-15)
    if c.sliding_window:  # the window hides keys 3 and more positions back, not only later ones
        assert np.isinf(got["terms"][T - 1, T - 4]) and got["terms"][T - 1, T - 3] == 0


def test_alibi_and_a_soft_cap_are_their_formulas_and_softmax_to_the_kernels_weights():
    model = sharp_model(dict(GPT2_TINY, attention="tiled", position="alibi", attn_softcap=0.5))
    studio, T = Studio(model, Letters(), "alibi and a soft cap"), len(IDS)
    weights = studio.attention({"ids": IDS, "layer": 1, "heads": [1]})["weights"][0]
    kept = decoded(weights, "<f2", (T * (T + 1) // 2,))
    for head, slope in ((0, 2**-4), (1, 2**-8)):  # m_h = 2^(-8 h / H), h = 1, 2 of H = 2
        answer = studio.attention_scores({"ids": IDS, "layer": 1, "head": head})
        got = {name: decoded(answer[name], "<f4", (T, T)) for name in ("raw", "capped", "terms", "modified")}
        np.testing.assert_allclose(got["capped"], 0.5 * np.tanh(got["raw"] / 0.5), rtol=1e-6, atol=1e-7)
        i, j = np.meshgrid(np.arange(T), np.arange(T), indexing="ij")
        np.testing.assert_allclose(got["terms"], np.where(j <= i, -slope * (i - j), -np.inf), rtol=1e-6)
        np.testing.assert_allclose(got["modified"], got["capped"] + got["terms"], rtol=1e-6, atol=1e-7)
        if head == 1:
            p = np.exp(got["modified"] - got["modified"].max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            np.testing.assert_allclose(kept, p[np.tril_indices(T)], rtol=2**-10, atol=1e-7)


@pytest.mark.parametrize(
    "route, body, words",
    [
        ("attention_scores", {"layer": 2}, "layer must be an integer in [0, 1]"),
        ("attention_scores", {"layer": -1}, "layer must be an integer in [0, 1]"),
        ("attention_scores", {"head": 4}, "head must be an integer in [0, 3]"),
        ("attention_scores", {"head": "0"}, "head must be an integer"),
        ("attention_overview", {"ids": [30]}, "in [0, 29]"),
    ],
)
def test_a_layer_or_head_out_of_range_is_refused(route, body, words):
    studio = Studio(sharp_model(LLAMA_TINY), Letters(), "a tiny sharp model")
    with pytest.raises((ValueError, TypeError)) as refused:
        getattr(studio, route)({"ids": IDS} | body)
    assert words in str(refused.value)
