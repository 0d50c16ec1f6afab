"""The forward pass of a GPT, stage by stage, with shapes and numbers, for study.

``forward_stages(model, prompt)`` reads every stage out of the cache of the
one forward pass ``run_prompt`` made (``prompt.py``). Nothing is recomputed by
hand; a stage whose array no cache holds is not shown. Each stage has a kind, the
same on every model (below), and a name that says it with the model's own
components (``components.stage_name``: ``layer 0 pre-attention RMSNorm output``
on Llama, ``embedding sum x = e + p`` only where a position row is added). Where
each number comes from (``N = B*T`` rows of the branches are shown as ``(B,T,...)``):

==================================  ==========================================
stage (its kind)                    array read
==================================  ==========================================
token embedding ``tok[ids]``        ``token_embedding[cache.embedding.ids]`` (times sqrt(C) if scaled)
position embedding ``pos[:T]``      ``position_embedding[:T]`` (or the sinusoidal table)
embedding sum                       layer 0's pre-attention norm input ``.norm.x``
layer i pre-attention norm output   ``qkv_proj.x``: the input of the fused q|k|v projection
layer i q, k, v                     ``attention.q / .k / .v``, ``(B,H,T,D)`` (k, v: ``(B,H_kv,T,D)``); with QK-norm
                                    or a rotation, q and k as split ``qk.path[0]``, then after each step
                                    (``q after qk_norm``, ``q after rope``) ``qk.path[i]``, the last the kernel's
layer i heads merged                ``out_proj.x``: the heads side by side, before the output projection
layer i attention branch output     residual after attention minus residual before: what ``out_proj`` added
layer i residual after attention    the pre-MLP norm input ``mlp.norm.x``
layer i pre-MLP norm output         ``projections[0].x`` (the input of every projection)
layer i MLP pre-activation          GELU: ``activation.x``; SwiGLU: ``activation.gate``, ``.up``;
                                    GeGLU: ``.gelu.x``, ``.up``; ReLU keeps only a mask, so none
layer i MLP activation              ``down_proj.x``
layer i MLP branch output           residual after the MLP minus residual after attention
layer i residual after MLP          the next norm's input (layer i+1's, or the final norm's ``.x``)
final norm output                   ``cache.loss.rows``, the rows the unembedding multiplies
==================================  ==========================================

Statistics are over the whole array, in float64; ``last`` holds the first
``FIRST_VALUES`` numbers of the last position (for ``(B,H,T,D)`` arrays: of
head 0). The loss and the predictions are in ``predictions.py``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..atomic import atomic_path
from ..backend import to_numpy
from ..model.mlp_branch import MlpBranchCache
from ..model.moe_branch import MoeBranchCache
from ..model.names import TOKEN_EMBEDDING
from ..table import format_table
from .components import stage_name

FIRST_VALUES = 4


class Stage(NamedTuple):
    """One array of the forward pass, summarized, with the array itself (for ``--dump``)."""

    name: str  # by the model's components (components.stage_name): "layer 0 pre-attention RMSNorm output"
    shape: tuple[int, ...]
    mean: float
    std: float
    min: float
    max: float
    last: tuple[float, ...]  # the first FIRST_VALUES numbers of the last position (head 0 if (B,H,T,D))
    source: str  # where the array was read
    array: object  # (B,T,...) or (B,H,T,D), NumPy or CuPy
    kind: str = ""  # the same on every model: "pre-attention norm output" (the equation's key); "" = the name
    layer: int | None = None  # the layer of a block's stage, else None


def summarize(name: str, array, source: str, heads_first: bool = False) -> Stage:
    """A ``Stage`` of ``array`` ``(B,T,...)``, or ``(B,H,T,D)`` when ``heads_first``."""
    values = to_numpy(array).astype(np.float64)
    last = values[0, 0, -1] if heads_first else values[0, -1]  # batch 0 (and head 0), last position
    return Stage(
        name,
        tuple(values.shape),
        float(values.mean()),
        float(values.std()),
        float(values.min()),
        float(values.max()),
        tuple(float(v) for v in np.ravel(last)[:FIRST_VALUES]),
        source,
        array,
        name,
    )


def forward_stages(model, prompt) -> list[Stage]:
    """The stages of the forward pass ``prompt.cache``, in data-flow order (see the module docstring), each
    named by the model's components (``components.stage_name``)."""
    cache, config = prompt.cache, model.config
    B, T = cache.ids_shape

    def rows(array):
        return array.reshape(B, T, -1)  # (N,X) -> (B,T,X)

    tokens = model.params[TOKEN_EMBEDDING][cache.embedding.ids]  # (B,T) -> (B,T,C)
    scaled = " * sqrt(C)" if config.scale_embeddings else ""
    if config.scale_embeddings:
        tokens = tokens * math.sqrt(config.d_model)
    stages = [summarize("token embedding", tokens, f"token_embedding[cache.embedding.ids]{scaled}")]
    added = model.positions.added
    if added in model.params:
        stages.append(summarize("position embedding", model.params[added][:T][None], f"{added}[:T]"))
    elif added is not None:
        stages.append(summarize("position embedding", model.position_tables[added][:T][None], f"the {added} table[:T]"))
    stages.append(summarize("embedding sum", rows(cache.blocks[0].attention.norm.x), "blocks[0].attention.norm.x"))
    residuals = [block.attention.norm.x for block in cache.blocks] + [cache.final_norm.x]  # (N,C) each
    for i, (attention, mlp, _) in enumerate(cache.blocks):
        at, mp = f"blocks[{i}].attention", f"blocks[{i}].mlp"
        after = f"blocks[{i + 1}].attention.norm.x" if i + 1 < len(cache.blocks) else "final_norm.x"
        layer = [summarize("pre-attention norm output", rows(attention.qkv_proj.x), f"{at}.qkv_proj.x")]
        layer += _qkv_stages(at, attention)
        layer += [
            summarize("heads merged (out_proj input)", rows(attention.out_proj.x), f"{at}.out_proj.x"),
            summarize("attention branch output", rows(mlp.norm.x - residuals[i]), f"{mp}.norm.x - {at}.norm.x"),
            summarize("residual after attention", rows(mlp.norm.x), f"{mp}.norm.x"),
        ]
        layer += MLP_STAGES[type(mlp)](mp, mlp, rows)
        layer += [
            summarize("MLP branch output", rows(residuals[i + 1] - mlp.norm.x), f"{after} - {mp}.norm.x"),
            summarize("residual after MLP", rows(residuals[i + 1]), after),
        ]
        stages += [s._replace(layer=i) for s in layer]
    stages.append(summarize("final norm output", rows(cache.loss.rows), "loss.rows"))
    return [s._replace(name=stage_name(s.kind, config, s.layer)) for s in stages]


def _dense_mlp_stages(mp: str, mlp: MlpBranchCache, rows) -> list[Stage]:
    """Inside a dense MLP: the norm's output, the activation's inputs, its output."""
    stages = [summarize("pre-MLP norm output", rows(mlp.projections[0].x), f"{mp}.projections[0].x")]
    stages += [
        summarize(f"MLP {name}", rows(array), f"{mp}.activation.{field}")
        for name, field, array in _pre_activations(mlp.activation)
    ]
    return stages + [summarize("MLP activation (down_proj input)", rows(mlp.down_proj.x), f"{mp}.down_proj.x")]


def _moe_stages(mp: str, mlp: MoeBranchCache, rows) -> list[Stage]:
    """Inside an MLP with experts: the norm's output (the router's and the experts' input), the router's
    probabilities over the experts, the gates of the chosen ones."""
    return [
        summarize("pre-MLP norm output (router and experts input)", rows(mlp.moe.router.x), f"{mp}.moe.router.x"),
        summarize("router probabilities (N,E)", rows(mlp.moe.probs), f"{mp}.moe.probs"),
        summarize("gates of the chosen experts (N,k)", rows(mlp.moe.gates), f"{mp}.moe.gates"),
    ]


MLP_STAGES = {MlpBranchCache: _dense_mlp_stages, MoeBranchCache: _moe_stages}  # an MLP kind's cache -> its stages


def _qkv_stages(at: str, attention) -> list[Stage]:
    """q, k, v as the projection split them, then q and k after each step of ``qk_steps`` (QK-norm, the
    rotation): the arrays the attention branch's ``QKCache.path`` holds; the last are the kernel's own."""
    qk = attention.qk
    if not qk.steps:  # the kernel attends to q and k as split
        return [
            summarize(name, getattr(attention.attention, name), f"{at}.attention.{name}", heads_first=True)
            for name in ("q", "k", "v")
        ]
    stages = [
        summarize("q", qk.path[0][0], f"{at}.qk.path[0][0]", heads_first=True),
        summarize("k", qk.path[0][1], f"{at}.qk.path[0][1]", heads_first=True),
        summarize("v", attention.attention.v, f"{at}.attention.v", heads_first=True),
    ]
    for i, step in enumerate(qk.steps, start=1):
        for j, name in enumerate(("q", "k")):
            source = f"{at}.attention.{name}" if i == len(qk.steps) else f"{at}.qk.path[{i}][{j}]"
            stages.append(summarize(f"{name} after {step}", qk.path[i][j], source, heads_first=True))
    return stages


def at_position(array, position: int, T: int) -> np.ndarray | None:
    """The part of a stage's array (forward or backward) at ``position`` of a one-sequence pass, float64 NumPy:
    ``(1,T,X) -> (X,)``, rows ``(T,X) -> (X,)`` (``N = B*T`` with ``B = 1``), ``(1,H,T,D) -> (H,D)``;
    None for an array with no position axis (the loss)."""
    shape = tuple(array.shape)
    if len(shape) == 4 and shape[0] == 1 and shape[2] == T:
        part = array[0, :, position]  # (1,H,T,D) -> (H,D)
    elif len(shape) == 3 and shape[:2] == (1, T):
        part = array[0, position]  # (1,T,X) -> (X,)
    elif len(shape) == 2 and shape[0] == T:
        part = array[position]  # (T,X) -> (X,)
    else:
        return None
    return to_numpy(part).astype(np.float64)


def _pre_activations(activation_cache):
    """``(name, field, array)`` of the MLP's pre-activation arrays that the activation cache holds."""
    fields = activation_cache._fields
    if "gate" in fields:  # SwiGLU: silu(gate) * up
        return [
            ("gate (pre-activation)", "gate", activation_cache.gate),
            ("up (pre-activation)", "up", activation_cache.up),
        ]
    if "gelu" in fields:  # GeGLU: gelu_tanh(gate) * up, the gate kept in its GELU's cache
        return [
            ("gate (pre-activation)", "gelu.x", activation_cache.gelu.x),
            ("up (pre-activation)", "up", activation_cache.up),
        ]
    if "x" in fields:  # GELU
        return [("pre-activation", "x", activation_cache.x)]
    return []  # ReLU keeps only the mask x > 0


def format_tokens(prompt) -> str:
    """The prompt's tokens: position, id, the token as ``shown_token`` writes it."""
    rows = [(str(t), str(i), shown) for t, (i, shown) in enumerate(zip(prompt.ids, prompt.shown))]
    return format_table(("position", "id", "token"), rows, align=("right", "right", "left"))


def format_stages(stages: list[Stage]) -> str:
    """A plain-text table: one line per stage, one meaning per column."""
    header = ("stage", "shape", "mean", "std", "min", "max", f"last position, first {FIRST_VALUES} values", "read from")
    rows = [
        (s.name, str(s.shape), *(f"{v:.4g}" for v in (s.mean, s.std, s.min, s.max)),
         " ".join(f"{v:.4g}" for v in s.last), s.source)
        for s in stages
    ]  # fmt: skip
    return format_table(header, rows, align=("left", "left", "right", "right", "right", "right", "left", "left"))


def dump_arrays(path, arrays: dict) -> None:
    """Save ``name -> array`` (NumPy or CuPy) to one ``.npz`` file, atomically; names are the keys."""
    with atomic_path(path) as temp, open(temp, "wb") as f:
        np.savez(f, **{name: to_numpy(a) for name, a in arrays.items()})
