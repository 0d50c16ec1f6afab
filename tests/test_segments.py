"""Packed segments (ops/segments.py, the "segments" score modifier): a packed row's attention is each segment's
attention run alone, on both kernels, forward and backward; the tiled kernel skips the tiles between segments;
decoding after a cache keeps the segments; PyTorch's SDPA with the twin mask agrees."""

import numpy as np
import pytest
from helpers import randn

from numforge import backend
from numforge.backend import to_numpy
from numforge.ops import flash_attention as flash_module
from numforge.ops._tiles import tiles
from numforge.ops.attention import attention_backward, attention_forward
from numforge.ops.flash_attention import flash_attention_backward, flash_attention_forward
from numforge.ops.scores import SCORE_MODIFIERS, ScoreSeam, score_modifiers
from numforge.ops.segments import segment_positions

KERNELS = {
    "plain": (lambda q, k, v, **o: attention_forward(q, k, v, **o), attention_backward),
    "tiled": (
        lambda q, k, v, **o: flash_attention_forward(q, k, v, block_q=2, block_k=3, **o),
        flash_attention_backward,
    ),
}


def ids_of(lengths_by_row):
    """Segment ids ``(B, T)`` from each row's segment lengths: ``[[3, 2]]`` -> ``[[0, 0, 0, 1, 1]]``."""
    return np.stack([np.repeat(np.arange(len(lengths)), lengths) for lengths in lengths_by_row])


def test_segment_positions_restart_at_each_segment():
    ids = np.array([[0, 0, 0, 1, 1, 2], [4, 4, 4, 4, 4, 4], [0, 1, 2, 3, 3, 7]])
    assert segment_positions(ids).tolist() == [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 4, 5], [0, 0, 0, 0, 1, 0]]


def test_the_segment_key_spans_by_hand():
    # the module docstring's example: ids [0 0 0 1 1 2 2 2]
    shape = (1, 1, 8, 8)
    ids = np.array([[0, 0, 0, 1, 1, 2, 2, 2]])
    seam = ScoreSeam.whole(score_modifiers(False, None, (("segments", ids),), shape), 1)
    assert seam.key_span(range(3, 5), 0, 8) == (range(3, 5), range(3, 5))
    assert seam.key_span(range(2, 6), 0, 8) == (range(0, 8), range(2, 2))
    # after the causal mask, queries 5..6 see keys 5..6, both of them key 5
    causal = ScoreSeam.whole(score_modifiers(True, None, (("segments", ids),), shape), 1)
    assert causal.key_span(range(5, 7), 0, 8) == (range(5, 7), range(5, 6))
    # two rows: the union of what each row's queries see, the intersection of what all of them see
    two = np.array([[0, 0, 0, 1, 1, 2, 2, 2], [0, 0, 1, 1, 1, 1, 2, 2]])
    seam = ScoreSeam.whole(score_modifiers(False, None, (("segments", two),), (2, 1, 8, 8)), 1)
    assert seam.key_span(range(3, 5), 0, 8) == (range(2, 6), range(3, 5))
    assert seam.part((slice(1, 2), slice(0, 1)), 1).key_span(range(3, 5), 0, 8) == (range(2, 6), range(2, 6))


@pytest.mark.parametrize("kernel", sorted(KERNELS))
@pytest.mark.parametrize("H_kv", [4, 2])
def test_a_packed_row_is_each_segment_run_alone(kernel, H_kv):
    forward, backward = KERNELS[kernel]
    lengths = [[3, 1, 4, 2], [6, 4], [10]]  # B = 3 rows of T = 10, the segments of each row differ
    B, H, T, D = 3, 4, 10, 3
    q, k, v = randn(B, H, T, D, seed=1), randn(B, H_kv, T, D, seed=2), randn(B, H_kv, T, D, seed=3)
    dout = randn(B, H, T, D, seed=4)
    ids = backend.asarray(ids_of(lengths))
    out, cache = forward(q, k, v, causal=True, modifiers=(("segments", ids),))
    dq, dk, dv = backward(dout, cache)
    for b, row in enumerate(lengths):
        start = 0
        for n in row:
            s = slice(start, start + n)
            alone, alone_cache = forward(q[b : b + 1, :, s], k[b : b + 1, :, s], v[b : b + 1, :, s], causal=True)
            grads = backward(backend.asarray(to_numpy(dout)[b : b + 1, :, s]), alone_cache)
            np.testing.assert_allclose(to_numpy(out[b : b + 1, :, s]), to_numpy(alone), rtol=1e-12, atol=1e-13)
            for packed, single in zip((dq, dk, dv), grads):
                np.testing.assert_allclose(to_numpy(packed[b : b + 1, :, s]), to_numpy(single), rtol=1e-11, atol=1e-13)
            start += n


@pytest.mark.parametrize("Tq", [1, 3, 10])
def test_decoding_after_a_cache_sees_the_segments_of_the_cached_keys(Tq):
    # the last Tq queries against all Tk keys (bottom-right aligned) give the last Tq rows of the whole call
    B, H, T, D = 2, 2, 10, 3
    q, k, v = randn(B, H, T, D, seed=5), randn(B, H, T, D, seed=6), randn(B, H, T, D, seed=7)
    ids = backend.asarray(ids_of([[4, 5, 1], [9, 1]]))
    uses = (("segments", ids),)
    whole, _ = attention_forward(q, k, v, causal=True, modifiers=uses)
    for forward, _ in KERNELS.values():
        last, _ = forward(q[:, :, T - Tq :], k, v, causal=True, modifiers=uses)
        np.testing.assert_allclose(to_numpy(last), to_numpy(whole[:, :, T - Tq :]), rtol=1e-12, atol=1e-13)


def test_the_tiled_kernel_skips_the_tiles_between_segments():
    # 8 segments of 32 in a row of 256, tiles of 16: each query tile sees its own segment's key tiles only
    T, block, n = 256, 16, 32
    ids = ids_of([[n] * (T // n)])
    seam = ScoreSeam.whole(score_modifiers(True, None, (("segments", ids),), (1, 1, T, T)), 1)
    visited = [
        (q0, q1, lo, hi, masked)
        for k0, k1 in tiles(T, block)
        for q0, q1, lo, hi, masked in flash_module._query_tiles(k0, k1, T, T, seam, block)
    ]
    seen = sum((q1 - q0) * (hi - lo) for q0, q1, lo, hi, _ in visited)
    assert seen == (T // n) * (n // block) * (n // block + 1) // 2 * block * block  # each segment's causal tiles
    assert seen < T * (T + block) / 2 / 4  # under a quarter of causal attention's
    assert all(q0 // n == lo // n for q0, _, lo, _, _ in visited)  # no tile joins two segments
    assert not any(masked for q0, _, lo, _, masked in visited if q0 != lo)  # off the diagonal: no mask added


def test_sdpa_with_the_twin_mask_agrees():
    torch = pytest.importorskip("torch")
    B, H, H_kv, Tq, Tk, D = 2, 4, 2, 3, 7, 5
    q, k, v = randn(B, H, Tq, D, seed=8), randn(B, H_kv, Tk, D, seed=9), randn(B, H_kv, Tk, D, seed=10)
    ids = SCORE_MODIFIERS["segments"].gradcheck(None, (B, H, Tq, Tk))
    uses = ("causal", ("segments", backend.asarray(ids)))
    ours, _ = flash_attention_forward(q, k, v, causal=False, block_q=2, block_k=3, modifiers=uses)
    mask = sum(SCORE_MODIFIERS[name].torch_twin(arg, (B, H, Tq, Tk), torch.float64) for name, arg in
               [("causal", None), ("segments", ids)])  # fmt: skip
    tq, tk, tv = (torch.from_numpy(to_numpy(a).copy()) for a in (q, k, v))
    theirs = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=mask, enable_gqa=True)
    np.testing.assert_allclose(to_numpy(ours), theirs.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "ids, Tq, error, message",
    [
        (np.zeros((1, 4)), 4, TypeError, "segment ids .* must be an integer array"),
        (np.zeros((1, 5), dtype=np.int64), 4, ValueError, r"shape \(B, Tk\) = \(1, 4\), got \(1, 5\)"),
        (np.array([[0, 1, 1, 0]]), 4, ValueError, "must not decrease along a row"),
        (np.zeros((1, 3), dtype=np.int64), 4, ValueError, r"Tq <= Tk\), got Tq = 4, Tk = 3"),
    ],
)
def test_bad_segment_ids_are_named(ids, Tq, error, message):
    Tk = ids.shape[1] if Tq == 4 and ids.shape[1] == 3 else 4
    q, k, v = randn(1, 1, Tq, 2), randn(1, 1, Tk, 2, seed=1), randn(1, 1, Tk, 2, seed=2)
    for forward in (attention_forward, flash_attention_forward):
        with pytest.raises(error, match=message):
            forward(q, k, v, modifiers=(("segments", backend.asarray(ids)),))
