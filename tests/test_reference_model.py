"""The textbook GPT (model/reference.py) equals the fast GPT: loss, logits and every gradient, every option."""

import numpy as np
import pytest
from helpers import REGISTERED

from numforge.backend import asarray, default_rng, to_numpy
from numforge.gradcheck.model import DROPOUT_SEED, OPTIONS, TINY, randomized_model, tiny_batch
from numforge.model import GPT, GPTConfig
from numforge.model.reference import reference_backward, reference_forward

TOL = 1e-12
EVERY_OPTION_AT_ONCE = {
    "activation": "swiglu",
    "tie_weights": False,
    "use_bias": False,
    "position": "sinusoidal",
    "scale_embeddings": True,
    "attention": "plain",
    "drop_prob": 0.3,
    "norm_eps": 1e-3,
}
EVERY_MODERN_OPTION_AT_ONCE = {  # GQA, RoPE with scaling, QK-norm, Qwen2's biases, a head width != C / H, dropout
    "norm": "rmsnorm",
    "position": "rope",
    "rope_scaling": {"rope_type": "linear", "factor": 2.0},
    "num_heads": 4,
    "num_kv_heads": 2,
    "head_dim": 6,
    "qk_norm": True,
    "use_bias": False,
    "qkv_bias": True,
    "tie_weights": False,
    "activation": "swiglu",
    "drop_prob": 0.3,
}
CASES = {
    **OPTIONS,
    "all_at_once": EVERY_OPTION_AT_ONCE,
    "gelu_exact_untied": {"gelu_approximate": "none", "tie_weights": False},
    **{
        f"modern_at_once_{order}_{kernel}": {**EVERY_MODERN_OPTION_AT_ONCE, "qk_norm_order": order, "attention": kernel}
        for order in ("before_rope", "after_rope")
        for kernel in ("tiled", "plain")
    },
}


def relative_difference(a, b) -> float:
    a, b = to_numpy(a), to_numpy(b)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-300))


def both_models(options: dict, targets=None):
    """The fast GPT's (loss, grads) and the reference's (logits, loss, grads), float64, same masks."""
    model = randomized_model(options)
    ids, tiny_targets = tiny_batch(model.config.vocab_size)
    targets = tiny_targets if targets is None else targets
    loss, cache = model.forward(ids, targets, rng=default_rng(DROPOUT_SEED))
    grads = model.backward(cache)
    logits, ref_loss, ref_cache = reference_forward(
        model.params, model.config, ids, targets, rng=default_rng(DROPOUT_SEED)
    )
    ref_grads = reference_backward(model.params, model.config, ref_cache)
    return model, ids, (loss, grads), (logits, ref_loss, ref_grads)


@pytest.mark.parametrize("option", list(CASES))
def test_reference_equals_the_fast_model(option):
    model, _, (loss, grads), (_, ref_loss, ref_grads) = both_models(CASES[option])
    assert abs(float(ref_loss) - float(loss)) <= TOL * abs(float(loss))
    assert list(ref_grads) == list(model.params)  # every parameter, absent biases absent, params' order
    for name, g in grads.items():
        assert ref_grads[name].shape == g.shape and ref_grads[name].dtype == g.dtype, name
        assert relative_difference(ref_grads[name], g) <= TOL, name


@pytest.mark.parametrize("component", list(REGISTERED))
def test_every_registered_component_gives_the_fast_models_loss_logits_and_gradients(component):
    """Each norm, activation and position scheme of the registries alone over the defaults: the textbook model
    reads its formula from its entry, the fast model its op pair, and the two agree."""
    model, ids, (loss, grads), (_, ref_loss, ref_grads) = both_models(REGISTERED[component])
    assert abs(float(ref_loss) - float(loss)) <= TOL * abs(float(loss))
    assert list(ref_grads) == list(model.params)
    assert max(relative_difference(ref_grads[name], g) for name, g in grads.items()) <= TOL
    logits, _, _ = reference_forward(model.params, model.config, ids, tiny_batch(model.config.vocab_size)[1])
    assert relative_difference(logits, model.logits(ids)) <= TOL  # no rng: evaluation


@pytest.mark.parametrize("option", ["untied", "sinusoidal_scaled"])
def test_reference_logits_equal_the_fast_models(option):
    model = randomized_model(OPTIONS[option])
    ids, targets = tiny_batch(model.config.vocab_size)
    logits, _, _ = reference_forward(model.params, model.config, ids, targets)  # no rng: evaluation
    assert logits.shape == (*ids.shape, model.config.vocab_size)
    assert relative_difference(logits, model.logits(ids)) <= TOL


@pytest.mark.parametrize("option, reach", [("window", 2 * 2), ("window_alternating", None)])
def test_a_windowed_model_does_not_see_past_its_reach(option, reach):
    # two layers of W = 3 (each sees 2 positions back): position t reads tokens t - 4 .. t; one global layer: all
    model = randomized_model(OPTIONS[option])
    ids, targets = tiny_batch(model.config.vocab_size)  # (2, 7)
    changed = ids.copy()
    changed[:, 0] = (ids[:, 0] + 1) % model.config.vocab_size  # only the first token differs
    for logits_of in (model.logits, lambda i: reference_forward(model.params, model.config, i, targets)[0]):
        moved = np.abs(to_numpy(logits_of(changed)) - to_numpy(logits_of(ids))).max(axis=(0, 2))  # (T,)
        if reach is None:
            assert (moved > 1e-6).all()  # the global layer sees the first token from everywhere
        else:
            assert (moved[: reach + 1] > 1e-6).all() and (moved[reach + 1 :] == 0).all(), moved


def test_the_reference_loss_is_a_softmax_cross_entropy_of_its_logits():
    model = randomized_model({})
    ids, targets = tiny_batch(model.config.vocab_size)
    logits, loss, _ = reference_forward(model.params, model.config, ids, targets)
    z, t = to_numpy(logits), to_numpy(targets)
    log_probs = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    counted = t != -1
    expected = -log_probs[counted, t[counted]].mean()  # one target is -1: it must not count
    assert float(loss) == pytest.approx(expected, rel=1e-13)


def test_dropout_masks_come_from_the_generator():
    """Same seed: equal (above). Another seed: other masks, so the loss differs from the fast model's."""
    model = randomized_model({"drop_prob": 0.2})
    ids, targets = tiny_batch(model.config.vocab_size)
    loss, _ = model.forward(ids, targets, rng=default_rng(DROPOUT_SEED))
    _, other, _ = reference_forward(model.params, model.config, ids, targets, rng=default_rng(DROPOUT_SEED + 1))
    _, evaluation, _ = reference_forward(model.params, model.config, ids, targets)
    assert abs(float(other) - float(loss)) > 1e-6
    assert float(evaluation) == pytest.approx(float(model.forward(ids, targets, for_backward=False)[0]), rel=TOL)


def test_all_targets_ignored_gives_zero_loss_and_zero_gradients():
    targets = asarray(np.full((2, 7), -1))
    model, _, (loss, grads), (_, ref_loss, ref_grads) = both_models({}, targets=targets)
    assert float(ref_loss) == float(loss) == 0.0
    assert all(not np.any(to_numpy(g)) for g in ref_grads.values())


def test_bad_inputs_are_named():
    model = randomized_model({})
    ids, targets = tiny_batch(model.config.vocab_size)
    with pytest.raises(TypeError, match="config must be a GPTConfig"):
        reference_forward(model.params, model.config.to_dict(), ids, targets)
    with pytest.raises(ValueError, match="targets must have the shape"):
        reference_forward(model.params, model.config, ids, targets[:, :3])
    with pytest.raises(TypeError, match="token_ids must be an integer array"):
        reference_forward(model.params, model.config, ids * 1.0, targets)
    with pytest.raises(ValueError, match=r"ids in \[0, 13\)"):
        reference_forward(model.params, model.config, ids - 1, targets)  # -1 would wrap to the last row
    with pytest.raises(ValueError, match="or the ignore index -1"):
        reference_forward(model.params, model.config, ids, targets + 13)


def test_float32_in_float32_out_and_close_to_the_fast_model():
    model = GPT(GPTConfig(**{**TINY, "drop_prob": 0.1, "activation": "swiglu"}), seed=1)  # float32
    ids, targets = tiny_batch(model.config.vocab_size)
    loss, cache = model.forward(ids, targets, rng=default_rng(3))
    grads = model.backward(cache)
    logits, ref_loss, ref_cache = reference_forward(model.params, model.config, ids, targets, rng=default_rng(3))
    ref_grads = reference_backward(model.params, model.config, ref_cache)
    assert logits.dtype == ref_loss.dtype == np.float32
    assert all(g.dtype == np.float32 for g in ref_grads.values())
    assert abs(float(ref_loss) - float(loss)) <= 1e-6 * abs(float(loss))
    assert max(relative_difference(ref_grads[name], g) for name, g in grads.items()) <= 1e-4
