"""Check a hand-written backward against finite differences, one coordinate at a time.

The layer-norm backward returns dx = J^T dy for an upstream gradient dy. With the
scalar f(x) = sum(layer_norm(x) * dy), df/dx_i = (J^T dy)_i exactly, and a central
difference estimates the same number:

    df/dx_i ~ (f(x + h e_i) - f(x - h e_i)) / (2 h)        (error O(h^2), float64)

Run:  python demos/gradcheck_by_hand.py
"""

# %%
import numpy as np
from _demo import command_line

from numforge.gradcheck import check_op, format_results
from numforge.ops.layernorm import layer_norm_backward, layer_norm_forward

command_line(__doc__)  # -h prints the docstring above

rng = np.random.default_rng(0)
x = rng.standard_normal((2, 3, 5))  # (B, T, C), float64
weight, bias = rng.standard_normal(5), rng.standard_normal(5)
dy = rng.standard_normal((2, 3, 5))  # a random upstream gradient


def f(x):
    """The scalar whose gradient the backward claims to compute."""
    y, _ = layer_norm_forward(x, weight, bias)
    return float(np.sum(y * dy))


# %% [markdown]
# ## The analytic gradient, then central differences one coordinate at a time

# %%
_, cache = layer_norm_forward(x, weight, bias)
dx, dweight, dbias = layer_norm_backward(dy, cache)

h = 1e-6
print("coordinate    analytic dx        numeric dx         |difference|")
for index in [(0, 0, 0), (0, 2, 3), (1, 1, 4)]:
    bumped = np.zeros_like(x)
    bumped[index] = h
    numeric = (f(x + bumped) - f(x - bumped)) / (2 * h)
    print(f"{str(index):12s}  {dx[index]: .12f}  {numeric: .12f}  {abs(dx[index] - numeric):.1e}")

# %% [markdown]
# ## Every coordinate of every argument

# %%
print("\nEvery coordinate of every argument, with numforge.gradcheck:\n")
rows = check_op("layer_norm", layer_norm_forward, layer_norm_backward, {"x": x, "weight": weight, "bias": bias})
print(format_results(rows))
