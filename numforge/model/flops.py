"""What a GPT costs: its parameters and its training FLOPs per token, per component, from the config alone.

Parameters are counted from ``parameter_shapes`` (the model's own list), sorted
into components by name. FLOPs count the matrix products only (the
elementwise work, norms and softmax are a few percent at these widths), as
nanoGPT and PaLM count them:

- each weight ``w`` of a matrix product costs 2 FLOPs per token forward
  (one multiply, one add) and 4 backward (``dx`` and ``dW``): 6 per weight
  per token of training;
- attention's two products of the sequence with itself, ``Q K^T`` and
  ``P V``, cost ``2 T H D`` each per token and layer forward (``H D = C``
  unless ``head_dim`` is set; grouped-query attention shares keys, not
  products), 3x that for training: ``12 T H D`` per layer (the full ``T x T``,
  causal or not);
- with experts (``num_experts`` E > 0), a token passes through ``experts_top_k`` of each layer's E stacked
  expert matrices ``(E, c_in, c_out)``: each such matrix costs ``top_k c_in c_out`` weights per token, and the
  router ``C E`` (the dispatch itself is no product);
- the logits ``h @ unembedding^T`` are a product with ``V C`` weights;
  the token lookup and the position rows cost no product.

So ``flops_per_token = 6 * (matrix weights, unembedding included) + 12 L T H D``.
Example: the default ``numforge train`` model (V 2048, T 64, C 96, 3 layers,
F 384) has 538,464 parameters and 3.39 MFLOPs per token of training (``numforge params``).
"""

from __future__ import annotations

from .config import GPTConfig
from .gpt import parameter_shapes
from .names import LM_HEAD, TOKEN_EMBEDDING
from .positions import POSITIONS

COMPONENTS = ("token table", "position table", "attention", "mlp", "norms", "lm_head")


def component_of(name: str, config: GPTConfig) -> str:
    """The component a parameter belongs to: ``"layers.0.attn.qkv_proj.weight"`` -> ``"attention"``."""
    if name == TOKEN_EMBEDDING:
        return "token table"
    if name in POSITIONS[config.position].parameter_shapes(config):
        return "position table"
    if name == LM_HEAD:
        return "lm_head"
    if name.rpartition(".")[0].endswith("norm"):
        return "norms"  # pre_attn_norm, pre_mlp_norm, final_norm, attn.q_norm, attn.k_norm
    return "attention" if ".attn." in name else "mlp"


def parameter_counts(config: GPTConfig) -> dict[str, int]:
    """Parameters per component (``COMPONENTS`` order; a tied token table counts once, as ``token table``)."""
    counts = dict.fromkeys(COMPONENTS, 0)
    for name, shape in parameter_shapes(config).items():
        size = 1
        for n in shape:
            size *= n
        counts[component_of(name, config)] += size
    return counts


def flop_counts(config: GPTConfig, seq_len: int | None = None) -> dict[str, int]:
    """Training FLOPs per token (forward + backward) per part, at sequence length ``seq_len`` (default
    ``max_seq_len``): ``attention projections``, ``attention scores`` (``Q K^T`` and ``P V``), ``mlp``, ``logits``.

    The scores count ``12 H D`` per key a query of layer ``l`` may see, ``T_l = min(T, W_l)`` with a sliding
    window ``W_l`` (``config.layer_window``), else ``T``: ``12 H D Σ_l T_l``, ``12 L T H D`` without windows."""
    T = config.max_seq_len if seq_len is None else seq_len
    C, V = config.d_model, config.vocab_size
    H, D = config.num_heads, config.head_dim
    matrices = {
        name: shape
        for name, shape in parameter_shapes(config).items()
        if len(shape) >= 2 and name.startswith("layers.")
    }
    weights = {part: 0 for part in ("attention", "mlp")}
    for name, (*stacked, rows, cols) in matrices.items():
        used = config.experts_top_k if stacked else 1  # experts (E, c_in, c_out): top_k of the E per token
        weights[component_of(name, config)] += used * rows * cols
    return {
        "attention projections": 6 * weights["attention"],
        "attention scores": 12 * H * D * sum(config.keys_seen(T)),
        "mlp": 6 * weights["mlp"],
        "logits": 6 * V * C,
    }


def flops_per_token(config: GPTConfig, seq_len: int | None = None) -> int:
    """Training FLOPs per token, forward and backward: the sum of ``flop_counts``; the forward alone is a third."""
    return sum(flop_counts(config, seq_len).values())
