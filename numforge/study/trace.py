"""The forward pass of a GPT, stage by stage, with shapes and numbers, for study.

``trace(model, tokenizer, text)`` encodes ``text`` to ids ``(1,T)``, runs the
model's own forward pass once, ``loss, cache = model.forward(ids, targets,
training=False)`` with ``targets`` the ids shifted left by one (the last one
``-1``, the ignore index), and reads every stage out of the returned cache.
Nothing is recomputed by hand; a stage whose array no cache holds is not
shown. Where each number comes from (``N = B*T`` rows of the branches are
shown as ``(B,T,...)``):

=================================  ===========================================
stage                              array read
=================================  ===========================================
token ids                          ``cache.embedding.ids``
embedding sum ``tok[ids] + pos``   layer 0's pre-attention norm input ``.norm.x``
layer i pre-attention norm         ``qkv_proj.x``: the input of the fused q|k|v projection
layer i q, k, v                    ``attention.q / .k / .v``, ``(B,H,T,D)``
layer i attention output           ``out_proj.x``: the heads merged, before the output projection
layer i residual after attention   the pre-MLP norm input ``mlp.norm.x``
layer i pre-MLP norm               ``up_proj.x``
layer i MLP pre-activation         GELU: ``activation.x``; SwiGLU: ``activation.gate``, ``.up``;
                                   ReLU keeps only a mask, so none
layer i MLP activation             ``down_proj.x``
layer i residual after MLP         the next norm's input (layer i+1's, or the final norm's ``.x``)
final norm                         ``cache.loss.rows``, the rows the unembedding multiplies
loss                               the forward's returned loss (absent for a one-token text:
                                   it has no target)
next token (top 5)                 ``loss.rows[-1] @ loss.table^T`` (the cache again), softmax in float64
=================================  ===========================================

Statistics are over the whole array, in float64; ``last`` holds the first
``FIRST_VALUES`` numbers of the last position (for ``(B,H,T,D)`` arrays: of
head 0). The branch outputs themselves (``out_proj`` and ``down_proj``
results) are not in any cache: they are the differences of consecutive
residuals.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..backend import asarray, to_numpy
from ..generate import next_token_probs

FIRST_VALUES = 4
TOP_K = 5


class Stage(NamedTuple):
    """One array of the forward pass, summarized."""

    name: str
    shape: tuple[int, ...]
    mean: float
    std: float
    min: float
    max: float
    last: tuple[float, ...]  # first values of the last position; top-5 probabilities for "next token"
    source: str  # where the array was read
    tokens: tuple[tuple[int, str], ...] = ()  # (id, text): the input tokens, or the top-5 predictions


def summarize(name: str, array, source: str, heads_first: bool = False, tokens=()) -> Stage:
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
        tuple(tokens),
    )


def trace(model, tokenizer, text: str) -> list[Stage]:
    """The stages of ``model``'s forward pass on ``text``, in data-flow order (see the module docstring)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    ids = tokenizer.encode(text, allowed_special="all")
    if not ids:
        raise ValueError("text encodes to no tokens; give a non-empty text")
    if len(ids) > model.config.max_seq_len:
        raise ValueError(
            f"text encodes to {len(ids)} tokens, more than the model's context "
            f"max_seq_len {model.config.max_seq_len}; give a shorter text"
        )
    token_ids = asarray(np.asarray([ids]))  # (1,T)
    targets = asarray(np.asarray([ids[1:] + [-1]]))  # (1,T): the next token; none after the last
    loss, cache = model.forward(token_ids, targets, training=False)
    B, T = cache.ids_shape

    def rows(array):
        return array.reshape(B, T, -1)  # (N,X) -> (B,T,X)

    pieces = tuple((int(i), tokenizer.decode([int(i)])) for i in ids)
    stages = [summarize("token ids", cache.embedding.ids, "cache.embedding.ids", tokens=pieces)]
    stages.append(summarize("embedding sum", rows(cache.blocks[0][0].norm.x), "blocks[0].attention.norm.x"))
    for i, (attention, mlp) in enumerate(cache.blocks):
        at, mp = f"blocks[{i}].attention", f"blocks[{i}].mlp"
        stages.append(summarize(f"layer {i} pre-attention norm", rows(attention.qkv_proj.x), f"{at}.qkv_proj.x"))
        for name in ("q", "k", "v"):
            stages.append(
                summarize(
                    f"layer {i} {name}", getattr(attention.attention, name), f"{at}.attention.{name}", heads_first=True
                )
            )
        stages.append(summarize(f"layer {i} attention output", rows(attention.out_proj.x), f"{at}.out_proj.x"))
        stages.append(summarize(f"layer {i} residual after attention", rows(mlp.norm.x), f"{mp}.norm.x"))
        stages.append(summarize(f"layer {i} pre-MLP norm", rows(mlp.up_proj.x), f"{mp}.up_proj.x"))
        stages.extend(
            summarize(f"layer {i} MLP {name}", rows(array), f"{mp}.activation.{field}")
            for name, field, array in _pre_activations(mlp.activation)
        )
        stages.append(summarize(f"layer {i} MLP activation", rows(mlp.down_proj.x), f"{mp}.down_proj.x"))
        after = (
            (f"blocks[{i + 1}].attention.norm.x", cache.blocks[i + 1][0].norm.x)
            if i + 1 < len(cache.blocks)
            else ("final_norm.x", cache.final_norm.x)
        )
        stages.append(summarize(f"layer {i} residual after MLP", rows(after[1]), after[0]))
    stages.append(summarize("final norm", rows(cache.loss.rows), "loss.rows"))
    if T > 1:
        value = float(to_numpy(loss))
        stages.append(Stage("loss", (), value, 0.0, value, value, (value,), "model.forward's loss"))
    stages.append(_next_token_stage(cache.loss.rows[-1] @ cache.loss.table.T, tokenizer))  # (C,) @ (C,V) -> (V,)
    return stages


def _pre_activations(activation_cache):
    """``(name, field, array)`` of the MLP's pre-activation arrays that the activation cache holds."""
    fields = activation_cache._fields
    if "gate" in fields:  # SwiGLU: silu(gate) * up
        return [
            ("gate (pre-activation)", "gate", activation_cache.gate),
            ("up (pre-activation)", "up", activation_cache.up),
        ]
    if "x" in fields:  # GELU
        return [("pre-activation", "x", activation_cache.x)]
    return []  # ReLU keeps only the mask x > 0


def _next_token_stage(last_logits, tokenizer) -> Stage:
    """The last position's next-token distribution; ``last`` and ``tokens`` are its top ``TOP_K``.

    ``last_logits (V,)`` = the last row of the final norm's output times the
    unembedding, both read from the forward's loss cache (no second forward pass).
    """
    logits = to_numpy(last_logits)  # (V,)
    probs = next_token_probs(logits, temperature=1.0)  # (V,) softmax in float64
    top = np.argsort(-probs, kind="stable")[:TOP_K]  # (TOP_K,) most probable first
    return Stage(
        f"next token (top {TOP_K})",
        tuple(probs.shape),
        float(probs.mean()),
        float(probs.std()),
        float(probs.min()),
        float(probs.max()),
        tuple(float(probs[t]) for t in top),
        "softmax(loss.rows[-1] @ loss.table^T)",
        tuple((int(t), tokenizer.decode([int(t)])) for t in top),
    )


def format_trace(stages: list[Stage]) -> str:
    """A plain-text table: one line per stage, the tokens (if any) on the line below."""
    header = f"{'stage':<40} {'shape':<16} {'mean':>9} {'std':>9} {'min':>9} {'max':>9}  last position"
    lines = [header, "-" * len(header)]
    for stage in stages:
        last = " ".join(f"{v:.4g}" for v in stage.last)
        lines.append(
            f"{stage.name:<40} {str(stage.shape):<16} {stage.mean:>9.4g} {stage.std:>9.4g} "
            f"{stage.min:>9.4g} {stage.max:>9.4g}  {last}"
        )
        if stage.tokens:
            lines.append("    " + "  ".join(f"{token_id}:{text!r}" for token_id, text in stage.tokens))
    return "\n".join(lines)
