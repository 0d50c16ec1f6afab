"""``numforge trace --prompt TEXT [--checkpoint DIR]``: print the forward pass stage by stage."""

from __future__ import annotations

import argparse
import sys

from ..checkpoint import load_checkpoint, restore_model
from ..config import GPTConfig
from ..data import default_documents
from ..model import GPT
from ..tokenizer import BPETokenizer
from ..trace import format_trace, trace

HELP = "show the forward pass on a prompt, stage by stage: shapes, statistics, the top-5 next tokens"

# Without a checkpoint: an untrained model this small, on a tokenizer learned in well under a second
FRESH_VOCAB_SIZE = 512
FRESH_CONFIG = dict(max_seq_len=64, d_model=32, num_heads=2, num_layers=2)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompt", required=True, help="the text to run through the model")
    parser.add_argument("--checkpoint", metavar="DIR",
                        help="a run directory written by numforge train (or one of its ckpt-* directories); "
                             "default: a tiny untrained model (seed 0)")


def fresh_model() -> tuple[GPT, BPETokenizer]:
    """An untrained 2-layer model (seed 0) and a 512-token BPE learned from the default corpus."""
    tokenizer = BPETokenizer.train(default_documents(), FRESH_VOCAB_SIZE)
    return GPT(GPTConfig(vocab_size=tokenizer.vocab_size, **FRESH_CONFIG), seed=0), tokenizer


def run(args: argparse.Namespace) -> int:
    try:
        if args.checkpoint is None:
            model, tokenizer = fresh_model()
            print(f"no --checkpoint: an untrained model (seed 0, {FRESH_CONFIG}) and a {FRESH_VOCAB_SIZE}-token "
                  "BPE tokenizer trained on the default corpus (pydoc_data.topics)")
        else:
            checkpoint = load_checkpoint(args.checkpoint)
            model, tokenizer = restore_model(checkpoint), BPETokenizer.from_dict(checkpoint.tokenizer)
            print(f"checkpoint: {args.checkpoint}")
        stages = trace(model, tokenizer, args.prompt)
    except (ValueError, FileNotFoundError) as err:
        print(f"numforge trace: {err}", file=sys.stderr)
        return 2
    print(format_trace(stages))
    return 0
