"""What the model predicts at every position, and what each layer would predict: the logit lens.

Both push rows of the residual stream through the unembedding::

    logits = rows @ table^T                 (N,C) @ (C,V) -> (N,V), in the model's dtype
    log p  = logits - logsumexp(logits)     per row, in float64

``position_predictions`` does it for the final norm's output rows, which the
loss cache holds (``cache.loss.rows``, with the table ``cache.loss.table``):
those logits are the model's own. Only the small "materialized" loss route
keeps them (as a float32 softmax numerator, whose log underflows below 1e-38),
so they are formed again here from the cached rows, ``CHUNK_ROWS`` rows at a
time. Per position: the target's probability, its loss ``-log p(target)``
(their mean over the positions with a target is the forward's loss), and the
top-k tokens.

``logit_lens`` asks each residual stream the same question (nostalgebraist's
"logit lens"): the stream entering each block and after each branch, read
from the norms' cached inputs, is normalized by the model's final norm (the
op itself, ``layer_norm_forward``, with ``final_norm.*``) and unembedded. At
the last stream this is exactly the model's prediction; earlier ones show the
prediction forming across depth.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..backend import to_numpy
from ..ops.layernorm import layer_norm_forward
from .prompt import token_label

CHUNK_ROWS = 64  # rows unembedded at once: (64, V) float64 is 26 MB for GPT-2's V = 50257


class Prediction(NamedTuple):
    """One position: its token, its target (None after the last), and the top-k next tokens."""

    position: int
    token: int
    target: int | None
    target_prob: float | None
    loss: float | None  # -log p(target)
    top: tuple[tuple[int, float], ...]  # (id, probability), most probable first


class LensRow(NamedTuple):
    """One residual stream read through the final norm and the unembedding: top-k per position."""

    name: str
    source: str
    top: tuple[tuple[tuple[int, float], ...], ...]  # (T,) positions, each (id, probability) most probable first


def unembed_log_probs(rows, table):
    """Yield ``(start, log_probs)``: float64 log-softmax of ``rows @ table^T``, ``CHUNK_ROWS`` rows at a time."""
    for start in range(0, rows.shape[0], CHUNK_ROWS):
        logits = to_numpy(rows[start : start + CHUNK_ROWS] @ table.T).astype(np.float64)  # (n,C) @ (C,V) -> (n,V)
        top = logits.max(axis=1, keepdims=True)  # (n,1)
        yield start, logits - (top + np.log(np.exp(logits - top).sum(axis=1, keepdims=True)))  # (n,V)


def top_k(log_probs, k: int) -> tuple[tuple[int, float], ...]:
    """The ``k`` most probable ``(id, probability)`` of one row ``(V,)``, most probable first (ties: lower id)."""
    best = np.argsort(-log_probs, kind="stable")[:k]
    return tuple((int(i), float(np.exp(log_probs[i]))) for i in best)


def position_predictions(prompt, k: int = 3) -> list[Prediction]:
    """One ``Prediction`` per position of ``prompt``, read from its loss cache (module docstring)."""
    loss_cache = prompt.cache.loss
    found = []
    for start, log_probs in unembed_log_probs(loss_cache.rows, loss_cache.table):
        for offset, row in enumerate(log_probs):
            t = start + offset
            target = prompt.targets[t] if prompt.targets[t] >= 0 else None
            found.append(
                Prediction(
                    t,
                    prompt.ids[t],
                    target,
                    None if target is None else float(np.exp(row[target])),
                    None if target is None else float(-row[target]),
                    top_k(row, k),
                )
            )
    return found


def residual_streams(cache) -> list[tuple[str, str, object]]:
    """``(name, source, rows (N,C))`` of every residual stream, bottom up, read from the norms' inputs."""
    blocks = cache.blocks
    streams = [("embedding sum", "blocks[0].attention.norm.x", blocks[0].attention.norm.x)]
    for i, block in enumerate(blocks):
        streams.append((f"layer {i} after attention", f"blocks[{i}].mlp.norm.x", block.mlp.norm.x))
        if i + 1 < len(blocks):
            streams.append(
                (f"layer {i} after MLP", f"blocks[{i + 1}].attention.norm.x", blocks[i + 1].attention.norm.x)
            )
        else:
            streams.append((f"layer {i} after MLP", "final_norm.x", cache.final_norm.x))
    C = cache.loss.table.shape[1]
    return [(name, source, x.reshape(-1, C)) for name, source, x in streams]  # (B,T,C) or (N,C) -> (N,C)


def logit_lens(model, prompt, k: int = 3) -> list[LensRow]:
    """Every residual stream through the final norm and the unembedding: the top ``k`` per position."""
    p, cache = model.params, prompt.cache
    found = []
    for name, source, x in residual_streams(cache):
        h, _ = layer_norm_forward(
            x, p["final_norm.weight"], p.get("final_norm.bias"), eps=model.config.ln_eps
        )  # (N,C) -> (N,C)
        per_position = []
        for _, log_probs in unembed_log_probs(h, cache.loss.table):
            per_position += [top_k(row, k) for row in log_probs]
        found.append(LensRow(name, source, tuple(per_position)))
    return found


def _cell(tokenizer, token_id: int, width: int) -> str:
    text = repr(token_label(tokenizer, token_id))
    return text if len(text) <= width else text[: width - 1] + "…"


def format_predictions(predictions: list[Prediction], tokenizer) -> str:
    """The per-position table: token, target, p(target), loss, top-k predictions."""
    header = f"{'pos':>4}  {'token':<16} {'target (next token)':<20} {'p(target)':>10} {'loss':>8}  top predictions"
    lines = [header, "-" * len(header)]
    for row in predictions:
        target = "(none: the end)" if row.target is None else _cell(tokenizer, row.target, 20)
        p = "" if row.target_prob is None else f"{row.target_prob:.4f}"
        loss = "" if row.loss is None else f"{row.loss:.3f}"
        top = ", ".join(f"{_cell(tokenizer, i, 14)} {q:.3f}" for i, q in row.top)
        lines.append(f"{row.position:>4}  {_cell(tokenizer, row.token, 16):<16} {target:<20} {p:>10} {loss:>8}  {top}")
    losses = [row.loss for row in predictions if row.loss is not None]
    if losses:
        lines.append(f"mean loss over the {len(losses)} positions with a target: {np.mean(losses):.6f}")
    return "\n".join(lines)


def format_lens(lens: list[LensRow], prompt, tokenizer, width: int = 12) -> str:
    """Top-1 of every stream at every position (rows = depth, columns = positions), then the last position's top-k."""
    T = len(prompt.ids)
    header = f"{'residual stream':<28}" + "".join(f"{_cell(tokenizer, i, width):<{width + 1}}" for i in prompt.ids)
    lines = ["top-1 prediction of each residual stream (columns: the input token at each position)", header]
    lines += [
        f"{row.name:<28}" + "".join(f"{_cell(tokenizer, row.top[t][0][0], width):<{width + 1}}" for t in range(T))
        for row in lens
    ]
    lines.append(f"\nlast position ({_cell(tokenizer, prompt.ids[-1], 20)}): top {len(lens[0].top[-1])} of each stream")
    for row in lens:
        top = ", ".join(f"{_cell(tokenizer, i, 14)} {q:.3f}" for i, q in row.top[-1])
        lines.append(f"{row.name:<28}{top}")
    return "\n".join(lines)
