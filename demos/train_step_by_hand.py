"""A tiny GPT trained by hand: one step taken apart (forward, backward, a gradient check), then 60 AdamW steps.

Run: python demos/train_step_by_hand.py

A 2-layer GPT learns to continue the sequence 0 1 2 3 ... 9. The demo prints
a few parameter shapes, then the shapes through the network (read from the
textbook model's cache, numforge/model/reference.py), the loss at init (close
to ln V: the model knows nothing yet), checks three gradients against finite
differences in float64 (up to 20 coordinates each), then takes 60 AdamW
steps and prints the loss falling.
"""

# %%
import math

import numpy as np
from _demo import command_line

from numforge.backend import asarray
from numforge.gradcheck import check_gradients, format_results
from numforge.model import GPT, GPTConfig
from numforge.model.reference import reference_forward
from numforge.optim import AdamW, clip_grad_norm, warmup_cosine_lr

command_line(__doc__)  # -h prints the docstring above

CONFIG = GPTConfig(vocab_size=10, max_seq_len=9, d_model=16, num_heads=2, num_layers=2)
STEPS = 60

ids = asarray(np.array([[0, 1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 8, 9]]))  # (B,T) = (2,9)
targets = asarray(np.array([[1, 2, 3, 4, 5, 6, 7, 8, 9], [2, 3, 4, 5, 6, 7, 8, 9, -1]]))  # -1: no target

model = GPT(CONFIG, seed=0, dtype="float64")
print(f"{model.num_params()} parameters in {len(model.params)} arrays, for example:")
for name in ("token_embedding", "layers.0.attn.qkv_proj.weight", "layers.0.mlp.up_proj.weight"):
    print(f"  {name:32s} {tuple(model.params[name].shape)}")

# %% [markdown]
# ## The shapes through the network, from the textbook model's cache

# %%
logits, _, saved = reference_forward(model.params, CONFIG, ids, targets)
first = saved["layers"][0]
print("\nshapes through the network (B = 2 sequences, T = 9 positions, C = 16, H = 2 heads):")
for name, array in [
    ("token ids", ids),
    ("layer 0 input x", first["x_attn_in"]),
    ("layer 0 queries q", first["q"]),
    ("layer 0 attention weights", first["weights"]),
    ("layer 0 MLP activation", first["act"]),
    ("final norm h", saved["final_h"]),
    ("logits", logits),
]:
    print(f"  {name:32s} {tuple(array.shape)}")

# %% [markdown]
# ## One step: the loss at init, the backward, three gradients checked

# %%
loss, cache = model.forward(ids, targets)
print(f"\nloss at init {float(loss):.4f}, ln V = {math.log(CONFIG.vocab_size):.4f}")
grads = model.backward(cache)

picked = ("token_embedding", "layers.1.attn.qkv_proj.weight", "final_norm.weight")
rows = check_gradients(
    "gpt",
    lambda: float(model.forward(ids, targets)[0]),
    {name: model.params[name] for name in picked},
    {name: grads[name] for name in picked},
    max_coords=20,
)
print("\nbackward vs finite differences (float64, up to 20 coordinates each):")
print(format_results(rows))

# %% [markdown]
# ## 60 AdamW steps: warmup, cosine decay, gradient clipping

# %%
opt = AdamW(model.params, lr=0.0, weight_decay=0.01)
for step in range(STEPS):
    opt.lr = warmup_cosine_lr(step, max_lr=1e-2, min_lr=1e-3, warmup_steps=5, total_steps=STEPS)
    loss, cache = model.forward(ids, targets)
    grads = model.backward(cache)
    norm = clip_grad_norm(grads, max_norm=1.0)
    opt.step(grads)
    if step % 10 == 0 or step == STEPS - 1:
        print(f"step {step:3d}  lr {opt.lr:.4f}  loss {float(loss):.4f}  grad norm {norm:.3f}")

logits = model.logits(ids[:1, :4], last_only=True)  # (1,V)
print(f"\nafter 0 1 2 3 the model predicts {int(logits.argmax())}")
