"""Experiment: ReLU vs GELU vs SwiGLU at an equal number of parameters.

SwiGLU has three feed-forward matrices (gate, up, down) where ReLU and GELU
have two (up, down). At model width C, a feed-forward width F costs
2 C F weights for ReLU/GELU and 3 C F for SwiGLU, so equal parameters means
F_swiglu = 2/3 F: here C = 48, F = 192 (4 C) against F = 128.

Each model trains the same number of steps on the same batches (bytes of this
Python's documentation) and is scored on the same validation windows.

What to expect: equal parameter counts in the first column (to the few
biases); then the validation losses. Measured with 300 steps (OPENBLAS_NUM_THREADS=1,
seeds 0, 1, 2 of ``train_tiny``): ReLU 2.43, 2.39, 2.41; GELU 2.57, 2.74, 2.50;
SwiGLU 2.84, 2.95, 2.70. The same order for all three seeds, and the reverse
of what large models report (SwiGLU ahead): a tiny model after 300 steps
shows how fast each activation starts to learn, not where it ends up. (The
quick mode's 60 steps are too few to compare at all.)

Run:  python demos/exp_activations.py   (--quick or NUMFORGE_DEMO_QUICK=1: fewer steps)
"""

# %%
from _demo import command_line
from _experiment import train_tiny

from numforge.model import GPTConfig

ARGS = command_line(__doc__, quick=True)

STEPS = 60 if ARGS.quick else 300
SHAPE = dict(vocab_size=256, max_seq_len=32, d_model=48, num_heads=4, num_layers=2)
VARIANTS = {
    "relu": dict(activation="relu", d_ff=192),
    "gelu": dict(activation="gelu", d_ff=192),
    "swiglu": dict(activation="swiglu", d_ff=128),
}

# %%
print(f"{STEPS} steps each, same batches; feed-forward weights per layer and the validation loss:")
for name, options in VARIANTS.items():
    config = GPTConfig(**SHAPE, **options)
    model, first_loss, val_loss = train_tiny(config, STEPS)
    mlp = sum(int(p.size) for key, p in model.params.items() if key.startswith("layers.0.mlp."))
    print(
        f"  {name:7s} d_ff {config.d_ff:3d}  MLP parameters per layer {mlp:6d}  total {model.num_params():6d}  "
        f"loss {first_loss:.3f} -> validation {val_loss:.3f}"
    )
