"""Experiment: untie the weights, and the token table's two roles get two arrays.

Tied (the default), one (V, C) table embeds the input tokens and scores the
output ones: logits = h @ table^T. Its gradient is the sum of two paths,
d table = (scatter-add of dx from the input side) + (dlogits^T h from the
output side) (demos/derivations/weight_tying.md). Untied, the output side
gets its own lm_head.weight, and each path's gradient lands in its own array.

The demo shows:
1. the parameter counts: untying adds V * C parameters;
2. the sum of two paths, checked on another, smaller model: the tiny model
   with random O(1) weights that ``numforge gradcheck`` checks (V = 13,
   C = 8, float64). An untied one whose lm_head equals the token table
   computes the tied one's loss, and its two gradients add up to the tied
   model's one gradient (to float64 rounding);
3. both trained the same steps on the same batches (bytes of this Python's
   documentation): their validation losses. Measured with 300 steps
   (OPENBLAS_NUM_THREADS=1, seeds 0, 1, 2 of ``train_tiny``): tied 2.57, 2.74,
   2.50; untied 2.46, 2.45, 2.50. Untied was as good or better here, for
   V * C = 12,288 more parameters (17% of this model): with bytes as tokens
   the input and output roles of a row can differ, and the untied model may
   learn them apart. (The quick mode's 60 steps are too few to compare.)

Run:  python demos/exp_untied.py   (--quick or NUMFORGE_DEMO_QUICK=1: fewer steps)
"""

# %%

import numpy as np
from _demo import command_line
from _experiment import train_tiny

from numforge.gradcheck.model import randomized_model, tiny_batch
from numforge.model import GPTConfig
from numforge.model.gpt import parameter_shapes

ARGS = command_line(__doc__, quick=True)

STEPS = 60 if ARGS.quick else 300
SHAPE = dict(vocab_size=256, max_seq_len=32, d_model=48, num_heads=4, num_layers=2)

# %% [markdown]
# ## 1. Parameters

# %%
for tie in (True, False):
    config = GPTConfig(**SHAPE, tie_weights=tie)
    count = sum(int(np.prod(shape)) for shape in parameter_shapes(config).values())
    print(f"tie_weights={tie!s:5s}: {count:6d} parameters, V*C = {SHAPE['vocab_size'] * SHAPE['d_model']}")

# %% [markdown]
# ## 2. One table, two paths: the tied gradient is the sum of the untied ones

# %%
tied = randomized_model({})
untied = randomized_model({"tie_weights": False})
untied.load_params({**tied.params, "lm_head.weight": tied.params["token_embedding"].copy()})
ids, targets = tiny_batch(tied.config.vocab_size)
V, C = tied.config.vocab_size, tied.config.d_model
print(f"another model: numforge gradcheck's tiny one (V = {V}, C = {C}, random O(1) weights, float64)")
loss_tied, cache_tied = tied.forward(ids, targets)
loss_untied, cache_untied = untied.forward(ids, targets)
grads_tied, grads_untied = tied.backward(cache_tied), untied.backward(cache_untied)
two_paths = grads_untied["token_embedding"] + grads_untied["lm_head.weight"]  # input side + output side
print(f"loss tied {float(loss_tied):.15f}\nloss untied {float(loss_untied):.15f} (lm_head = token table)")
print(
    f"input-side gradient norm {np.linalg.norm(grads_untied['token_embedding']):.3f}, "
    f"output-side {np.linalg.norm(grads_untied['lm_head.weight']):.3f}"
)
difference = np.max(np.abs(grads_tied["token_embedding"] - two_paths))
print(f"max |tied gradient - (input side + output side)| = {difference:.1e}")

# %% [markdown]
# ## 3. Trained side by side

# %%
for tie in (True, False):
    model, first_loss, val_loss = train_tiny(GPTConfig(**SHAPE, tie_weights=tie), STEPS)
    print(f"tie_weights={tie!s:5s}: {STEPS} steps, loss {first_loss:.3f} -> validation {val_loss:.3f}")
