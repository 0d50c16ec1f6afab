"""Train a small GPT for a minute, then look at what sampling does with its next-token distribution.

1. Train: BPE on the embedded corpus (this Python's docs), the default 3-layer GPT, 300 steps.
2. The distribution after a prompt, reshaped by temperature, top-k and top-p:
       p_i = softmax(z / temperature)_i, restricted to the kept tokens, renormalized.
3. The KV cache: a new token attends to the cached keys and values of every
   earlier position, so it costs one position instead of the whole prefix. It is
   the same computation, so greedy decoding gives the same tokens either way.

Run:  python demos/sample_from_scratch.py      (one to two minutes on one CPU core)
      python demos/sample_from_scratch.py --quick   (a 1-layer model, 30 steps: seconds; the text is noise,
      the mechanics are the same; NUMFORGE_DEMO_QUICK=1 does the same, which is how the tests run it)
"""

# %%
import tempfile
import time

import numpy as np
from _demo import command_line

from numforge.backend import asarray, to_numpy
from numforge.data import load_or_train_tokenizer
from numforge.generate import generate, generate_ids, next_token_probs
from numforge.training import TrainSettings, new_run, train

ARGS = command_line(__doc__, quick=True)

QUICK = ARGS.quick
STEPS = 30 if QUICK else 300
MODEL_SHAPE = {"num_layers": 1 if QUICK else 3, "d_model": 32 if QUICK else 96, "num_heads": 4, "activation": "gelu"}

# %% [markdown]
# ## 1. Train
# The loss starts near ln 2048 = 7.6 (uniform guessing) and falls.

# %%
with tempfile.TemporaryDirectory() as scratch:
    tokenizer = load_or_train_tokenizer(None, 2048, cache_dir=scratch)  # None: the embedded corpus
    settings = TrainSettings(
        max_steps=STEPS,
        batch_size=16,
        seq_len=64,
        lr=3e-3,
        min_lr=3e-4,
        warmup_steps=STEPS // 10,
        schedule_steps=STEPS,
        eval_every=STEPS // 3,
        eval_batches=4,
        save_every=STEPS,
        seed=0,
    )
    run = new_run(f"{scratch}/run", settings, MODEL_SHAPE, tokenizer, cache_dir=scratch)
    train(run, progress=not QUICK)
model = run.model

# %% [markdown]
# ## 2. Temperature, top-k, top-p
# Low temperature sharpens the distribution, high flattens it; top-k and top-p cut its tail.

# %%
prompt = "The"
ids = tokenizer.encode(prompt)
logits = to_numpy(model.logits(asarray(np.asarray([ids])), last_only=True))[0]  # (1,T) -> (1,V) -> (V,)
print(f"\nnext token after {prompt!r}: the five most likely, under each setting")
for label, kwargs in [
    ("temperature 1.0", dict(temperature=1.0)),
    ("temperature 0.5", dict(temperature=0.5)),
    ("temperature 1.5", dict(temperature=1.5)),
    ("top-k 3", dict(temperature=1.0, top_k=3)),
    ("top-p 0.5", dict(temperature=1.0, top_p=0.5)),
]:
    probs = next_token_probs(logits, **kwargs)
    top = [t for t in np.argsort(-probs)[:5] if probs[t] > 0]
    shown = "  ".join(f"{tokenizer.decode([int(t)])!r} {probs[t]:.2f}" for t in top)
    print(f"  {label:16s} {shown}   (tokens kept: {int((probs > 0).sum())})")

# %% [markdown]
# ## 3. The KV cache: same tokens, less work

# %%
greedy = {}
for use_cache in (True, False):
    started = time.perf_counter()
    greedy[use_cache] = list(generate_ids(model, ids, 60, temperature=0.0, use_kv_cache=use_cache))
    print(f"\ngreedy, KV cache {'on ' if use_cache else 'off'}: {time.perf_counter() - started:.3f} s for 60 tokens")
assert greedy[True] == greedy[False], "the KV cache changed the greedy tokens"
print("identical tokens with and without the cache:")
print(prompt + tokenizer.decode(greedy[True]))

# %%
print("\ntemperature 0.8, top-p 0.9, streamed as decoded:")
print(prompt, end="")
generate(model, tokenizer, prompt, 60, temperature=0.8, top_p=0.9, seed=1, on_text=lambda s: print(s, end=""))
print()
