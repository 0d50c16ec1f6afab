"""The parameters' names, declared once, and a layer's layout with its shapes.

``GPT.params`` is one flat dict; a name is a part (a norm, a linear layer, a
table) and, for a norm or a linear layer, ``.weight`` or ``.bias``. Layer
``i``'s parts are under ``layers.{i}.`` by the short names below, and every
place that addresses a parameter reads them from here: the branches, the
model, the Hugging Face tables (``hf/``, which map them to each family's
names), the torch twin and the study tools. Checkpoints and the docs store
the strings themselves: they do not change.

``layer_layout(config)`` is one layer, in the order of ``parameter_shapes``
(the order the init draws them in)::

    pre_attn_norm                  (C,)                  weight | bias, as the norm has them
    attn.qkv_proj                  (C, (H + 2 H_kv) D)   one fused projection, split q|k|v
    attn.q_norm, attn.k_norm       (D,)                  QK-norm only; no bias; (H D,), (H_kv D,) projection-wide
    attn.out_proj                  (H D, C)
    post_attn_norm                 (C,)                  post_norms only (Gemma 2/3's sandwich)
    pre_mlp_norm                   (C,)
    mlp.up_proj [, mlp.gate_proj]  (C, F)                one per input of the activation (SwiGLU: gate too)
    mlp.down_proj                  (F, C)
    post_mlp_norm                  (C,)                  post_norms only

or, with experts (``config.num_experts`` E > 0, ``config.mlp_kind`` "experts"; ``ops/moe.py``), in place of the
three projections::

    mlp.router                     (C, E)                the router's logits h W_r; no bias
    mlp.experts.gate_proj          (E, C, F)             expert e's matrices stacked on the first axis; no biases
    mlp.experts.up_proj            (E, C, F)
    mlp.experts.down_proj          (E, F, C)

A linear layer's bias has its output width and exists where its switch (``config.has_bias``) says.
Around the layers: ``token_embedding (V, C)``, the position scheme's table if it has one
(``positions.py``), ``final_norm (C,)`` and, with untied weights, ``lm_head.weight (V, C)``.
"""

from __future__ import annotations

from typing import NamedTuple

from ..ops.activations import ACTIVATIONS
from .qk_norm import QK_NORM_EXTENTS

TOKEN_EMBEDDING = "token_embedding"
PRE_ATTN_NORM = "pre_attn_norm"
QKV_PROJ = "attn.qkv_proj"
Q_NORM, K_NORM = "attn.q_norm", "attn.k_norm"
OUT_PROJ = "attn.out_proj"
PRE_MLP_NORM = "pre_mlp_norm"
POST_ATTN_NORM, POST_MLP_NORM = "post_attn_norm", "post_mlp_norm"  # config.post_norms: each branch's output
DOWN_PROJ = "mlp.down_proj"
ROUTER = "mlp.router"
EXPERTS_GATE_PROJ, EXPERTS_UP_PROJ, EXPERTS_DOWN_PROJ = (
    "mlp.experts.gate_proj",
    "mlp.experts.up_proj",
    "mlp.experts.down_proj",
)
FINAL_NORM = "final_norm"
LM_HEAD = "lm_head.weight"
RESIDUAL_OUTPUTS = (OUT_PROJ, DOWN_PROJ, EXPERTS_DOWN_PROJ)  # the projections that write into the residual stream


def projection(input_name: str) -> str:
    """The linear layer of ``h`` feeding the activation's input ``input_name``: ``mlp.up_proj``, ``mlp.gate_proj``."""
    return f"mlp.{input_name}_proj"


class Linear(NamedTuple):
    """``y = x W + b``: ``weight (c_in, c_out)``, ``bias (c_out,)`` where ``config.has_bias(bias_switch)`` (None:
    never)."""

    c_in: int
    c_out: int
    bias_switch: str | None


class Experts(NamedTuple):
    """``count`` stacked matrices, one per expert: ``weight (count, c_in, c_out)``; no bias."""

    count: int
    c_in: int
    c_out: int


class Norm(NamedTuple):
    """A norm over ``width`` values: the parameters of ``config.norm``, each ``(width,)``; a bias only where
    ``bias_switch`` (None: never) says."""

    width: int
    bias_switch: str | None


def layer_layout(config) -> dict[str, Linear | Experts | Norm]:
    """Layer ``i``'s parts by short name (module docstring), each with its widths: its attention branch's,
    then its MLP branch's."""
    return attention_layout(config) | mlp_layout(config)


def attention_layout(config) -> dict[str, Linear | Norm]:
    """The attention branch's parts: its norm, the fused q|k|v projection, the QK-norms, the output projection."""
    C, H, H_kv, D = config.d_model, config.num_heads, config.num_kv_heads, config.head_dim
    layout = {PRE_ATTN_NORM: Norm(C, "norm_bias"), QKV_PROJ: Linear(C, (H + 2 * H_kv) * D, "qkv_bias")}
    if config.qk_norm:  # (D,) each, or over the whole projection (H D,) and (H_kv D,)
        width = QK_NORM_EXTENTS[config.qk_norm_extent].width
        layout |= {Q_NORM: Norm(width(H, D), None), K_NORM: Norm(width(H_kv, D), None)}
    layout |= {OUT_PROJ: Linear(H * D, C, "out_bias")}
    return layout | ({POST_ATTN_NORM: Norm(C, "norm_bias")} if config.post_norms else {})


def mlp_layout(config) -> dict[str, Linear | Experts | Norm]:
    """The MLP branch's parts, as its kind (``config.mlp_kind``: ``MLP_LAYOUTS``) has them."""
    return MLP_LAYOUTS[config.mlp_kind](config)


def dense_mlp_layout(config) -> dict[str, Linear | Norm]:
    """A dense MLP's parts: its norm, a projection per input of the activation, the down projection."""
    C, F = config.d_model, config.d_ff
    layout = {PRE_MLP_NORM: Norm(C, "norm_bias")}
    for name in sorted(ACTIVATIONS[config.activation].inputs, key=lambda name: name != "up"):
        layout[projection(name)] = Linear(C, F, "mlp_bias")  # up_proj first: the order the init has always drawn
    layout |= {DOWN_PROJ: Linear(F, C, "mlp_bias")}
    return layout | ({POST_MLP_NORM: Norm(C, "norm_bias")} if config.post_norms else {})


def experts_mlp_layout(config) -> dict[str, Linear | Experts | Norm]:
    """A mixture of experts' parts: its norm, the router, the experts' stacked gate, up and down projections."""
    C, F, E = config.d_model, config.d_ff, config.num_experts
    return {
        PRE_MLP_NORM: Norm(C, "norm_bias"),
        ROUTER: Linear(C, E, None),
        EXPERTS_GATE_PROJ: Experts(E, C, F),
        EXPERTS_UP_PROJ: Experts(E, C, F),
        EXPERTS_DOWN_PROJ: Experts(E, F, C),
    }


MLP_LAYOUTS = {"dense": dense_mlp_layout, "experts": experts_mlp_layout}  # config.mlp_kind -> the layer's MLP parts


def final_norm(config) -> Norm:
    """The norm after the last layer, of ``C`` values."""
    return Norm(config.d_model, "norm_bias")
