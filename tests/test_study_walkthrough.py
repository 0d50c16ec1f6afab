"""The Walkthrough's steps (``study/walkthrough.py``) equal an independent float64 NumPy forward of a tiny model.

The forward (``tests/numpy_forward.py``) is written from the equations, on the model's parameter arrays, and
shares no code with numforge: the embedding, each block's norm, q/k/v (and the rotation), the scores against
every key, the mask, the softmax, the weighted sum, the output projection, the residual, the MLP, the final
norm. Two models: GPT-2's parts (LayerNorm, learned positions, GELU, biases, tied) and Llama's with a sliding
window (RMSNorm, RoPE, SwiGLU, 4 query heads over 2 key/value heads, no biases, untied), so the mask hides
earlier keys too; the first on the plain attention kernel (its cache keeps P), the second on the tiled one (P
rebuilt from its log-sum-exp).
"""

import numpy as np
import pytest
from helpers import GPT2_TINY, IDS, LLAMA_TINY, Letters, sharp_model
from numpy_forward import reference

from numforge.study.prompt import run_ids
from numforge.study.walkthrough import walkthrough_view


def expected(array, kind, t, head, kv_head):
    """What the step of ``kind`` shows at position ``t``: head ``head``'s (``kv_head``'s) row, or the vector."""
    if kind in ("scores", "mask", "softmax"):
        return array[head, t]  # (T,)
    if array.ndim == 3:
        return array[kv_head if kind[0] in "kv" else head, t]  # (D,)
    return array[t]  # (X,)


@pytest.mark.parametrize("options", [GPT2_TINY, LLAMA_TINY], ids=["gpt2", "llama-gqa-window"])
@pytest.mark.parametrize("position,head", [(6, 0), (4, 3), (5, 1), (0, 2)])
def test_every_step_equals_an_independent_numpy_forward(options, position, head):
    model = sharp_model(options)
    head = head % model.config.num_heads
    view = walkthrough_view(model, Letters(), run_ids(model, Letters(), IDS), position, head)
    ours, c = reference(model, IDS), model.config
    kv_head = head // (c.num_heads // c.num_kv_heads)  # GPT-2: each head its own; Llama here: 0, 1 -> 0; 2, 3 -> 1
    assert view["kv_head"] == kv_head
    kinds = [s["kind"] for s in view["steps"] if s["layer"] == 1]
    for kind in ("q", "k", "v", "scores", "mask", "softmax", "weighted sum", "attention branch output"):
        assert kind in kinds
    assert kinds.index("v") < kinds.index("scores") < kinds.index("mask") < kinds.index("softmax")
    assert kinds.index("softmax") < kinds.index("weighted sum") < kinds.index("attention branch output")
    checked = 0
    for s in view["steps"]:
        assert s["says"] and s["equation"], s["name"]
        want = expected(ours[(s["layer"], s["kind"])], s["kind"], position, head, kv_head)
        got = np.array([-np.inf if v is None else v for v in s["values"]])
        assert got.shape == want[: len(got)].shape and len(got) == min(len(want), 16)
        np.testing.assert_allclose(got, want[: len(got)], rtol=5.1e-6, atol=1e-12, err_msg=s["name"])
        if s["norm"] is not None:
            assert s["norm"] == pytest.approx(np.linalg.norm(want), rel=5.1e-6)
        checked += 1
    assert checked == len(view["steps"]) == len(ours)


def test_the_next_residual_is_the_previous_plus_the_attention_output():
    model = sharp_model(LLAMA_TINY, seed=3)
    view = walkthrough_view(model, Letters(), run_ids(model, Letters(), IDS), 5, 2)
    ours = reference(model, IDS)
    by = {(s["layer"], s["kind"]): s for s in view["steps"]}
    for layer in range(2):
        before = ours[(None, "embedding sum") if layer == 0 else (layer - 1, "residual after MLP")][5]
        after, added = by[(layer, "residual after attention")], by[(layer, "attention branch output")]
        shown, a = np.array(after["values"]), np.array(added["values"])
        assert (np.abs(shown - (before + a)) <= 5.1e-6 * (np.abs(shown) + np.abs(a))).all()  # each 6 digits
        assert np.abs(a).max() > 1e-3 * np.abs(before).max()  # attention added something that shows


def test_the_mask_hides_later_keys_and_those_beyond_the_window():
    model = sharp_model(LLAMA_TINY)
    view = walkthrough_view(model, Letters(), run_ids(model, Letters(), IDS), 4, 0)
    mask = next(s for s in view["steps"] if s["kind"] == "mask")
    softmax = next(s for s in view["steps"] if s["kind"] == "softmax")
    assert [v is None for v in mask["values"]] == [True, True, False, False, False, True, True]
    assert mask["hidden"] == 4 and sum(softmax["values"]) == pytest.approx(1, abs=1e-5)
    assert [softmax["values"][j] for j in (0, 1, 5, 6)] == [0, 0, 0, 0]
    k = next(s for s in view["steps"] if s["kind"] == "k")
    assert len(k["keys"]) == 5 and k["shape"] == [2, 4]


def test_a_position_or_head_out_of_range_is_refused():
    model = sharp_model(GPT2_TINY)
    prompt = run_ids(model, Letters(), IDS)
    with pytest.raises(ValueError, match="position"):
        walkthrough_view(model, Letters(), prompt, 7)
    with pytest.raises(ValueError, match="head"):
        walkthrough_view(model, Letters(), prompt, 0, 2)


@pytest.mark.parametrize(
    "extra",
    [
        dict(position="alibi"),
        dict(position="rope", attn_softcap=0.5, sliding_window=2, window_layers=(0,)),
        dict(position="rope", qk_norm=True, attention="plain"),
    ],
    ids=["alibi", "softcap-window", "qk-norm"],
)
def test_the_masked_scores_softmax_to_the_kernels_own_weights(extra):
    """The mask step's S' (the scores with the layer's soft cap, window and ALiBi terms) gives, by a softmax
    written here, the weights the kernel's cache holds: no term is missing or added twice."""
    model = sharp_model(dict(GPT2_TINY, attention="tiled") | extra)
    view = walkthrough_view(model, Letters(), run_ids(model, Letters(), IDS), 5, 1)
    masks = [s for s in view["steps"] if s["kind"] == "mask"]
    weights = [s for s in view["steps"] if s["kind"] == "softmax"]
    for mask, kernel in zip(masks, weights, strict=True):
        s = np.array([-np.inf if v is None else v for v in mask["values"]])
        p = np.exp(s - s.max())
        np.testing.assert_allclose(kernel["values"], p / p.sum(), rtol=2e-5, atol=1e-6, err_msg=mask["name"])
    later = len(IDS) - 1 - 5  # keys after position 5; the window of 2 also hides keys 0..3 in layer 0
    assert [m["hidden"] for m in masks] == ([4 + later, later] if "sliding_window" in extra else [later, later])
