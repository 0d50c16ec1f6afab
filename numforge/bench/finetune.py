"""``numforge bench finetune``: a LoRA fine-tuning step of a SmolLM2-135M-shaped model against PEFT on transformers.

The model is random, of SmolLM2-135M's shape (30 layers, width 576, 9 query and 3 key/value heads, SwiGLU
of 1536, vocabulary 49152, tied; ``--layers`` fewer for a quick run), on batches of ``--batch-size`` x
``--seq-len`` (256) tokens. Three steps are measured:

- numforge LoRA: ``--lora`` targets (PEFT's default for Llama: q, v), the base frozen, AdamW on the adapters;
- PEFT: ``get_peft_model(LlamaForCausalLM, LoraConfig(r, lora_alpha, lora_dropout, target_modules))``,
  ``torch.optim.AdamW`` on its trainable parameters, torch's autograd;
- numforge full fine-tuning: every weight trains (AdamW on all of them).

Each side at its default threads (numforge: ``numforge train``'s, the batch's rows in one part per core,
one BLAS thread each; torch: its own). The step is forward, backward and the optimizer's update.

Speed: the three are built in this one process and take turns step by step (one warm-up step each,
then ``--steps`` rounds), as ``numforge bench train`` does, so that a busy machine slows each alike;
tokens/s is ``B T`` over the median of a side's step times, and the CPU time per step (the process's,
all threads) is printed beside it. ``OMP_WAIT_POLICY=PASSIVE`` is set before torch is imported (unless
set): torch's OpenMP threads otherwise spin on the cores after each call and slow the numforge step
that follows (``bench/train.py``). The load average is printed before and after the rounds.

Memory: a process's peak RSS (VmHWM) holds everything it ever held, so the sides cannot share one: each
is built again in a fresh process of its own (build, warm-up step, one step) for its peak, the three one
after the other. numforge's processes keep freed memory as ``numforge train`` does
(``allocator.retain_freed_memory``).

``--profile`` adds cProfile's view of numforge's LoRA step on one thread (own time per function; a
product's time shows as its caller's) and the share of that step inside matrix products.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from ..blas import blas_threads
from ..training.threads import set_blas_threads
from .measure import MIB, free_cores, optional_torch, positive_int, where_it_runs

# SmolLM2-135M's shape but its 30 layers (--layers): width, 9 / 3 heads, SwiGLU width, vocabulary, tied
SMOLLM2_135M = dict(d_model=576, num_heads=9, num_kv_heads=3, d_ff=1536, vocab_size=49152, tie_weights=True)
SIDES = ("numforge LoRA", "PEFT", "numforge full")
LR = 1e-4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--layers", type=positive_int, default=30, help="layers (default 30, SmolLM2-135M's)")
    parser.add_argument("--seq-len", type=positive_int, default=256, help="context T (default 256)")
    parser.add_argument("--batch-size", type=positive_int, default=4, help="sequences per step B (default 4)")
    parser.add_argument("--steps", type=positive_int, default=5, help="timed rounds, the sides taking turns (5)")
    parser.add_argument("--lora", default="q,v", help="LoRA targets, as train --lora (default q,v: PEFT's for Llama)")
    parser.add_argument("--lora-rank", type=positive_int, default=8, help="rank r (default 8)")
    parser.add_argument("--lora-alpha", type=float, default=16.0, help="alpha (default 16)")
    parser.add_argument("--lora-dropout", type=float, default=0.05, help="dropout on the adapters' input (0.05)")
    parser.add_argument("--no-peft", action="store_true", help="numforge's two steps only (no torch)")
    parser.add_argument("--profile", action="store_true", help="also profile numforge's LoRA step on one thread")


def run(args: argparse.Namespace) -> int:
    saved_blas_threads = blas_threads()  # the numforge sides set one BLAS thread, as numforge train does
    try:
        return _run(args)
    finally:
        set_blas_threads(saved_blas_threads)


def _run(args: argparse.Namespace) -> int:
    if not args.no_peft:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # module docstring: torch's threads stop spinning
    torch = None if args.no_peft else optional_torch()
    print(where_it_runs(torch))
    job = {name: getattr(args, name) for name in ("layers", "seq_len", "batch_size")}
    job |= {"targets": args.lora, "rank": args.lora_rank, "alpha": args.lora_alpha, "dropout": args.lora_dropout}
    print(
        f"model: SmolLM2-135M's shape, random, {args.layers} layers; B {args.batch_size} x T {args.seq_len}; "
        f"LoRA on {args.lora}, r {args.lora_rank}, alpha {args.lora_alpha:g}, dropout {args.lora_dropout:g}"
    )
    sides = [side for side in SIDES if torch is not None or side != "PEFT"]
    built = {side: build_step(side, job) for side in sides}
    times = _take_turns({side: step for side, (step, _, _) in built.items()}, args.steps)
    threads = max(numforge_threads for _, numforge_threads, _ in built.values())
    if threads > 1:  # measure.free_cores: what any code on these threads could gain just now
        print(f"cores free for this process after the rounds: {free_cores(threads):.2f} ({threads:.2f} when idle)")
    rss = {side: _peak_rss_apart(side, job) for side in sides}
    tokens = args.batch_size * args.seq_len
    print(f"\n{'side':<16}{'threads':>8}{'step (s)':>10}{'CPU (s)':>9}{'tokens/s':>10}{'peak RSS':>11}{'trained':>13}")
    for side, (_, side_threads, trainable) in built.items():
        wall, cpu = times[side]
        print(
            f"{side:<16}{side_threads:>8}{wall:>10.3f}{cpu:>9.3f}{tokens / wall:>10.0f}"
            f"{rss[side] / MIB:>7.0f} MiB{trainable:>13,}"
        )
    print(
        f"(step: the median wall-clock seconds of {args.steps} rounds, the sides taking turns; CPU: the process's "
        "CPU seconds per step, all threads; peak RSS: each side alone in a fresh process)"
    )
    lora = times["numforge LoRA"][0]
    if "PEFT" in built:
        print(
            f"numforge LoRA / PEFT: {times['PEFT'][0] / lora:.2f}x tokens/s, "
            f"peak RSS {rss['numforge LoRA'] / rss['PEFT']:.2f}x PEFT's"
        )
    print(
        f"numforge LoRA / numforge full fine-tuning: {times['numforge full'][0] / lora:.2f}x tokens/s, "
        f"peak RSS {rss['numforge LoRA'] / rss['numforge full']:.2f}x"
    )
    if args.profile:
        _print_profile(job, args.steps)
    return 0


def _take_turns(steps: dict, rounds: int) -> dict[str, tuple[float, float]]:
    """``side -> (median wall seconds, median CPU seconds)`` of its step, the sides taking turns: one warm-up
    round, then ``rounds``; the load average printed before and after."""
    print(f"load average before the rounds: {_load()}")
    records = {side: [] for side in steps}
    for i in range(1 + rounds):
        for side, step in steps.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            step()
            if i > 0:
                records[side].append((time.perf_counter() - start, time.process_time() - start_cpu))
    print(f"load average after the rounds: {_load()}")
    return {side: tuple(statistics.median(r[k] for r in record) for k in (0, 1)) for side, record in records.items()}


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _print_profile(job: dict, steps: int) -> None:
    """cProfile's functions and the matrix products' share of numforge's LoRA step on one thread."""
    from ..blas import one_blas_thread
    from .train import matmul_share, profile

    step, _, _ = build_step("numforge LoRA", job, threads=1)
    with one_blas_thread():
        step()  # warm-up
        print(profile(step, steps))
        print(matmul_share(step, steps))


def _peak_rss_apart(side: str, job: dict) -> int:
    """``side``'s peak RSS (VmHWM, bytes) in a fresh process: built, a warm-up step and one step."""
    code = f"from numforge.bench.finetune import child_main; child_main({side!r}, {json.dumps(job)!r})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the {side} measurement failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])["rss"]


def child_main(side: str, job: str) -> None:
    """In the measuring process: build ``side``'s model, take two steps, print VmHWM as JSON."""
    if side != "PEFT":
        from ..allocator import retain_freed_memory

        retain_freed_memory()  # as the numforge command does
    step, _, _ = build_step(side, json.loads(job))
    for _ in range(2):
        step()
    rss = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    print(json.dumps({"rss": rss}))


def build_step(side: str, job: dict, threads: int | None = None):
    """``(step, threads, trainable scalars)`` of ``side``: numforge's at ``threads`` (default ``numforge
    train``'s), PEFT's at torch's own."""
    return _peft_step(job) if side == "PEFT" else _numforge_step(side, job, threads)


def _batch(job: dict, vocab_size: int):
    import numpy as np

    rng = np.random.default_rng(0)
    return rng.integers(0, vocab_size, size=(job["batch_size"], job["seq_len"] + 1))  # (B,T+1)


def _numforge_step(side: str, job: dict, threads: int | None):
    """numforge's step (LoRA or full) at ``numforge train``'s threads: ``(step, threads, trainable scalars)``."""
    from ..model import GPT, GPTConfig
    from ..model.config import ARCHS
    from ..model.lora import LoraConfig
    from ..optim import AdamW
    from ..training.dropout import dropout_rng
    from ..training.parallel import DataParallel, SingleProcess
    from ..training.threads import Threads, set_blas_threads, thread_count

    config = GPTConfig(**{**ARCHS["llama"], **SMOLLM2_135M}, num_layers=job["layers"], max_seq_len=job["seq_len"])
    model = GPT(config)
    if side == "numforge LoRA":
        targets = tuple(job["targets"].split(","))
        model.add_lora(LoraConfig(job["rank"], job["alpha"], job["dropout"], targets))
    threads = thread_count(threads)
    set_blas_threads(1)  # as numforge train: its own threads fill the cores
    opt = AdamW(model.trainable, lr=LR, betas=(0.9, 0.95))
    parallel = DataParallel(SingleProcess(), model, threads=Threads(threads))
    rows = _batch(job, config.vocab_size)
    ids, targets = rows[:, :-1], rows[:, 1:]
    count = iter(range(10**9))

    def step():
        s = next(count)
        _, grads = parallel.loss_and_gradients(ids, targets, lambda r: dropout_rng(config, 0, s, r, model.lora))
        opt.step(grads)

    return step, threads, sum(int(p.size) for p in model.trainable.values())


def _peft_step(job: dict):
    """PEFT's LoRA step on transformers' Llama of the same shape: ``(step, torch's threads, trainable scalars)``."""
    import peft
    import torch
    import transformers

    hf_config = transformers.LlamaConfig(
        vocab_size=SMOLLM2_135M["vocab_size"], hidden_size=SMOLLM2_135M["d_model"],
        intermediate_size=SMOLLM2_135M["d_ff"], num_hidden_layers=job["layers"],
        num_attention_heads=SMOLLM2_135M["num_heads"], num_key_value_heads=SMOLLM2_135M["num_kv_heads"],
        max_position_embeddings=job["seq_len"], tie_word_embeddings=True,
    )  # fmt: skip
    modules = [f"{target}_proj" for target in job["targets"].split(",")]
    lora = peft.LoraConfig(
        r=job["rank"], lora_alpha=job["alpha"], lora_dropout=job["dropout"], target_modules=modules,
        task_type="CAUSAL_LM",
    )  # fmt: skip
    model = peft.get_peft_model(transformers.LlamaForCausalLM(hf_config), lora).train()
    trained = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trained, lr=LR, betas=(0.9, 0.95))
    rows = torch.tensor(_batch(job, hf_config.vocab_size))
    ids, targets = rows[:, :-1], rows[:, 1:]

    def step():
        logits = model(input_ids=ids).logits  # (B,T,V)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, torch.get_num_threads(), sum(p.numel() for p in trained)
