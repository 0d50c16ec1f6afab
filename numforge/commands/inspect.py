"""``numforge inspect --prompt TEXT [--checkpoint DIR] --out report.html``: one page, a whole pass."""

from __future__ import annotations

import argparse

from ..checks import check_positive_int, float_between, path_flag
from ..resources import check_output_file
from ..study.report import ATTENTION_MIB, inspect_data, write_page
from ._model import add_model_arguments, study_model

HELP = (
    "write one self-contained HTML page of a forward and backward pass on a prompt: tokens, stages, "
    "attention heatmaps, predictions, logit lens, gradients"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--out", metavar="FILE.html", type=path_flag, required=True, help="the page to write")
    parser.add_argument("--top", type=int, default=3, metavar="K", help="top-K tokens per prediction (default 3)")
    parser.add_argument(
        "--attention-mib",
        type=float_between(0.0),
        default=ATTENTION_MIB,
        metavar="MIB",
        help=f"the attention weights the page holds, layer by layer from layer 0 (always), while they fit in MIB "
        f"(default {ATTENTION_MIB:g}: every layer of a small model; one of GPT-2 124M at 1024 tokens)",
    )


def run(args: argparse.Namespace) -> int:
    check_positive_int(args.top, "--top")
    check_output_file(args.out, "--out")
    model, tokenizer = study_model(args)
    data = inspect_data(model, tokenizer, args.prompt, args.top, args.attention_mib)
    write_page(args.out, data)
    print(f"wrote {args.out}: open it in a browser (no network needed)")
    held, layers = len(data["answers"]["attention"]), model.config.num_layers
    if held < layers:
        print(
            f"it holds the attention weights of layers 0-{held - 1} of {layers} (--attention-mib "
            f"{args.attention_mib:g}); numforge studio shows every layer"
        )
    return 0
