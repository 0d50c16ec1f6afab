"""Attention weights and scores, read from the caches of the model's own forward pass.

The weights come from ``ops.flash_attention.attention_weights``: the plain path's cache keeps
``P`` itself, the tiled path's is rebuilt from its saved log-sum-exp ``L`` as
``P = exp(S' - L)``, ``S'`` the scores with the same score modifiers the kernel
added (the causal mask, ALiBi, ...: ``ops/scores.py``), the very line its
backward uses. The study tools never re-derive them, so they cannot disagree
with the kernel (``tests/test_study_attention.py``: rows sum to 1 and equal the
plain path's weights, 1e-6 in float32, 1e-12 in float64).

``attention_scores`` gives ``S = s Q K^T`` before the modifiers and the softmax,
from the same cached ``q, k`` and scale (no cache keeps ``S``: the plain path
overwrites it with ``P``).
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np

from ..backend import get_xp, to_numpy
from ..model.attention_branch import ORACLE_KERNEL
from ..ops._kv_groups import repeat_kv
from ..ops.flash_attention import attention_weights as kernel_attention_weights
from ..table import format_table


def _cached_qk(attention_cache):
    """The cache's ``q (B,H,Tq,D)`` and its keys for every query head ``(B,H,Tk,D)``: a cache of grouped-query
    attention holds ``H_kv`` kv heads, each serving ``H / H_kv`` query heads (``ops/_kv_groups.py``)."""
    q, k = attention_cache.q, attention_cache.k
    return q, repeat_kv(k, q.shape[1] // k.shape[1])


def attention_scores(attention_cache) -> np.ndarray:
    """``S = s Q K^T`` ``(B,H,Tq,Tk)``, before the mask, from a plain or tiled attention cache (NumPy)."""
    q, k = _cached_qk(attention_cache)
    return to_numpy(get_xp(q).matmul(q, k.swapaxes(-1, -2)) * attention_cache.scale)  # (B,H,Tq,D) @ (B,H,D,Tk)


def attention_weights(attention_cache) -> np.ndarray:
    """The softmax weights ``P`` ``(B,H,Tq,Tk)`` (NumPy), 0 where masked, as the kernel's cache holds them
    (``ops.flash_attention.attention_weights``)."""
    return to_numpy(kernel_attention_weights(attention_cache))


def model_attention_weights(cache) -> list[np.ndarray]:
    """Per layer, the weights ``(B,H,T,T)`` of a ``ModelCache``."""
    return [attention_weights(block.attention.attention) for block in cache.blocks]


def plain_twin(model):
    """A model that shares ``model``'s parameter arrays but runs the plain attention path (the oracle)."""
    twin = copy.copy(model)  # a shallow copy: the same params dict and arrays
    twin.config = replace(model.config, attention=ORACLE_KERNEL)
    return twin


def max_difference(weights: list[np.ndarray], oracle: list[np.ndarray]) -> float:
    """``max |P - P_oracle|`` over every layer, head and entry."""
    return max(float(np.abs(a.astype(np.float64) - b).max()) for a, b in zip(weights, oracle))


def format_matrix(matrix: np.ndarray, labels: list[str], masked: np.ndarray | None = None) -> str:
    """One ``(T,T)`` matrix, rows = queries, columns = keys, labelled with the tokens as ``shown_token``
    writes them (``prompt.shown``). With ``masked`` ``(T,T)`` (the weights): masked entries blank and each
    row's sum at the end; without (the scores): every entry."""
    hidden = np.zeros(matrix.shape, dtype=bool) if masked is None else masked
    rows = []
    for i, label in enumerate(labels):
        cells = tuple("" if hidden[i, j] else f"{matrix[i, j]:.3f}" for j in range(matrix.shape[1]))
        total = () if masked is None else (f"{float(matrix[i][~hidden[i]].sum()):.4f}",)
        rows.append((label[:16], *cells, *total))
    header = ("query \\ key", *(label[:8] for label in labels), *(() if masked is None else ("row sum",)))
    return format_table(header, rows, align=("left",) + ("right",) * (len(header) - 1))
