"""The model flags that ``numforge train`` and ``numforge params`` share: one per ``GPTConfig`` field, and ``--arch``.

``MODEL_FLAGS`` maps each flag's dest to its ``GPTConfig`` field and its
argparse options; the choices come from the registries (``NORMS``,
``POSITIONS``, ``ACTIVATIONS``). A flag not given reads ``None`` (so
``train --resume`` can refuse the ones given); ``vocab_size`` and
``max_seq_len`` come from the tokenizer and ``--seq-len``.

``--arch`` is a preset: a model family's defaults in one flag (``ARCHS``).
The fields a new run takes are, each over the one before: ``RUN_DEFAULTS``
(the sizes), the preset's, then the flags given, wherever they stand on the
line (``--arch llama --norm layernorm`` is Llama with LayerNorm).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import fields

from ..checks import float_between, int_at_least
from ..model import ATTENTION_KINDS, POSITIONS, GPTConfig
from ..model.config import ARCHS, QK_NORM_ORDERS
from ..model.qk_norm import QK_NORM_EXTENTS
from ..ops.activations import ACTIVATIONS, GELU_FORMS
from ..ops.norms import NORMS
from ..training.spec import RUN_DEFAULTS

PROBABILITY = float_between(0, 1, high_open=True)  # an argparse type: "--dropout 1" names the flag and [0, 1)
POSITIVE = float_between(0, low_open=True)
NON_NEGATIVE = float_between(0)
GELU_FLAG_VALUES = {form: options["approximate"] for form, options in GELU_FORMS.items()}  # --gelu -> gelu_approximate


def gelu_form(text: str) -> str:
    """An argparse type: ``tanh`` or ``exact`` -> the ``gelu_approximate`` value."""
    if text not in GELU_FLAG_VALUES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(GELU_FLAG_VALUES)}, got {text!r}")
    return GELU_FLAG_VALUES[text]


def json_object(text: str) -> dict:
    """An argparse type: a JSON object, ``'{"rope_type": "linear", "factor": 2.0}'``."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r} ({err.msg})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def layer_list(text: str) -> list[int]:
    """An argparse type: layer indices separated by commas, ``0,2,4`` -> ``[0, 2, 4]``."""
    try:
        layers = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected layer indices separated by commas (0,2,4), got {text!r}") from None
    if any(layer < 0 for layer in layers):
        raise argparse.ArgumentTypeError(f"layer indices start at 0, got {text!r}")
    return layers


# flag dest -> (GPTConfig field, argparse options)
MODEL_FLAGS = {
    "layers": ("num_layers", dict(type=int_at_least(1), help="transformer blocks")),
    "d_model": ("d_model", dict(type=int_at_least(1), help="model width C")),
    "heads": ("num_heads", dict(type=int_at_least(1), help="attention (query) heads H")),
    "kv_heads": (
        "num_kv_heads",
        dict(type=int_at_least(1), help="key/value heads H_kv, dividing H: grouped-query attention (default H)"),
    ),
    "head_dim": ("head_dim", dict(type=int_at_least(1), help="each head's width D (default C / H)")),
    "d_ff": (
        "d_ff",
        dict(type=int_at_least(1), help="feed-forward width F (default 4 C; SwiGLU: 8/3 C rounded up to 64)"),
    ),
    "activation": ("activation", dict(choices=tuple(ACTIVATIONS), help="the feed-forward activation")),
    "gelu": ("gelu_approximate", dict(type=gelu_form, metavar="tanh|exact", help="GELU's form")),
    "norm": ("norm", dict(choices=tuple(NORMS), help="every norm of the model")),
    "norm_eps": ("norm_eps", dict(type=POSITIVE, metavar="EPS", help="the norms' epsilon")),
    "no_norm_weight": (
        "norm_weight",
        dict(action="store_const", const=False, help="norms without a learned weight (parameter-free)"),
    ),
    "position": ("position", dict(choices=tuple(POSITIONS), help="how positions enter the model")),
    "rope_theta": ("rope_theta", dict(type=POSITIVE, metavar="THETA", help="the rotation's base")),
    "rope_scaling": (
        "rope_scaling",
        dict(
            type=json_object,
            metavar="JSON",
            help='the rotation\'s frequency scaling, e.g. \'{"rope_type": "linear", "factor": 2.0}\'',
        ),
    ),  # fmt: skip
    "qk_norm": ("qk_norm", dict(action="store_const", const=True, help="a norm over each head's q and k")),
    "qk_norm_order": ("qk_norm_order", dict(choices=QK_NORM_ORDERS, help="QK-norm before or after the rotation")),
    "qk_norm_extent": (
        "qk_norm_extent",
        dict(choices=tuple(QK_NORM_EXTENTS), help="QK-norm over each head, or over the whole q (and k) projection"),
    ),
    "no_bias": (
        "use_bias",
        dict(action="store_const", const=False, help="no biases anywhere (each --X-bias flag still overrides)"),
    ),
    "qkv_bias": ("qkv_bias", dict(action=argparse.BooleanOptionalAction, help="biases of the q|k|v projection")),
    "out_bias": ("out_bias", dict(action=argparse.BooleanOptionalAction, help="a bias of attention's output")),
    "mlp_bias": ("mlp_bias", dict(action=argparse.BooleanOptionalAction, help="the MLP's biases")),
    "norm_bias": ("norm_bias", dict(action=argparse.BooleanOptionalAction, help="the norms' biases")),
    "no_tie": ("tie_weights", dict(action="store_const", const=False, help="an lm_head apart from the token table")),
    "scale_embeddings": ("scale_embeddings", dict(action="store_const", const=True, help="tokens times sqrt(C)")),
    "attention": ("attention", dict(choices=ATTENTION_KINDS, help="the attention kernel (the same numbers)")),
    "sliding_window": (
        "sliding_window",
        dict(type=int_at_least(1), metavar="W", help="attention sees the W latest positions only (sliding window)"),
    ),
    "window_layers": (
        "window_layers",
        dict(type=layer_list, metavar="0,2,..", help="the layers with the window (default: all; 0-based)"),
    ),
    "post_norms": (
        "post_norms",
        dict(action="store_const", const=True, help="a norm on each branch's output too (Gemma's sandwich)"),
    ),
    "query_pre_attn_scalar": (
        "query_pre_attn_scalar",
        dict(type=POSITIVE, metavar="Q", help="scores scaled by Q^-1/2 (default: head_dim^-1/2)"),
    ),
    "attn_softcap": (
        "attn_softcap",
        dict(type=POSITIVE, metavar="C", help="every attention score capped, C tanh(S / C) (Gemma 2: 50)"),
    ),
    "logit_softcap": (
        "logit_softcap",
        dict(type=POSITIVE, metavar="C", help="the final logits capped, C tanh(z / C) (Gemma 2: 30)"),
    ),
    "rope_local_theta": (
        "rope_local_theta",
        dict(type=POSITIVE, metavar="THETA", help="the rotation's base on the --window-layers (Gemma 3: 10000)"),
    ),
    "experts": (
        "num_experts",
        dict(type=int_at_least(0), metavar="E", help="a mixture of E SwiGLU experts in place of each MLP (0: dense)"),
    ),
    "experts_top_k": ("experts_top_k", dict(type=int_at_least(1), metavar="K", help="the experts each token goes to")),
    "experts_renormalize": (
        "experts_renormalize",
        dict(action=argparse.BooleanOptionalAction, help="divide the K kept gates by their sum (Mixtral; not: OLMoE)"),
    ),
    "router_aux_loss_coef": (
        "router_aux_loss_coef",
        dict(type=NON_NEGATIVE, metavar="COEF", help="times each layer's load-balancing loss E sum_e f_e P_e"),
    ),
    "router_z_loss_coef": (
        "router_z_loss_coef",
        dict(type=NON_NEGATIVE, metavar="COEF", help="times each layer's router z-loss mean logsumexp(z)^2"),
    ),
    "dropout": (
        "drop_prob",
        dict(type=PROBABILITY, metavar="P", help="dropout probability while training (activations, attention weights)"),
    ),
    "no_attention_dropout": (
        "attention_dropout",
        dict(action="store_const", const=False, help="--dropout spares the attention weights"),
    ),
}
FLAG_ALIASES = {"norm_eps": ("--ln-eps",)}  # older spellings still read
MODEL_FLAG_DESTS = ("arch", *MODEL_FLAGS)  # every flag that shapes the model


def add_model_flags(group) -> None:
    """Add ``--arch`` and every ``MODEL_FLAGS`` flag to ``group`` (a parser or an argument group),
    with the defaults in the help."""
    group.add_argument(
        "--arch",
        choices=tuple(ARCHS),
        help="a model family's defaults in one flag (the other model flags override it); default gpt2",
    )
    defaults = {f.name: f.default for f in fields(GPTConfig)} | RUN_DEFAULTS
    for dest, (field, options) in MODEL_FLAGS.items():
        shown = "" if options.get("action") or defaults[field] is None else f" (default {defaults[field]})"
        names = ["--" + dest.replace("_", "-"), *FLAG_ALIASES.get(dest, ())]
        group.add_argument(*names, dest=dest, **{**options, "help": options["help"] + shown})


def model_options(args: argparse.Namespace) -> dict:
    """The ``GPTConfig`` fields of a new run: ``RUN_DEFAULTS``, under the ``--arch`` preset, under the flags given."""
    given = {field: getattr(args, dest) for dest, (field, _) in MODEL_FLAGS.items() if getattr(args, dest) is not None}
    return RUN_DEFAULTS | ARCHS[args.arch or "gpt2"] | given
