"""``numforge trace --prompt TEXT [--checkpoint DIR] [--backward] [--lens] [--dump FILE.npz]``."""

from __future__ import annotations

import argparse

from ..checks import check_positive_int, path_flag
from ..resources import check_output_file
from ..study.backward import backward_stages, format_backward
from ..study.predictions import format_lens, format_predictions, logit_lens, position_predictions
from ..study.prompt import run_prompt
from ..study.trace import dump_arrays, format_stages, format_tokens, forward_stages
from ._model import add_model_arguments, study_model

HELP = (
    "show one pass on a prompt stage by stage: the forward's arrays, the per-position predictions, "
    "and with --backward the gradients, with --lens the logit lens"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument(
        "--backward",
        action="store_true",
        help="also run the backward (targets = the prompt shifted by one) and show each upstream gradient",
    )
    parser.add_argument(
        "--lens", action="store_true", help="also show what each residual stream predicts (the logit lens)"
    )
    parser.add_argument("--top", type=int, default=3, metavar="K", help="top-K tokens per prediction (default 3)")
    parser.add_argument(
        "--dump", metavar="FILE.npz", type=path_flag, help="save every stage's array (and gradient) to FILE.npz"
    )


def run(args: argparse.Namespace) -> int:
    check_positive_int(args.top, "--top")
    if args.dump is not None:
        check_output_file(args.dump, "--dump")
    model, tokenizer = study_model(args)
    prompt = run_prompt(model, tokenizer, args.prompt)
    stages = forward_stages(model, prompt)
    print(f"\ntokens ({len(prompt.ids)}):\n{format_tokens(prompt)}")
    print(f"\nforward pass:\n{format_stages(stages)}")
    if prompt.loss is None:
        print("\nloss: none (one token, no target)")
    else:
        print(f"\nloss (mean cross-entropy of the {len(prompt.ids) - 1} next tokens): {prompt.loss:.6f}")
    print(f"\npredictions at each position:\n{format_predictions(position_predictions(prompt, args.top), tokenizer)}")
    arrays = {"ids": prompt.cache.embedding.ids, **{stage.name: stage.array for stage in stages}}
    if args.lens:
        print(f"\nlogit lens:\n{format_lens(logit_lens(model, prompt, args.top), prompt, tokenizer)}")
    if args.backward:
        grad_stages, grads = backward_stages(model, prompt)
        print("\nbackward pass (d loss / d each stage, in the order the backward makes them):")
        print(format_backward(grad_stages))
        arrays.update({f"grad/{stage.name}": stage.array for stage in grad_stages})
        arrays.update({f"grad/{name}": g for name, g in grads.items()})
    if args.dump:
        dump_arrays(args.dump, arrays)
        print(f"\nsaved {len(arrays)} arrays to {args.dump}")
    return 0
