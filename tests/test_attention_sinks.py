"""Attention sinks (gpt-oss's learned per-head logit in the softmax denominator) in both kernels: by hand,
plain == tiled (forward and every gradient, dsinks included) under the score modifiers, GQA, Tq != Tk,
dropout, threads; equal to transformers' gpt-oss eager attention and its autograd in float64; the study
weights with the sink's mass; decoding with a KV cache; the kernels without sinks unchanged; bad sinks named."""

import numpy as np
import pytest
from helpers import randn

from numforge import backend
from numforge.backend import to_numpy
from numforge.gradcheck.attention import CASES
from numforge.ops import flash_attention as flash
from numforge.ops.attention import attention_backward, attention_forward
from numforge.ops.flash_attention import (
    attention_weights,
    flash_attention_backward,
    flash_attention_forward,
    sink_weights,
)
from numforge.ops.scores import SCORE_MODIFIERS


def qkv_sinks(B, H, H_kv, Tq, Tk, D, seed=0, dtype="float64"):
    """``q (B,H,Tq,D)``, ``k, v (B,H_kv,Tk,D)`` standard normal; sink logits ``(H,)`` spread over [-2, 2]."""
    q, k, v = (
        randn(B, h, T, D, seed=seed + i, dtype=dtype) for i, (h, T) in enumerate([(H, Tq), (H_kv, Tk), (H_kv, Tk)])
    )
    return q, k, v, backend.asarray(np.linspace(-2.0, 2.0, H), dtype=dtype)


def both_kernels(q, k, v, sinks, dout, block_q=2, block_k=3, **options):
    """``(out, dq, dk, dv, dsinks)`` of the plain kernel and of the tiled one on ``block_q x block_k`` tiles."""
    plain_out, plain_cache = attention_forward(q, k, v, sinks=sinks, **options)
    tiled_out, tiled_cache = flash_attention_forward(q, k, v, sinks=sinks, block_q=block_q, block_k=block_k, **options)
    plain = (plain_out, *attention_backward(dout, plain_cache))
    tiled = (tiled_out, *flash_attention_backward(dout, tiled_cache))
    return plain, tiled, (plain_cache, tiled_cache)


def test_a_sink_by_hand():
    # one key of score 0 and a sink of logit 0: half the mass each, O = V / 2
    q, k, v = np.zeros((1, 1, 1, 2)), np.zeros((1, 1, 1, 2)), np.array([[[[2.0, -4.0]]]])
    for sinks, share in [(np.array([0.0]), 0.5), (np.array([np.log(3.0)]), 0.25)]:  # exp(s) = 3: P = 1 / (1 + 3)
        for forward in (attention_forward, flash_attention_forward):
            out, cache = forward(q, k, v, sinks=sinks)
            np.testing.assert_allclose(out, share * v, rtol=1e-15)
            np.testing.assert_allclose(attention_weights(cache), [[[[share]]]], rtol=1e-15)
            np.testing.assert_allclose(sink_weights(cache), [[[[1 - share]]]], rtol=1e-15)
    # Tq = 3 > Tk = 1, causal: the first two rows see no key, only the sink: P_sink = 1, O = 0, no gradient
    q, k, v, sinks = qkv_sinks(1, 2, 2, 3, 1, 2)
    dout = randn(1, 2, 3, 2, seed=5)
    plain, tiled, caches = both_kernels(q, k, v, sinks, dout, causal=True)
    for (out, dq, _, _, dsinks), cache in zip((plain, tiled), caches):
        assert (to_numpy(out)[:, :, :2] == 0).all() and (to_numpy(dq)[:, :, :2] == 0).all()
        assert np.isfinite(to_numpy(dsinks)).all()
        np.testing.assert_allclose(to_numpy(sink_weights(cache))[:, :, :2], 1.0, rtol=1e-15)


CASES_OF_MODIFIERS = [
    {"causal": True},
    {"causal": False},
    {"causal": False, "modifiers": (("window", 3),)},
    {"causal": True, "modifiers": ("alibi",)},
    {"causal": False, "modifiers": (("window", 2), "alibi")},
    {"causal": True, "dropout_p": 0.3, "dropout_seed": 5},
    {"causal": True, "keep_probs": True},
]


@pytest.mark.parametrize("options", CASES_OF_MODIFIERS, ids=lambda o: "+".join(f"{k}={v}" for k, v in o.items()))
@pytest.mark.parametrize("H_kv", [4, 2, 1])
@pytest.mark.parametrize("Tq, Tk", [(7, 7), (3, 8), (8, 3)])
def test_plain_and_tiled_agree_with_sinks(options, H_kv, Tq, Tk):
    q, k, v, sinks = qkv_sinks(2, 4, H_kv, Tq, Tk, 3, seed=Tq + Tk)
    dout = randn(2, 4, Tq, 3, seed=9)
    options = dict(options)
    keep_probs = options.pop("keep_probs", False)
    plain_out, plain_cache = attention_forward(q, k, v, sinks=sinks, **options)
    tiled_out, tiled_cache = flash_attention_forward(
        q, k, v, sinks=sinks, block_q=2, block_k=3, keep_probs=keep_probs, **options
    )
    plain = (plain_out, *attention_backward(dout, plain_cache))
    tiled = (tiled_out, *flash_attention_backward(dout, tiled_cache))
    assert len(plain) == len(tiled) == 5
    for name, a, b in zip(("out", "dq", "dk", "dv", "dsinks"), tiled, plain):
        assert a.shape == b.shape and a.dtype == b.dtype, name
        np.testing.assert_allclose(to_numpy(a), to_numpy(b), rtol=1e-10, atol=1e-12, err_msg=name)
    assert tiled[4].shape == (4,) and np.abs(to_numpy(tiled[4])).min() > 0  # every head's sink has a gradient


@pytest.mark.parametrize(("B", "H", "H_kv", "pairs", "parts"), [(1, 8, 1, 4, 2), (2, 6, 2, 2, 6), (1, 8, 4, 3, 4)])
def test_sinks_of_heads_split_across_threads_are_each_rows_own(monkeypatch, B, H, H_kv, pairs, parts):
    # a part holds some heads (a share of one group, or whole groups): each row must start from its own head's sink
    monkeypatch.setattr(flash, "worker_count", lambda *args: 3)
    monkeypatch.setattr(flash, "pairs_per_part", lambda *args: pairs)
    q, k, v, sinks = qkv_sinks(B, H, H_kv, 9, 11, 3, seed=H + H_kv)
    dout = randn(B, H, 9, 3, seed=7)
    plain, tiled, (_, tiled_cache) = both_kernels(q, k, v, sinks, dout, block_k=4)
    assert len(tiled_cache.parts) == parts
    for name, a, b in zip(("out", "dq", "dk", "dv", "dsinks"), tiled, plain):
        np.testing.assert_allclose(to_numpy(a), to_numpy(b), rtol=1e-10, atol=1e-12, err_msg=name)


def _gpt_oss_attention(q, k, v, sinks, modifiers, scale, dout):
    """transformers' own gpt-oss eager attention (the sink as a last column of the scores, softmaxed, dropped)
    on torch copies of ``q, k, v, sinks``, float64, the mask the torch twins of ``modifiers``; returns the
    output ``(B,H,Tq,Dv)``, the weights without the sink column, and autograd's ``dq, dk, dv, dsinks`` for the
    output's gradient ``dout``, as NumPy arrays."""
    torch = pytest.importorskip("torch")
    gpt_oss = pytest.importorskip("transformers.models.gpt_oss.modeling_gpt_oss")
    leaves = [torch.tensor(to_numpy(a), requires_grad=True) for a in (q, k, v, sinks)]
    shape = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    mask = sum(SCORE_MODIFIERS[name].torch_twin(arg, shape, torch.float64) for name, arg in modifiers)
    module = torch.nn.Module()  # what eager_attention_forward reads of the attention layer
    module.sinks, module.num_key_value_groups = leaves[3], q.shape[1] // k.shape[1]
    module.eval()
    out, weights = gpt_oss.eager_attention_forward(module, *leaves[:3], torch.as_tensor(mask), scale)
    out = out.transpose(1, 2)  # (B,Tq,H,Dv) -> (B,H,Tq,Dv)
    out.backward(torch.tensor(to_numpy(dout)))
    return out.detach().numpy(), weights.detach().numpy(), [leaf.grad.numpy() for leaf in leaves]


@pytest.mark.parametrize(
    "modifiers, H_kv, Tq, Tk",
    [
        ((("causal", None),), 4, 6, 6),
        ((("causal", None),), 2, 3, 9),  # decoding 3 tokens after 6 cached, grouped-query heads
        ((("window", 3),), 1, 7, 7),  # gpt-oss's sliding layers: a window of 3, multi-query
        ((("causal", None), ("alibi", None)), 2, 5, 8),
    ],
)
def test_both_kernels_equal_transformers_gpt_oss_eager_attention_and_its_autograd(modifiers, H_kv, Tq, Tk):
    q, k, v, sinks = qkv_sinks(2, 4, H_kv, Tq, Tk, 5, seed=3)
    dout = randn(2, 4, Tq, 5, seed=4)
    theirs, their_weights, their_grads = _gpt_oss_attention(q, k, v, sinks, modifiers, 0.3, dout)
    plain, tiled, caches = both_kernels(q, k, v, sinks, dout, causal=False, modifiers=modifiers, scale=0.3)
    for ours, cache in zip((plain, tiled), caches):
        np.testing.assert_allclose(to_numpy(ours[0]), theirs, rtol=1e-12, atol=1e-13)
        for name, mine, want in zip(("dq", "dk", "dv", "dsinks"), ours[1:], their_grads):
            np.testing.assert_allclose(to_numpy(mine), want, rtol=1e-11, atol=1e-12, err_msg=name)
        # the study weights: theirs without the sink column, and the mass that column took
        np.testing.assert_allclose(to_numpy(attention_weights(cache)), their_weights, rtol=1e-12, atol=1e-14)
        sink_mass = 1 - their_weights.sum(axis=-1)  # (B,H,Tq)
        np.testing.assert_allclose(to_numpy(sink_weights(cache))[..., 0], sink_mass, rtol=1e-11, atol=1e-14)


@pytest.mark.parametrize("dtype, tolerance", [("float64", 1e-13), ("float32", 1e-6)])
def test_study_weights_rows_sum_to_one_minus_the_sinks_mass(dtype, tolerance):
    # GQA, Tq = 4 after 5 cached keys, a window of 3: rows of the plain P and the rebuilt tiled P both sum to
    # 1 - P_sink, each kernel's own P_sink, and the two kernels' weights agree
    q, k, v, sinks = qkv_sinks(2, 4, 2, 4, 9, 3, seed=8, dtype=dtype)
    options = {"causal": False, "modifiers": (("window", 3),)}
    _, plain = attention_forward(q, k, v, sinks=sinks, **options)
    _, tiled = flash_attention_forward(q, k, v, sinks=sinks, block_q=3, block_k=2, **options)
    for cache in (plain, tiled):
        weights, mass = to_numpy(attention_weights(cache)), to_numpy(sink_weights(cache))
        assert weights.dtype == mass.dtype == np.dtype(dtype) and mass.shape == (2, 4, 4, 1)
        assert (mass > 0.01).all() and (mass < 0.99).all()  # the sinks take a real share: the sums say something
        np.testing.assert_allclose(weights.sum(axis=-1, keepdims=True), 1 - mass, rtol=0, atol=tolerance)
    np.testing.assert_allclose(to_numpy(attention_weights(tiled)), to_numpy(attention_weights(plain)), atol=tolerance)
    np.testing.assert_allclose(to_numpy(sink_weights(tiled)), to_numpy(sink_weights(plain)), atol=tolerance)
    assert (to_numpy(sink_weights(attention_forward(q, k, v)[1])) == 0).all()  # no sinks: no sink mass


@pytest.mark.parametrize("forward", [attention_forward, flash_attention_forward])
@pytest.mark.parametrize("modifiers, H_kv", [((), 2), ((("window", 3),), 1)])
def test_decoding_with_a_kv_cache_and_sinks_matches_the_full_causal_pass(forward, modifiers, H_kv):
    # Tq new queries after the cached keys (bottom-right alignment); the sinks depend on no position
    q, k, v, sinks = qkv_sinks(1, 4, H_kv, 9, 9, 4, seed=2)
    full, _ = forward(q, k, v, causal=True, sinks=sinks, modifiers=modifiers)
    for t in range(9):
        step, _ = forward(q[:, :, t : t + 1], k[:, :, : t + 1], v[:, :, : t + 1], sinks=sinks, modifiers=modifiers)
        np.testing.assert_allclose(to_numpy(step)[:, :, 0], to_numpy(full)[:, :, t], rtol=1e-12, atol=1e-13)
    chunk, _ = forward(q[:, :, 6:], k, v, sinks=sinks, modifiers=modifiers)  # 3 new tokens at once
    np.testing.assert_allclose(to_numpy(chunk), to_numpy(full)[:, :, 6:], rtol=1e-12, atol=1e-13)


def test_without_sinks_the_kernels_return_what_they_did_and_a_sink_far_below_takes_nothing():
    q, k, v, _ = qkv_sinks(1, 2, 2, 5, 5, 3)
    dout = randn(1, 2, 5, 3, seed=1)
    far_below = backend.asarray(np.full(2, -1e4))  # exp(-1e4 - m) = 0 in float64
    plain, tiled, _ = both_kernels(q, k, v, far_below, dout)
    kernels = [
        (attention_forward, attention_backward, plain),
        (flash_attention_forward, flash_attention_backward, tiled),
    ]
    for forward, backward, with_sinks in kernels:
        tiles = {"block_q": 2, "block_k": 3} if forward is flash_attention_forward else {}  # both_kernels' tiles
        out, cache = forward(q, k, v, **tiles)
        grads = backward(dout, cache)
        assert len(grads) == 3 and cache.sinks is None
        for a, b in zip((out, *grads), with_sinks):
            np.testing.assert_array_equal(to_numpy(a), to_numpy(b))
        assert (to_numpy(with_sinks[4]) == 0).all()


def test_gradient_checks_cover_sinks_on_both_kernels():
    # the float64 checks (gradcheck/attention.py, run whole by tests/test_flash_attention.py) of dsinks
    for kernel in ("attention", "flash_attention"):
        names = " ".join(case.name for case in CASES if case.name.startswith(f"{kernel}.sinks_"))
        for words in [("causal",), ("window",), ("gqa", "mqa"), ("tq<tk", "tq>tk"), ("masked",), ("dropout",)]:
            assert any(word in names for word in words), (kernel, words)


@pytest.mark.parametrize(
    "sinks, error, message",
    [
        (np.zeros(3), ValueError, r"one logit per query head, shape \(2,\), got \(3,\)"),
        (np.zeros((1, 2)), ValueError, r"sinks must have 1 dimensions, got shape \(1, 2\)"),
        (np.zeros(2, dtype=np.float32), TypeError, "sinks must have q's dtype float64, got float32"),
        (np.zeros(2, dtype=np.int64), TypeError, "sinks must be float32 or float64"),
        ([0.0, 0.0], TypeError, "sinks must be a numpy or cupy array, got list"),
    ],
)
def test_bad_sinks_are_named(sinks, error, message):
    q, k, v, _ = qkv_sinks(1, 2, 2, 3, 3, 2)
    for forward in (attention_forward, flash_attention_forward):
        with pytest.raises(error, match=message):
            forward(q, k, v, sinks=sinks)
