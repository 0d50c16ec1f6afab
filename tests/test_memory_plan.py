"""The memory plan (``training/memory_plan.py``) against tracemalloc's peak, its table, and the refusal it makes.

tracemalloc sees every NumPy buffer, and a step's allocations are the same on every run, so the peaks are
deterministic; the plan's count of a step (activations kept + the backward's working memory + the gradients)
must be within 0.7 to 1.5 of the measured peak, for each kind of block, with and without recomputation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from numforge import cli, resources
from numforge.bench.memory import planned_peak, step_peak
from numforge.model import GPT, GPTConfig
from numforge.model.config import ARCHS
from numforge.model.lora import LoraConfig, adapter_shapes
from numforge.training import TrainSettings
from numforge.training.memory_plan import check_plan_fits, chosen_plan, memory_plan, plan_table, run_plans

B, T = 2, 96
SHAPE = dict(vocab_size=200, max_seq_len=T, d_model=48, num_heads=3)
KINDS = {
    "gpt2": {},
    "llama, GQA": dict(ARCHS["llama"], num_kv_heads=1),
    "qwen3, QK-norm": dict(ARCHS["llama"], qk_norm=True, num_kv_heads=1),
    "dropout": dict(drop_prob=0.1),
    "experts": dict(ARCHS["llama"], num_experts=4, d_ff=96, router_aux_loss_coef=0.01),
    "plain attention": dict(attention="plain"),
    "relu": dict(activation="relu"),
}


def _model_and_batch(num_layers: int, **options):
    config = GPTConfig(**SHAPE, num_layers=num_layers, **options)
    data = np.random.default_rng(0)
    ids, targets = (data.integers(0, config.vocab_size, size=(B, T)) for _ in range(2))
    return GPT(config), ids, targets


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_the_plan_counts_a_steps_peak_within_a_factor(kind, recompute):
    model, ids, targets = _model_and_batch(3, **KINDS[kind])
    measured = step_peak(model, ids, targets, recompute)
    planned = planned_peak(model.config, B, T, recompute)
    assert 0.7 <= measured / planned <= 1.5, (measured, planned)


def test_recomputation_makes_the_peak_grow_by_far_less_per_layer():
    peaks = {}
    for L in (2, 8):
        model, ids, targets = _model_and_batch(L)
        peaks[L] = {recompute: step_peak(model, ids, targets, recompute) for recompute in (False, True)}
    plain_growth = peaks[8][False] - peaks[2][False]
    recompute_growth = peaks[8][True] - peaks[2][True]
    assert plain_growth > 0 and recompute_growth < 0.25 * plain_growth, peaks
    assert peaks[8][True] < 0.5 * peaks[8][False]


def test_the_plan_of_weights_gradients_and_moments_follows_the_trainable_count():
    config = GPTConfig(**SHAPE, num_layers=2)
    P = GPT(config).num_params()
    settings = TrainSettings(batch_size=4, seq_len=T, eval_batches=3)
    plan = memory_plan(config, settings)
    assert (plan.weights, plan.gradients, plan.optimizer) == (4 * P, 4 * P, 8 * P)
    assert plan.validation == 8 * 3 * 4 * (T + 1)
    assert plan.total == sum(plan[:3]) + plan.activations + plan.working + plan.validation
    adapters = memory_plan(config, settings, parameters=P + 1000, trainable=1000)  # frozen weights, adapters
    assert (adapters.weights, adapters.gradients, adapters.optimizer) == (4 * (P + 1000), 4000, 8000)
    recompute = memory_plan(config, settings, recompute=True)
    assert recompute.activations_per_block == plan.activations_per_block
    # recomputation: a (B,T,C) input per block in place of the block's cache, and one cache at a time
    assert plan.activations - recompute.activations == (2 - 1) * plan.activations_per_block - 2 * 4 * 4 * T * 48
    halved = memory_plan(config, TrainSettings(batch_size=4, seq_len=T, grad_accum=2))  # one micro-batch of 2
    assert halved.activations_per_block < plan.activations_per_block


def test_the_table_shows_each_way_and_marks_the_chosen_one(monkeypatch):
    monkeypatch.setattr(resources, "memory_limit", lambda: (2**30, "physical memory"))
    config = GPTConfig(**SHAPE, num_layers=2)
    table = plan_table(run_plans(config, TrainSettings(seq_len=T)), "--recompute")
    lines = table.splitlines()
    assert lines[0].split() == ["memory", "plan", "plain", "--recompute", "(this", "run)"]
    assert [line.split("  ")[0] for line in lines[2:-1]] == [
        "weights",
        "gradients",
        "AdamW moments (m, v)",
        "activations, one block",
        "activations kept",
        "backward's working memory",
        "validation windows",
        "total",
    ]
    assert lines[-1] == "this machine: 1.0 GiB (physical memory)"
    with pytest.raises(ValueError, match="chosen must be one of the plans"):
        plan_table(run_plans(config, TrainSettings(seq_len=T)), "--lora")


def test_a_lora_run_plans_gradients_and_moments_for_its_adapters_alone(monkeypatch):
    monkeypatch.setattr(resources, "memory_limit", lambda: (2**30, "physical memory"))
    config = GPTConfig(**SHAPE, num_layers=2, position="rope", norm="rmsnorm", activation="swiglu", use_bias=False)
    lora = LoraConfig(rank=2, alpha=4.0, dropout=0.0, targets=("q", "v"))
    adapters = sum(math.prod(shape) for shape in adapter_shapes(config, lora).values())  # A and B of each target
    P = GPT(config).num_params()
    plans = run_plans(config, TrainSettings(seq_len=T), lora)
    assert list(plans) == ["plain", "--recompute", "--lora"]
    assert (plans["--lora"].weights, plans["--lora"].gradients) == (4 * (P + adapters), 4 * adapters)
    assert plans["--lora"].optimizer == 8 * adapters < plans["plain"].optimizer
    assert "--lora (this run)" in plan_table(plans, chosen_plan(TrainSettings(seq_len=T), lora))


def test_a_run_that_fits_only_with_recompute_is_refused_without_it(monkeypatch):
    config = GPTConfig(**SHAPE, num_layers=8)
    plain, recompute = run_plans(config, TrainSettings(seq_len=T)).values()
    between = (plain.total + recompute.total) // 2
    monkeypatch.setattr(resources, "memory_limit", lambda: (between, "the address-space limit (ulimit -v)"))
    with pytest.raises(
        ValueError,
        match=r"(?s)training needs about .* more than this machine's .*\(--recompute would fit: see the table\)",
    ):
        check_plan_fits(config, TrainSettings(seq_len=T), "training")
    assert "--recompute (this run)" in check_plan_fits(config, TrainSettings(seq_len=T, recompute=True), "training")


def test_train_prints_the_plan_and_refuses_with_it_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(resources, "memory_limit", lambda: (2**20, "physical memory"))
    argv = ["train", "--data", str(tmp_path / "never-read.txt"), "--cache-dir", str(tmp_path)]
    assert cli.main([*argv, "--out", str(tmp_path / "run"), "--recompute"]) == 2
    err = capsys.readouterr().err
    assert "of memory, more than this machine's 1.0 MiB (physical memory):" in err
    assert "memory plan" in err and "--recompute (this run)" in err and "activations kept" in err


def test_a_fine_tune_is_planned_and_refused_for_the_pretrained_model_and_its_adapters(tmp_path, monkeypatch, capsys):
    from hf_dirs import llama_fields, write_llama_dir

    fields = llama_fields()
    directory, _ = write_llama_dir(tmp_path / "llama", fields)
    monkeypatch.setattr(resources, "memory_limit", lambda: (2**20, "physical memory"))
    argv = ["train", "--init-from", str(directory), "--lora", "q,v", "--data", str(tmp_path / "never-read.txt")]
    assert cli.main([*argv, "--cache-dir", str(tmp_path), "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    shape = f"({fields['num_hidden_layers']} layers, width {fields['hidden_size']}, vocabulary {fields['vocab_size']})"
    assert f"training this model {shape}" in err  # the pretrained model, not the default one
    assert "--lora (this run)" in err and not (tmp_path / "run").exists()
