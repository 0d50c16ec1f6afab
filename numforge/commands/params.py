"""``numforge params``: where a GPT's parameters and training FLOPs go, component by component.

The model is a checkpoint's (``--checkpoint DIR``) or the one ``numforge
train`` would build from the same flags (``--layers``, ``--no-tie``, ...,
``--vocab-size``, ``--seq-len``). The counts come from ``model/flops.py``.
"""

from __future__ import annotations

import argparse

from ..checkpoint import checkpoint_config, load_checkpoint
from ..checks import int_at_least, path_flag
from ..data import DEFAULT_VOCAB_SIZE
from ..model import GPTConfig
from ..model.flops import COMPONENTS, flop_counts, parameter_counts
from ..table import format_table
from ..training import TrainSettings
from .model_flags import MODEL_FLAGS, add_model_flags, model_options

HELP = "count a GPT's parameters and training FLOPs per component (a checkpoint's, or from train's model flags)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkpoint", metavar="DIR", type=path_flag, help="a run directory or checkpoint: count its model"
    )
    model = parser.add_argument_group("or the model numforge train would build from these flags")
    add_model_flags(model)
    model.add_argument("--vocab-size", type=int_at_least(1), help=f"vocabulary V (default {DEFAULT_VOCAB_SIZE})")
    model.add_argument("--seq-len", type=int_at_least(1), help=f"context length T (default {TrainSettings.seq_len})")


def run(args: argparse.Namespace) -> int:
    print(breakdown(_config(args)))
    return 0


def _config(args: argparse.Namespace) -> GPTConfig:
    given = [dest for dest in (*MODEL_FLAGS, "vocab_size", "seq_len") if getattr(args, dest) is not None]
    if args.checkpoint is None:
        vocab_size = DEFAULT_VOCAB_SIZE if args.vocab_size is None else args.vocab_size
        seq_len = TrainSettings.seq_len if args.seq_len is None else args.seq_len
        return GPTConfig(vocab_size=vocab_size, max_seq_len=seq_len, **model_options(args))
    if given:
        flags = ", ".join("--" + dest.replace("_", "-") for dest in given)
        raise ValueError(f"{flags} cannot be given with --checkpoint: the checkpoint's config says what its model is")
    return checkpoint_config(load_checkpoint(args.checkpoint))


def breakdown(config: GPTConfig) -> str:
    """The two tables: parameters per component, training FLOPs per token per part."""
    L, C, V, T = config.num_layers, config.d_model, config.vocab_size, config.max_seq_len
    gelu = f" ({'exact' if config.gelu_approximate == 'none' else 'tanh'})" if config.activation == "gelu" else ""
    lines = [
        f"model: {L} layers, d_model {C}, {config.num_heads} heads, d_ff {config.d_ff}, "
        f"{config.activation}{gelu}, vocabulary {V}, context {T}; "
        f"{'tied' if config.tie_weights else 'untied'} unembedding, {config.position} positions"
        f"{', scaled embeddings' if config.scale_embeddings else ''}, {'biases' if config.use_bias else 'no biases'}",
        "",
    ]
    params = parameter_counts(config)
    notes = {
        "token table": f"V x C = {V} x {C}" + (", also the unembedding (tied)" if config.tie_weights else ""),
        "position table": f"T x C = {T} x {C}" if config.position == "learned" else "sinusoidal: fixed, no parameters",
        "attention": f"{L} layers x {params['attention'] // L:,} (qkv_proj, out_proj)",
        "mlp": f"{L} layers x {params['mlp'] // L:,} ({'gate_proj, ' if config.gated else ''}up_proj, down_proj)",
        "norms": f"{2 * L + 1} layer norms",
        "lm_head": "V x C, the untied unembedding" if not config.tie_weights else "none: tied to the token table",
    }
    lines += _table("parameters", {name: params[name] for name in COMPONENTS}, notes)
    flops = flop_counts(config)
    notes = {
        "attention projections": "6 x (qkv_proj + out_proj weights)",
        "attention scores": f"Q K^T and P V: 12 x L x T x C, T = {T}",
        "mlp": "6 x the MLP's weights",
        "logits": "6 x V x C (h @ unembedding^T)",
    }
    lines += ["", *_table("training FLOPs per token", flops, notes)]
    lines.append("(forward 2 and backward 4 FLOPs per weight and token; the forward alone is a third)")
    return "\n".join(lines)


def _table(title: str, counts: dict[str, int], notes: dict[str, str]) -> list[str]:
    total = sum(counts.values())
    rows = [(name, f"{count:,}", f"{count / total:.1%}", notes[name]) for name, count in counts.items()]
    rows.append(("total", f"{total:,}", "100.0%", ""))
    return format_table((title, "count", "share", ""), rows, align=("left", "right", "right", "left")).splitlines()
