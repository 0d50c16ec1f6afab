"""Experiment: QK-norm before or after the rotary embedding: when does the order matter?

QK-norm normalizes each head's query and key over its D features (RMSNorm). Qwen3
normalizes with a learned weight (D,) and then rotates; nanochat rotates and then
normalizes without a weight. RoPE turns each pair (x[i], x[i + D/2]) in its own plane,
so it keeps the head's norm, hence its root mean square: a norm without a weight
divides by the same number before or after the turn, and the two orders agree. A
weight scales x[i] and x[i + D/2] by w[i] and w[i + D/2]; a turn mixes the two
coordinates, so unless w[i] = w[i + D/2] scaling and turning do not commute
(demos/derivations/qk_norm.md).

What to expect, float64, q of shape (B, H, T, D) at positions 5..12:
- no weight: the orders agree to ~1e-16, and so do their gradients;
- a weight with w[i] = w[i + D/2]: they agree to ~1e-16;
- a random weight: they differ by order 1.

Run:  python demos/exp_qk_norm_order.py
"""

# %%
import numpy as np
from _demo import command_line

from numforge.ops.rmsnorm import rms_norm_backward, rms_norm_forward
from numforge.ops.rope import rope_backward, rope_forward, rope_table

command_line(__doc__)  # -h prints the docstring above

B, H, T, D = 2, 4, 8, 16
rng = np.random.default_rng(0)
q = rng.standard_normal((B, H, T, D)) * 3.0  # (B,H,T,D), rows far from mean square 1
table = rope_table(5 + T, D, dtype="float64")
cos, sin = table.cos[5:], table.sin[5:]  # positions 5..12, (T, D)


def norm_then_rope(x, weight):
    """Qwen3's order: y = rope(rms_norm(x) * w)."""
    h, norm_cache = rms_norm_forward(x, weight)
    y, rope_cache = rope_forward(h, cos, sin)
    return y, (norm_cache, rope_cache)


def rope_then_norm(x, weight):
    """nanochat's order (there without a weight): y = rms_norm(rope(x)) * w."""
    h, rope_cache = rope_forward(x, cos, sin)
    y, norm_cache = rms_norm_forward(h, weight)
    return y, (rope_cache, norm_cache)


# %%
half = rng.uniform(0.5, 1.5, D // 2)
weights = {
    "no weight": None,
    "w[i] = w[i + D/2]": np.concatenate([half, half]),
    "a random weight": rng.uniform(0.5, 1.5, D),
}
print(f"max |rope(norm(q)) - norm(rope(q))| over q of shape {(B, H, T, D)}, positions 5..{4 + T}:")
for label, weight in weights.items():
    a, _ = norm_then_rope(q, weight)
    b, _ = rope_then_norm(q, weight)
    print(f"  {label:18s} {np.abs(a - b).max():.1e}")
norms = [np.linalg.norm(x, axis=-1) for x in (q, rope_forward(q, cos, sin)[0])]
print(f"rope keeps each head's norm: max relative change {np.abs(norms[1] / norms[0] - 1).max():.1e}")

# %% [markdown]
# The backward of each order is the chain rule through the two ops, last op first. Without a weight the two
# functions are one function, so their gradients must agree too.

# %%
dy = rng.standard_normal((B, H, T, D))
_, (norm_cache, rope_cache) = norm_then_rope(q, None)
dx_norm_first, _ = rms_norm_backward(rope_backward(dy, rope_cache), norm_cache)
_, (rope_cache, norm_cache) = rope_then_norm(q, None)
dx_rope_first = rope_backward(rms_norm_backward(dy, norm_cache)[0], rope_cache)
print(f"no weight, max |dx (norm first) - dx (rope first)|: {np.abs(dx_norm_first - dx_rope_first).max():.1e}")
