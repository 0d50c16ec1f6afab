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
from ..model.layers import norm_forward
from ..model.names import FINAL_NORM
from ..ops.softcap import softcap_in_place
from ..table import format_table
from .components import stage_name
from .prompt import shown_token

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


def unembed_logits(rows, table, cap: float | None = None) -> np.ndarray:
    """The logits ``rows @ table^T`` (in the model's dtype; with the loss's soft cap ``cap``, ``c tanh(. / c)``,
    as the model computes them), as float64 NumPy: ``(n,C) @ (C,V) -> (n,V)``."""
    logits = rows @ table.T  # (n,C) @ (C,V) -> (n,V)
    return to_numpy(logits if cap is None else softcap_in_place(logits, cap)).astype(np.float64)


def unembed_log_probs(rows, table, cap: float | None = None):
    """Yield ``(start, log_probs)``: float64 log-softmax of ``rows @ table^T`` (capped by ``cap``), ``CHUNK_ROWS``
    rows at a time."""
    for start in range(0, rows.shape[0], CHUNK_ROWS):
        logits = unembed_logits(rows[start : start + CHUNK_ROWS], table, cap)  # (n,C) @ (C,V) -> (n,V)
        top = logits.max(axis=1, keepdims=True)  # (n,1)
        yield start, logits - (top + np.log(np.exp(logits - top).sum(axis=1, keepdims=True)))  # (n,V)


def top_k(log_probs, k: int) -> tuple[tuple[int, float], ...]:
    """The ``k`` most probable ``(id, probability)`` of one row ``(V,)``, most probable first (ties: lower id).

    The order of ``np.argsort(-log_probs, kind="stable")[:k]`` (the oracle in the tests), found without sorting
    the whole row: a partition finds the k-th largest value, and only the ids at or above it are sorted.
    """
    k = min(k, log_probs.size)
    kth = np.partition(log_probs, log_probs.size - k)[log_probs.size - k]  # the k-th largest value
    candidates = np.flatnonzero(log_probs >= kth)  # ascending ids: the k best and every tie of the k-th
    best = candidates[np.argsort(-log_probs[candidates], kind="stable")[:k]]
    return tuple((int(i), float(np.exp(log_probs[i]))) for i in best)


def position_predictions(prompt, k: int = 3) -> list[Prediction]:
    """One ``Prediction`` per position of ``prompt``, read from its loss cache (module docstring)."""
    loss_cache = prompt.cache.loss
    found = []
    for start, log_probs in unembed_log_probs(loss_cache.rows, loss_cache.table, loss_cache.cap):
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


def residual_streams(cache, config) -> list[tuple[str, str, object]]:
    """``(name, source, rows (N,C))`` of every residual stream, bottom up, read from the norms' inputs; the first
    named as the trace names it (``components.stage_name``: no "embedding sum" where no position is added)."""
    blocks = cache.blocks
    streams = [(stage_name("embedding sum", config), "blocks[0].attention.norm.x", blocks[0].attention.norm.x)]
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
    for name, source, x in residual_streams(cache, model.config):
        h, _ = norm_forward(x, p, FINAL_NORM, model.config)  # (N,C) -> (N,C)
        per_position = []
        for _, log_probs in unembed_log_probs(h, cache.loss.table, cache.loss.cap):
            per_position += [top_k(row, k) for row in log_probs]
        found.append(LensRow(name, source, tuple(per_position)))
    return found


def _cell(tokenizer, token_id: int, width: int) -> str:
    text = shown_token(tokenizer, token_id)
    return text if len(text) <= width else text[: width - 1] + "…"


def format_predictions(predictions: list[Prediction], tokenizer) -> str:
    """The per-position table: token, target, p(target), loss, top-k predictions."""
    rows = [
        (str(r.position), _cell(tokenizer, r.token, 16),
         "(none: the end)" if r.target is None else _cell(tokenizer, r.target, 20),
         "" if r.target_prob is None else f"{r.target_prob:.4f}", "" if r.loss is None else f"{r.loss:.3f}",
         ", ".join(f"{_cell(tokenizer, i, 14)} {q:.3f}" for i, q in r.top))
        for r in predictions
    ]  # fmt: skip
    header = ("pos", "token", "target (next token)", "p(target)", "loss", "top predictions")
    lines = [format_table(header, rows, align=("right", "left", "left", "right", "right", "left"))]
    losses = [r.loss for r in predictions if r.loss is not None]
    if losses:
        lines.append(f"mean loss over the {len(losses)} positions with a target: {np.mean(losses):.6f}")
    return "\n".join(lines)


def format_lens(lens: list[LensRow], prompt, tokenizer, width: int = 12) -> str:
    """Top-1 of every stream at every position (rows = depth, columns = positions), then the last position's top-k."""
    header = ("residual stream", *(_cell(tokenizer, i, width) for i in prompt.ids))
    grid = [(row.name, *(_cell(tokenizer, top[0][0], width) for top in row.top)) for row in lens]
    last = [(row.name, ", ".join(f"{_cell(tokenizer, i, 14)} {q:.3f}" for i, q in row.top[-1])) for row in lens]
    return "\n".join(
        [
            "top-1 prediction of each residual stream (columns: the input token at each position)",
            format_table(header, grid, align="left"),
            f"\nlast position ({_cell(tokenizer, prompt.ids[-1], 20)}): top {len(lens[0].top[-1])} of each stream",
            format_table(("residual stream", "top predictions"), last, align="left"),
        ]
    )
