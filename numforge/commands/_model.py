"""The model a study command (``trace``, ``attention``, ``inspect``) reads: ``--checkpoint DIR`` or a fresh one."""

from __future__ import annotations

import argparse
import sys

from ..checkpoint import load_model
from ..checks import path_flag, text_flag
from ..data import default_tokenizer
from ..model import GPT, GPTConfig
from ..study.prompt import describe_model

# Without a checkpoint: an untrained model this small, on the default tokenizer (trained once, then cached)
FRESH_CONFIG = dict(max_seq_len=64, d_model=32, num_heads=2, num_layers=2)


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompt", type=text_flag, required=True, help="the text to run through the model")
    add_checkpoint_arguments(parser)


def add_checkpoint_arguments(parser: argparse.ArgumentParser, default: str = "a tiny untrained model (seed 0)") -> None:
    parser.add_argument(
        "--checkpoint",
        metavar="DIR",
        type=path_flag,
        help="a run directory written by numforge train (or one of its ckpt-* directories), or a Hugging Face "
        "directory (GPT-2, Llama, Mistral, Qwen2, Qwen3); default: " + default,
    )
    parser.add_argument(
        "--trust-pattern",
        action="store_true",
        help="use the checkpoint tokenizer's split pattern even if numforge does not know it (a pattern is code)",
    )


def study_model(args: argparse.Namespace):
    """``(model, tokenizer)`` of ``args.checkpoint`` (through ``checkpoint.load_model``), or an untrained
    2-layer model (seed 0) on the default corpus's cached tokenizer; says which on stdout."""
    model, tokenizer, source = study_model_and_source(args)
    print(source)
    return model, tokenizer


def study_model_and_source(args: argparse.Namespace):
    """``(model, tokenizer, a line saying which model it is)``, as ``study_model`` chooses them."""
    if args.checkpoint is not None:
        model, tokenizer = load_model(args.checkpoint, trust_pattern=args.trust_pattern)
        return model, tokenizer, f"checkpoint: {args.checkpoint} ({describe_model(model)})"
    tokenizer = default_tokenizer(say=lambda text: print(text, file=sys.stderr))
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, **FRESH_CONFIG), seed=0)
    return (
        model,
        tokenizer,
        (
            f"no --checkpoint: an untrained model, seed 0 ({describe_model(model)}), and the "
            f"{tokenizer.vocab_size}-token BPE tokenizer of the default corpus (pydoc_data.topics)"
        ),
    )
