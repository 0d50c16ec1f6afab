"""AdamW and gradient clipping, written out from their formulas and compared with numforge's.

See demos/derivations/adamw.md and grad_clipping.md. The demo:

1. runs three AdamW steps by hand (the update rule line by line, plain NumPy)
   and with numforge.optim.AdamW, on a (3, 4) weight (decayed) and a (4,) bias
   (not decayed), and prints the largest difference;
2. shows what bias correction does on the first step: every coordinate moves
   by lr (times the sign of its gradient) whatever the gradient's size; without
   the correction it would move by lr (1 - beta1) / sqrt(1 - beta2): 3.16 lr at
   this demo's beta2 = 0.999 (PyTorch's default), 0.45 lr at the 0.95 numforge
   trains with (too large, or too small);
3. shows why the decay is decoupled: a weight with no loss gradient shrinks by
   the factor (1 - lr wd); weight decay added to the gradient instead would be
   normalized by Adam into a step of lr, whatever wd is;
4. clips a gradient to a global norm of 1: the norm after is 1 and the
   direction is unchanged (cosine 1).

Run:  python demos/optimizer_by_hand.py
"""

# %%
import math

import numpy as np
from _demo import command_line

from numforge.optim import AdamW, clip_grad_norm

command_line(__doc__)  # -h prints the docstring above

LR, BETA1, BETA2, EPS, WD = 0.1, 0.9, 0.999, 1e-8, 0.01
rng = np.random.default_rng(0)
start = {"weight": rng.standard_normal((3, 4)), "bias": rng.standard_normal(4)}
steps = [{name: rng.standard_normal(p.shape) for name, p in start.items()} for _ in range(3)]  # gradients

# %% [markdown]
# ## 1. Three AdamW steps by hand, and with numforge

# %%
by_hand = {name: p.copy() for name, p in start.items()}
m = {name: np.zeros_like(p) for name, p in start.items()}
v = {name: np.zeros_like(p) for name, p in start.items()}
for t, grads in enumerate(steps, start=1):
    for name, p in by_hand.items():
        g = grads[name]
        if p.ndim >= 2:
            p -= LR * WD * p  # decoupled decay, matrices only, on the parameter before this step
        m[name] = BETA1 * m[name] + (1 - BETA1) * g  # first moment
        v[name] = BETA2 * v[name] + (1 - BETA2) * g**2  # second moment
        m_hat = m[name] / (1 - BETA1**t)  # bias corrections
        v_hat = v[name] / (1 - BETA2**t)
        p -= LR * m_hat / (np.sqrt(v_hat) + EPS)
    if t == 1:
        first_step = {name: (p - start[name]) for name, p in by_hand.items()}

params = {name: p.copy() for name, p in start.items()}
optimizer = AdamW(params, lr=LR, betas=(BETA1, BETA2), eps=EPS, weight_decay=WD)
for grads in steps:
    optimizer.step({name: g.copy() for name, g in grads.items()})
difference = max(float(np.max(np.abs(params[name] - by_hand[name]))) for name in params)
print(f"max |numforge - by hand| after {len(steps)} AdamW steps: {difference:.1e}")

# %% [markdown]
# ## 2. Bias correction: the first step moves every coordinate by lr

# %%
ratio = np.abs(first_step["bias"]) / LR
print(f"first step, |change of each bias coordinate| / lr: {ratio.min():.6f} .. {ratio.max():.6f}")
print(f"  (the gradients were {np.abs(steps[0]['bias']).round(2).tolist()}: their size does not matter)")
for beta2, whose in ((BETA2, "this demo's, PyTorch's default"), (0.95, "numforge's in training")):
    uncorrected = (1 - BETA1) / math.sqrt(1 - beta2)  # lr times this, without bias correction
    print(f"  without bias correction: (1 - beta1) / sqrt(1 - beta2) = {uncorrected:.2f} lr", end="")
    print(f" at beta2 = {beta2} ({whose})")

# %% [markdown]
# ## 3. Decoupled decay against decay added to the gradient

# %%
weight = {"w": np.ones((1, 1))}
AdamW(weight, lr=LR, betas=(BETA1, BETA2), eps=EPS, weight_decay=WD).step({"w": np.zeros((1, 1))})
coupled = {"w": np.ones((1, 1))}
AdamW(coupled, lr=LR, betas=(BETA1, BETA2), eps=EPS).step({"w": WD * coupled["w"]})  # g + wd * p, with g = 0
print(f"a weight 1 with no loss gradient, after one step (lr {LR}, wd {WD}):")
print(f"  decoupled decay:             {weight['w'].item():.4f}  (times 1 - lr wd)")
print(f"  decay added to the gradient: {coupled['w'].item():.4f}  (Adam normalizes wd * p into a step of lr)")

# %% [markdown]
# ## 4. Clipping the global gradient norm

# %%
grads = {name: 3.0 * g for name, g in steps[0].items()}
before = np.concatenate([g.reshape(-1) for g in grads.values()])
norm = clip_grad_norm(grads, max_norm=1.0)  # scales grads in place
after = np.concatenate([g.reshape(-1) for g in grads.values()])
cosine = before @ after / (np.linalg.norm(before) * np.linalg.norm(after))
print(
    f"gradient norm before clipping {norm:.4f} (by hand {np.linalg.norm(before):.4f}), "
    f"after {np.linalg.norm(after):.6f}; cosine(before, after) = {cosine:.6f}"
)
