"""Tiled attention against its oracle, plain attention: same numbers, gradients, memory that grows with T;
grouped-query and multi-query attention (k, v with fewer heads than q) without repeated k, v."""

import tracemalloc

import numpy as np
import pytest
from helpers import assert_gradients_pass, randn
from hypothesis import given
from hypothesis import strategies as st

from numforge import backend
from numforge.backend import to_numpy
from numforge.gradcheck import check_op
from numforge.gradcheck.attention import CASES
from numforge.ops import flash_attention as flash
from numforge.ops.attention import attention_backward, attention_forward
from numforge.ops.flash_attention import flash_attention_backward, flash_attention_forward
from numforge.ops.scores import ScoreSeam, score_modifiers


def qkv(B, H, Tq, Tk, D, Dv, dtype="float64", seed=0, kv_heads=None):
    """``q (B,H,Tq,D)``, ``k (B,H_kv,Tk,D)``, ``v (B,H_kv,Tk,Dv)``, ``H_kv = kv_heads`` (default H)."""
    kv_heads = H if kv_heads is None else kv_heads
    return (
        randn(B, H, Tq, D, dtype=dtype, seed=seed),
        randn(B, kv_heads, Tk, D, dtype=dtype, seed=seed + 1),
        randn(B, kv_heads, Tk, Dv, dtype=dtype, seed=seed + 2),
    )


# (H_kv, G): H = H_kv G query heads; H_kv = 1 is multi-query, G = 1 multi-head
kv_groups = st.tuples(st.integers(1, 3), st.integers(1, 3))


def forward_backward(forward, backward, q, k, v, dout, **kwargs):
    out, cache = forward(q, k, v, **kwargs)
    return (out, *backward(dout, cache))


def error_vs(result, reference) -> float:
    """``max|result - reference| / max(max|reference|, 1)``: inputs are standard normal, so the
    outputs and gradients are of order 1 and the floor only matters where the exact value is 0."""
    result, reference = to_numpy(result).astype(np.float64), to_numpy(reference).astype(np.float64)
    return float(np.max(np.abs(result - reference)) / max(float(np.max(np.abs(reference))), 1.0))


@given(
    shape=st.tuples(st.integers(1, 2), kv_groups, st.integers(1, 9), st.integers(1, 9), st.integers(1, 4)),
    blocks=st.tuples(st.integers(1, 11), st.integers(1, 11)),
    causal=st.booleans(),
    keep_probs=st.booleans(),
)
def test_tiled_equals_plain(shape, blocks, causal, keep_probs):
    B, (H_kv, G), Tq, Tk, D = shape
    H = H_kv * G
    q, k, v = qkv(B, H, Tq, Tk, D, D + 1, seed=Tq * 13 + Tk, kv_heads=H_kv)
    dout = randn(B, H, Tq, D + 1, seed=99)
    plain = forward_backward(attention_forward, attention_backward, q, k, v, dout, causal=causal)
    tiled = forward_backward(
        flash_attention_forward, flash_attention_backward, q, k, v, dout,
        causal=causal, block_q=blocks[0], block_k=blocks[1], keep_probs=keep_probs,
    )  # fmt: skip
    for name, a, b in zip(("out", "dq", "dk", "dv"), tiled, plain):
        assert error_vs(a, b) <= 1e-10, name


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)  # plain and tiled: the command's suite, whole
def test_gradcheck_cases(case):
    rows = case.run()
    assert_gradients_pass(rows)


@given(
    shape=st.tuples(kv_groups, st.integers(1, 5), st.integers(2, 5), st.integers(1, 3)),
    blocks=st.tuples(st.integers(1, 6), st.integers(1, 6)),
    causal=st.booleans(),
)
def test_gradients(shape, blocks, causal):
    # Tk >= 2: with a single key dq = dk = 0 exactly, and a relative error of rounding noise
    # against 0 means nothing; that case has its own test below. Every coordinate is checked: causal
    # with Tq > Tk leaves rows that see one key or none (dq = 0 there), and a sample of only those
    # rows would again judge rounding noise against 0 (Tq 3, Tk 2 drew 1.1e-7 from 12 such coordinates).
    (H_kv, G), Tq, Tk, D = shape
    q, k, v = qkv(1, H_kv * G, Tq, Tk, D, D, seed=Tq + 7 * Tk, kv_heads=H_kv)
    options = {"causal": causal, "block_q": blocks[0], "block_k": blocks[1]}
    inputs = {"q": q, "k": k, "v": v}
    forward, backward = flash_attention_forward, flash_attention_backward
    rows = check_op("flash_attention", forward, backward, inputs, options)
    assert_gradients_pass(rows)


@pytest.mark.parametrize("causal", [True, False])
def test_a_single_key_gives_zero_score_gradients(causal):
    # Softmax over one key is the constant 1: o = v, dv = dout, and dq = dk = 0 up to rounding.
    q, k, v = qkv(2, 2, 3, 1, 4, 4)
    dout = randn(2, 2, 3, 4, seed=4)
    out, dq, dk, dv = forward_backward(flash_attention_forward, flash_attention_backward, q, k, v, dout, causal=causal)
    seen = slice(2, 3) if causal else slice(0, 3)  # causal, Tq = 3 > Tk = 1: only the last query sees the key
    expected_out = np.broadcast_to(to_numpy(v), out[:, :, seen].shape)  # o = v for the queries that see the key
    np.testing.assert_allclose(to_numpy(out)[:, :, seen], expected_out, rtol=1e-15)
    np.testing.assert_allclose(to_numpy(dv), to_numpy(dout)[:, :, seen].sum(axis=2, keepdims=True), rtol=1e-14)
    assert np.abs(to_numpy(dq)).max() <= 1e-14 and np.abs(to_numpy(dk)).max() <= 1e-14


@pytest.mark.parametrize("T, D, block_q, block_k", [(200, 16, 64, 96), (257, 16, 32, 100), (130, 24, 17, 23)])
def test_float32_error_is_no_worse_than_plain_float32(T, D, block_q, block_k):
    # The FlashAttention criterion: against a float64 reference, the tiled float32 error is
    # at most twice the plain float32 path's own error.
    q, k, v = qkv(2, 2, T, T, D, D, seed=T)
    dout = randn(2, 2, T, D, seed=T + 5)
    reference = forward_backward(attention_forward, attention_backward, q, k, v, dout)
    as32 = [a.astype("float32") for a in (q, k, v, dout)]
    plain = forward_backward(attention_forward, attention_backward, *as32)
    tiled = forward_backward(flash_attention_forward, flash_attention_backward, *as32, block_q=block_q, block_k=block_k)
    for name, t, p, r in zip(("out", "dq", "dk", "dv"), tiled, plain, reference):
        assert t.dtype.name == "float32"
        tiled_error, plain_error = error_vs(t, r), error_vs(p, r)
        assert tiled_error <= 2 * plain_error, (name, tiled_error, plain_error)


@pytest.mark.parametrize("keep_probs", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_queries_that_see_no_key_give_zeros_not_nan(dtype, keep_probs):
    q, k, v = qkv(2, 2, 7, 3, 4, 4, dtype=dtype)  # causal, Tq > Tk: queries 0..3 see no key
    dout = randn(2, 2, 7, 4, dtype=dtype, seed=9)
    out, dq, dk, dv = forward_backward(
        flash_attention_forward, flash_attention_backward, q, k, v, dout, block_q=2, block_k=2, keep_probs=keep_probs
    )
    for a in (out, dq, dk, dv):
        assert np.isfinite(to_numpy(a)).all()
        assert a.dtype.name == dtype
    assert (to_numpy(out)[:, :, :4] == 0).all() and (to_numpy(dq)[:, :, :4] == 0).all()
    assert np.abs(to_numpy(out)[:, :, 4:]).min() > 0


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_decoding_one_token_at_a_time_matches_the_full_causal_pass(kv_heads):
    # A KV cache calls with Tq = new tokens and Tk = cached + new (bottom-right alignment); with GQA
    # the cache holds H_kv heads.
    q, k, v = qkv(1, 4, 9, 9, 4, 4, dtype="float32", kv_heads=kv_heads)
    full, _ = flash_attention_forward(q, k, v, causal=True)
    for t in range(9):
        step, _ = flash_attention_forward(q[:, :, t : t + 1], k[:, :, : t + 1], v[:, :, : t + 1], block_k=4)
        np.testing.assert_allclose(to_numpy(step)[:, :, 0], to_numpy(full)[:, :, t], rtol=1e-5, atol=1e-6)
    chunk, _ = flash_attention_forward(q[:, :, 6:], k, v, block_q=2, block_k=3)  # 3 new tokens at once
    np.testing.assert_allclose(to_numpy(chunk), to_numpy(full)[:, :, 6:], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
@pytest.mark.parametrize(("Tq", "Tk"), [(113, 113), (113, 203), (203, 113)])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dropout_p", [0.0, 0.2])
def test_grouped_query_tiled_equals_plain_at_odd_lengths_and_widths(monkeypatch, kv_heads, Tq, Tk, causal, dropout_p):
    # FlashAttention's odd lengths (113, 203) and head width (59); tiles of 32 x 48 that the lengths do not
    # divide; two threads: whole groups a part (H_kv 2, 4), or halves of the one group (H_kv 1).
    monkeypatch.setattr(flash, "worker_count", lambda *args: 2)
    q, k, v = qkv(1, 4, Tq, Tk, 59, 59, seed=Tq + Tk, kv_heads=kv_heads)
    dout = randn(1, 4, Tq, 59, seed=3)
    options = {"causal": causal, "dropout_p": dropout_p, "dropout_seed": 17}
    plain = forward_backward(attention_forward, attention_backward, q, k, v, dout, **options)
    tiled = forward_backward(
        flash_attention_forward, flash_attention_backward, q, k, v, dout, block_q=32, block_k=48, **options
    )
    for name, a, b in zip(("out", "dq", "dk", "dv"), tiled, plain):
        assert a.shape == b.shape
        assert error_vs(a, b) <= 1e-10, name


@pytest.mark.parametrize(("B", "H", "H_kv", "pairs", "parts"), [
    (1, 8, 1, 4, 2),  # multi-query: two halves of the one group, each summing its own dk, dv
    (1, 8, 2, 4, 2),  # one whole group a part
    (2, 6, 2, 2, 6),  # groups of 3 > 2 pairs: one head (the largest divisor of 3 within 2) of both rows a part
    (1, 8, 4, 3, 4),  # groups of 2: one group a part (3 pairs round down to whole groups)
    (3, 4, 1, 8, 2),  # the whole group of two batch rows a part, then of the third
])  # fmt: skip
@pytest.mark.parametrize("dropout_p", [0.0, 0.3])
@pytest.mark.parametrize("keep_probs", [False, True])
def test_grouped_query_heads_split_across_threads_give_the_plain_result(
    monkeypatch, B, H, H_kv, pairs, parts, dropout_p, keep_probs
):
    monkeypatch.setattr(flash, "worker_count", lambda *args: 3)
    monkeypatch.setattr(flash, "pairs_per_part", lambda *args: pairs)
    q, k, v = qkv(B, H, 9, 11, 3, 4, seed=H + H_kv, kv_heads=H_kv)
    dout = randn(B, H, 9, 4, seed=7)
    options = {"dropout_p": dropout_p, "dropout_seed": 2}
    plain = forward_backward(attention_forward, attention_backward, q, k, v, dout, **options)
    out, cache = flash_attention_forward(q, k, v, block_q=2, block_k=4, keep_probs=keep_probs, **options)
    assert len(cache.parts) == parts
    tiled = (out, *flash_attention_backward(dout, cache))
    for name, a, b in zip(("out", "dq", "dk", "dv"), tiled, plain):
        assert error_vs(a, b) <= 1e-10, name


@pytest.mark.parametrize(("H", "H_kv", "Tq", "Tk", "causal"), [(8, 2, 37, 37, True), (4, 1, 9, 40, True),
                                                               (6, 3, 20, 13, False)])  # fmt: skip
def test_tiled_grouped_query_attention_agrees_with_torch_sdpa_enable_gqa(monkeypatch, H, H_kv, Tq, Tk, causal):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(flash, "worker_count", lambda *args: 2)
    q, k, v = qkv(2, H, Tq, Tk, 8, 5, seed=1, kv_heads=H_kv)
    dout = randn(2, H, Tq, 5, seed=2)
    out, cache = flash_attention_forward(q, k, v, causal=causal, block_q=8, block_k=16)
    grads = flash_attention_backward(dout, cache)
    tq, tk, tv = (torch.from_numpy(to_numpy(a).copy()).requires_grad_() for a in (q, k, v))
    # SDPA's is_causal aligns the triangle top-left when Tq != Tk; numforge's bottom-right mask, given explicitly
    bottom_right = torch.ones(Tq, Tk, dtype=torch.bool).tril(Tk - Tq) if causal else None
    t_out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=bottom_right, enable_gqa=True)
    t_out.backward(torch.from_numpy(to_numpy(dout).copy()))
    np.testing.assert_allclose(to_numpy(out), t_out.detach().numpy(), rtol=1e-12, atol=1e-12)
    for mine, theirs in zip(grads, (tq.grad, tk.grad, tv.grad)):
        assert mine.shape == theirs.shape
        np.testing.assert_allclose(to_numpy(mine), theirs.numpy(), rtol=1e-11, atol=1e-12)


def _visits(k_start, k_stop, Tq, Tk, causal, block_q):
    """The tiled kernel's (q_start, q_stop, key_lo, key_hi, masked) for one key tile."""
    seam = ScoreSeam.whole(score_modifiers(causal, None, (), (1, 1, Tq, Tk)), 1)
    return list(flash._query_tiles(k_start, k_stop, Tq, Tk, seam, block_q))


def test_causal_skips_tiles_above_the_diagonal_and_masks_only_the_diagonal():
    # Tq = Tk = 8, blocks of 2: key tile j is seen by query tiles j..3, and only tile j needs a mask.
    visits = {k0: _visits(k0, k0 + 2, 8, 8, True, 2) for k0 in range(0, 8, 2)}
    assert visits[0] == [(0, 2, 0, 2, True), (2, 4, 0, 2, False), (4, 6, 0, 2, False), (6, 8, 0, 2, False)]
    assert visits[6] == [(6, 8, 6, 8, True)]
    # a query tile that stops inside a key tile sees only the keys up to its last query: blocks 2 x 4
    assert _visits(0, 4, 8, 8, True, 2) == [(0, 2, 0, 2, True), (2, 4, 0, 4, True), (4, 6, 0, 4, False),
                                            (6, 8, 0, 4, False)]  # fmt: skip
    # Tq = 2 new tokens after 5 cached (Tk = 7): the queries sit at positions 5 and 6.
    assert _visits(0, 4, 2, 7, True, 4) == [(0, 2, 0, 4, False)]
    assert _visits(4, 7, 2, 7, True, 4) == [(0, 2, 4, 7, True)]
    # Tq > Tk: queries 0..2 of 5 see nothing when Tk = 2, so only the second query tile visits the keys.
    assert _visits(0, 2, 5, 2, True, 3) == [(3, 5, 0, 2, True)]
    assert _visits(3, 6, 8, 8, False, 3) == [(0, 3, 3, 6, False), (3, 6, 3, 6, False), (6, 8, 3, 6, False)]


def test_no_score_sized_array_survives_the_forward():
    q, k, v = qkv(2, 3, 40, 40, 4, 4)
    _, cache = flash_attention_forward(q, k, v, block_q=8, block_k=8)
    arrays = [a for a in cache if hasattr(a, "shape")]
    assert max(a.size for a in arrays) <= max(q.size, k.size, v.size)  # P would be 2*3*40*40 = 2.4 q.size


def test_kept_probabilities_are_the_plain_softmax_and_skip_the_backward_recomputation(monkeypatch):
    # Causal, Tq = Tk = 7, blocks 3 x 2: query tiles see 2 to 4 key tiles, so the kept tiles are
    # rescaled from the running max to the final log-sum-exp.
    q, k, v = qkv(2, 2, 7, 7, 3, 3)
    _, plain_cache = attention_forward(q, k, v, causal=True)
    _, cache = flash_attention_forward(q, k, v, block_q=3, block_k=2, keep_probs=True)
    expected = {(q0, k0) for q0 in (0, 3, 6) for k0 in range(0, q0 + 3, 2) if k0 < 7}
    [kept] = cache.probs  # a small call: one part, all heads
    assert set(kept) == expected
    for (q0, k0), tile in kept.items():
        want = to_numpy(plain_cache.probs)[:, :, q0 : q0 + 3, k0 : k0 + 2][..., : tile.shape[-1]]
        np.testing.assert_allclose(to_numpy(tile), want, rtol=1e-13, atol=1e-15)
    monkeypatch.setattr(flash, "_recomputed_probs", None)  # the backward must not rebuild score tiles
    flash_attention_backward(randn(2, 2, 7, 3, seed=5), cache)


def test_peak_memory_is_a_fraction_of_plain():
    if backend.backend_name() != "numpy":
        pytest.skip("tracemalloc sees NumPy buffers only")
    q, k, v = qkv(1, 2, 512, 512, 16, 16, dtype="float32")
    dout = randn(1, 2, 512, 16, dtype="float32", seed=3)
    peaks = []
    for forward, backward, kwargs in [
        (attention_forward, attention_backward, {}),
        (flash_attention_forward, flash_attention_backward, {"block_q": 64, "block_k": 64}),
    ]:
        tracemalloc.start()
        forward_backward(forward, backward, q, k, v, dout, **kwargs)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    plain_peak, tiled_peak = peaks
    assert tiled_peak * 8 <= plain_peak, (plain_peak, tiled_peak)


def test_grouped_query_attention_never_repeats_k_and_v(monkeypatch):
    # Multi-query decoding-like call: 8 query heads, 1 kv head of 4096 keys. k (or v) repeated to
    # (B,H,Tk,D) would be 8 MiB of float32 alone; the tiled forward + backward must peak below that, while
    # plain attention (the oracle, which repeats them) holds both repeats at once.
    if backend.backend_name() != "numpy":
        pytest.skip("tracemalloc sees NumPy buffers only")
    monkeypatch.setattr(flash, "worker_count", lambda *args: 1)  # one thread: a peak that does not depend on timing
    B, H, H_kv, Tq, Tk, D = 1, 8, 1, 32, 4096, 64
    q, k, v = qkv(B, H, Tq, Tk, D, D, dtype="float32", kv_heads=H_kv)
    dout = randn(B, H, Tq, D, dtype="float32", seed=3)
    repeated = B * H * Tk * D * 4  # bytes of one repeated k: 8 MiB
    peaks = []
    for forward, backward, kwargs in [
        (attention_forward, attention_backward, {}),
        (flash_attention_forward, flash_attention_backward, {"block_q": 32, "block_k": 256}),
    ]:
        tracemalloc.start()
        forward_backward(forward, backward, q, k, v, dout, **kwargs)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    plain_peak, tiled_peak = peaks
    assert plain_peak >= 2 * repeated, plain_peak  # the oracle does repeat: the measure sees it
    assert tiled_peak < repeated / 2, tiled_peak


@pytest.mark.parametrize("keep_probs", [False, True])
def test_backward_leaves_its_inputs_and_cache_alone(keep_probs):
    q, k, v = qkv(1, 2, 5, 5, 3, 3)
    _, cache = flash_attention_forward(q, k, v, block_q=2, block_k=2, keep_probs=keep_probs)
    dout = randn(1, 2, 5, 3, seed=5)
    arrays = [
        dout,
        *(a for a in cache if hasattr(a, "shape")),
        *(tile for part in cache.probs or [] for tile in part.values()),
    ]
    before = [to_numpy(a).copy() for a in arrays]
    flash_attention_backward(dout, cache)
    for a, b in zip(before, arrays):
        np.testing.assert_array_equal(a, to_numpy(b))


def test_strided_views_from_a_fused_projection_are_accepted():
    B, T, H, D = 2, 7, 3, 4
    rows = randn(B, T, 3, H, D)  # a fused (B,T,3C) projection, reshaped
    q, k, v = (rows[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # (B,H,T,D) views
    dout = randn(B, H, T, D, seed=3)
    strided = forward_backward(flash_attention_forward, flash_attention_backward, q, k, v, dout, block_q=3, block_k=2)
    plain = forward_backward(attention_forward, attention_backward, q.copy(), k.copy(), v.copy(), dout)
    for a, b in zip(strided, plain):
        assert error_vs(a, b) <= 1e-12


@pytest.mark.parametrize(
    "change, error, message",
    [
        ({"k": (1, 2, 4, 3)}, ValueError, "same head width D, got 5 and 3"),
        ({"k": (1, 3, 4, 5)}, ValueError, "same number of heads H_kv"),
        ({"q": (1, 3, 3, 5)}, ValueError, r"H = 3 must be a multiple of the key/value heads H_kv = 2"),
        ({"v": (1, 2, 3, 6)}, ValueError, "same number of keys, got 4 and 3"),
        ({"block_q": 0}, ValueError, "block_q must be a positive integer, got 0"),
        ({"block_k": 2.0}, ValueError, "block_k must be a positive integer, got 2.0"),
        ({"keep_probs": "yes"}, TypeError, "keep_probs must be True or False, got 'yes'"),
        ({"causal": None}, TypeError, "causal must be True or False"),
    ],
)
def test_bad_input_is_named(change, error, message):
    shapes = {"q": (1, 2, 3, 5), "k": (1, 2, 4, 5), "v": (1, 2, 4, 6)}
    arrays = {name: randn(*change.get(name, shape)) for name, shape in shapes.items()}
    options = {key: value for key, value in change.items() if key not in shapes}
    with pytest.raises(error, match=message):
        flash_attention_forward(arrays["q"], arrays["k"], arrays["v"], **options)


def test_bad_upstream_gradient_is_named():
    q, k, v = qkv(1, 2, 3, 4, 5, 6)
    _, cache = flash_attention_forward(q, k, v)
    with pytest.raises(ValueError, match=r"dout must have the output's shape \(1, 2, 3, 6\) and dtype float64"):
        flash_attention_backward(randn(1, 2, 3, 6, dtype="float32"), cache)


@pytest.mark.parametrize(("shape", "parts"), [((1, 5, 9, 9), 3), ((4, 1, 9, 9), 2), ((3, 2, 6, 9), 3)])
@pytest.mark.parametrize("keep_probs", [False, True])
def test_heads_split_across_threads_give_the_plain_result(monkeypatch, shape, parts, keep_probs):
    # Three workers whatever the call's size, parts of at most 2 pairs: several parts a thread.
    monkeypatch.setattr(flash, "worker_count", lambda *args: 3)
    monkeypatch.setattr(flash, "pairs_per_part", lambda *args: 2)
    B, H, Tq, Tk = shape
    q, k, v = qkv(B, H, Tq, Tk, 3, 4, seed=B + H)
    dout = randn(B, H, Tq, 4, seed=7)
    plain = forward_backward(attention_forward, attention_backward, q, k, v, dout)
    out, cache = flash_attention_forward(q, k, v, block_q=2, block_k=4, keep_probs=keep_probs)
    assert len(cache.parts) == parts
    tiled = (out, *flash_attention_backward(dout, cache))
    for name, a, b in zip(("out", "dq", "dk", "dv"), tiled, plain):
        assert error_vs(a, b) <= 1e-10, name


def test_head_parts_cover_every_pair_once():
    from numforge.ops._parallel import head_parts

    assert head_parts(1, 8, 4) == [(slice(0, 1), slice(0, 4)), (slice(0, 1), slice(4, 8))]
    assert head_parts(16, 4, 32) == [(slice(0, 8), slice(0, 4)), (slice(8, 16), slice(0, 4))]
    for B, H, pairs in [(1, 1, 2), (3, 2, 2), (2, 5, 4), (7, 3, 16), (4, 4, 1)]:
        seen = np.zeros((B, H), dtype=int)
        for part in head_parts(B, H, pairs):
            assert seen[part].size <= pairs
            seen[part] += 1
        assert (seen == 1).all(), (B, H, pairs)


def test_grouped_head_parts_hold_whole_groups_or_equal_shares_of_one():
    from numforge.ops._parallel import head_parts

    assert head_parts(1, 8, 4, group=8) == [(slice(0, 1), slice(0, 4)), (slice(0, 1), slice(4, 8))]
    assert head_parts(1, 8, 6, group=2) == [(slice(0, 1), slice(0, 6)), (slice(0, 1), slice(6, 8))]
    assert head_parts(1, 12, 5, group=6) == [(slice(0, 1), slice(h, h + 3)) for h in (0, 3, 6, 9)]
    for B, H, group, pairs in [(1, 8, 8, 3), (2, 6, 3, 4), (3, 12, 4, 2), (2, 8, 2, 16), (1, 9, 9, 1)]:
        parts = head_parts(B, H, pairs, group)
        sizes = {part[1].stop - part[1].start for part in parts}
        seen = np.zeros((B, H), dtype=int)
        for part in parts:
            heads = part[1]
            whole_groups = heads.start % group == 0 and (heads.stop - heads.start) % group == 0
            share = len(sizes) == 1 and group % (heads.stop - heads.start) == 0
            assert whole_groups or (share and heads.start // group == (heads.stop - 1) // group), (part, group)
            seen[part] += 1
        assert (seen == 1).all(), (B, H, group, pairs)


def test_parts_are_one_on_one_thread_and_sized_by_tile_on_several():
    from numforge.ops._parallel import pairs_per_part

    assert pairs_per_part(1, 16, 4, 64, 128, 4) == 64  # one thread: the whole (B, H) in one part
    assert pairs_per_part(2, 1, 8, 128, 256, 4) == 4  # 128 KiB a head, 512 KiB a part
    assert pairs_per_part(2, 1, 8, 1024, 1024, 8) == 1


def test_threads_run_again_in_a_forked_child(monkeypatch):
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    monkeypatch.setattr(flash, "worker_count", lambda *args: 2)
    q, k, v = qkv(1, 2, 5, 5, 3, 3)
    expected = to_numpy(flash_attention_forward(q, k, v)[0])  # the parent starts its threads
    with multiprocessing.get_context("fork").Pool(1) as pool:
        result = pool.apply_async(_forward_in_child, (q, k, v)).get(timeout=60)
    np.testing.assert_array_equal(result, expected)


def _forward_in_child(q, k, v):
    flash.worker_count = lambda *args: 2
    return to_numpy(flash_attention_forward(q, k, v)[0])
