"""``numforge bench WHAT``: side-by-side speed and memory measurements.

Each benchmark lives in ``numforge.bench.<name>`` with ``add_arguments`` and ``run``.
"""

from __future__ import annotations

import argparse
from importlib import import_module

HELP = "measure speed and memory side by side with a plain reference or a peer library"

BENCHMARKS = {  # name -> one-line help; each is numforge/bench/<name>.py
    "attention": "plain vs tiled attention (vs torch SDPA): forward+backward time and peak memory",
    "cross_entropy": "weight-tied cross-entropy: chunked vs materialized logits (vs torch): time and peak memory",
    "prepare": "numforge prepare on 100 MB of stdlib source: MB/s at 1 and N workers, peak memory, vs tiktoken",
    "tokenizer": "BPE training and encoding on stdlib sources vs reference, HF tokenizers, tiktoken",
    "train": "training step (forward, backward, AdamW): tokens/s and MFU vs PyTorch eager",
    "memory": "a training step's peak memory (tracemalloc) at 2, 4, 8 layers with and without --recompute, vs the plan",
    "finetune": "LoRA fine-tuning step of a SmolLM2-135M-shaped model vs PEFT on transformers, and vs full fine-tuning",
    "generate": "greedy decoding with the KV cache at GPT-2 124M's shape: prefill, tokens/s, memory vs transformers",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    for name, help_text in BENCHMARKS.items():
        module = import_module(f"numforge.bench.{name}")
        module.add_arguments(sub.add_parser(name, help=help_text, description=help_text))


def run(args: argparse.Namespace) -> int:
    return import_module(f"numforge.bench.{args.benchmark}").run(args)
