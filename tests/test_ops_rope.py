"""Rotary position embeddings: the frequencies and tables against Hugging Face's, the rotation against its
formula and PyTorch autograd, the backward as the inverse rotation, relative positions, gradients, bad input."""

import math

import numpy as np
import pytest
from helpers import assert_gradients_pass, randn
from hypothesis import given
from hypothesis import strategies as st

from numforge import backend
from numforge.gradcheck import check_op
from numforge.ops.rope import (
    ROPE_SCALING_TYPES,
    check_rope_scaling,
    rope_backward,
    rope_forward,
    rope_frequencies,
    rope_table,
)

LINEAR = {"rope_type": "linear", "factor": 4.0}
LLAMA3 = {
    "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}  # fmt: skip
# With head_dim 16 and theta 10,000 the wavelengths 2 pi / inv_freq run from 6.3 to about 20,000 positions: LLAMA3's
# original context 32 puts one below 32 / 4 = 8 (kept), most above 32 / 1 (divided by 8) and one between
# (smoothed). That the three bands are all there is checked in test_llama3_scaling_has_three_bands.
SCALINGS = {"default": None, "linear": LINEAR, "llama3": LLAMA3}


def rotate_half(x):
    """Hugging Face's rotate_half, in NumPy: (x1, x2) -> (-x2, x1) on the two halves of the last axis."""
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def table(positions: slice, head_dim: int, dtype="float64", **options):
    cos, sin = rope_table(positions.stop, head_dim, dtype=dtype, **options)
    return backend.asarray(cos[positions]), backend.asarray(sin[positions])


def test_frequencies_by_hand():
    np.testing.assert_allclose(rope_frequencies(4, theta=100.0), [1.0, 0.1], rtol=1e-15)  # 100^(-0/4), 100^(-2/4)
    np.testing.assert_allclose(rope_frequencies(4, theta=100.0, scaling=LINEAR), [0.25, 0.025], rtol=1e-15)
    assert rope_frequencies(8).dtype == np.float64 and rope_frequencies(8).shape == (4,)


def test_table_is_cos_and_sin_of_position_times_frequency_on_both_halves():
    cos, sin = rope_table(5, 4, theta=100.0, dtype="float64")
    angle = np.arange(5.0)[:, None] * np.array([1.0, 0.1, 1.0, 0.1])  # (T, D): each frequency twice
    np.testing.assert_allclose(cos, np.cos(angle), rtol=0, atol=1e-15)
    np.testing.assert_allclose(sin, np.sin(angle), rtol=0, atol=1e-15)
    cos32, sin32 = rope_table(5, 4, theta=100.0)  # float32 by default, cast from the float64 table
    assert cos32.dtype == sin32.dtype == np.float32
    np.testing.assert_array_equal(cos32, cos.astype(np.float32))


def test_llama3_scaling_has_three_bands():
    inv_freq = rope_frequencies(16)
    scaled = rope_frequencies(16, scaling=LLAMA3)
    wavelength = 2 * math.pi / inv_freq
    kept, divided = wavelength < 32 / 4, wavelength > 32 / 1
    between = ~kept & ~divided
    assert kept.any() and divided.any() and between.any()
    np.testing.assert_array_equal(scaled[kept], inv_freq[kept])
    np.testing.assert_allclose(scaled[divided], inv_freq[divided] / 8, rtol=1e-15)
    assert np.all((scaled[between] < inv_freq[between]) & (scaled[between] > inv_freq[between] / 8))


@pytest.mark.parametrize("size", [(10000.0, 64, 16), (500000.0, 2048, 64)], ids=["small", "llama3-8b-like"])
@pytest.mark.parametrize("name", SCALINGS)
def test_frequencies_and_table_equal_hugging_faces_to_float32_rounding(name, size):
    """HF builds inv_freq and the angles in float32; ours are float64, so they agree to float32 rounding, where
    one ulp of a float32 v is at most 2^-23 |v|. inv_freq: within 2 ulps (a pow, then a division). An angle
    t * inv_freq carries those 2 ulps and 1 of its own product, and cos and sin round once or twice more:
    |ours - HF| <= (3 angle + 2) 2^-23, element by element (measured: at most 4.4 (angle + 1) 2^-24)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    theta, max_len, head_dim = size
    parameters = {"rope_type": "default", **(SCALINGS[name] or {}), "rope_theta": theta}
    config = LlamaConfig(
        hidden_size=2 * head_dim, num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=max_len,
        rope_parameters=parameters,
    )  # fmt: skip
    rotary = LlamaRotaryEmbedding(config)
    ours = rope_frequencies(head_dim, theta=theta, scaling=SCALINGS[name])
    np.testing.assert_allclose(ours, rotary.inv_freq.numpy(), rtol=2 * 2**-23, atol=0)
    if name != "default":  # the function of modeling_rope_utils itself, not only through the module
        hf, attention_factor = ROPE_INIT_FUNCTIONS[name](config)
        np.testing.assert_allclose(ours, hf.numpy(), rtol=2 * 2**-23, atol=0)
        assert attention_factor == 1.0  # neither scaling rescales cos and sin
    hf_cos, hf_sin = rotary(torch.zeros(1, max_len, head_dim), torch.arange(max_len)[None])
    cos, sin = rope_table(max_len, head_dim, theta=theta, scaling=SCALINGS[name], dtype="float64")
    angle = np.arange(max_len)[:, None] * np.concatenate([ours, ours])  # (T, D)
    for table, hf_table in ((cos, hf_cos), (sin, hf_sin)):
        difference = np.abs(table - hf_table[0].double().numpy())
        assert np.all(difference <= (3 * angle + 2) * 2**-23), (difference / ((angle + 1) * 2**-24)).max()


@pytest.mark.parametrize("name", SCALINGS)
def test_rotation_equals_hugging_faces_given_the_same_cos_and_sin(name):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    q, k = randn(2, 3, 5, 8), randn(2, 3, 5, 8, seed=1)  # (B,H,T,D)
    cos, sin = table(slice(7, 12), 8, scaling=SCALINGS[name])  # positions 7..11, as a decoding step would
    hf_q, hf_k = apply_rotary_pos_emb(
        *(torch.tensor(backend.to_numpy(a)) for a in (q, k)),
        torch.tensor(backend.to_numpy(cos))[None],  # (1, T, D): HF's (batch, seq, head_dim), unsqueezed at 1
        torch.tensor(backend.to_numpy(sin))[None],
    )
    for x, hf in ((q, hf_q), (k, hf_k)):
        y, _ = rope_forward(x, cos, sin)
        np.testing.assert_allclose(backend.to_numpy(y), hf.numpy(), rtol=0, atol=1e-12)


def test_forward_equals_the_plain_formula_and_backward_its_transpose():
    """The fast form works on the halves; the plain one builds rotate_half(x). Also for cos and sin that are
    not a table (halves that differ), where only the exact transpose, not the inverse rotation, is right."""
    x, dy = randn(3, 7, 6), randn(3, 7, 6, seed=1)
    for cos, sin in (table(slice(2, 9), 6), (randn(7, 6, seed=2), randn(7, 6, seed=3))):
        y, cache = rope_forward(x, cos, sin)
        c, s, xn, dyn = (backend.to_numpy(a) for a in (cos, sin, x, dy))
        np.testing.assert_allclose(backend.to_numpy(y), xn * c + rotate_half(xn) * s, rtol=0, atol=1e-14)
        # <dy, x cos + R x sin> = <dy cos + R^T (dy sin), x>, with R^T = -R (rotate_half is antisymmetric)
        dx_plain = dyn * c - rotate_half(dyn * s)
        np.testing.assert_allclose(backend.to_numpy(rope_backward(dy, cache)), dx_plain, rtol=0, atol=1e-14)


def test_backward_against_torch_autograd():
    torch = pytest.importorskip("torch")
    x, dy = randn(2, 3, 5, 8), randn(2, 3, 5, 8, seed=1)
    cos, sin = table(slice(3, 8), 8, scaling=LLAMA3)
    _, cache = rope_forward(x, cos, sin)
    tx = torch.tensor(backend.to_numpy(x), requires_grad=True)
    tcos, tsin = (torch.tensor(backend.to_numpy(a)) for a in (cos, sin))
    rotated = torch.cat((-tx[..., 4:], tx[..., :4]), dim=-1)
    (tx * tcos + rotated * tsin).backward(torch.tensor(backend.to_numpy(dy)))
    np.testing.assert_allclose(backend.to_numpy(rope_backward(dy, cache)), tx.grad.numpy(), rtol=0, atol=1e-12)


def test_backward_is_the_inverse_rotation_and_norms_are_kept():
    x = randn(2, 4, 9, 10)
    cos, sin = table(slice(0, 9), 10, theta=500000.0)
    y, cache = rope_forward(x, cos, sin)
    np.testing.assert_allclose(backend.to_numpy(rope_backward(y, cache)), backend.to_numpy(x), rtol=0, atol=1e-14)
    norms = [np.linalg.norm(backend.to_numpy(a), axis=-1) for a in (x, y)]
    np.testing.assert_allclose(norms[1], norms[0], rtol=1e-14)


@pytest.mark.parametrize("name", SCALINGS)
def test_scores_depend_only_on_the_distance(name):
    """<rope(q at m), rope(k at n)> = <q, rotation by (n - m) of k>: the same for every m, n at one distance."""
    D, max_len = 16, 40
    cos, sin = (backend.asarray(a) for a in rope_table(max_len, D, scaling=SCALINGS[name], dtype="float64"))
    q, k = randn(D), randn(D, seed=1)

    def score(m, n):
        qm, _ = rope_forward(q[None], cos[m : m + 1], sin[m : m + 1])  # (1, D) at position m
        kn, _ = rope_forward(k[None], cos[n : n + 1], sin[n : n + 1])
        return float(backend.to_numpy(qm @ kn.T)[0, 0])

    for distance in (0, 1, 3, 10):
        scores = [score(m, m - distance) for m in range(distance, max_len, 7)]
        assert len(scores) >= 3
        np.testing.assert_allclose(scores, scores[0], rtol=0, atol=1e-12)
    assert abs(score(10, 9) - score(10, 7)) > 1e-3  # and the distance does change the score


@given(
    lead=st.lists(st.integers(1, 3), min_size=0, max_size=2),  # (T, D), (H, T, D) or (B, H, T, D)
    seq=st.integers(1, 6),
    half=st.integers(1, 4),
    start=st.integers(0, 20),
    name=st.sampled_from(sorted(SCALINGS)),
    seed=st.integers(0, 2**16),
)
def test_gradient(lead, seq, half, start, name, seed):
    cos, sin = table(slice(start, start + seq), 2 * half, scaling=SCALINGS[name])
    rows = check_op(
        "rope", rope_forward, rope_backward, {"x": randn(*lead, seq, 2 * half, seed=seed)}, {"cos": cos, "sin": sin}
    )
    assert [r.argument for r in rows] == ["x"]
    assert_gradients_pass(rows)


def test_float32_table_keeps_float32():
    x = randn(2, 3, 4, dtype="float32")
    cos, sin = table(slice(0, 3), 4, dtype="float32")
    y, cache = rope_forward(x, cos, sin)
    assert y.dtype == rope_backward(y, cache).dtype == np.float32


def test_scaling_is_checked_and_normalised():
    assert ROPE_SCALING_TYPES == ("linear", "llama3")
    assert check_rope_scaling(None) is None
    assert check_rope_scaling({"type": "linear", "factor": 2}) == {"rope_type": "linear", "factor": 2.0}
    normal = check_rope_scaling({**LLAMA3, "factor": 8})
    assert normal == {**LLAMA3, "factor": 8.0} and isinstance(normal["factor"], float)
    with pytest.raises(TypeError, match="rope_scaling must be a dict or None, got list"):
        check_rope_scaling([("rope_type", "linear")])


BAD_SCALINGS = [
    ({"rope_type": "yarn", "factor": 2.0}, r"rope_type must be one of \('linear', 'llama3'\), got 'yarn'"),
    ({"factor": 2.0}, "rope_scaling needs a rope_type"),
    ({"rope_type": "linear"}, "rope_scaling of rope_type 'linear' needs factor"),
    ({"rope_type": "linear", "factor": 0.5}, "rope_scaling's factor must be a finite number >= 1, got 0.5"),
    ({"rope_type": "linear", "factor": True}, "rope_scaling's factor must be a finite number >= 1, got True"),
    ({"rope_type": "linear", "factor": math.inf}, "rope_scaling's factor must be a finite number >= 1, got inf"),
    (
        {"rope_type": "linear", "factor": 2.0, "low_freq_factor": 1.0},
        r"rope_type 'linear' has unknown fields \['low_freq_factor'\]",
    ),
    ({"rope_type": "linear", "type": "llama3", "factor": 2.0}, "type 'llama3' and rope_type 'linear' disagree"),
    ({**LLAMA3, "high_freq_factor": 1.0}, "high_freq_factor must be greater than low_freq_factor 1.0, got 1.0"),
    ({**LLAMA3, "low_freq_factor": 0}, "rope_scaling's low_freq_factor must be a finite number > 0, got 0"),
    (
        {**LLAMA3, "original_max_position_embeddings": 32.0},
        "original_max_position_embeddings must be a positive integer, got 32.0",
    ),
    (
        {k: v for k, v in LLAMA3.items() if k != "high_freq_factor"},
        "rope_scaling of rope_type 'llama3' needs high_freq_factor",
    ),
]


@pytest.mark.parametrize("scaling, message", BAD_SCALINGS)
def test_bad_scaling_is_named(scaling, message):
    with pytest.raises(ValueError, match=message):
        check_rope_scaling(scaling)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="head_dim must be an even positive integer, got 5"):
        rope_frequencies(5)
    with pytest.raises(ValueError, match="theta must be a number > 0, got 0"):
        rope_frequencies(4, theta=0)
    with pytest.raises(ValueError, match="rope_scaling's rope_type must be one of"):
        rope_table(8, 4, scaling={"rope_type": "dynamic", "factor": 2.0})
    with pytest.raises(ValueError, match="max_seq_len must be a positive integer, got 0"):
        rope_table(0, 4)
    with pytest.raises(ValueError, match="dtype must be one of"):
        rope_table(8, 4, dtype="int32")
    x = randn(2, 3, 4)
    cos, sin = table(slice(0, 3), 4)
    with pytest.raises(ValueError, match=r"cos must have shape \(3, 4\) to match x \(2, 3, 4\), got \(2, 4\)"):
        rope_forward(x, cos[:2], sin)
    with pytest.raises(ValueError, match=r"sin must have shape \(3, 4\) to match x \(2, 3, 4\), got \(3, 2\)"):
        rope_forward(x, cos, sin[:, :2])
    with pytest.raises(TypeError, match="cos must have x's dtype float64, got float32"):
        rope_forward(x, table(slice(0, 3), 4, dtype="float32")[0], sin)
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., T, D\) with D even, got \(2, 3, 5\)"):
        rope_forward(randn(2, 3, 5), cos, sin)
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., T, D\) with D even, got \(4,\)"):
        rope_forward(randn(4), cos, sin)
    _, cache = rope_forward(x, cos, sin)
    with pytest.raises(ValueError, match=r"dy must have the shape of x \(2, 3, 4\), got \(3, 3, 4\)"):
        rope_backward(randn(3, 3, 4), cache)
