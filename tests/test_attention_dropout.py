"""Dropout on attention weights: tiled equals plain with the same seed, the masks' statistics, bad arguments."""

import tracemalloc

import numpy as np
import pytest
from helpers import randn
from hypothesis import given
from hypothesis import strategies as st
from test_flash_attention import error_vs, forward_backward, kv_groups, qkv

from numforge import backend
from numforge.backend import to_numpy
from numforge.ops import flash_attention as flash
from numforge.ops._attention_dropout import MASK_BLOCK_K, MASK_BLOCK_Q, AttentionDropout, random_words
from numforge.ops.attention import attention_backward, attention_forward
from numforge.ops.flash_attention import flash_attention_backward, flash_attention_forward


@given(
    shape=st.tuples(st.integers(1, 2), kv_groups, st.integers(1, 9), st.integers(1, 9), st.integers(1, 4)),
    blocks=st.tuples(st.integers(1, 11), st.integers(1, 11)),
    causal=st.booleans(),
    keep_probs=st.booleans(),
    p=st.floats(0.0, 0.9),
    seed=st.integers(0, 2**64 - 1),
)
def test_tiled_equals_plain_with_dropout(shape, blocks, causal, keep_probs, p, seed):
    B, (H_kv, G), Tq, Tk, D = shape
    H = H_kv * G
    q, k, v = qkv(B, H, Tq, Tk, D, D + 1, seed=Tq * 13 + Tk, kv_heads=H_kv)
    dout = randn(B, H, Tq, D + 1, seed=99)
    dropout = {"dropout_p": p, "dropout_seed": seed}
    plain = forward_backward(attention_forward, attention_backward, q, k, v, dout, causal=causal, **dropout)
    tiled = forward_backward(
        flash_attention_forward, flash_attention_backward, q, k, v, dout,
        causal=causal, block_q=blocks[0], block_k=blocks[1], keep_probs=keep_probs, **dropout,
    )  # fmt: skip
    for name, a, b in zip(("out", "dq", "dk", "dv"), tiled, plain):
        assert error_vs(a, b) <= 1e-10, name


@pytest.mark.parametrize(("H", "H_kv"), [(3, 3), (4, 2), (4, 1)])
@pytest.mark.parametrize("blocks", [(64, 256), (128, 256), (50, 100)])
def test_tiled_equals_plain_across_mask_blocks_and_threads(monkeypatch, blocks, H, H_kv):
    # T = 300 spans several mask blocks (64 x 256); three threads split the heads (whole groups, or shares
    # of the one group with H_kv = 1).
    monkeypatch.setattr(flash, "worker_count", lambda *args: 3)
    monkeypatch.setattr(flash, "pairs_per_part", lambda *args: 2)
    q, k, v = qkv(1, H, 300, 300, 4, 4, dtype="float32", kv_heads=H_kv)
    dout = randn(1, H, 300, 4, dtype="float32", seed=5)
    dropout = {"dropout_p": 0.2, "dropout_seed": 123}
    plain = forward_backward(attention_forward, attention_backward, q, k, v, dout, **dropout)
    tiled = forward_backward(
        flash_attention_forward, flash_attention_backward, q, k, v, dout, block_q=blocks[0], block_k=blocks[1],
        **dropout,
    )  # fmt: skip
    for name, a, b in zip(("out", "dq", "dk", "dv"), tiled, plain):
        assert error_vs(a, b) <= 2e-6, name  # float32 rounding


def test_query_heads_that_share_a_kv_head_draw_masks_of_their_own():
    # the mask is keyed by the query head: the G heads of a group drop different weights, and each head's
    # mask is the one multi-head attention draws for that head
    q, k, v = qkv(1, 4, 9, 9, 3, 3, kv_heads=1)
    _, cache = attention_forward(q, k, v, dropout_p=0.5, dropout_seed=8)
    _, mha_cache = attention_forward(q, *(backend.array_module().repeat(a, 4, axis=1) for a in (k, v)),
                                     dropout_p=0.5, dropout_seed=8)  # fmt: skip
    keep = to_numpy(cache.keep)  # (1,4,9,9)
    np.testing.assert_array_equal(keep, to_numpy(mha_cache.keep))
    assert all(not np.array_equal(keep[0, 0], keep[0, h]) for h in (1, 2, 3))


def test_the_mask_is_the_seeds_and_drops_something():
    q, k, v = qkv(2, 2, 9, 9, 3, 3)
    none, _ = attention_forward(q, k, v)
    a, cache = attention_forward(q, k, v, dropout_p=0.5, dropout_seed=1)
    b, _ = attention_forward(q, k, v, dropout_p=0.5, dropout_seed=1)
    c, _ = attention_forward(q, k, v, dropout_p=0.5, dropout_seed=2)
    np.testing.assert_array_equal(to_numpy(a), to_numpy(b))
    assert not np.allclose(to_numpy(a), to_numpy(c)) and not np.allclose(to_numpy(a), to_numpy(none))
    # out = (P * keep / (1 - p)) V, with P the plain softmax: checked with the mask the cache holds
    probs, keep = to_numpy(cache.probs), to_numpy(cache.keep)
    np.testing.assert_allclose(to_numpy(a), (probs * keep * 2.0) @ to_numpy(v), rtol=1e-12, atol=1e-14)
    zero, _ = attention_forward(q, k, v, dropout_p=0.0, dropout_seed=1)
    np.testing.assert_array_equal(to_numpy(zero), to_numpy(none))  # p = 0 drops nothing


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_kept_fraction_per_mask_block_and_independent_blocks(p):
    # B 2, H 2, 256 x 512 positions: 2 x 2 x 4 x 2 = 32 mask blocks of 64 x 256 = 16384 weights each.
    dropout = AttentionDropout(p, seed=7, batches=range(2), heads=range(2), Tk=512)
    keep = dropout.keep(np, range(256), range(512))  # (2,2,256,512)
    blocks = keep.reshape(2, 2, 4, MASK_BLOCK_Q, 2, MASK_BLOCK_K).transpose(0, 1, 2, 4, 3, 5).reshape(32, -1)
    n = blocks.shape[1]
    fraction = blocks.mean(axis=1)  # (32,) kept fraction per block
    standard_error = np.sqrt(p * (1 - p) / n)
    assert np.all(np.abs(fraction - (1 - p)) < 5 * standard_error), fraction
    # independence: two blocks agree on a weight with probability p^2 + (1-p)^2 (same mask: 1; copies would show)
    agree = (blocks[:, None, :] == blocks[None, :, :]).mean(axis=2)[np.triu_indices(32, k=1)]  # (496,)
    expected = p**2 + (1 - p) ** 2
    spread = np.sqrt(expected * (1 - expected) / n)
    assert np.all(np.abs(agree - expected) < 6 * spread), agree.max()
    # within a block, neighbours are independent too: the lag-1 agreement along keys
    lag = (keep[..., 1:] == keep[..., :-1]).mean()
    assert abs(lag - expected) < 5 * np.sqrt(expected * (1 - expected) / keep[..., 1:].size)


def test_mask_rectangles_agree_with_the_whole_and_follow_the_keying():
    dropout = AttentionDropout(0.3, seed=11, batches=range(2), heads=range(3), Tk=300)
    whole = dropout.keep(np, range(130), range(300))  # (2,3,130,300)
    part = dropout._replace(batches=range(1, 2), heads=range(2, 3)).keep(np, range(70, 129), range(250, 263))
    np.testing.assert_array_equal(part, whole[1:2, 2:3, 70:129, 250:263])
    # query 70, key 260 of batch 1, head 2: block (1, 1), key (11, 1), counter (0, 2, 1, 1), width 300 - 256
    words = random_words(11, 1, 2, 1, 1, rows=7, width=44)
    assert whole[1, 2, 70, 260] == (words[70 - 64, 260 - 256] >= round(0.3 * 2**32))


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"dropout_p": 1.0}, ValueError, "dropout_p"),
        ({"dropout_p": -0.1}, ValueError, "dropout_p"),
        ({"dropout_p": True}, ValueError, "dropout_p"),
        ({"dropout_p": 0.1, "dropout_seed": 1.5}, TypeError, "dropout_seed"),
        ({"dropout_p": 0.1, "dropout_seed": -1}, ValueError, "dropout_seed"),
        ({"dropout_p": 0.1, "dropout_seed": 2**64}, ValueError, "dropout_seed"),
    ],
)
@pytest.mark.parametrize("forward", [attention_forward, flash_attention_forward])
def test_bad_dropout_arguments_are_named(forward, options, error, match):
    q, k, v = qkv(1, 1, 3, 3, 2, 2)
    with pytest.raises(error, match=match):
        forward(q, k, v, **options)


def test_tiled_keeps_no_mask_and_its_peak_memory_barely_moves(monkeypatch):
    if backend.backend_name() != "numpy":
        pytest.skip("tracemalloc sees NumPy buffers only")
    monkeypatch.setattr(flash, "worker_count", lambda *args: 1)  # one thread: a peak that does not depend on timing
    q, k, v = qkv(1, 2, 512, 512, 16, 16, dtype="float32")
    dout = randn(1, 2, 512, 16, dtype="float32", seed=3)
    peaks = []
    for p in (0.0, 0.2):
        tracemalloc.start()
        out, cache = flash_attention_forward(q, k, v, block_q=64, block_k=256, dropout_p=p, dropout_seed=1)
        flash_attention_backward(dout, cache)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert max(a.size for a in cache if hasattr(a, "shape")) <= q.size  # no (T, T) mask in the cache
    # dropout adds at most a tile's bool mask (1 x 2 x 64 x 256) and one mask block's uint32 words (64 x 256);
    # the whole (T, T) mask would add 2 x 512 x 512 bytes. Measured: +38 KB here.
    assert peaks[1] - peaks[0] <= 2 * 64 * 256 + 64 * 256 * 4, peaks


def test_seeds_up_to_two_to_the_64_key_distinct_masks():
    # the key is an exact uint64: the largest seeds are not rounded to one another
    top = [random_words(2**64 - i, 0, 0, 0, 0, rows=2, width=8) for i in (1, 2)]
    assert not np.array_equal(*top)


def test_per_row_seeds_key_each_row_alone():
    # one seed per batch row: rows 2..3 of a batch draw what they draw in the whole batch (a split batch)
    q, k, v = qkv(4, 2, 6, 6, 3, 3)
    seeds = [11, 12, 13, 14]
    whole, _ = flash_attention_forward(q, k, v, block_q=4, block_k=4, dropout_p=0.4, dropout_seed=seeds)
    half, _ = attention_forward(q[2:], k[2:], v[2:], dropout_p=0.4, dropout_seed=seeds[2:])
    np.testing.assert_allclose(to_numpy(half), to_numpy(whole)[2:], rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="one seed per batch row"):
        attention_forward(q, k, v, dropout_p=0.4, dropout_seed=seeds[:3])
