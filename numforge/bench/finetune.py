"""``numforge bench finetune``: a LoRA fine-tuning step of a SmolLM2-135M-shaped model against PEFT on transformers.

The model is random, of SmolLM2-135M's shape (30 layers, width 576, 9 query and 3 key/value heads, SwiGLU
of 1536, vocabulary 49152, tied; ``--layers`` fewer for a quick run), on batches of ``--batch-size`` x
``--seq-len`` (256) tokens. Three steps are timed, each in its own process (so each peak RSS, VmHWM, is
that side's alone, the model built included):

- numforge LoRA: ``--lora`` targets (PEFT's default for Llama: q, v), the base frozen, AdamW on the adapters;
- PEFT: ``get_peft_model(LlamaForCausalLM, LoraConfig(r, lora_alpha, lora_dropout, target_modules))``,
  ``torch.optim.AdamW`` on its trainable parameters, torch's autograd;
- numforge full fine-tuning: every weight trains (AdamW on all of them).

Each side at its default threads (numforge: ``numforge train``'s, one BLAS thread per row part; torch: its
own). The step is forward, backward and the optimizer's update; tokens/s is ``B T`` over the median of
``--steps`` step times after one warm-up step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from .measure import MIB, optional_torch, positive_int, where_it_runs

# SmolLM2-135M's shape but its 30 layers (--layers): width, 9 / 3 heads, SwiGLU width, vocabulary, tied
SMOLLM2_135M = dict(d_model=576, num_heads=9, num_kv_heads=3, d_ff=1536, vocab_size=49152, tie_weights=True)
SIDES = ("numforge LoRA", "PEFT", "numforge full")
LR = 1e-4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--layers", type=positive_int, default=30, help="layers (default 30, SmolLM2-135M's)")
    parser.add_argument("--seq-len", type=positive_int, default=256, help="context T (default 256)")
    parser.add_argument("--batch-size", type=positive_int, default=4, help="sequences per step B (default 4)")
    parser.add_argument("--steps", type=positive_int, default=3, help="timed steps per side (default 3)")
    parser.add_argument("--lora", default="q,v", help="LoRA targets, as train --lora (default q,v: PEFT's for Llama)")
    parser.add_argument("--lora-rank", type=positive_int, default=8, help="rank r (default 8)")
    parser.add_argument("--lora-alpha", type=float, default=16.0, help="alpha (default 16)")
    parser.add_argument("--lora-dropout", type=float, default=0.05, help="dropout on the adapters' input (0.05)")
    parser.add_argument("--no-peft", action="store_true", help="numforge's two steps only (no torch)")


def run(args: argparse.Namespace) -> int:
    torch = None if args.no_peft else optional_torch()
    print(where_it_runs(torch))
    job = {name: getattr(args, name) for name in ("layers", "seq_len", "batch_size", "steps")}
    job |= {"targets": args.lora, "rank": args.lora_rank, "alpha": args.lora_alpha, "dropout": args.lora_dropout}
    print(
        f"model: SmolLM2-135M's shape, random, {args.layers} layers; B {args.batch_size} x T {args.seq_len}; "
        f"LoRA on {args.lora}, r {args.lora_rank}, alpha {args.lora_alpha:g}, dropout {args.lora_dropout:g}"
    )
    sides = [side for side in SIDES if torch is not None or side != "PEFT"]
    reports = {side: _measure_apart(side, job) for side in sides}
    tokens = args.batch_size * args.seq_len
    print(f"\n{'side':<16}{'threads':>8}{'step (s)':>10}{'tokens/s':>10}{'peak RSS':>11}{'trained':>13}")
    for side, report in reports.items():
        print(
            f"{side:<16}{report['threads']:>8}{report['seconds']:>10.3f}{tokens / report['seconds']:>10.0f}"
            f"{report['rss'] / MIB:>7.0f} MiB{report['trainable']:>13,}"
        )
    lora = reports["numforge LoRA"]
    if "PEFT" in reports:
        peft = reports["PEFT"]
        speed, memory = peft["seconds"] / lora["seconds"], lora["rss"] / peft["rss"]
        print(f"numforge LoRA / PEFT: {speed:.2f}x tokens/s, peak RSS {memory:.2f}x PEFT's")
    full = reports["numforge full"]
    speed, memory = full["seconds"] / lora["seconds"], lora["rss"] / full["rss"]
    print(f"numforge LoRA / numforge full fine-tuning: {speed:.2f}x tokens/s, peak RSS {memory:.2f}x")
    return 0


def _measure_apart(side: str, job: dict) -> dict:
    """``side``'s step measured in a fresh process (its own peak RSS); its JSON report."""
    code = f"from numforge.bench.finetune import child_main; child_main({side!r}, {json.dumps(job)!r})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the {side} measurement failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def child_main(side: str, job: str) -> None:
    """In the measuring process: build ``side``'s model, time its steps, print the median and VmHWM as JSON."""
    job = json.loads(job)
    step, threads, trainable = (_peft_step if side == "PEFT" else _numforge_step)(side, job)
    step()  # warm-up
    times = []
    for _ in range(job["steps"]):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    rss = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    print(json.dumps({"seconds": statistics.median(times), "rss": rss, "threads": threads, "trainable": trainable}))


def _batch(job: dict, vocab_size: int):
    import numpy as np

    rng = np.random.default_rng(0)
    return rng.integers(0, vocab_size, size=(job["batch_size"], job["seq_len"] + 1))  # (B,T+1)


def _numforge_step(side: str, job: dict):
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
    threads = thread_count()
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


def _peft_step(side: str, job: dict):
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
