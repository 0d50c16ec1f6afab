"""Experiment: rotary embeddings make attention scores depend on the distance between positions, not on the positions.

RoPE turns each pair of a query's coordinates by an angle proportional to its
position m, and each pair of a key's by one proportional to n. A dot product of
two turned vectors only sees the difference of their angles, so

    <rope(q, m), rope(k, n)> = <q, rope(k, n - m)>:

the score of a query at m and a key at n is a function of n - m alone
(demos/derivations/rope.md derives it). Checked here on every pair of 128
positions at once: along each diagonal of the (T, T) score matrix (one
distance m - n) the scores are one number, up to float64 rounding, while
different distances give different scores. Then: Hugging Face's layout
(pairs (i, i + D/2)) is the interleaved one of the paper (pairs (2i, 2i+1))
with the coordinates renumbered; and what linear and Llama 3 scaling do to the
wavelengths.

What to expect: spreads along a diagonal ~1e-14, scores across distances of
order 1; the two layouts agree after the permutation to ~1e-16; linear scaling
stretches every wavelength by its factor, llama3 only the long ones.

Run:  python demos/exp_rope_relative.py
"""

# %%
import math

import numpy as np
from _demo import command_line

from numforge.ops.rope import rope_forward, rope_frequencies, rope_table

command_line(__doc__)  # -h prints the docstring above

T, D = 128, 64
cos, sin = rope_table(T, D, theta=10000.0, dtype="float64")  # (T, D) each
rng = np.random.default_rng(0)
q, k = rng.standard_normal(D), rng.standard_normal(D)  # one query and one key, (D,)

queries, _ = rope_forward(np.tile(q, (T, 1)), cos, sin)  # q at every position m, (T, D)
keys, _ = rope_forward(np.tile(k, (T, 1)), cos, sin)  # k at every position n, (T, D)
scores = queries @ keys.T  # (T, D) @ (D, T) -> (T, T): scores[m, n] = <rope(q, m), rope(k, n)>

# %% [markdown]
# Along the diagonal of offset d, scores[m, m - d] should be one number for every m: the spread (max - min)
# is rounding. Across diagonals the number changes: the score carries the distance.

# %%
spreads = [np.ptp(np.diagonal(scores, offset=-d)) for d in range(T - 1)]  # m - n = d >= 0 (a causal query)
by_distance = [scores[d, 0] for d in range(T)]  # one score per distance d = m - n
print(f"scores of q at m and k at n, T = {T}, D = {D}, theta 10000:")
print(f"  largest spread along one distance m - n (over {T - 1} distances): {max(spreads):.1e}")
print(f"  scores across distances: from {min(by_distance):.3f} to {max(by_distance):.3f}")
for d in (0, 1, 2, 10, 100):
    print(f"  distance {d:3d}: score {by_distance[d]:+.6f}, spread over {T - d} (m, n) pairs {spreads[d]:.1e}")
shifted_key, _ = rope_forward(k[None], cos[7:8], sin[7:8])  # k turned by 7 positions
print(f"  <rope(q, 20), rope(k, 27)> - <q, rope(k, 7)> = {scores[20, 27] - float(q @ shifted_key[0]):.1e}")

# %% [markdown]
# The paper rotates interleaved pairs (x[2i], x[2i+1]); Hugging Face's Llama rotates (x[i], x[i + D/2]).
# Renumber the coordinates, HF index i -> 2i and i + D/2 -> 2i + 1, and the two are one rotation.

# %%
order = np.stack([np.arange(D // 2), np.arange(D // 2) + D // 2], axis=1).reshape(-1)  # [0, D/2, 1, D/2+1, ...]
x = rng.standard_normal((T, D))
hf_layout, _ = rope_forward(x, cos, sin)
angle = np.arange(T)[:, None] * rope_frequencies(D)  # (T, D/2): pair i's angle at position t
pairs = x[:, order].reshape(T, D // 2, 2)  # the same numbers as interleaved pairs, (T, D/2, 2)
interleaved = np.stack(
    [
        pairs[..., 0] * np.cos(angle) - pairs[..., 1] * np.sin(angle),
        pairs[..., 1] * np.cos(angle) + pairs[..., 0] * np.sin(angle),
    ],
    axis=-1,
).reshape(T, D)
print(f"\nmax |HF layout (renumbered) - interleaved rotation|: {np.abs(hf_layout[:, order] - interleaved).max():.1e}")

# %% [markdown]
# The spectrum: pair i turns once every 2 pi / inv_freq[i] positions, from 2 pi for i = 0 to about
# 2 pi theta for the last pair. Llama 3.1 8B's settings: theta 500,000, factor 8 for an original context of 8192.
# Linear scaling stretches every wavelength 8 times; llama3 keeps those below 8192 / 4 = 2048 positions,
# stretches those above 8192 / 1 by 8, and blends in between.

# %%
llama3 = {
    "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}  # fmt: skip
head_dim, theta = 128, 500000.0
wavelengths = {
    name: 2 * math.pi / rope_frequencies(head_dim, theta, scaling)
    for name, scaling in (("none", None), ("linear x8", {"rope_type": "linear", "factor": 8.0}), ("llama3", llama3))
}
print(f"\nwavelength (positions per turn) of pair i, head_dim {head_dim}, theta {theta:,.0f}:")
print("   i        none   linear x8      llama3   llama3 / none")
for i in (0, 16, 28, 29, 31, 33, 34, 35, 48, 63):
    w = [wavelengths[name][i] for name in wavelengths]
    print(f"  {i:2d}  {w[0]:10.1f}  {w[1]:10.1f}  {w[2]:10.1f}  {w[2] / w[0]:14.3f}")
