"""Activation recomputation (``GPT.forward(..., recompute=True)``, ``numforge train --recompute``).

The forward keeps only each block's input and the backward runs each block's forward again just before its
backward: the gradients must be bit for bit those of the plain run (dense, MoE with its auxiliary losses,
dropout drawn from the row streams, tied and untied), and the peak memory of a step must stop growing with
the blocks' activations (tracemalloc, which NumPy reports its buffers to).
"""

from __future__ import annotations

import numpy as np
import pytest

from numforge.model import GPT, GPTConfig
from numforge.model.blocks import BlockInput
from numforge.model.config import ARCHS
from numforge.training.dropout import dropout_rng

SMALL = dict(vocab_size=61, max_seq_len=12, d_model=16, num_heads=2, num_layers=3)
CONFIGS = {
    "dense gpt2, tied": dict(SMALL),
    "dense gpt2, untied, plain attention": dict(SMALL, tie_weights=False, attention="plain"),
    "dense llama, untied": dict(SMALL, **ARCHS["llama"]),
    "dropout, tied": dict(SMALL, drop_prob=0.2),
    "dropout llama, untied, GQA": dict(SMALL, **ARCHS["llama"], num_heads=4, num_kv_heads=2, drop_prob=0.3),
    "moe with aux losses and dropout": dict(
        SMALL,
        **ARCHS["llama"],
        num_experts=4,
        experts_top_k=2,
        d_ff=24,
        router_aux_loss_coef=0.01,
        router_z_loss_coef=0.001,
        drop_prob=0.1,
    ),
}


def _batch(config: GPTConfig, B: int = 3, T: int = 10):
    rng = np.random.default_rng(7)
    ids = rng.integers(0, config.vocab_size, size=(B, T))
    targets = rng.integers(0, config.vocab_size, size=(B, T))
    targets[0, :3] = -1  # some ignored targets too
    return ids, targets


def _loss_and_grads(model: GPT, ids, targets, recompute: bool):
    rng = dropout_rng(model.config, seed=3, step=5, rows=range(ids.shape[0]))
    loss, cache = model.forward(ids, targets, rng=rng, recompute=recompute)
    return loss, model.backward(cache), cache


@pytest.mark.parametrize("name", CONFIGS)
def test_recomputed_gradients_are_bit_identical(name):
    config = GPTConfig(**CONFIGS[name])
    model = GPT(config, seed=2)
    ids, targets = _batch(config)
    loss, grads, plain_cache = _loss_and_grads(model, ids, targets, recompute=False)
    loss_r, grads_r, cache = _loss_and_grads(model, ids, targets, recompute=True)
    assert all(isinstance(block, BlockInput) for block in cache.blocks)
    assert not any(isinstance(block, BlockInput) for block in plain_cache.blocks)
    assert np.array_equal(loss, loss_r)
    assert list(grads) == list(grads_r)
    for key in grads:
        assert np.array_equal(grads[key], grads_r[key]), key
    again = model.backward(cache)  # a second backward of the same forward draws the same masks again
    assert all(np.array_equal(grads[key], again[key]) for key in grads)


def test_dropout_changes_the_gradients_so_the_masks_are_really_replayed():
    # the check above would pass trivially if recomputation ran without dropout: a fresh draw must differ
    config = GPTConfig(**CONFIGS["dropout, tied"])
    model = GPT(config, seed=2)
    ids, targets = _batch(config)
    _, grads, _ = _loss_and_grads(model, ids, targets, recompute=False)
    other = dropout_rng(config, seed=4, step=5, rows=range(ids.shape[0]))
    _, cache = model.forward(ids, targets, rng=other, recompute=True)
    name = "layers.0.mlp.up_proj.weight"
    assert not np.array_equal(model.backward(cache)[name], grads[name])


@pytest.mark.parametrize("options", [{"for_backward": False}, {"keep_caches": True}])
def test_recompute_needs_a_backward_without_kept_caches(options):
    config = GPTConfig(**SMALL)
    ids, targets = _batch(config)
    with pytest.raises(ValueError, match="recompute keeps only each block's input"):
        GPT(config).forward(ids, targets, recompute=True, **options)
    with pytest.raises(TypeError, match="recompute"):
        GPT(config).forward(ids, targets, recompute=1)


# ---------------------------------------------------------------- training with --recompute

WORDS = "the cat sat on a mat while one dog ran to the old red barn and back".split()
TRAINING = dict(max_steps=6, batch_size=4, seq_len=16, warmup_steps=2, schedule_steps=12, eval_every=3, save_every=3)


def _start(run_dir, corpus, cache, **changes):
    from numforge.data import load_or_train_tokenizer
    from numforge.training import TrainSettings, new_run

    tokenizer = load_or_train_tokenizer(corpus, 280, cache_dir=cache, say=lambda _: None)
    model = {"num_layers": 2, "d_model": 16, "num_heads": 2, "drop_prob": 0.1}
    settings = TrainSettings(**{**TRAINING, "eval_batches": 2, "seed": 5, **changes})
    return new_run(run_dir, settings, model, tokenizer, data=corpus, cache_dir=cache)


def test_training_with_recompute_repeats_the_plain_run_bit_for_bit_and_resumes_exactly(tmp_path, monkeypatch):
    from numforge import checkpoint
    from numforge.training import LOSS_CSV, resume_run, train

    asked = []  # the recompute of every forward that a backward follows
    forward = GPT.forward

    def spied(self, *args, **kwargs):
        if kwargs.get("for_backward", True):
            asked.append(kwargs.get("recompute", False))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(GPT, "forward", spied)

    corpus = tmp_path / "corpus.txt"
    words = np.random.default_rng(0).integers(0, len(WORDS), 1200)
    corpus.write_text(" ".join(WORDS[i] for i in words), encoding="utf-8")
    train(_start(tmp_path / "plain", corpus, tmp_path), progress=False, threads=2)
    assert asked and not any(asked)
    asked.clear()
    train(_start(tmp_path / "recompute", corpus, tmp_path, recompute=True), progress=False, threads=2)
    assert asked == [True] * 12  # 6 steps of 2 thread parts
    # recomputing for 3 steps, then resumed without it (a resume may switch it either way)
    train(_start(tmp_path / "split", corpus, tmp_path, recompute=True, max_steps=3), progress=False, threads=2)
    assert checkpoint.load_checkpoint(tmp_path / "split").state["settings"]["recompute"] is True
    resumed = resume_run(tmp_path / "split", {"max_steps": 6, "recompute": False}, cache_dir=tmp_path)
    assert resumed.settings.recompute is False
    train(resumed, progress=False, threads=2)
    plain = checkpoint.load_checkpoint(tmp_path / "plain")
    for other in ("recompute", "split"):
        loaded = checkpoint.load_checkpoint(tmp_path / other)
        assert all(np.array_equal(plain.params[name], loaded.params[name]) for name in plain.params), other
        assert all(np.array_equal(plain.optimizer_state["v"][n], loaded.optimizer_state["v"][n]) for n in plain.params)
        assert (tmp_path / other / LOSS_CSV).read_text() == (tmp_path / "plain" / LOSS_CSV).read_text()


def test_a_checkpoint_without_the_recompute_setting_resumes_without_it(tmp_path):
    from numforge.training.spec import TrainSettings
    from numforge.training.state import STATE_FIELDS

    settings = {**TRAINING, "lr": 1e-3, "min_lr": 1e-4}
    assert TrainSettings(**settings).recompute is False  # written before the field existed
    STATE_FIELDS["settings"](
        {**{f: v for f, v in vars(TrainSettings()).items() if f != "recompute"}}, "state.json: 'settings'"
    )
    with pytest.raises(ValueError, match="recompute must be true or false, got 1"):
        TrainSettings(recompute=1)


def test_recompute_with_dropout_is_refused_before_the_run_on_cupy(monkeypatch):
    from numforge.training import TrainSettings, run

    monkeypatch.setattr(run, "backend_name", lambda: "cupy")
    with_dropout = GPTConfig(**SMALL, drop_prob=0.1)
    with pytest.raises(ValueError, match="--recompute with --dropout runs on NumPy only"):
        run.check_run_fits(with_dropout, TrainSettings(seq_len=12, recompute=True))
    run.check_run_fits(with_dropout, TrainSettings(seq_len=12))  # either alone starts
    run.check_run_fits(GPTConfig(**SMALL), TrainSettings(seq_len=12, recompute=True))
