"""``numforge params``: where a GPT's parameters and training FLOPs go, component by component.

The model is a checkpoint's or a Hugging Face directory's (``--checkpoint DIR``) or the one ``numforge
train`` would build from the same flags (``--layers``, ``--no-tie``, ...,
``--vocab-size``, ``--seq-len``). The counts come from ``model/flops.py``.
"""

from __future__ import annotations

import argparse

from ..checkpoint import model_config
from ..checks import int_at_least, path_flag
from ..data import DEFAULT_VOCAB_SIZE
from ..model import POSITIONS, GPTConfig
from ..model.config import BIAS_SWITCHES
from ..model.flops import COMPONENTS, flop_counts, parameter_counts
from ..model.names import mlp_layout
from ..model.qk_norm import QK_NORM_EXTENTS
from ..ops.activations import ACTIVATIONS
from ..ops.norms import NORMS
from ..table import format_table
from ..training import TrainSettings
from .model_flags import MODEL_FLAG_DESTS, add_model_flags, model_options

HELP = "count a GPT's parameters and training FLOPs per component (a checkpoint's, or from train's model flags)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkpoint",
        metavar="DIR",
        type=path_flag,
        help="a run directory or checkpoint, or a Hugging Face model directory (its config.json): count its model",
    )
    model = parser.add_argument_group("or the model numforge train would build from these flags")
    add_model_flags(model)
    model.add_argument("--vocab-size", type=int_at_least(1), help=f"vocabulary V (default {DEFAULT_VOCAB_SIZE})")
    model.add_argument("--seq-len", type=int_at_least(1), help=f"context length T (default {TrainSettings.seq_len})")


def run(args: argparse.Namespace) -> int:
    print(breakdown(_config(args)))
    return 0


def _config(args: argparse.Namespace) -> GPTConfig:
    given = [dest for dest in (*MODEL_FLAG_DESTS, "vocab_size", "seq_len") if getattr(args, dest) is not None]
    if args.checkpoint is None:
        vocab_size = DEFAULT_VOCAB_SIZE if args.vocab_size is None else args.vocab_size
        seq_len = TrainSettings.seq_len if args.seq_len is None else args.seq_len
        return GPTConfig(vocab_size=vocab_size, max_seq_len=seq_len, **model_options(args))
    if given:
        flags = ", ".join("--" + dest.replace("_", "-") for dest in given)
        raise ValueError(f"{flags} cannot be given with --checkpoint: the checkpoint's config says what its model is")
    return model_config(args.checkpoint)


def breakdown(config: GPTConfig) -> str:
    """The two tables: parameters per component, training FLOPs per token per part; then the KV cache per token."""
    L, C, V, T = config.num_layers, config.d_model, config.vocab_size, config.max_seq_len
    H, H_kv, D = config.num_heads, config.num_kv_heads, config.head_dim
    forms = ACTIVATIONS[config.activation].forms.items()
    form = next((f" ({name})" for name, options in forms if options == config.activation_options()), "")
    over = QK_NORM_EXTENTS[config.qk_norm_extent].over
    qk_norm = f", QK-norm {config.qk_norm_order.replace('_', ' ')} over {over}" if config.qk_norm else ""
    lines = [
        f"model: {L} layers, d_model {C}, {H} heads of width {D}, {H_kv} key/value heads, d_ff {config.d_ff}, "
        f"{config.activation}{form}, vocabulary {V}, context {T}; {config.norm} norms"
        f"{'' if config.norm_weight else ' without weights'}{qk_norm}, {config.position} positions, "
        f"{'tied' if config.tie_weights else 'untied'} unembedding"
        f"{', scaled embeddings' if config.scale_embeddings else ''}, {_biases(config)}"
        f"{', ' + config.about_window() if config.sliding_window else ''}",
        "",
    ]
    params = parameter_counts(config)
    norms = ((4 if config.post_norms else 2) * L + 1) + (2 * L if config.qk_norm else 0)  # post_norms: the sandwich
    experts = f": {config.about_experts()}" if config.num_experts else ""
    projections = ", ".join(name.removeprefix("mlp.") for name in mlp_layout(config) if not name.endswith("norm"))
    notes = {
        "token table": f"V x C = {V} x {C}" + (", also the unembedding (tied)" if config.tie_weights else ""),
        "position table": POSITIONS[config.position].about,
        "attention": f"{L} layers x {params['attention'] // L:,} (qkv_proj C x (H + 2 H_kv) D, out_proj H D x C)",
        "mlp": f"{L} layers x {params['mlp'] // L:,} ({projections}{experts})",
        "norms": f"{norms} {config.norm} norms"
        + (f", {2 * L} of them on q and k" if config.qk_norm else "")
        + (f", {2 * L} after the branches" if config.post_norms else ""),
        "lm_head": "V x C, the untied unembedding" if not config.tie_weights else "none: tied to the token table",
    }
    lines += _table("parameters", {name: params[name] for name in COMPONENTS}, notes)
    flops, E = flop_counts(config), config.num_experts
    notes = {
        "attention projections": "6 x (qkv_proj + out_proj weights)",
        "attention scores": f"Q K^T and P V: 12 x L x T x H x D, T = {T}"
        if config.sliding_window is None
        else f"Q K^T and P V: 12 x H x D x the keys each layer sees, min(T, W) windowed, T = {T}",
        "mlp": "6 x the MLP's weights" + (f" (top-{config.experts_top_k} experts per token)" if E else ""),
        "logits": "6 x V x C (h @ unembedding^T)",
    }
    lines += ["", *_table("training FLOPs per token", flops, notes)]
    lines.append("(forward 2 and backward 4 FLOPs per weight and token; the forward alone is a third)")
    lines += ["", _kv_cache(config)]
    return "\n".join(lines)


def _kv_cache(config: GPTConfig) -> str:
    """The KV cache's values per token and bytes for the whole context; a windowed layer keeps a ring of
    ``min(W, T)`` positions (``model/kv_cache.py``), not ``T``."""
    L, H, H_kv, D, T = config.num_layers, config.num_heads, config.num_kv_heads, config.head_dim, config.max_seq_len
    per_token = 2 * L * H_kv * D  # a key and a value of D per key/value head and layer
    held = sum(config.keys_seen(T))  # positions kept, summed over the layers
    windowed = sum(config.layer_window(layer) is not None for layer in range(L))
    ring = f" ({windowed} windowed layers keep a ring of {min(config.sliding_window, T)})" if windowed else ""
    return (
        f"KV cache (sampling): 2 x L x H_kv x D = {per_token:,} values per token, {4 * per_token:,} bytes in float32, "
        f"{4 * 2 * H_kv * D * held:,} bytes for the whole context of {T}{ring}"
        + (f"; {H_kv}/{H} of full attention's {2 * L * H * D:,} values" if H_kv != H else "")
    )


def _biases(config: GPTConfig) -> str:
    possible = [name for name in BIAS_SWITCHES if name != "norm_bias" or "bias" in NORMS[config.norm].parameters]
    present = [name for name in possible if config.has_bias(name)]
    if present == possible:
        return "biases"
    return f"biases only: {', '.join(present)}" if present else "no biases"


def _table(title: str, counts: dict[str, int], notes: dict[str, str]) -> list[str]:
    total = sum(counts.values())
    rows = [(name, f"{count:,}", f"{count / total:.1%}", notes[name]) for name, count in counts.items()]
    rows.append(("total", f"{total:,}", "100.0%", ""))
    return format_table((title, "count", "share", ""), rows, align=("left", "right", "right", "left")).splitlines()
