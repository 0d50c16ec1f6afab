"""The backward pass, stage by stage: each upstream gradient as the model's own backward makes it.

``backward_stages(model, prompt)`` walks ``model.backward_steps(prompt.cache)``
once: each step of the real backward holds every gradient it made, by
reference, as named fields (``GPT.backward_steps``, ``model/blocks.py``, the
branches' ``MlpBackward`` and ``AttentionBackward``), and this module names
them and puts them in order (``STEP_STAGES``), so every number here is read
from the real backward; nothing is recomputed. The stages come in the
backward's own order, top down:

- ``loss`` (``dloss = 1``); ``final norm output h`` and, with tied weights,
  the output side of the token table's gradient (``dlogits^T h``);
- ``residual after the last layer``, then per layer, last first: the MLP branch
  (activation, pre-activation, norm output, its gradient into the residual),
  the residual after attention (``skip + MLP branch``), the attention branch
  (heads merged, q, k, v, q and k before each QK step, norm output, into the
  residual), and the residual entering the block (``skip + attention branch``).
  The skips carry the gradient from the top to layer 0 unchanged; each branch adds its part;
- ``embedding sum``, with the token table's input side (scatter-add), the
  tied sum ``input side + output side`` (the gradient ``backward`` returns),
  and the position table's gradient, summed over the batch.

Inside a branch the tokens are rows, so a branch's stages, its gradient into the residual too, are ``(N, ...)``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..backend import to_numpy
from ..model.attention_branch import QK_NORM, AttentionBackward
from ..model.gpt import EmbeddingBackward, HeadBackward, LayerBackward
from ..model.mlp_branch import MlpBackward
from ..model.moe_branch import WEIGHTS, MoeBackward
from ..model.names import (
    DOWN_PROJ,
    K_NORM,
    LM_HEAD,
    OUT_PROJ,
    PRE_ATTN_NORM,
    PRE_MLP_NORM,
    Q_NORM,
    QKV_PROJ,
    TOKEN_EMBEDDING,
    projection,
)
from ..ops.activations import ACTIVATIONS
from ..table import format_table
from .components import stage_name


class GradStage(NamedTuple):
    """One upstream gradient, summarized, and the parameter gradients the same step produced."""

    name: str  # by the model's components (components.stage_name): "layer 1 pre-MLP RMSNorm output"
    shape: tuple[int, ...]
    norm: float
    mean: float
    std: float
    max_abs: float
    params: tuple[tuple[str, tuple[int, ...], float], ...]  # (name, shape, norm)
    array: object  # the gradient itself (NumPy or CuPy), for --dump
    param_arrays: dict  # name -> parameter gradient
    kind: str = ""  # the same on every model: "pre-MLP norm output" (the equation's key)
    layer: int | None = None  # the layer of a block's stage, else None


def _norm(array) -> float:
    return float(np.linalg.norm(to_numpy(array).astype(np.float64).ravel()))


def backward_stages(model, prompt) -> tuple[list[GradStage], dict]:
    """``(stages, grads)``: the stages of one backward on ``prompt.cache``, and its gradients."""
    if prompt.loss is None:
        raise ValueError("a one-token prompt has no target, so no loss to differentiate; give at least two tokens")
    return record_backward(model, prompt.cache)


def record_backward(model, cache) -> tuple[list[GradStage], dict]:
    """``(stages, grads)`` of one backward on a forward's ``cache`` (kept with ``keep_caches``): every step of
    ``model.backward_steps`` as its stages, and the gradients ``model.backward`` returns."""
    stages, grads = [], {}
    for step in model.backward_steps(cache):
        grads.update(step.grads)
        layer = step.layer if isinstance(step, LayerBackward) else None
        stages += [_summary(*stage, model.config, layer) for stage in STEP_STAGES[type(step)](step, model.config)]
    return stages, {name: grads[name] for name in model.params}


def _summary(kind: str, grad, params: dict, config, layer: int | None) -> GradStage:
    values = to_numpy(grad).astype(np.float64)
    return GradStage(
        stage_name(kind, config, layer),
        tuple(values.shape),
        float(np.linalg.norm(values.ravel())),
        float(values.mean()),
        float(values.std()),
        float(np.abs(values).max()),
        tuple((p, tuple(g.shape), _norm(g)) for p, g in params.items()),
        grad,
        dict(params),
        kind,
        layer,
    )


# ---------------------------------------------------------------- each step's stages: (kind, gradient, params)


def _head_stages(head: HeadBackward, config):
    output_side = "token_embedding (output side: dlogits^T h)" if config.tie_weights else LM_HEAD
    yield "loss", head.dloss, {}
    yield "final norm output h", head.dh, {output_side: head.dunembedding}
    yield "residual after the last layer", head.dx, head.grads


def _layer_stages(layer: LayerBackward, config):
    branch, prefix = layer.step.branch, f"layers.{layer.layer}."
    for name, grad, parts in BRANCH_STAGES[type(branch)](branch, config):
        params = {prefix + p: g for part in parts for p, g in branch.grads.items() if p.rpartition(".")[0] == part}
        yield name, grad, params
    after = _INTO_THE_BLOCK if isinstance(branch, AttentionBackward) else "residual after attention (skip + MLP)"
    yield after, layer.step.dx, {}


_INTO_THE_BLOCK = "residual into the block (skip + attention)"


def _mlp_stages(mlp: MlpBackward, config):
    """``(name, gradient, the parts whose parameter gradients that step made)`` of the MLP branch."""
    inputs = ACTIVATIONS[config.activation].inputs
    yield "MLP activation (down_proj input)", mlp.dact, (DOWN_PROJ,)
    for name, dinput in zip(inputs, mlp.dinputs):
        yield ("MLP pre-activation" if len(inputs) == 1 else f"MLP {name} (pre-activation)"), dinput, ()
    yield "pre-MLP norm output", mlp.dh, tuple(projection(name) for name in inputs)
    yield "MLP branch -> residual", mlp.dx.reshape(mlp.dh.shape), (PRE_MLP_NORM,)  # (B,T,C) -> (N,C)


def _moe_stages(moe: MoeBackward, config):
    """``(name, gradient, the parts whose parameter gradients that step made)`` of the MLP branch with experts."""
    yield "pre-MLP norm output (router and experts input)", moe.dh, WEIGHTS
    yield "MLP branch -> residual", moe.dx.reshape(moe.dh.shape), (PRE_MLP_NORM,)  # (B,T,C) -> (N,C)


def _attention_stages(attention: AttentionBackward, config):
    """``(name, gradient, the parts whose parameter gradients that step made)`` of the attention branch."""
    yield "heads merged (out_proj input)", attention.dmerged, (OUT_PROJ,)
    yield from (("q", attention.dq, ()), ("k", attention.dk, ()), ("v", attention.dv, ()))
    for step, dq, dk in attention.qk.path:  # the last step of qk_steps first
        norm = step == QK_NORM
        yield f"q before {'q_norm' if norm else step}", dq, (Q_NORM,) if norm else ()
        yield f"k before {'k_norm' if norm else step}", dk, (K_NORM,) if norm else ()
    yield "pre-attention norm output", attention.dh, (QKV_PROJ,)
    yield "attention branch -> residual", attention.dx.reshape(attention.dh.shape), (PRE_ATTN_NORM,)  # -> (N,C)


def _embedding_stages(embedding: EmbeddingBackward, config):
    parts = {"token_embedding (input side: scatter-add)": embedding.dtoken_embedding}
    if config.tie_weights:
        parts["token_embedding (input side + output side)"] = embedding.grads[TOKEN_EMBEDDING]
    parts.update({f"{name} (summed over the batch)": g for name, g in embedding.position_grads.items()})
    yield "embedding sum", embedding.dx, parts


BRANCH_STAGES = {MlpBackward: _mlp_stages, MoeBackward: _moe_stages, AttentionBackward: _attention_stages}
STEP_STAGES = {  # a step of GPT.backward_steps -> its stages, in the order the backward made them
    HeadBackward: _head_stages,
    LayerBackward: _layer_stages,
    EmbeddingBackward: _embedding_stages,
}


def format_backward(stages: list[GradStage]) -> str:
    """One line per upstream gradient; below it, the parameter gradients of that step with their norms."""
    rows = []
    for s in stages:
        rows.append((s.name, str(s.shape), f"{s.norm:.4g}", f"{s.mean:.3g}", f"{s.std:.3g}", f"{s.max_abs:.3g}"))
        rows += [(f"    param {name}", str(shape), f"{norm:.4g}", "", "", "") for name, shape, norm in s.params]
    header = ("upstream gradient (d loss / d ...)", "shape", "norm", "mean", "std", "max |.|")
    return format_table(header, rows, align=("left", "left", "right", "right", "right", "right"))
