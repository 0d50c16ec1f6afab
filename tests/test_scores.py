"""The score-modifier seam (ops/scores.py): each entry's tile terms equal its textbook terms, the plain and tiled
kernels agree under every modifier (ALiBi included), both match PyTorch's SDPA with the twin masks, and the
gradient checks cover every registered modifier on both kernels."""

import numpy as np
import pytest
from helpers import randn

from numforge import backend
from numforge.backend import to_numpy
from numforge.gradcheck.attention import CASES
from numforge.ops import flash_attention as flash_module
from numforge.ops import scores as seam_module
from numforge.ops._tiles import tiles
from numforge.ops.attention import attention_backward, attention_forward
from numforge.ops.flash_attention import flash_attention_backward, flash_attention_forward
from numforge.ops.scores import SCORE_MODIFIERS, ScoreSeam, alibi_slopes, score_modifiers


def qkv(B, H, H_kv, Tq, Tk, D, seed=0):
    return randn(B, H, Tq, D, seed=seed), randn(B, H_kv, Tk, D, seed=seed + 1), randn(B, H_kv, Tk, D, seed=seed + 2)


def modifier_uses(names, shape, seed=0):
    rng = np.random.default_rng(seed)
    uses = []
    for name in names:
        arg = SCORE_MODIFIERS[name].gradcheck(rng, shape)
        uses.append((name, backend.asarray(arg) if isinstance(arg, np.ndarray) else arg))
    return tuple(uses)


def test_alibi_slopes_are_the_geometric_sequence():
    assert alibi_slopes(8).tolist() == [2.0**-k for k in range(1, 9)]  # 2^(-8 h / 8), h = 1..8
    assert alibi_slopes(2).tolist() == [2.0**-4, 2.0**-8]
    # 6 heads: the 4 of H = 4 (2^-2, 2^-4, 2^-6, 2^-8), then every other one of H = 8's: 2^-1, 2^-3
    assert alibi_slopes(6).tolist() == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]


def test_textbook_terms_of_causal_and_alibi_by_hand():
    # Tq = 2 queries after 2 cached keys (Tk = 4): positions 2 and 3; H = 2, slopes 1/16, 1/256
    causal = SCORE_MODIFIERS["causal"].textbook(np, None, (1, 2, 2, 4), np.dtype("float64"))
    assert causal.tolist() == [[0, 0, 0, -np.inf], [0, 0, 0, 0]]
    alibi = SCORE_MODIFIERS["alibi"].textbook(np, None, (1, 2, 2, 4), np.dtype("float64"))
    np.testing.assert_array_equal(alibi[0], -np.array([[2, 1, 0, -1], [3, 2, 1, 0]]) / 16)
    np.testing.assert_array_equal(alibi[1], -np.array([[2, 1, 0, -1], [3, 2, 1, 0]]) / 256)
    # a window of W = 2: position 2 sees keys 1, 2; position 3 sees keys 2, 3
    window = SCORE_MODIFIERS["window"].textbook(np, 2, (1, 2, 2, 4), np.dtype("float64"))
    assert window.tolist() == [[-np.inf, 0, 0, -np.inf], [-np.inf, -np.inf, 0, 0]]


TERMS = [name for name, modifier in SCORE_MODIFIERS.items() if not modifier.transforms]  # the transforms: below


@pytest.mark.parametrize("name", TERMS)
@pytest.mark.parametrize("group", [1, 3])
def test_each_tile_term_is_its_textbook_term_on_that_tile(name, group):
    # B = 2, H = 6 (2 groups of 3 when group = 3), Tq = 5 after 4 cached (Tk = 9); tiles 2 x 4, GQA-stacked
    B, H, Tq, Tk = 2, 6, 5, 9
    modifier = SCORE_MODIFIERS[name]
    arg = modifier.gradcheck(np.random.default_rng(3), (B, H, Tq, Tk))  # NumPy, like the tiles below
    use = (name, arg)
    whole = np.broadcast_to(modifier.textbook(np, arg, (B, H, Tq, Tk), np.dtype("float64")), (B, H, Tq, Tk))
    seam = ScoreSeam.whole(score_modifiers(False, None, (use,), (B, H, Tq, Tk)), H)
    for part in [(slice(0, 1), slice(0, H)), (slice(1, 2), slice(3, 6))]:
        placed = seam.part(part, group)
        b, heads = part
        r = (heads.stop - heads.start) // group
        for q0, k0 in [(0, 0), (2, 4), (4, 8)]:
            queries, keys = range(q0, min(q0 + 2, Tq)), range(k0, min(k0 + 4, Tk))
            tile = np.zeros((1, r, len(queries) * group, len(keys)))  # (b,r,nq g,nk)
            placed.add(tile, queries, keys, Tk - Tq, masked=True)
            # (b,r,nq,g,nk) -> (b,r,g,nq,nk) -> (b,H_part,nq,nk): head heads.start + r_i g + m
            stacked = tile.reshape(1, r, len(queries), group, len(keys)).swapaxes(2, 3)  # (b,r,g,nq,nk)
            got = stacked.reshape(1, r * group, len(queries), len(keys))
            want = whole[b, heads, queries.start : queries.stop, keys.start : keys.stop]
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "names",
    [
        ("alibi",), ("causal", "alibi"), ("causal", "mask", "alibi"), ("mask",), ("window",),
        ("mask", "window", "alibi"), ("causal", "softcap"), ("window", "softcap", "alibi"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("Tq, Tk", [(7, 7), (3, 8), (8, 3)])
def test_plain_and_tiled_agree_under_every_modifier(names, Tq, Tk):
    B, H, H_kv, D = 2, 4, 2, 3
    q, k, v = qkv(B, H, H_kv, Tq, Tk, D)
    dout = randn(B, H, Tq, D, seed=9)
    uses = modifier_uses(names, (B, H, Tq, Tk), seed=1)
    plain, plain_cache = attention_forward(q, k, v, causal=False, modifiers=uses)
    tiled, tiled_cache = flash_attention_forward(q, k, v, causal=False, block_q=2, block_k=3, modifiers=uses)
    np.testing.assert_allclose(to_numpy(tiled), to_numpy(plain), rtol=1e-11, atol=1e-12)
    for a, b in zip(flash_attention_backward(dout, tiled_cache), attention_backward(dout, plain_cache)):
        np.testing.assert_allclose(to_numpy(a), to_numpy(b), rtol=1e-10, atol=1e-12)


def test_the_tiled_kernel_takes_a_key_padding_mask_as_the_plain_one_does():
    q, k, v = qkv(2, 2, 2, 6, 6, 4)
    padding = np.ones((2, 1, 1, 6), dtype=bool)
    padding[1, ..., 4:] = False  # the second sequence is 4 tokens long
    mask = backend.asarray(padding)
    plain, _ = attention_forward(q, k, v, mask=mask)
    tiled, _ = flash_attention_forward(q, k, v, mask=mask, block_q=2, block_k=2)
    np.testing.assert_allclose(to_numpy(tiled), to_numpy(plain), rtol=1e-12, atol=1e-13)
    short, _ = attention_forward(q[1:, :, :4], k[1:, :, :4], v[1:, :, :4])  # the same sequence, unpadded
    np.testing.assert_allclose(to_numpy(tiled[1:, :, :4]), to_numpy(short), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("width", [1, 3, 4, 20])
@pytest.mark.parametrize("Tq, Tk, H_kv", [(9, 9, 2), (4, 11, 1), (10, 6, 2)])
def test_the_window_on_both_kernels_and_the_tiles_it_skips(width, Tq, Tk, H_kv):
    # ragged 2 x 3 tiles: a query tile may start seeing a key tile in its middle; W = 20 > T: causal
    q, k, v = qkv(1, 4, H_kv, Tq, Tk, 3)
    dout = randn(1, 4, Tq, 3, seed=4)
    both = (("window", width), "alibi")
    plain, plain_cache = attention_forward(q, k, v, causal=False, modifiers=both)
    tiled, tiled_cache = flash_attention_forward(q, k, v, causal=False, block_q=2, block_k=3, modifiers=both)
    np.testing.assert_allclose(to_numpy(tiled), to_numpy(plain), rtol=1e-12, atol=1e-13)
    for a, b in zip(flash_attention_backward(dout, tiled_cache), attention_backward(dout, plain_cache)):
        np.testing.assert_allclose(to_numpy(a), to_numpy(b), rtol=1e-10, atol=1e-12)
    if width >= Tk:  # nothing left of the window: the causal mask's numbers
        causal, _ = attention_forward(q, k, v, causal=True, modifiers=("alibi",))
        np.testing.assert_allclose(to_numpy(plain), to_numpy(causal), rtol=1e-13, atol=1e-14)


def test_the_window_key_span_by_hand():
    # W = 3, Tq = Tk = 9: queries 6..7 see keys 4..7 (query 6 keys 4..6, query 7 keys 5..7): 5..6 seen by both
    seam = ScoreSeam.whole(score_modifiers(False, None, (("window", 3),), (1, 1, 9, 9)), 1)
    assert seam.key_span(range(6, 8), 0, 9) == (range(4, 8), range(5, 7))
    # after 5 cached keys (offset 5), query rows 0..1 sit at 5..6 and see keys 3..6, both of them 4..5
    assert seam.key_span(range(0, 2), 5, 7) == (range(3, 7), range(4, 6))
    # queries 0..3 with W = 3: keys 0..3, and no key is seen by both query 0 and query 3
    assert seam.key_span(range(0, 4), 0, 9) == (range(0, 4), range(0, 0))


@pytest.mark.parametrize("width, T, block", [(16, 256, 16), (32, 512, 16), (64, 256, 32)])
def test_the_tiled_kernel_visits_about_T_W_scores_of_a_window(width, T, block):
    # forward and backward walk the same (query tile, key tile) pairs; count the scores they compute
    seam = ScoreSeam.whole(score_modifiers(False, None, (("window", width),), (1, 1, T, T)), 1)
    seen = sum(
        (q1 - q0) * (hi - lo)
        for k0, k1 in tiles(T, block)
        for q0, q1, lo, hi, _ in flash_module._query_tiles(k0, k1, T, T, seam, block)
    )
    # each query tile of `block` rows spans the W + block - 1 keys of its rows' windows, in whole key tiles
    assert seen <= T * (width + 2 * block)
    assert seen >= T * width  # and every score of the window is computed


def test_every_registered_modifier_is_gradient_checked_on_both_kernels():
    names = {case.name for case in CASES}
    for modifier in SCORE_MODIFIERS:
        for kernel in ("attention", "flash_attention"):
            assert f"{kernel}.scores.{modifier}" in names
            if modifier != "causal":
                assert f"{kernel}.scores.causal+{modifier}" in names


@pytest.mark.parametrize(
    "call, error, message",
    [
        (dict(modifiers=("sliding",)), ValueError, "unknown score modifier 'sliding'"),
        (dict(modifiers=("causal",)), ValueError, "'causal' is given twice"),
        (dict(modifiers=(("alibi", 3),)), TypeError, "takes no argument"),
        (dict(modifiers="alibi"), TypeError, "modifiers must be a tuple"),
        (dict(mask=np.ones((3, 3))), TypeError, "mask must be boolean"),
        (dict(modifiers=(("window", 0),)), ValueError, r"window's width W .* must be a positive integer, got 0"),
        (dict(modifiers=(("window", 2.0),)), ValueError, "must be a positive integer, got 2.0"),
        (dict(modifiers=("window",)), ValueError, "must be a positive integer, got None"),
    ],
)
def test_bad_modifiers_are_named(call, error, message):
    q, k, v = qkv(1, 1, 1, 4, 4, 2)
    for forward in (attention_forward, flash_attention_forward):
        with pytest.raises(error, match=message):
            forward(q, k, v, **call)


def test_the_torch_twins_give_sdpa_our_numbers():
    torch = pytest.importorskip("torch")
    B, H, H_kv, Tq, Tk, D = 2, 4, 2, 3, 7, 5
    q, k, v = qkv(B, H, H_kv, Tq, Tk, D)
    for names in [("causal", "alibi"), ("alibi",), ("causal", "mask"), ("window",), ("window", "alibi")]:
        uses = modifier_uses(names, (B, H, Tq, Tk), seed=2)
        ours, _ = flash_attention_forward(q, k, v, causal=False, block_q=2, block_k=3, modifiers=uses)
        mask = sum(SCORE_MODIFIERS[n].torch_twin(arg, (B, H, Tq, Tk), torch.float64) for n, arg in uses)
        tq, tk, tv = (torch.from_numpy(to_numpy(a).copy()) for a in (q, k, v))
        theirs = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=mask, enable_gqa=True)
        if "mask" in names:  # a row that sees nothing: SDPA gives NaN, the kernels 0 (ops/attention.py)
            theirs = torch.nan_to_num(theirs, nan=0.0)
        np.testing.assert_allclose(to_numpy(ours), theirs.numpy(), rtol=1e-12, atol=1e-12)
    # causal alone, Tq == Tk: SDPA's own is_causal, the causal twin's mask exactly
    options = seam_module.torch_attention_options(("causal",), (1, 1, 4, 4), torch.float64)
    assert options == {"is_causal": True}
    tq = torch.randn(1, 1, 4, 2, dtype=torch.float64)
    twin = SCORE_MODIFIERS["causal"].torch_twin(None, (1, 1, 4, 4), torch.float64)
    fast = torch.nn.functional.scaled_dot_product_attention(tq, tq, tq, is_causal=True)
    assert torch.allclose(fast, torch.nn.functional.scaled_dot_product_attention(tq, tq, tq, attn_mask=twin))


def test_the_softcap_transform_by_hand_in_either_base():
    # c = 2: f(S) = 2 tanh(S / 2); the tiled kernel's base-2 tile is log2(e) f(S), its slope 1 - (f(S) / c)^2
    scores = np.array([[0.0, 2.0, -3.0, 100.0]])
    want = 2.0 * np.tanh(scores / 2.0)
    np.testing.assert_allclose(SCORE_MODIFIERS["softcap"].textbook(np, 2.0, scores), want, rtol=1e-15)
    seam = ScoreSeam.whole(score_modifiers(True, None, (("softcap", 2.0),), (1, 1, 1, 4)), 1)
    tile = scores * flash_module.LOG2_E
    slope = seam.transform(tile, flash_module.LOG2_E)
    np.testing.assert_allclose(tile, want * flash_module.LOG2_E, rtol=1e-14)
    np.testing.assert_allclose(slope, 1.0 - np.tanh(scores / 2.0) ** 2, rtol=1e-12, atol=1e-15)
    assert seam.transformed and not seam.biased


def test_softcapped_attention_equals_torch_autograd_on_both_kernels():
    """transformers' Gemma 2 eager attention: scores * s, then c tanh(. / c), then the mask, softmax, @ v."""
    torch = pytest.importorskip("torch")
    B, H, H_kv, Tq, Tk, D, cap = 2, 4, 2, 5, 5, 3, 0.7
    q, k, v = qkv(B, H, H_kv, Tq, Tk, D)
    dout = randn(B, H, Tq, D, seed=9)
    tq, tk, tv = (torch.tensor(to_numpy(a), requires_grad=True) for a in (q, k, v))
    keys, values = (t.repeat_interleave(H // H_kv, dim=1) for t in (tk, tv))
    scores = torch.tanh(tq @ keys.transpose(-1, -2) / D**0.5 / cap) * cap
    scores = scores + SCORE_MODIFIERS["window"].torch_twin(3, (B, H, Tq, Tk), torch.float64)
    out = torch.softmax(scores, dim=-1) @ values
    (out * torch.tensor(to_numpy(dout))).sum().backward()
    uses = (("window", 3), ("softcap", cap))
    for forward, backward, blocks in [
        (attention_forward, attention_backward, {}),
        (flash_attention_forward, flash_attention_backward, {"block_q": 2, "block_k": 3, "keep_probs": True}),
    ]:
        ours, cache = forward(q, k, v, causal=False, modifiers=uses, **blocks)
        np.testing.assert_allclose(to_numpy(ours), out.detach().numpy(), rtol=1e-12, atol=1e-13)
        for mine, t in zip(backward(dout, cache), (tq, tk, tv)):
            np.testing.assert_allclose(to_numpy(mine), t.grad.numpy(), rtol=1e-11, atol=1e-12)


def test_the_tiled_kernels_weights_under_a_soft_cap_are_the_plain_kernels():
    from numforge.ops.flash_attention import attention_weights

    q, k, v = qkv(2, 4, 2, 6, 6, 3)
    uses = (("softcap", 0.7), ("window", 4))
    _, plain = attention_forward(q, k, v, modifiers=uses)
    _, tiled = flash_attention_forward(q, k, v, block_q=2, block_k=4, modifiers=uses)
    np.testing.assert_allclose(to_numpy(attention_weights(tiled)), to_numpy(plain.probs), rtol=1e-12, atol=1e-14)
