"""``numforge sample``: continue a prompt with a trained checkpoint or a Hugging Face directory, streaming the text.

The prompt is encoded as ``transformers``' ``tokenizer(prompt)`` encodes it (a Llama 3 directory's BOS
first) and sampling stops at the directory's end ids (``generate``)."""

from __future__ import annotations

import argparse
import sys

from ..checkpoint import load_model
from ..checks import float_between, int_at_least, path_flag, text_flag
from ..generate import generate

HELP = "generate text from a checkpoint (greedy at --temperature 0; top-k, top-p; KV cache)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_sampling_arguments(parser)
    parser.add_argument("--no-kv-cache", action="store_true", help="recompute the whole context for every token")


def add_sampling_arguments(parser: argparse.ArgumentParser, prompt: bool = True) -> None:
    """The flags ``sample`` and ``chat`` share: the checkpoint, the sampling, the seed (and ``--prompt``)."""
    parser.add_argument(
        "--checkpoint",
        metavar="DIR",
        type=path_flag,
        required=True,
        help="a run directory written by numforge train (or one of its ckpt-* directories), or a Hugging Face "
        "directory of GPT-2, Llama, Mistral, Qwen2, Qwen3 (config.json, model.safetensors, tokenizer files)",
    )
    if prompt:
        parser.add_argument(
            "--prompt", type=text_flag, default="", help="text to continue (default: start a new document)"
        )
    parser.add_argument(
        "--max-new-tokens", type=int_at_least(1), default=200, help="stop after this many tokens (default 200)"
    )
    parser.add_argument(
        "--temperature", type=float_between(0), default=0.8, help="0 is greedy; higher is more random (default 0.8)"
    )
    parser.add_argument("--top-k", type=int_at_least(1), help="sample only among the K most likely tokens")
    parser.add_argument(
        "--top-p",
        type=float_between(0, 1, low_open=True),
        help="sample only among the most likely tokens whose probability sums to P",
    )
    parser.add_argument("--seed", type=int_at_least(0), default=0, help="seed of the sampling (default 0)")
    parser.add_argument(
        "--trust-pattern",
        action="store_true",
        help="use the tokenizer's split pattern even if numforge does not know it (a pattern is code)",
    )


def run(args: argparse.Namespace) -> int:
    model, tokenizer = load_model(args.checkpoint, trust_pattern=args.trust_pattern)
    sys.stdout.write(args.prompt)
    sys.stdout.flush()
    result = generate(
        model,
        tokenizer,
        args.prompt,
        args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        use_kv_cache=not args.no_kv_cache,
        on_text=lambda piece: (sys.stdout.write(piece), sys.stdout.flush()),
        on_notice=lambda text: print(f"note: {text}", file=sys.stderr),
    )
    print()
    if result.stopped_at_end_of_text:
        print(f"[{len(result.ids)} tokens, stopped at {tokenizer.decode([result.end_id])}]", file=sys.stderr)
    return 0
