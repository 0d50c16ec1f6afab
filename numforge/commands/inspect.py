"""``numforge inspect --prompt TEXT [--checkpoint DIR] --out report.html``: one page, a whole pass."""

from __future__ import annotations

import argparse

from ..checks import check_positive_int, path_flag
from ..resources import check_output_file
from ..study.report import inspect_data, write_page
from ._model import add_model_arguments, study_model

HELP = (
    "write one self-contained HTML page of a forward and backward pass on a prompt: tokens, stages, "
    "attention heatmaps, predictions, logit lens, gradients"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--out", metavar="FILE.html", type=path_flag, required=True, help="the page to write")
    parser.add_argument("--top", type=int, default=3, metavar="K", help="top-K tokens per prediction (default 3)")


def run(args: argparse.Namespace) -> int:
    check_positive_int(args.top, "--top")
    check_output_file(args.out, "--out")
    model, tokenizer = study_model(args)
    write_page(args.out, inspect_data(model, tokenizer, args.prompt, args.top))
    print(f"wrote {args.out}: open it in a browser (no network needed)")
    return 0
