"""The GPT model: parameters, gradients under every option, inference, the KV cache, errors."""

import math

import numpy as np
import pytest
from helpers import assert_gradients_pass

from numforge.backend import asarray, default_rng, to_numpy
from numforge.gradcheck.model import OPTIONS, TINY, check_model, randomized_model, tiny_batch
from numforge.model import GPT, GPTConfig
from numforge.model import gpt as gpt_module
from numforge.model.config import ARCHS
from numforge.optim import AdamW

SMALL = dict(vocab_size=29, max_seq_len=12, d_model=16, num_heads=4, num_layers=2)


def log_softmax_loss(logits, targets):
    """The mean cross-entropy of (B,T,V) logits, in float64 NumPy: an oracle outside the model."""
    z = to_numpy(logits).astype(np.float64).reshape(-1, logits.shape[-1])
    t = to_numpy(targets).reshape(-1)
    keep = t != -1
    log_probs = z - z.max(axis=1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(axis=1, keepdims=True))
    return -log_probs[keep, t[keep]].mean()


@pytest.mark.parametrize("option", list(OPTIONS))
def test_every_parameter_gradient_matches_finite_differences(option):
    rows = check_model(option)
    assert_gradients_pass(rows)


def test_parameter_names_and_shapes_follow_the_architecture():
    config = GPTConfig(vocab_size=10, max_seq_len=6, d_model=4, num_heads=2, num_layers=1, d_ff=8)
    shapes = {n: tuple(p.shape) for n, p in GPT(config).params.items()}
    assert shapes == {
        "token_embedding": (10, 4),
        "position_embedding": (6, 4),
        "layers.0.pre_attn_norm.weight": (4,),
        "layers.0.pre_attn_norm.bias": (4,),
        "layers.0.attn.qkv_proj.weight": (4, 12),
        "layers.0.attn.qkv_proj.bias": (12,),
        "layers.0.attn.out_proj.weight": (4, 4),
        "layers.0.attn.out_proj.bias": (4,),
        "layers.0.pre_mlp_norm.weight": (4,),
        "layers.0.pre_mlp_norm.bias": (4,),
        "layers.0.mlp.up_proj.weight": (4, 8),
        "layers.0.mlp.up_proj.bias": (8,),
        "layers.0.mlp.down_proj.weight": (8, 4),
        "layers.0.mlp.down_proj.bias": (4,),
        "final_norm.weight": (4,),
        "final_norm.bias": (4,),
    }
    other = GPTConfig(
        **{
            **config.to_dict(),
            "activation": "swiglu",
            "use_bias": False,
            "tie_weights": False,
            "position": "sinusoidal",
        }
    )
    shapes = {n: tuple(p.shape) for n, p in GPT(other).params.items()}
    assert shapes == {
        "token_embedding": (10, 4),
        "layers.0.pre_attn_norm.weight": (4,),
        "layers.0.attn.qkv_proj.weight": (4, 12),
        "layers.0.attn.out_proj.weight": (4, 4),
        "layers.0.pre_mlp_norm.weight": (4,),
        "layers.0.mlp.up_proj.weight": (4, 8),
        "layers.0.mlp.gate_proj.weight": (4, 8),
        "layers.0.mlp.down_proj.weight": (8, 4),
        "final_norm.weight": (4,),
        "lm_head.weight": (10, 4),
    }
    # 10*4 + 6*4 + 4+4 + 4*12+12 + 16+4 + 4+4 + 32+8 + 32+4 + 4+4
    assert GPT(config).num_params() == 244


def test_gpt2_initialisation():
    config = GPTConfig(vocab_size=500, max_seq_len=64, d_model=64, num_heads=4, num_layers=8)
    params = {n: to_numpy(p) for n, p in GPT(config, seed=3).params.items()}
    assert all(p.dtype == np.float32 for p in params.values())
    assert params["token_embedding"].std() == pytest.approx(0.02, rel=0.03)
    assert params["layers.0.mlp.up_proj.weight"].std() == pytest.approx(0.02, rel=0.03)
    residual_std = 0.02 / math.sqrt(2 * 8)
    assert params["layers.5.mlp.down_proj.weight"].std() == pytest.approx(residual_std, rel=0.03)
    assert params["layers.5.attn.out_proj.weight"].std() == pytest.approx(residual_std, rel=0.05)
    assert np.all(params["layers.2.attn.qkv_proj.bias"] == 0)
    assert np.all(params["layers.2.pre_mlp_norm.weight"] == 1) and np.all(params["final_norm.bias"] == 0)
    same = GPT(config, seed=3, dtype="float64").params
    np.testing.assert_array_equal(to_numpy(same["token_embedding"]).astype(np.float32), params["token_embedding"])
    assert not np.array_equal(to_numpy(GPT(config, seed=4).params["token_embedding"]), params["token_embedding"])


def test_tiled_and_plain_attention_give_the_same_loss_and_gradients():
    tiled = randomized_model({})
    plain = randomized_model({"attention": "plain"})
    ids, targets = tiny_batch(TINY["vocab_size"])
    loss_tiled, cache_tiled = tiled.forward(ids, targets)
    loss_plain, cache_plain = plain.forward(ids, targets)
    assert float(loss_tiled) == pytest.approx(float(loss_plain), rel=1e-13)
    grads_tiled, grads_plain = tiled.backward(cache_tiled), plain.backward(cache_plain)
    for name in tiled.params:
        np.testing.assert_allclose(
            to_numpy(grads_tiled[name]), to_numpy(grads_plain[name]), rtol=1e-10, atol=1e-13, err_msg=name
        )


@pytest.mark.parametrize("keep_limit", [2**23, 0])  # the tiled kernel with and without its kept tiles
def test_tiled_and_plain_attention_drop_the_same_weights(monkeypatch, keep_limit):
    monkeypatch.setattr("numforge.model.attention_branch.KEEP_PROBS_LIMIT", keep_limit)
    tiled = randomized_model({"drop_prob": 0.3})
    plain = randomized_model({"drop_prob": 0.3, "attention": "plain"})
    ids, targets = tiny_batch(TINY["vocab_size"])
    loss_tiled, cache_tiled = tiled.forward(ids, targets, rng=default_rng(4))
    loss_plain, cache_plain = plain.forward(ids, targets, rng=default_rng(4))
    assert all(block.attention.attention.dropout is not None for block in cache_tiled.blocks)
    assert float(loss_tiled) == pytest.approx(float(loss_plain), rel=1e-13)
    grads_tiled, grads_plain = tiled.backward(cache_tiled), plain.backward(cache_plain)
    for name in tiled.params:
        np.testing.assert_allclose(
            to_numpy(grads_tiled[name]), to_numpy(grads_plain[name]), rtol=1e-10, atol=1e-13, err_msg=name
        )


def test_attention_dropout_can_be_turned_off_alone():
    ids, targets = tiny_batch(TINY["vocab_size"])
    on = randomized_model({"drop_prob": 0.3})
    off = randomized_model({"drop_prob": 0.3, "attention_dropout": False})
    _, cache_on = on.forward(ids, targets, rng=default_rng(4))
    _, cache_off = off.forward(ids, targets, rng=default_rng(4))
    assert all(block.attention.attention.dropout is None for block in cache_off.blocks)
    assert all(block.attention.dropout.keep is not None for block in cache_off.blocks)  # the branches still drop
    assert all(block.attention.attention.dropout.p == 0.3 for block in cache_on.blocks)
    cache_kept = on.forward(ids, targets, for_backward=False, keep_caches=True)[1]  # no generator: no dropout
    assert all(block.attention.attention.dropout is None for block in cache_kept.blocks)


def test_training_keeps_attention_probabilities_under_the_limit_with_the_same_gradients(monkeypatch):
    model = randomized_model({})
    ids, targets = tiny_batch(TINY["vocab_size"])

    def kept(cache):
        return [block.attention.attention.probs is not None for block in cache.blocks]

    _, cache = model.forward(ids, targets)
    assert all(kept(cache))
    grads_kept = model.backward(cache)
    assert model.forward(ids, targets, for_backward=False)[1] is None  # evaluation keeps nothing
    assert not any(kept(model.forward(ids, targets, for_backward=False, keep_caches=True)[1]))  # nor the study
    monkeypatch.setattr("numforge.model.attention_branch.KEEP_PROBS_LIMIT", 0)
    _, cache = model.forward(ids, targets)
    assert not any(kept(cache))
    for name, g in model.backward(cache).items():
        np.testing.assert_allclose(to_numpy(grads_kept[name]), to_numpy(g), rtol=1e-12, atol=1e-14, err_msg=name)


@pytest.mark.parametrize("option", ["gelu", "swiglu", "untied", "sinusoidal_scaled"])
def test_loss_is_the_cross_entropy_of_the_logits(option):
    model = randomized_model(OPTIONS[option])
    ids, targets = tiny_batch(TINY["vocab_size"], seed=1)
    loss, _ = model.forward(ids, targets)
    logits = model.logits(ids)
    assert logits.shape == (2, 7, TINY["vocab_size"])
    assert float(loss) == pytest.approx(log_softmax_loss(logits, targets), rel=1e-12)
    np.testing.assert_allclose(to_numpy(model.logits(ids, last_only=True)), to_numpy(logits[:, -1]), rtol=1e-12)


def test_float32_model_stays_float32_and_matches_float64():
    config = GPTConfig(**SMALL, activation="swiglu", position="sinusoidal", scale_embeddings=True)
    model32, model64 = GPT(config, seed=1), GPT(config, seed=1, dtype="float64")
    ids = asarray(np.random.default_rng(0).integers(0, 29, size=(3, 12)))
    loss32, cache32 = model32.forward(ids, ids)
    loss64, cache64 = model64.forward(ids, ids)
    assert loss32.dtype == np.float32 and loss32.shape == ()
    assert float(loss32) == pytest.approx(float(loss64), rel=1e-5)
    assert float(loss64) == pytest.approx(math.log(29), rel=0.05)  # near-uniform predictions at init
    grads32, grads64 = model32.backward(cache32), model64.backward(cache64)
    for name, g in grads32.items():
        assert g.dtype == np.float32 and g.shape == model32.params[name].shape, name
        scale = np.abs(to_numpy(grads64[name])).max()
        np.testing.assert_allclose(to_numpy(g), to_numpy(grads64[name]), atol=2e-4 * scale + 1e-9, err_msg=name)
    assert model32.logits(ids).dtype == np.float32


DECODING_OPTIONS = [
    {},
    {"activation": "relu", "position": "sinusoidal", "attention": "plain"},
    {**ARCHS["llama"], "qk_norm": True},  # the cache holds keys rotated at their absolute positions
    {**ARCHS["llama"], "qk_norm": True, "qk_norm_order": "after_rope", "norm_weight": False, "head_dim": 6},
    {**ARCHS["llama"], "num_kv_heads": 2, "qk_norm": True},  # the cache holds H_kv = 2 heads
    {**ARCHS["llama"], "num_kv_heads": 2, "qk_norm": True, "qk_norm_extent": "projection"},  # OLMoE: per position
    {**ARCHS["llama"], "num_kv_heads": 1, "attention": "plain"},
    {  # Gemma: the (1 + w) norm, GeGLU, the sandwich, Q^-1/2 scores, both soft caps (the decoded rows capped too)
        **ARCHS["llama"],
        "norm": "rmsnorm_offset",
        "activation": "geglu",
        "scale_embeddings": True,
        "tie_weights": True,
        "post_norms": True,
        "query_pre_attn_scalar": 3.0,
        "attn_softcap": 0.5,
        "logit_softcap": 2.0,
        "qk_norm": True,
    },  # fmt: skip
]


@pytest.mark.parametrize("options", DECODING_OPTIONS)
def test_greedy_decoding_with_and_without_kv_cache_is_identical(options):
    model = GPT(GPTConfig(**SMALL, **options), seed=2)
    prompt = asarray(np.array([[3, 1, 4], [2, 7, 1]]))
    tokens_plain, tokens_cached = prompt, prompt
    kv = model.new_kv_cache(2)
    new_ids = prompt
    for _ in range(SMALL["max_seq_len"] - 3):
        full = model.logits(tokens_plain, last_only=True)  # (B,V), recomputing every position
        cached = model.logits(new_ids, last_only=True, kv_cache=kv)  # only the new positions
        np.testing.assert_allclose(to_numpy(cached), to_numpy(full), rtol=1e-5, atol=1e-6)  # float32 rounding
        next_plain = full.argmax(axis=-1)[:, None]
        new_ids = cached.argmax(axis=-1)[:, None]
        tokens_plain = np.concatenate([to_numpy(tokens_plain), to_numpy(next_plain)], axis=1)
        tokens_plain = asarray(tokens_plain)
        tokens_cached = asarray(np.concatenate([to_numpy(tokens_cached), to_numpy(new_ids)], axis=1))
    assert kv.length == SMALL["max_seq_len"] - 1
    assert kv.keys[0].shape == (2, model.config.num_kv_heads, SMALL["max_seq_len"], model.config.head_dim)
    np.testing.assert_array_equal(to_numpy(tokens_cached), to_numpy(tokens_plain))
    with pytest.raises(ValueError, match="max_seq_len"):
        model.logits(asarray(np.array([[1, 2], [3, 4]])), kv_cache=kv)


@pytest.mark.parametrize("options", DECODING_OPTIONS)
def test_kv_cache_prefill_in_chunks_matches_full_logits(options):
    model = GPT(GPTConfig(**SMALL, **options), seed=5)
    ids = asarray(np.random.default_rng(1).integers(0, 29, size=(2, 10)))
    full = model.logits(ids)
    kv = model.new_kv_cache(2)
    parts = [model.logits(ids[:, a:b], kv_cache=kv) for a, b in [(0, 4), (4, 5), (5, 10)]]
    stitched = np.concatenate([to_numpy(p) for p in parts], axis=1)
    np.testing.assert_allclose(stitched, to_numpy(full), rtol=1e-5, atol=1e-6)


def test_dropout_is_switched_by_its_generator():
    model = randomized_model({"drop_prob": 0.3})
    plain = randomized_model({})
    ids, targets = tiny_batch(TINY["vocab_size"])
    loss_eval, _ = model.forward(ids, targets, for_backward=False)
    assert float(loss_eval) == float(plain.forward(ids, targets, for_backward=False)[0])  # the same evaluation path
    assert float(model.forward(ids, targets)[0]) == float(loss_eval)  # no generator: no dropout, for_backward or not
    loss_a = float(model.forward(ids, targets, rng=default_rng(1))[0])
    loss_b = float(model.forward(ids, targets, rng=default_rng(1))[0])
    loss_c = float(model.forward(ids, targets, rng=default_rng(2))[0])
    assert loss_a == loss_b and loss_a != loss_c and loss_a != float(loss_eval)


def test_bad_inputs_are_named():
    model = GPT(GPTConfig(**SMALL))
    ids = asarray(np.zeros((2, 5), dtype=np.int64))
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 29\).*got 29"):
        model.forward(asarray(np.full((2, 5), 29)), ids)
    with pytest.raises(ValueError, match="-2"):
        model.logits(asarray(np.full((2, 5), -2)))
    with pytest.raises(ValueError, match="max_seq_len"):
        model.forward(asarray(np.zeros((1, 13), dtype=np.int64)), asarray(np.zeros((1, 13), dtype=np.int64)))
    with pytest.raises(ValueError, match="targets"):
        model.forward(ids, ids[:, :4])
    with pytest.raises(ValueError, match=r"targets must lie in \[0, 29\) or equal ignore_index=-1, got 40"):
        model.forward(ids, asarray(np.full((2, 5), 40)))
    with pytest.raises(TypeError, match="integer"):
        model.forward(asarray(np.zeros((2, 5))), ids)
    with pytest.raises(ValueError, match="dtype"):
        GPT(GPTConfig(**SMALL), dtype="float16")


def test_load_params_copies_in_place_and_names_mismatches():
    model, source = GPT(GPTConfig(**SMALL), seed=0), GPT(GPTConfig(**SMALL), seed=1)
    before = {n: id(p) for n, p in model.params.items()}
    model.load_params({n: p.copy() for n, p in source.params.items()})
    for name, p in model.params.items():
        assert id(p) == before[name]
        np.testing.assert_array_equal(to_numpy(p), to_numpy(source.params[name]))
    good = dict(source.params)
    with pytest.raises(ValueError, match="final_norm.bias"):
        model.load_params({n: p for n, p in good.items() if n != "final_norm.bias"})
    with pytest.raises(ValueError, match="lm_head.weight"):
        model.load_params({**good, "lm_head.weight": good["token_embedding"]})
    with pytest.raises(ValueError, match="token_embedding"):
        model.load_params({**good, "token_embedding": good["token_embedding"][:5]})
    with pytest.raises(ValueError, match="final_norm.weight"):
        model.load_params({**good, "final_norm.weight": good["final_norm.weight"].astype("float64")})


def test_a_model_built_on_given_params_takes_them_without_drawing_or_copying(monkeypatch):
    source = GPT(GPTConfig(**{**SMALL, "norm": "rmsnorm", "position": "rope"}), seed=1)
    given = {n: p.copy() for n, p in source.params.items()}
    given["token_embedding"] = np.asfortranarray(to_numpy(given["token_embedding"]))  # as read transposed from a file

    def no_draws(*_):
        raise AssertionError("initial values were drawn")

    monkeypatch.setattr(gpt_module, "init_value", no_draws)
    model = GPT(source.config, params=given)
    for name, p in model.params.items():
        np.testing.assert_array_equal(to_numpy(p), to_numpy(source.params[name]))
        assert p.flags.c_contiguous
        assert (p is given[name]) == (name != "token_embedding")  # only the Fortran-ordered one is copied
    ids = asarray(np.arange(10).reshape(2, 5) % SMALL["vocab_size"])
    assert float(model.forward(ids, ids)[0]) == float(source.forward(ids, ids)[0])
    with pytest.raises(ValueError, match=r"params\['final_norm.weight'\] is float64\(16,\), expected float32\(16,\)"):
        GPT(source.config, params={**given, "final_norm.weight": given["final_norm.weight"].astype("float64")})
    with pytest.raises(ValueError, match=r"missing \['final_norm.weight'\]"):
        GPT(source.config, params={n: p for n, p in given.items() if n != "final_norm.weight"})
    with pytest.raises(TypeError, match="params must be a dict of name -> array, got list"):
        GPT(source.config, params=list(given.values()))


def test_adamw_training_memorises_a_batch():
    model = GPT(GPTConfig(**SMALL, drop_prob=0.1), seed=0)
    ids = asarray(np.random.default_rng(3).integers(0, 29, size=(4, 12)))
    targets = asarray(np.roll(to_numpy(ids), -1, axis=1))
    opt = AdamW(model.params, lr=1e-2, weight_decay=0.01)
    rng = default_rng(0)
    first = float(model.forward(ids, targets, for_backward=False)[0])
    for _ in range(40):
        _, cache = model.forward(ids, targets, rng=rng)
        opt.step(model.backward(cache))
    last = float(model.forward(ids, targets, for_backward=False)[0])
    assert first == pytest.approx(math.log(29), rel=0.05)
    assert last < 0.3 * first


@pytest.mark.parametrize("option", ["gelu", "untied"])
def test_fused_chunked_and_materialized_logits_give_the_same_loss_and_gradients(option, monkeypatch):
    ids, targets = tiny_batch(TINY["vocab_size"])
    model = randomized_model(OPTIONS[option])
    loss_fused, cache = model.forward(ids, targets)  # the default: loss and gradients fused
    assert cache.loss.route == "fused"
    grads_fused = model.backward(cache)
    loss_materialized, cache = model.forward(ids, targets, for_backward=False, keep_caches=True)  # tiny: materialized
    assert cache.loss.route == "materialized"
    grads_materialized = model.backward(cache)
    monkeypatch.setattr("numforge.model.unembedding.MATERIALIZED_LOGITS_LIMIT", 0)  # force the chunked loss
    loss_chunked, cache = model.forward(ids, targets, for_backward=False, keep_caches=True)
    assert cache.loss.route == "chunked"
    assert float(model.forward(ids, targets, for_backward=False)[0]) == float(loss_chunked)  # evaluation's route
    grads_chunked = model.backward(cache)
    for loss, grads in ((loss_chunked, grads_chunked), (loss_fused, grads_fused)):
        assert float(loss) == pytest.approx(float(loss_materialized), rel=1e-14)
        for name, g in grads.items():
            np.testing.assert_allclose(
                to_numpy(g), to_numpy(grads_materialized[name]), rtol=1e-12, atol=1e-14, err_msg=name
            )
