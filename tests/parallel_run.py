"""A tiny training run for ``test_parallel.py`` and ``test_threads.py``: in the test's process, or on each MPI rank.

    mpiexec -n 2 python tests/parallel_run.py OUT CORPUS CACHE --dtype float64 --steps 20 --dropout 0.1 --threads 2

Rank 0 writes ``OUT/final.npz``, the parameters after the last step. The
helpers below compare runs and give the same tiny run's command-line flags.
"""

import argparse

import numpy as np

from numforge.backend import to_numpy
from numforge.data import load_or_train_tokenizer
from numforge.model import GPT, GPTConfig
from numforge.training import TrainSettings, new_run, train
from numforge.training.parallel import connect

WORDS = "the cat sat on a mat while one dog ran to the old red barn and back".split()
MODEL = {"num_layers": 1, "d_model": 16, "num_heads": 2, "activation": "gelu"}
VOCAB = 280  # 256 bytes + <|endoftext|> + 23 merges


def write_corpus(path):
    """About 5 KB of word salad at ``path``: enough for 16-token windows, learnable in a few dozen steps."""
    rng = np.random.default_rng(0)
    path.write_text(" ".join(WORDS[i] for i in rng.integers(0, len(WORDS), 1200)), encoding="utf-8")
    return path


def tiny_run(
    out, corpus, cache, *, dtype="float64", grad_accum=1, steps=20, batch_size=8, drop_prob=0.1, world=None, threads=1
):
    """Train the tiny model for ``steps`` in ``dtype`` on ``threads`` threads (None: the default count); its
    parameters after the last step, as NumPy arrays."""
    tokenizer = load_or_train_tokenizer(corpus, VOCAB, cache_dir=cache, say=lambda _: None)
    settings = TrainSettings(
        max_steps=steps,
        batch_size=batch_size,
        seq_len=16,
        lr=1e-2,
        min_lr=1e-3,
        warmup_steps=2,
        schedule_steps=20,
        eval_every=10,
        eval_batches=2,
        save_every=steps,
        seed=5,
        grad_accum=grad_accum,
    )
    config = GPTConfig(vocab_size=tokenizer.vocab_size, max_seq_len=16, **MODEL, drop_prob=drop_prob)
    model = GPT(config, seed=settings.seed, dtype=dtype)  # the run in dtype (the command: float32)
    run = new_run(out, settings, {}, tokenizer, data=corpus, cache_dir=cache, model=model)
    train(run, progress=False, say=lambda _: None, world=world, threads=threads)
    return {name: to_numpy(p) for name, p in run.model.params.items()}


# float32, 2 ranks (or threads) vs 1 process after 20 steps of the tiny model, measured: at most 1.1e-5 on any tensor
# (max|a - b| / max|b|), the key bias aside (see without_key_bias)
FLOAT32_TOLERANCE = 1e-4


def without_key_bias(params: dict) -> dict:
    """``params`` with each ``qkv_proj.bias`` cut to its q and v thirds.

    The key bias has a zero gradient in exact arithmetic (softmax ignores a
    shift shared by every key), so its tiny values (about 1e-5) are float32
    rounding noise that AdamW scales up: 1.8e-4 of the q|k|v bias's largest
    value between 2 ranks and 1 process after 20 steps, with nothing to compare.
    """
    cut = {}
    for name, value in params.items():
        if name.endswith("attn.qkv_proj.bias"):
            C = len(value) // 3
            value = np.concatenate([value[:C], value[2 * C :]])  # (3C,) -> (2C,): q | v
        cut[name] = value
    return cut


def max_relative_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float(np.max(np.abs(a[k] - b[k])) / np.max(np.abs(b[k]))) for k in a)


def tiny_flags(tmp_path, corpus, out, steps=20) -> list[str]:
    """The flags of a tiny run (the model and settings of ``parallel_run.py``) in ``tmp_path / out``."""
    flags = [
        *("--data", corpus, "--vocab-size", VOCAB, "--cache-dir", tmp_path, "--out", tmp_path / out),
        *("--layers", 1, "--d-model", 16, "--heads", 2, "--seq-len", 16, "--batch-size", 8, "--seed", 5),
        *("--max-steps", steps, "--schedule-steps", 20, "--warmup-steps", 2, "--lr", 0.01, "--eval-every", 10),
        *("--dropout", 0.1, "--no-progress"),
    ]
    return [str(flag) for flag in flags]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("corpus")
    parser.add_argument("cache")
    parser.add_argument("--dtype", default="float64")
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    world = connect()
    params = tiny_run(
        args.out,
        args.corpus,
        args.cache,
        dtype=args.dtype,
        grad_accum=args.grad_accum,
        steps=args.steps,
        drop_prob=args.dropout,
        world=world,
        threads=args.threads,
    )
    if world.is_root:
        np.savez(f"{args.out}/final.npz", **params)
