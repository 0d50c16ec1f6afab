"""Plain masked softmax attention: the definition, written out literally, and its gradients; grouped-query
attention (k, v with fewer heads than q) among them."""

import math

import numpy as np
import pytest
from helpers import assert_gradients_pass, randn
from hypothesis import given
from hypothesis import strategies as st

from numforge import backend
from numforge.backend import to_numpy
from numforge.gradcheck import check_op
from numforge.ops.attention import attention_backward, attention_forward


def literal_attention(q, k, v, causal, mask, scale):
    """The definition, one query row at a time, in float64 NumPy (the test's own oracle); query head ``h``
    reads key/value head ``h // G``, ``G = H / H_kv`` (Hugging Face's ``repeat_kv`` order)."""
    q, k, v = (to_numpy(a).astype(np.float64) for a in (q, k, v))
    B, H, Tq, _ = q.shape
    Tk, G = k.shape[2], H // k.shape[1]
    allowed = np.ones((B, H, Tq, Tk), dtype=bool)
    if mask is not None:
        allowed &= np.broadcast_to(to_numpy(mask), allowed.shape)
    out = np.zeros((B, H, Tq, v.shape[3]))
    for b in range(B):
        for h in range(H):
            for i in range(Tq):
                keys = [j for j in range(Tk) if allowed[b, h, i, j] and (not causal or j <= i + Tk - Tq)]
                if not keys:
                    continue
                scores = [scale * float(q[b, h, i] @ k[b, h // G, j]) for j in keys]
                top = max(scores)
                weights = [math.exp(s - top) for s in scores]
                total = sum(weights)
                out[b, h, i] = sum(w / total * v[b, h // G, j] for w, j in zip(weights, keys))
    return out


@st.composite
def shapes(draw, max_groups=3, max_group=3, max_t=6, max_d=4):
    """``(B, H, Tq, Tk, D, Dv, H_kv)``: ``H = H_kv G``, so H_kv is 1 (multi-query), a divisor, or H (multi-head)."""
    kv_heads, group = draw(st.integers(1, max_groups)), draw(st.integers(1, max_group))
    B, Tq, Tk = draw(st.integers(1, 2)), draw(st.integers(1, max_t)), draw(st.integers(1, max_t))
    D, Dv = draw(st.integers(1, max_d)), draw(st.integers(1, max_d))
    return B, kv_heads * group, Tq, Tk, D, Dv, kv_heads


def qkv(B, H, Tq, Tk, D, Dv, kv_heads=None, dtype="float64", seed=0):
    """``q (B,H,Tq,D)``, ``k (B,H_kv,Tk,D)``, ``v (B,H_kv,Tk,Dv)``, ``H_kv = kv_heads`` (default H)."""
    kv_heads = H if kv_heads is None else kv_heads
    return (
        randn(B, H, Tq, D, dtype=dtype, seed=seed),
        randn(B, kv_heads, Tk, D, dtype=dtype, seed=seed + 1),
        randn(B, kv_heads, Tk, Dv, dtype=dtype, seed=seed + 2),
    )


def random_mask(shape, seed):
    return backend.asarray(np.random.default_rng(seed).random(shape) < 0.6)


@given(shape=shapes(), causal=st.booleans(), mask_kind=st.sampled_from(["none", "full", "query_key", "per_head"]))
def test_matches_the_literal_definition(shape, causal, mask_kind):
    B, H, Tq, Tk, D, Dv, _ = shape
    q, k, v = qkv(*shape)
    mask_shape = {"none": None, "full": (B, H, Tq, Tk), "query_key": (Tq, Tk), "per_head": (1, H, 1, Tk)}[mask_kind]
    mask = None if mask_shape is None else random_mask(mask_shape, seed=Tq * 7 + Tk)
    out, _ = attention_forward(q, k, v, causal=causal, mask=mask)
    expected = literal_attention(q, k, v, causal, mask, 1 / math.sqrt(D))
    np.testing.assert_allclose(to_numpy(out), expected, rtol=1e-12, atol=1e-12)


def test_equal_scores_average_the_visible_values():
    # q = k = 0 gives equal scores, so each query averages the values it may see.
    # Bottom-right causal with Tq = 2, Tk = 4: query 0 sees keys 0..2, query 1 sees keys 0..3.
    xp = backend.array_module()
    q, k = xp.zeros((1, 1, 2, 3)), xp.zeros((1, 1, 4, 3))
    v = backend.asarray(np.array([1.0, 2.0, 3.0, 10.0]).reshape(1, 1, 4, 1))
    out, _ = attention_forward(q, k, v, causal=True)
    np.testing.assert_allclose(to_numpy(out).ravel(), [2.0, 4.0], rtol=1e-15)


def test_weights_are_probabilities_and_hidden_keys_get_none():
    # With v = identity the output row is the weight row itself.
    Tq = Tk = 5
    xp = backend.array_module()
    q, k = randn(2, 3, Tq, 4), randn(2, 3, Tk, 4, seed=1)
    v = xp.broadcast_to(xp.eye(Tk), (2, 3, Tk, Tk)).copy()
    weights = to_numpy(attention_forward(q, k, v, causal=True)[0])
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-14)
    assert (weights >= 0).all()
    assert (weights[..., np.triu_indices(Tq, 1)[0], np.triu_indices(Tq, 1)[1]] == 0).all()


@given(shape=shapes(), causal=st.booleans(), masked=st.booleans())
def test_gradients(shape, causal, masked):
    B, H, Tq, Tk, D, Dv, _ = shape
    q, k, v = qkv(*shape, seed=Tq + 10 * Tk)
    options = {"causal": causal}
    if masked:
        options["mask"] = random_mask((B, 1, Tq, Tk), seed=Tq + Tk)  # rows of all False happen
    rows = check_op("attention", attention_forward, attention_backward, {"q": q, "k": k, "v": v}, options)
    assert_gradients_pass(rows)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_rows_that_see_nothing_give_zeros_and_zero_gradients(dtype):
    xp = backend.array_module()
    q, k, v = qkv(2, 2, 6, 3, 4, 5, dtype=dtype)  # causal with Tq > Tk: queries 0..2 see no key
    mask = xp.ones((2, 2, 6, 3), dtype=bool)
    mask[:, :, 4] = False  # and query 4 sees nothing either
    out, cache = attention_forward(q, k, v, causal=True, mask=mask)
    dq, dk, dv = attention_backward(randn(2, 2, 6, 5, dtype=dtype, seed=9), cache)
    for a in (out, dq, dk, dv):
        assert np.isfinite(to_numpy(a)).all()
    empty = [0, 1, 2, 4]
    assert (to_numpy(out)[:, :, empty] == 0).all()
    assert (to_numpy(dq)[:, :, empty] == 0).all()
    assert np.abs(to_numpy(out)[:, :, [3, 5]]).min() > 0


def test_float32_stays_float32():
    q, k, v = qkv(1, 2, 4, 5, 3, 3, dtype="float32")
    out, cache = attention_forward(q, k, v, causal=True)
    grads = attention_backward(randn(1, 2, 4, 3, dtype="float32"), cache)
    assert [a.dtype.name for a in (out, *grads)] == ["float32"] * 4


def test_backward_leaves_its_inputs_and_cache_alone():
    q, k, v = qkv(1, 2, 4, 4, 3, 3)
    out, cache = attention_forward(q, k, v)
    dout = randn(1, 2, 4, 3, seed=5)
    before = [to_numpy(a).copy() for a in (dout, *cache[:4])]
    attention_backward(dout, cache)
    for a, b in zip(before, (dout, *cache[:4])):
        np.testing.assert_array_equal(a, to_numpy(b))


def test_strided_views_from_a_fused_projection_are_accepted():
    B, T, H, D = 2, 5, 3, 4
    qkv_rows = randn(B, T, 3, H, D)  # as a fused (B,T,3C) projection reshaped
    q, k, v = (qkv_rows[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # (B,H,T,D) views
    assert not q.flags.c_contiguous
    out, cache = attention_forward(q, k, v)
    dout = randn(B, H, T, D, seed=3)
    contiguous_out, contiguous_cache = attention_forward(*(a.copy() for a in (q, k, v)))
    np.testing.assert_allclose(to_numpy(out), to_numpy(contiguous_out), rtol=1e-13)
    for a, b in zip(attention_backward(dout, cache), attention_backward(dout, contiguous_cache)):
        np.testing.assert_allclose(to_numpy(a), to_numpy(b), rtol=1e-13)


def test_agrees_with_torch_sdpa_and_autograd():
    torch = pytest.importorskip("torch")
    q, k, v = qkv(2, 3, 5, 7, 4, 6, seed=4)
    mask = np.random.default_rng(1).random((2, 1, 5, 7)) < 0.6
    mask[..., 0] = True  # torch gives NaN for rows that see nothing; keep every row non-empty
    dout = randn(2, 3, 5, 6, seed=8)
    out, cache = attention_forward(q, k, v, causal=False, mask=backend.asarray(mask), scale=0.3)
    tq, tk, tv = (torch.from_numpy(to_numpy(a).copy()).requires_grad_() for a in (q, k, v))
    t_out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.from_numpy(mask), scale=0.3)
    t_out.backward(torch.from_numpy(to_numpy(dout).copy()))
    np.testing.assert_allclose(to_numpy(out), t_out.detach().numpy(), rtol=1e-12, atol=1e-12)
    for mine, theirs in zip(attention_backward(dout, cache), (tq.grad, tk.grad, tv.grad)):
        np.testing.assert_allclose(to_numpy(mine), theirs.numpy(), rtol=1e-11, atol=1e-12)


@given(shape=shapes(max_groups=3, max_group=4), causal=st.booleans(), p=st.sampled_from([0.0, 0.4]))
def test_grouped_query_attention_is_multi_head_attention_on_repeated_kv(shape, causal, p):
    # kv head j serves query heads j G .. j G + G - 1; its gradient is the sum over those G heads
    B, H, Tq, Tk, D, Dv, H_kv = shape
    G = H // H_kv
    q, k, v = qkv(*shape, seed=3 * Tq + Tk)
    dout = randn(B, H, Tq, Dv, seed=11)
    dropout = {"dropout_p": p, "dropout_seed": 5}
    out, cache = attention_forward(q, k, v, causal=causal, **dropout)
    dq, dk, dv = attention_backward(dout, cache)
    xp = backend.array_module()
    repeated = [xp.repeat(a, G, axis=1) for a in (k, v)]  # (B,H,Tk,.): head h holds kv head h // G
    mha_out, mha_cache = attention_forward(q, *repeated, causal=causal, **dropout)
    mha_dq, mha_dk, mha_dv = attention_backward(dout, mha_cache)
    assert dk.shape == k.shape and dv.shape == v.shape
    np.testing.assert_array_equal(to_numpy(out), to_numpy(mha_out))
    np.testing.assert_array_equal(to_numpy(dq), to_numpy(mha_dq))
    for grad, mha_grad in ((dk, mha_dk), (dv, mha_dv)):
        group_sum = to_numpy(mha_grad).reshape(B, H_kv, G, Tk, -1).sum(axis=2)  # (B,H_kv,Tk,.)
        np.testing.assert_allclose(to_numpy(grad), group_sum, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize(("H", "H_kv", "Tq", "Tk", "causal"), [(6, 2, 5, 7, True), (4, 1, 7, 7, True),
                                                               (3, 3, 4, 6, False)])  # fmt: skip
def test_grouped_query_attention_agrees_with_torch_sdpa_enable_gqa(H, H_kv, Tq, Tk, causal):
    torch = pytest.importorskip("torch")
    q, k, v = qkv(2, H, Tq, Tk, 4, 3, kv_heads=H_kv, seed=6)
    dout = randn(2, H, Tq, 3, seed=9)
    out, cache = attention_forward(q, k, v, causal=causal)
    tq, tk, tv = (torch.from_numpy(to_numpy(a).copy()).requires_grad_() for a in (q, k, v))
    # SDPA's is_causal aligns the triangle top-left when Tq != Tk; numforge's bottom-right mask, given explicitly
    bottom_right = torch.ones(Tq, Tk, dtype=torch.bool).tril(Tk - Tq) if causal else None
    t_out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=bottom_right, enable_gqa=True)
    t_out.backward(torch.from_numpy(to_numpy(dout).copy()))
    np.testing.assert_allclose(to_numpy(out), t_out.detach().numpy(), rtol=1e-12, atol=1e-12)
    for mine, theirs in zip(attention_backward(dout, cache), (tq.grad, tk.grad, tv.grad)):
        assert mine.shape == theirs.shape
        np.testing.assert_allclose(to_numpy(mine), theirs.numpy(), rtol=1e-11, atol=1e-12)


def _bad_inputs():
    q, k, v = qkv(1, 2, 3, 4, 5, 6)
    xp = backend.array_module()
    three = randn(1, 3, 3, 5)  # 3 query heads: not a multiple of 2 kv heads
    return [
        ((q[0], k, v), {}, ValueError, "q must have 4 dimensions"),
        ((q, xp.concatenate([k, k]), v), {}, ValueError, r"share the batch B: got shapes \(1, 2, 3, 5\), \(2, 2"),
        ((q, k[:, :1], v), {}, ValueError, r"same number of heads H_kv: got shapes .*\(1, 1, 4, 5\), \(1, 2, 4, 6\)"),
        ((three, k, v), {}, ValueError, r"H = 3 must be a multiple of the key/value heads H_kv = 2 .*\(1, 3, 3, 5\)"),
        ((q, k[..., :4], v), {}, ValueError, "same head width D, got 5 and 4"),
        ((q, k, v[:, :, :3]), {}, ValueError, "same number of keys, got 4 and 3"),
        ((q, k.astype("float32"), v), {}, TypeError, "one dtype"),
        ((q, k, v), {"mask": xp.ones((3, 4))}, TypeError, "mask must be boolean"),
        ((q, k, v), {"mask": xp.ones((3, 5), dtype=bool)}, ValueError, r"\(3, 5\) does not broadcast"),
        ((q, k, v), {"mask": xp.ones((1, 1, 1, 3, 4), dtype=bool)}, ValueError, "does not broadcast"),
        ((q, k, v), {"scale": float("nan")}, ValueError, "scale must be a finite number"),
        ((q, k, v), {"causal": "yes"}, TypeError, "causal must be True or False"),
        ((q.tolist(), k, v), {}, TypeError, "q must be a numpy or cupy array"),
    ]


@pytest.mark.parametrize("index", range(len(_bad_inputs())))
def test_bad_input_is_named(index):
    args, kwargs, error, message = _bad_inputs()[index]
    with pytest.raises(error, match=message):
        attention_forward(*args, **kwargs)


def test_bad_upstream_gradient_is_named():
    q, k, v = qkv(1, 2, 3, 4, 5, 6)
    _, cache = attention_forward(q, k, v)
    with pytest.raises(ValueError, match=r"dout must have the output's shape \(1, 2, 3, 6\)"):
        attention_backward(randn(1, 2, 3, 5), cache)
