"""Experiment: remove the 1/sqrt(D) from attention, and the softmax saturates.

With query and key entries of mean 0 and variance 1 (what a LayerNorm and a
well-initialised projection give), a score s = q . k = sum_d q_d k_d is a sum
of D independent products of variance 1: Var(s) = D. Scaled by 1/sqrt(D) it
has variance 1 whatever the head width. Unscaled, the scores of a wide head
spread over +-2 sqrt(D) (+-16 at D = 64), so the softmax puts almost all its
weight on the largest one: its entropy falls toward 0 (one-hot), and the
gradient it sends back, dS = P * (dP - rowsum(P * dP)), vanishes on such a
row (one-hot P: rowsum(P * dP) = dP at the one position, so dS = 0 there,
and P = 0 elsewhere): a saturated row no longer learns.

What to expect: score variance ~ D unscaled, ~ 1 scaled; the mean entropy of
a row stays near the same value for every D when scaled and falls as D grows
when not; the share of rows with one weight above 0.99 grows with D, and
those rows pass back a small fraction of the gradient of an unsaturated one.

Run:  python demos/exp_attention_scale.py
"""

# %%
import math

import numpy as np
from _demo import command_line

from numforge.ops.attention import attention_backward, attention_forward

command_line(__doc__)  # -h prints the docstring above

B, H, T = 4, 4, 64
rng = np.random.default_rng(0)


def row_entropy(probs):
    """Mean over rows of -sum_j p_j ln p_j, (B,H,T,T) -> a float (0 for one-hot rows, ln T for uniform ones)."""
    logs = np.log(np.where(probs > 0, probs, 1.0))  # 0 ln 0 = 0
    return float(-(probs * logs).sum(axis=-1).mean())


# %% [markdown]
# The queries go in already multiplied by the scale (1/sqrt(D) or 1) and the op runs with scale=1, so the
# gradient it returns for them is exactly dS K: the gradient the scores send back, for the same keys.

# %%
print(
    f"full attention, B={B} H={H} T={T}, q, k, v entries ~ N(0, 1); uniform weights have entropy ln T = "
    f"{math.log(T):.2f}"
)
print(" D  scale      Var(scores)  entropy  saturated rows  their gradient / an unsaturated row's (median)")
for D in (16, 64, 256):
    q, k, v, dout = (rng.standard_normal((B, H, T, D)) for _ in range(4))
    for label, scale in (("1/sqrt(D)", 1 / math.sqrt(D)), ("1 (none)", 1.0)):
        out, cache = attention_forward(q * scale, k, v, causal=False, scale=1.0)
        dq_scaled, _, _ = attention_backward(dout, cache)  # = dS K, (B,H,T,D)
        scores = (q * scale) @ k.swapaxes(-1, -2)  # (B,H,T,D) @ (B,H,D,T) -> (B,H,T,T)
        saturated = cache.probs.max(axis=-1) > 0.99  # (B,H,T): one weight above 0.99
        row_grad = np.linalg.norm(dq_scaled, axis=-1)  # (B,H,T,D) -> (B,H,T)
        ratio = f"{row_grad[saturated].mean() / np.median(row_grad[~saturated]):.3f}" if saturated.any() else "(none)"
        print(
            f"{D:3d}  {label:9s}  {scores.var():11.2f}  {row_entropy(cache.probs):7.2f}  "
            f"{saturated.mean():14.0%}  {ratio}"
        )
