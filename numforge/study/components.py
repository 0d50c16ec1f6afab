"""What the study tools call each stage on a given model: by the model's own components, never GPT-2's by default.

A stage has a *kind*, the same on every model (``"pre-attention norm output"``, ``"embedding sum"``: the key of
its equation, ``equations.py``, and of its sentence in the walkthrough), and a *name*, the kind said
with what this model has (``stage_name``)::

    kind                                GPT-2                                  Llama (RoPE, RMSNorm, SwiGLU)
    embedding sum                       embedding sum x = e + p                residual stream x = e (no position
                                                                               added: rope acts in attention)
    pre-attention norm output           pre-attention LayerNorm output         pre-attention RMSNorm output
    MLP gate (pre-activation)           (none: GELU has one input)             MLP gate_proj output (SwiGLU gate)
    MLP activation (down_proj input)    MLP GELU output (down_proj input)      MLP SwiGLU output (down_proj input)
    final norm output                   final LayerNorm output (into the       final RMSNorm output (into lm_head,
                                        tied unembedding, the token table)     untied)

Gemma adds its embedding scale (``token embedding * sqrt(C)``) and its post-norms (``attention branch output
(post-attention RMSNorm (1 + w))``); a mixture of experts its own branch (``MLP branch output (gated sum of the
chosen experts)``). The titles come from the registries (``NORMS[...].title``, ``ACTIVATIONS[...].title``), so no
component's name is tested here; a kind without a name of its own (``q``, ``heads merged (out_proj input)``) is
its own name.
"""

from __future__ import annotations

from ..model.positions import POSITIONS
from ..ops.activations import ACTIVATIONS
from ..ops.norms import NORMS


def norm_title(config) -> str:
    return NORMS[config.norm].title


def activation_title(config) -> str:
    return ACTIVATIONS[config.activation].title


def position_added(config) -> bool:
    """Whether the position scheme adds a row to each token embedding (learned, sinusoidal) or acts in every
    attention layer instead (RoPE rotates q and k, ALiBi biases the scores)."""
    return POSITIONS[config.position].added is not None


def unembedding_title(config) -> str:
    return "the tied unembedding, the token table" if config.tie_weights else "lm_head, untied"


def _embedding_sum(config) -> str:
    if position_added(config):
        return "embedding sum x = e + p"
    return f"residual stream x = e (no position added: {config.position} acts in attention)"


def _branch(what: str, config) -> str:
    """``"attention branch output"``, with Gemma's post-norm ``"(post-attention RMSNorm (1 + w))"``; an MLP of
    experts: the gated sum."""
    if what == "MLP" and config.num_experts:
        return "MLP branch output (gated sum of the chosen experts)"
    return f"{what} branch output (post-{what} {norm_title(config)})" if config.post_norms else f"{what} branch output"


NAMES = {  # kind -> its name on a model of this config (forward and backward stages alike)
    "token embedding": lambda c: "token embedding * sqrt(C)" if c.scale_embeddings else "token embedding",
    "position embedding": lambda c: f"{c.position} position embedding",
    "embedding sum": _embedding_sum,
    "pre-attention norm output": lambda c: f"pre-attention {norm_title(c)} output",
    "attention branch output": lambda c: _branch("attention", c),
    "pre-MLP norm output": lambda c: f"pre-MLP {norm_title(c)} output",
    "pre-MLP norm output (router and experts input)": lambda c: (
        f"pre-MLP {norm_title(c)} output (router and experts input)"
    ),
    "MLP pre-activation": lambda c: f"MLP up_proj output ({activation_title(c)} input)",
    "MLP gate (pre-activation)": lambda c: f"MLP gate_proj output ({activation_title(c)} gate)",
    "MLP up (pre-activation)": lambda c: f"MLP up_proj output ({activation_title(c)} up)",
    "MLP activation (down_proj input)": lambda c: f"MLP {activation_title(c)} output (down_proj input)",
    "MLP branch output": lambda c: _branch("MLP", c),
    "final norm output": lambda c: f"final {norm_title(c)} output (into {unembedding_title(c)})",
    "final norm output h": lambda c: f"final {norm_title(c)} output h",
}


def stage_name(kind: str, config, layer: int | None = None) -> str:
    """The name of a stage of ``kind`` on a model of ``config``, ``"layer {layer} "`` first for a layer's stage:
    ``stage_name("pre-MLP norm output", llama, 1)`` -> ``"layer 1 pre-MLP RMSNorm output"``."""
    name = NAMES[kind](config) if kind in NAMES else kind
    return name if layer is None else f"layer {layer} {name}"
