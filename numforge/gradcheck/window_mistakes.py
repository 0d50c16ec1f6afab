"""The windowed tiled backward's known mistakes, each computed on the whole square from the case's cache.

A learner's ``flash_attention_backward`` on a sliding window (``ops/scores.py``'s ``window``: query ``i`` sees
keys ``i - W < j <= i``) can go wrong in ways the scale and the cosine do not name
(``demos/derivations/sliding_window.md``). Each is one wrong set of probabilities ``P~`` put through the
right backward, ``dS = P~ (dP - D)`` with ``D = rowsum(dO O)``::

    dV = P~^T dO,   dQ = s dS K,   dK = s dS^T Q      (summed over each kv head's group)

- ``unmasked``: each visited tile rebuilt as ``exp(S + bias - L)`` with no mask term (the tiles still those the
  window leaves);
- ``crossed_skipped``: the tiles a mask crosses (the window's left edge, the diagonal) skipped, as if hidden;
- ``edge_skipped``: the key tiles that start before the first key any query of the tile sees skipped;
- ``window_dropped``: the window left out of the seam: ``P`` and the tiles walked are those of the other masks.

``L`` is the forward's, with ``-inf`` (a row that sees nothing) read as 0, as the kernel's backward reads it.
Each function returns ``(dq, dk, dv)`` of the mistake, or None where the case cannot show it (no window; dropout
or a transform, which these formulas leave out).
"""

from __future__ import annotations

import numpy as np

from ..backend import to_numpy
from ..ops._kv_groups import repeat_kv
from ..ops._tiles import tiles
from ..ops.flash_attention import _query_tiles

WINDOW = "window"


def _shows(cache) -> bool:
    """Whether the case's cache can show a window mistake: a window, no dropout, no transform of the scores."""
    names = [a.name for a in cache.seam.applied]
    return WINDOW in names and cache.dropout is None and not cache.seam.transformed


def _visited(cache, seam, keep) -> np.ndarray:
    """(Tq, Tk) bool: the entries of the tiles ``_query_tiles`` walks under ``seam`` for which
    ``keep(k_start, lo, masked)`` holds."""
    Tq, Tk = cache.q.shape[2], cache.k.shape[2]
    region = np.zeros((Tq, Tk), dtype=bool)
    for k_start, k_stop in tiles(Tk, cache.block_k):
        for q_start, q_stop, lo, hi, masked in _query_tiles(k_start, k_stop, Tq, Tk, seam, cache.block_q):
            region[q_start:q_stop, lo:hi] = keep(k_start, lo, masked)
    return region


def _probs(cache, seam, masked: bool, region: np.ndarray) -> np.ndarray:
    """``exp(S' - L)`` (B,H,Tq,Tk) on ``region``, 0 elsewhere; ``S' = s Q K^T`` + ``seam``'s biases, and its masks
    when ``masked``."""
    q = to_numpy(cache.q)
    k = to_numpy(repeat_kv(cache.k, q.shape[1] // cache.k.shape[1]))  # (B,H_kv,Tk,D) -> (B,H,Tk,D)
    scores = q @ k.swapaxes(-1, -2) * cache.scale  # (B,H,Tq,D) @ (B,H,D,Tk) -> (B,H,Tq,Tk)
    Tq, Tk = scores.shape[-2:]
    seam.add(scores, range(Tq), range(Tk), Tk - Tq, masked=masked)
    lse = to_numpy(cache.lse)
    lse = np.where(np.isneginf(lse), 0.0, lse)  # (B,H,Tq,1): the backward's L of a row that sees nothing
    with np.errstate(over="ignore"):  # an entry outside the region may overflow: it is not used
        return np.where(region, np.exp(scores - lse), 0.0)


def _gradients(dout, cache, probs: np.ndarray):
    """``(dq, dk, dv)`` of ``probs`` through the right backward (module docstring)."""
    q, out, dout = to_numpy(cache.q), to_numpy(cache.out), to_numpy(dout)
    B, H, Tq, D = q.shape
    group = H // cache.k.shape[1]
    k, v = (to_numpy(repeat_kv(a, group)) for a in (cache.k, cache.v))  # (B,H,Tk,.)
    delta = (dout * out).sum(axis=-1, keepdims=True)  # D = rowsum(dO O): (B,H,Tq,1)
    dscores = probs * (dout @ v.swapaxes(-1, -2) - delta)  # dS = P (dP - D): (B,H,Tq,Tk)
    dq = cache.scale * dscores @ k  # (B,H,Tq,Tk) @ (B,H,Tk,D)
    by_group = lambda a: a.reshape(B, H // group, group, *a.shape[2:]).sum(axis=2)  # noqa: E731 (B,H,..) -> (B,H_kv,..)
    dk = by_group(cache.scale * dscores.swapaxes(-1, -2) @ q)  # (B,H,Tk,Tq) @ (B,H,Tq,D)
    dv = by_group(probs.swapaxes(-1, -2) @ dout)  # (B,H,Tk,Tq) @ (B,H,Tq,Dv)
    return dq, dk, dv


def unmasked(dout, cache):
    """The visited tiles rebuilt without the mask's terms."""
    if not _shows(cache):
        return None
    region = _visited(cache, cache.seam, lambda k_start, lo, masked: True)
    return _gradients(dout, cache, _probs(cache, cache.seam, False, region))


def crossed_skipped(dout, cache):
    """Only the tiles no mask crosses visited."""
    if not _shows(cache):
        return None
    region = _visited(cache, cache.seam, lambda k_start, lo, masked: not masked)
    return _gradients(dout, cache, _probs(cache, cache.seam, True, region))


def edge_skipped(dout, cache):
    """The key tiles that start before the first key the query tile sees (``lo > k_start``) skipped."""
    if not _shows(cache):
        return None
    region = _visited(cache, cache.seam, lambda k_start, lo, masked: lo == k_start)
    if region.sum() == _visited(cache, cache.seam, lambda k_start, lo, masked: True).sum():
        return None  # no tile of this case starts before its window
    return _gradients(dout, cache, _probs(cache, cache.seam, True, region))


def window_dropped(dout, cache):
    """The window left out of the seam: the other masks' tiles and probabilities."""
    if not _shows(cache):
        return None
    seam = cache.seam._replace(applied=tuple(a for a in cache.seam.applied if a.name != WINDOW))
    region = _visited(cache, seam, lambda k_start, lo, masked: True)
    return _gradients(dout, cache, _probs(cache, seam, True, region))
