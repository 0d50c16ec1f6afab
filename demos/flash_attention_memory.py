"""Tiled attention gives plain attention's numbers with a fraction of its memory.

    python demos/flash_attention_memory.py [T]

Runs forward + backward of causal attention (B = 1, H = 8, D = 64, float32)
both ways, prints the largest difference in the output and the gradients,
and the peak extra memory each needed (tracemalloc sees NumPy's buffers).
Plain attention keeps the (T, T) probabilities of every head; the tiled
version keeps one row statistic per query and works on one tile at a time.
"""

# %%
import tracemalloc

import numpy as np
from _demo import command_line

from numforge.ops.attention import attention_backward, attention_forward
from numforge.ops.flash_attention import flash_attention_backward, flash_attention_forward

T = command_line(__doc__, ("T", int, 1024, "the sequence length")).T


def run_with_peak(forward, backward, q, k, v, dout):
    """Forward + backward; returns the four results and the peak bytes allocated meanwhile."""
    tracemalloc.start()
    out, cache = forward(q, k, v, causal=True)
    grads = backward(dout, cache)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return (out, *grads), peak


# %% [markdown]
# ## The same inputs through both kernels

# %%
rng = np.random.default_rng(0)
q, k, v, dout = (rng.standard_normal((1, 8, T, 64)).astype(np.float32) for _ in range(4))

plain, plain_peak = run_with_peak(attention_forward, attention_backward, q, k, v, dout)
tiled, tiled_peak = run_with_peak(flash_attention_forward, flash_attention_backward, q, k, v, dout)

# %% [markdown]
# ## Same numbers (float32 rounding), a fraction of the memory

# %%
print(f"causal attention, B=1 H=8 T={T} D=64 float32, forward + backward")
for name, a, b in zip(("out", "dq", "dk", "dv"), plain, tiled):
    print(f"  max |plain - tiled| in {name}: {np.max(np.abs(a - b)):.1e}   (values up to {np.max(np.abs(a)):.1f})")
print(f"  the (T, T) probabilities of all heads alone: {8 * T * T * 4 / 2**20:.0f} MiB")
print(f"  peak extra memory, plain: {plain_peak / 2**20:.1f} MiB")
print(f"  peak extra memory, tiled: {tiled_peak / 2**20:.1f} MiB  ({plain_peak / tiled_peak:.0f}x less)")
