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

``head_scores`` follows one query head through the score modifiers, as the tiled kernel applies them to a
tile (``ops.scores.ScoreSeam``: the transform, then the masks and biases): ``S``, ``f(S)`` (a soft cap), the
terms added (``0`` or ``-inf`` for a mask, ALiBi's bias) and ``S' = f(S) + terms``, the scores the softmax
takes; the Walkthrough's steps and the studio's scores mode read them. ``overview`` pools every layer's and
head's weights into a thumbnail of at most ``OVERVIEW_CELLS`` squared cells, with a few numbers per head
(``head_summaries``), for the studio's all layers x heads grid.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from ..backend import get_xp, to_numpy
from ..model.attention_branch import ORACLE_KERNEL
from ..ops._kv_groups import repeat_kv
from ..ops.flash_attention import attention_weights as kernel_attention_weights
from ..ops.scores import ScoreSeam, score_modifiers
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


class HeadScores(NamedTuple):
    """One query head's scores for some query rows against every key, each ``(nq,Tk)`` float64."""

    raw: np.ndarray  # S = s q k^T
    capped: np.ndarray  # f(S): S itself but for a transform (softcap: c tanh(S / c))
    terms: np.ndarray  # what the modifiers add: 0 or -inf (a mask), a bias (ALiBi), summed
    modified: np.ndarray  # S' = f(S) + terms, -inf where a mask hides the key


def kv_head(config, head: int) -> int:
    """The key/value head query head ``head`` reads: ``h // (H / H_kv)`` (``ops/_kv_groups.py``)."""
    return head // (config.num_heads // config.num_kv_heads)


def head_scores(config, kernel, layer: int, head: int, queries: range) -> HeadScores:
    """Query head ``head`` of layer ``layer`` at query rows ``queries`` (their positions: the forward's queries
    are its keys, ``Tq = Tk``) from the kernel's cache: ``S = s q k^T`` from its cached ``q, k`` and scale, then
    the layer's score terms placed as the tiled kernel places them on a tile (``ScoreSeam.add`` on ``f(S)``,
    and on zeros for the terms alone)."""
    q = kernel.q[:, head : head + 1, queries.start : queries.stop]  # (1,1,nq,D)
    k = kernel.k[:, kv_head(config, head) : kv_head(config, head) + 1]  # (1,1,Tk,D): the kv head query head h reads
    raw = get_xp(q).matmul(q, k.swapaxes(-1, -2)) * q.dtype.type(kernel.scale)  # (1,1,nq,D) @ (1,1,D,Tk)
    Tk, H = raw.shape[-1], config.num_heads
    applied = score_modifiers(False, None, config.score_modifiers(layer), (1, H, len(queries), Tk))
    seam = ScoreSeam(tuple(applied), slice(None), np.full((1, 1, 1, 1), head), H)  # one head of H (ALiBi's slope)
    capped, terms = raw.copy(), get_xp(raw).zeros_like(raw)
    seam.transform(capped, with_slope=False)  # f(S)
    modified = capped.copy()
    for scores in (modified, terms):
        seam.add(scores, queries, range(Tk), 0, masked=True)  # + every term, the masks' -inf included
    return HeadScores(*(to_numpy(a)[0, 0].astype(np.float64) for a in (raw, capped, terms, modified)))


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


OVERVIEW_CELLS = 32  # a thumbnail of the overview is at most this many cells a side


def pool_edges(T: int, cells: int = OVERVIEW_CELLS) -> np.ndarray:
    """``(n+1,)`` edges of ``n = min(T, cells)`` bins over ``T`` positions: bin ``a`` holds positions
    ``floor(a T / n) .. floor((a+1) T / n) - 1``, each bin ``T / n`` positions, give or take one."""
    n = min(T, cells)
    return np.arange(n + 1) * T // n


def pooled(weights: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """``(H,T,T)`` -> ``(H,n,n)``: each cell the mean of its block, ``mean_{i in bin a, j in bin b} P_ij`` (a
    masked entry counts as its weight, 0)."""
    sums = np.add.reduceat(np.add.reduceat(weights, edges[:-1], axis=1), edges[:-1], axis=2)  # (H,n,n)
    sizes = np.diff(edges)  # (n,)
    return sums / (sizes[:, None] * sizes[None, :])


def head_summaries(weights: np.ndarray) -> dict[str, np.ndarray]:
    """Per head ``(H,)`` of the weights ``P (H,T,T)``, each a mean over the queries ``i``:

    - ``entropy``: ``-sum_j P_ij ln P_ij`` in nats (``0 ln 0 = 0``): 0 on one key, ``ln(i+1)`` spread evenly;
    - ``distance``: ``sum_j P_ij (i - j)``, how far back the query looks, in positions;
    - ``first``: ``P_i0``, the weight on the first token;
    - ``previous``: ``P_i,i-1`` over ``i >= 1``, the weight on the token before (NaN for one token).
    """
    H, T, _ = weights.shape
    logs = np.log(np.where(weights > 0, weights, 1.0))  # ln P, 0 where P = 0
    back = np.arange(T)[:, None] - np.arange(T)[None, :]  # i - j (T,T)
    return {
        "entropy": -(weights * logs).sum(-1).mean(-1),
        "distance": (weights * back).sum(-1).mean(-1),
        "first": weights[:, :, 0].mean(-1),
        "previous": weights[:, np.arange(1, T), np.arange(T - 1)].mean(-1) if T > 1 else np.full(H, np.nan),
    }


class Overview(NamedTuple):
    """Every layer's heads pooled (``pooled``) and summed up (``head_summaries``)."""

    edges: np.ndarray  # (n+1,) the bins' edges over the positions
    thumbs: list[np.ndarray]  # per layer (H,n,n)
    summaries: list[dict[str, np.ndarray]]  # per layer, each (H,)


def overview(cache, cells: int = OVERVIEW_CELLS) -> Overview:
    """The overview of a ``ModelCache`` of one row: the kernel's weights of each layer, one layer at a time."""
    thumbs, summaries, edges = [], [], None
    for block in cache.blocks:
        weights = attention_weights(block.attention.attention)[0].astype(np.float64)  # (H,T,T)
        edges = pool_edges(weights.shape[-1], cells) if edges is None else edges
        thumbs.append(pooled(weights, edges))
        summaries.append(head_summaries(weights))
    return Overview(edges, thumbs, summaries)
