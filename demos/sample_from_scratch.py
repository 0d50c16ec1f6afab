"""Train a small GPT for a minute, then look at what sampling does with its next-token distribution.

1. Train: BPE on the embedded corpus (this Python's docs), the default 3-layer GPT, 300 steps.
2. The distribution after a prompt, reshaped by temperature, top-k and top-p:
       p_i = softmax(z / temperature)_i, restricted to the kept tokens, renormalized.
3. The KV cache: a new token attends to the cached keys and values of every
   earlier position, so it costs one position instead of the whole prefix. It is
   the same computation, so greedy decoding gives the same tokens either way.

Run:  python demos/sample_from_scratch.py      (one to two minutes on one CPU core)
"""

import tempfile
import time

import numpy as np

from numforge.backend import asarray, to_numpy
from numforge.data import load_documents, load_or_train_tokenizer
from numforge.generate import generate, generate_ids, next_token_probs
from numforge.training import TrainSettings, new_run, train

with tempfile.TemporaryDirectory() as scratch:
    documents = load_documents(None)
    tokenizer = load_or_train_tokenizer(documents, 2048, cache_dir=scratch)
    settings = TrainSettings(
        max_steps=300,
        batch_size=16,
        seq_len=64,
        lr=3e-3,
        min_lr=3e-4,
        warmup_steps=30,
        schedule_steps=300,
        eval_every=100,
        eval_batches=4,
        save_every=300,
        seed=0,
    )
    model_shape = {"num_layers": 3, "d_model": 96, "num_heads": 4, "activation": "gelu"}
    run = new_run(f"{scratch}/run", settings, model_shape, tokenizer, documents=documents, cache_dir=scratch)
    train(run, progress=True)
model = run.model

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

timings = {}
for use_cache in (True, False):
    started = time.perf_counter()
    timings[use_cache] = list(generate_ids(model, ids, 60, temperature=0.0, use_kv_cache=use_cache))
    print(f"\ngreedy, KV cache {'on ' if use_cache else 'off'}: {time.perf_counter() - started:.3f} s for 60 tokens")
assert timings[True] == timings[False], "the KV cache changed the greedy tokens"
print("identical tokens with and without the cache:")
print(prompt + tokenizer.decode(timings[True]))

print("\ntemperature 0.8, top-p 0.9, streamed as decoded:")
print(prompt, end="")
generate(model, tokenizer, prompt, 60, temperature=0.8, top_p=0.9, seed=1, on_text=lambda s: print(s, end=""))
print()
