"""``numforge trace --prompt TEXT [--checkpoint DIR]``: print the forward pass stage by stage."""

from __future__ import annotations

import argparse
import sys

from ..checkpoint import load_model
from ..data import default_tokenizer
from ..model import GPT, GPTConfig
from ..study.trace import format_trace, trace
from ..tokenizer import BPETokenizer

HELP = "show the forward pass on a prompt, stage by stage: shapes, statistics, the top-5 next tokens"

# Without a checkpoint: an untrained model this small, on the default tokenizer (trained once, then cached)
FRESH_CONFIG = dict(max_seq_len=64, d_model=32, num_heads=2, num_layers=2)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompt", required=True, help="the text to run through the model")
    parser.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="a run directory written by numforge train (or one of its ckpt-* directories); "
        "default: a tiny untrained model (seed 0)",
    )


def fresh_model() -> tuple[GPT, BPETokenizer]:
    """An untrained 2-layer model (seed 0) and the default corpus's cached tokenizer."""
    tokenizer = default_tokenizer(say=lambda text: print(text, file=sys.stderr))
    return GPT(GPTConfig(vocab_size=tokenizer.vocab_size, **FRESH_CONFIG), seed=0), tokenizer


def run(args: argparse.Namespace) -> int:
    if args.checkpoint is None:
        model, tokenizer = fresh_model()
        print(
            f"no --checkpoint: an untrained model (seed 0, {FRESH_CONFIG}) and the "
            f"{tokenizer.vocab_size}-token BPE tokenizer of the default corpus (pydoc_data.topics)"
        )
    else:
        model, tokenizer = load_model(args.checkpoint)
        print(f"checkpoint: {args.checkpoint}")
    print(format_trace(trace(model, tokenizer, args.prompt)))
    return 0
