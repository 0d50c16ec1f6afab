"""The model flags that ``numforge train`` and ``numforge params`` share: one per ``GPTConfig`` field.

``MODEL_FLAGS`` maps each flag's dest to its ``GPTConfig`` field, the value a
new run takes when the flag is absent, and its argparse options. A flag not
given reads ``None`` (so ``train --resume`` can refuse the ones given);
``vocab_size`` and ``max_seq_len`` come from the tokenizer and ``--seq-len``.
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from ..checks import float_between, int_at_least
from ..model import ATTENTION_KINDS, POSITION_KINDS, GPTConfig
from ..ops.activations import ACTIVATIONS

PROBABILITY = float_between(0, 1, high_open=True)  # an argparse type: "--dropout 1" names the flag and [0, 1)
GELU_FLAG_VALUES = {"tanh": "tanh", "exact": "none"}  # --gelu value -> GPTConfig.gelu_approximate


def gelu_form(text: str) -> str:
    """An argparse type: ``tanh`` or ``exact`` -> the ``gelu_approximate`` value."""
    if text not in GELU_FLAG_VALUES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(GELU_FLAG_VALUES)}, got {text!r}")
    return GELU_FLAG_VALUES[text]


# the sizes of a new run when no flag gives them (GPTConfig has no default for these); every other field
# left out takes GPTConfig's default
RUN_DEFAULTS = {"num_layers": 3, "d_model": 96, "num_heads": 4}
# flag dest -> (GPTConfig field, argparse options)
MODEL_FLAGS = {
    "layers": ("num_layers", dict(type=int_at_least(1), help="transformer blocks")),
    "d_model": ("d_model", dict(type=int_at_least(1), help="model width C")),
    "heads": ("num_heads", dict(type=int_at_least(1), help="attention heads H (C / H = head width)")),
    "d_ff": (
        "d_ff",
        dict(type=int_at_least(1), help="feed-forward width F (default 4 C; SwiGLU: 8/3 C rounded up to 64)"),
    ),
    "activation": ("activation", dict(choices=tuple(ACTIVATIONS), help="the feed-forward activation")),
    "gelu": ("gelu_approximate", dict(type=gelu_form, metavar="tanh|exact", help="GELU's form")),
    "no_bias": ("use_bias", dict(action="store_const", const=False, help="no biases (linear layers, norms)")),
    "no_tie": ("tie_weights", dict(action="store_const", const=False, help="an lm_head apart from the token table")),
    "position": ("position", dict(choices=POSITION_KINDS, help="position embeddings")),
    "scale_embeddings": ("scale_embeddings", dict(action="store_const", const=True, help="tokens times sqrt(C)")),
    "attention": ("attention", dict(choices=ATTENTION_KINDS, help="the attention kernel (the same numbers)")),
    "ln_eps": ("ln_eps", dict(type=float_between(0, low_open=True), metavar="EPS", help="layer norm's epsilon")),
    "dropout": (
        "drop_prob",
        dict(type=PROBABILITY, metavar="P", help="dropout probability while training (activations, attention weights)"),
    ),
    "no_attention_dropout": (
        "attention_dropout",
        dict(action="store_const", const=False, help="--dropout spares the attention weights"),
    ),
}


def add_model_flags(group) -> None:
    """Add every ``MODEL_FLAGS`` flag to ``group`` (a parser or an argument group), with its default in the help."""
    defaults = {f.name: f.default for f in fields(GPTConfig)} | RUN_DEFAULTS
    for dest, (field, options) in MODEL_FLAGS.items():
        shown = "" if options.get("action") or defaults[field] is None else f" (default {defaults[field]})"
        group.add_argument("--" + dest.replace("_", "-"), dest=dest, **{**options, "help": options["help"] + shown})


def model_options(args: argparse.Namespace) -> dict:
    """The ``GPTConfig`` fields the flags give, over ``RUN_DEFAULTS``."""
    given = {field: getattr(args, dest) for dest, (field, _) in MODEL_FLAGS.items() if getattr(args, dest) is not None}
    return RUN_DEFAULTS | given
