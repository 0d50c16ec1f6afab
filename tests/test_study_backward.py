"""numforge.study.backward: the backward's own upstream gradients, stage by stage, checked against the model."""

import numpy as np
import pytest
from helpers import STUDY_PROMPT, STUDY_TEXT, tiny_model

from numforge.backend import asarray, to_numpy
from numforge.study.backward import backward_stages, format_backward, record_backward
from numforge.study.prompt import run_prompt
from numforge.tokenizer import BPETokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return BPETokenizer.train(STUDY_TEXT, 256 + 12)


def _by_name(stages):
    return {s.name: s for s in stages}


@pytest.mark.parametrize("options", [{}, {"activation": "swiglu", "attention": "plain"}, {"tie_weights": False}])
def test_recording_changes_no_gradient(tokenizer, options):
    model = tiny_model(tokenizer, **options)
    prompt = run_prompt(model, tokenizer, STUDY_PROMPT)
    plain = model.backward(prompt.cache)
    stages, recorded = backward_stages(model, prompt)
    assert list(recorded) == list(plain)
    for name in plain:
        np.testing.assert_array_equal(to_numpy(recorded[name]), to_numpy(plain[name]))  # bit for bit
    # every parameter's gradient is reported once, at the step that made it, with its norm
    reported = {name: norm for s in stages for name, _, norm in s.params}
    shown_as = {
        "token_embedding": "token_embedding (input side + output side)"
        if model.config.tie_weights
        else "token_embedding (input side: scatter-add)",
        "position_embedding": "position_embedding (summed over the batch)",
    }
    for name, grad in plain.items():
        norm = np.linalg.norm(to_numpy(grad).astype(np.float64))
        assert reported[shown_as.get(name, name)] == pytest.approx(norm, rel=1e-12)


def test_stages_come_in_the_backwards_order(tokenizer):
    model = tiny_model(tokenizer)
    names = [s.name for s in backward_stages(model, run_prompt(model, tokenizer, STUDY_PROMPT))[0]]
    per_layer = [
        "MLP GELU output (down_proj input)", "MLP up_proj output (GELU input)", "pre-MLP LayerNorm output",
        "MLP branch -> residual", "residual after attention (skip + MLP)", "heads merged (out_proj input)", "q", "k",
        "v", "pre-attention LayerNorm output", "attention branch -> residual",
        "residual into the block (skip + attention)",
    ]  # fmt: skip
    expected = ["loss", "final LayerNorm output h", "residual after the last layer"]
    expected += [f"layer {i} {name}" for i in (1, 0) for name in per_layer] + ["embedding sum x = e + p"]
    assert names == expected


def test_numbers_equal_the_gradients_computed_from_the_forward_here(tokenizer):
    """float64: dh = dlogits table, dtable (output side) = dlogits^T h, dlogits = (softmax - onehot) / count,
    from the model's own logits; the tied gradient is the sum of its two sides; the residual sums hold."""
    model = tiny_model(tokenizer, dtype="float64")
    prompt = run_prompt(model, tokenizer, STUDY_PROMPT)
    stages, grads = backward_stages(model, prompt)
    by_name = _by_name(stages)
    ids, T = list(prompt.ids), len(prompt.ids)
    logits = to_numpy(model.logits(asarray(np.array([ids]))))[0]  # (T,V)
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    dlogits = probs.copy()
    dlogits[np.arange(T - 1), ids[1:]] -= 1
    dlogits[T - 1] = 0  # the last position has no target
    dlogits /= T - 1
    table = to_numpy(model.params["token_embedding"])
    h = to_numpy(prompt.cache.loss.rows)  # (T,C): the final norm's output
    np.testing.assert_allclose(to_numpy(by_name["final LayerNorm output h"].array)[0], dlogits @ table, atol=1e-15)
    parts = by_name["final LayerNorm output h"].param_arrays
    output_side = to_numpy(parts["token_embedding (output side: dlogits^T h)"])
    np.testing.assert_allclose(output_side, dlogits.T @ h, atol=1e-15)
    embedding = by_name["embedding sum x = e + p"].param_arrays
    input_side = to_numpy(embedding["token_embedding (input side: scatter-add)"])
    np.testing.assert_array_equal(
        to_numpy(embedding["token_embedding (input side + output side)"]), input_side + output_side
    )
    np.testing.assert_array_equal(to_numpy(grads["token_embedding"]), input_side + output_side)
    dx_embedding = to_numpy(by_name["embedding sum x = e + p"].array)[0]  # (T,C)
    expected_input_side = np.zeros_like(table)
    np.add.at(expected_input_side, ids, dx_embedding)
    np.testing.assert_allclose(input_side, expected_input_side, atol=1e-15)
    # residual path: into the block = (after attention) + (attention branch); after attention = above + MLP branch
    for i in (0, 1):
        above = by_name[
            "residual after the last layer" if i == 1 else "layer 1 residual into the block (skip + attention)"
        ]
        after_attention = by_name[f"layer {i} residual after attention (skip + MLP)"]
        mlp = to_numpy(by_name[f"layer {i} MLP branch -> residual"].array).reshape(1, T, -1)
        attention = to_numpy(by_name[f"layer {i} attention branch -> residual"].array).reshape(1, T, -1)
        np.testing.assert_array_equal(to_numpy(after_attention.array), to_numpy(above.array) + mlp)
        into = by_name[f"layer {i} residual into the block (skip + attention)"]
        np.testing.assert_array_equal(to_numpy(into.array), to_numpy(after_attention.array) + attention)


def test_position_gradient_is_summed_over_the_batch(tokenizer):
    model = tiny_model(tokenizer, dtype="float64")
    ids = np.array([[1, 2, 3, 4, 5], [5, 4, 3, 2, 1]])  # (2,5)
    targets = np.concatenate([ids[:, 1:], np.full((2, 1), -1)], axis=1)
    _, cache = model.forward(asarray(ids), asarray(targets), for_backward=False, keep_caches=True)
    stages, grads = record_backward(model, cache)
    recorded = {s.name: (s.array, s.param_arrays) for s in stages}
    dx, params = recorded["embedding sum x = e + p"]
    summed = to_numpy(dx).sum(axis=0)  # (B,T,C) -> (T,C)
    np.testing.assert_allclose(to_numpy(params["position_embedding (summed over the batch)"])[:5], summed, atol=1e-15)
    np.testing.assert_array_equal(
        to_numpy(grads["position_embedding"]), to_numpy(params["position_embedding (summed over the batch)"])
    )


def test_format_and_a_one_token_prompt(tokenizer):
    model = tiny_model(tokenizer, num_layers=1)
    stages, _ = backward_stages(model, run_prompt(model, tokenizer, STUDY_PROMPT))
    text = format_backward(stages)
    assert all(s.name in text for s in stages) and "param layers.0.attn.qkv_proj.weight" in text
    with pytest.raises(ValueError, match="no target"):
        backward_stages(model, run_prompt(model, tokenizer, "the"))
