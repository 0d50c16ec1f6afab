"""``numforge attention --prompt TEXT [--checkpoint DIR] [--layer L] [--head H] [--scores] [--out FILE.png]``."""

from __future__ import annotations

import argparse

import numpy as np

from ..checks import path_flag
from ..model.attention_branch import KERNELS, ORACLE_KERNEL
from ..resources import check_output_file
from ..study.attention import (
    attention_scores,
    format_matrix,
    max_difference,
    model_attention_weights,
    plain_twin,
)
from ..study.attention_plot import plot_attention_grid
from ..study.prompt import run_prompt
from ._model import add_model_arguments, study_model

HELP = "show the attention weights of every layer and head on a prompt (rows: queries, columns: keys); --out draws them"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--layer", type=int, help="only this layer (default: every layer)")
    parser.add_argument("--head", type=int, help="only this head (default: every head)")
    parser.add_argument(
        "--scores", action="store_true", help="show the scores s q.k before the mask and the softmax instead"
    )
    parser.add_argument(
        "--out", metavar="FILE.png", type=path_flag, help="draw the grid of heatmaps, layers x heads (matplotlib)"
    )


def _chosen(value, count: int, flag: str) -> list[int]:
    if value is None:
        return list(range(count))
    if not 0 <= value < count:
        raise ValueError(f"{flag} must be in [0, {count - 1}], got {value}")
    return [value]


def run(args: argparse.Namespace) -> int:
    if args.out is not None:
        check_output_file(args.out, "--out")
    model, tokenizer = study_model(args)
    layers = _chosen(args.layer, model.config.num_layers, "--layer")
    heads = _chosen(args.head, model.config.num_heads, "--head")
    prompt = run_prompt(model, tokenizer, args.prompt)
    weights = model_attention_weights(prompt.cache)  # per layer (1,H,T,T)
    about = KERNELS[model.config.attention].weights
    if model.config.attention != ORACLE_KERNEL:
        oracle = model_attention_weights(run_prompt(plain_twin(model), tokenizer, args.prompt).cache)
        about += (
            f"; max |P - P_{ORACLE_KERNEL}| = {max_difference(weights, oracle):.2e} against the weights the "
            f"{ORACLE_KERNEL} path keeps"
        )
    print(about)
    T = len(prompt.ids)
    masked = np.triu(np.ones((T, T), dtype=bool), k=1)  # causal: query i sees keys j <= i
    what = "scores s q.k, before the mask" if args.scores else "attention weights"
    matrices = {}
    for layer in layers:
        scores = attention_scores(prompt.cache.blocks[layer].attention.attention) if args.scores else None
        for head in heads:
            matrix = scores[0, head] if args.scores else weights[layer][0, head]  # (T,T)
            print(f"\nlayer {layer}, head {head}: {what} (rows: queries, columns: keys)")
            print(format_matrix(matrix, list(prompt.shown), None if args.scores else masked))
            matrices[layer, head] = matrix if args.scores else np.where(masked, np.nan, matrix)
    if args.out:
        plot_attention_grid(args.out, matrices, list(prompt.shown), f"{what}: {args.prompt!r}")
        print(f"\ndrew {len(matrices)} heatmaps to {args.out}")
    return 0
