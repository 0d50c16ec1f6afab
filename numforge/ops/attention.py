"""Plain masked softmax attention on ``(B, H, T, D)``: the oracle for the tiled version.

``q`` has ``H`` heads, ``k`` and ``v`` have ``H_kv`` heads, with ``H`` a
multiple of ``H_kv``: grouped-query attention, multi-query when ``H_kv = 1``,
multi-head when ``H_kv = H``. Query head ``h`` attends with key/value head
``h // G``, ``G = H / H_kv`` (``ops/_kv_groups.py``); this oracle repeats each
kv head ``G`` times (Hugging Face's ``repeat_kv``) and then runs multi-head
attention, the plainest form. Write ``K, V`` below for the repeated ones.

Forward, for every batch ``b`` and head ``h`` (scale ``s = 1/sqrt(D)`` by default)::

    S = s Q K^T                                   (Tq, Tk)  scores
    S[i, j] = f(S[i, j]) + term(h, i, j)          each score modifier's (ops/scores.py): -inf where
                                                  query i may not see key j, or a bias (ALiBi); f the
                                                  identity, or a transform (softcap: c tanh(S / c))
    P = softmax(S)  row by row: P = exp(S - max) / sum(exp(S - max))
    O = P V                                       (Tq, Dv)

Query ``i`` may see key ``j`` when the boolean ``mask`` (True = may attend,
broadcast to ``(B, H, Tq, Tk)``) says so and, with ``causal=True``, when
``j <= i + Tk - Tq``. The causal mask is aligned bottom-right: the last query
sees every key. With ``Tq == Tk`` that is the usual lower triangle; with
``Tq < Tk`` (decoding with a KV cache: ``Tq`` new tokens, ``Tk`` = cached +
new) query ``i`` is the token at position ``i + Tk - Tq``. Example, Tq = 2, Tk = 4::

    query 0 (position 2) sees keys 0 1 2
    query 1 (position 3) sees keys 0 1 2 3

Attention sinks (gpt-oss): with ``sinks`` (one learned logit ``s_h`` per query head, ``(H,)``) every row's
softmax has one more column, a key every query sees whose score is ``s_h`` (no ``q . k``) and whose value is
zero: it takes probability mass and adds nothing to the output, so ``P``'s rows sum to less than 1::

    m_i = max(s_h, max_j S_ij)
    P_ij = exp(S_ij - m_i) / (exp(s_h - m_i) + sum_j exp(S_ij - m_i))        O = P V
    P_sink_i = exp(s_h - m_i) / (the same sum)                              sum_j P_ij = 1 - P_sink_i

Example: one key of score 0 and s_h = 0: P = 1/2, P_sink = 1/2, O = V / 2.

A row with nothing to see is all ``-inf`` and would give
``exp(-inf - -inf) = NaN``; its max is taken as 0 and its sum as 1, so its
weights, its output and its gradients are exactly zero (with a sink it sees the sink alone:
``P_sink = 1``, ``O = 0``). A bias without parameters
adds a constant to ``S``: the backward below needs nothing for it.

With ``dropout_p = p > 0`` the weights are dropped after the softmax
(``ops/_attention_dropout.py`` draws the mask from ``dropout_seed``, the same
mask the tiled kernel draws tile by tile)::

    O = (P * Z) V,     Z = keep / (1 - p)

Backward, given ``dO`` (without dropout ``Z = 1``)::

    dV = (P * Z)^T dO
    dP = (dO V^T) * Z
    dS = P * (dP - rowsum(P * dP))       the softmax Jacobian, one row at a time
    dS = f'(S) dS                        through a transform (softcap: f'(S) = 1 - (f(S) / c)^2, kept)
    dQ = s dS K        dK = s dS^T Q

and a kv head used by ``G`` query heads gets the sum of their gradients: for kv
head ``j``, ``dK_j = sum over h = jG .. jG+G-1 of dK_h`` (likewise ``dV_j``).

With sinks, take the sink as column ``Tk`` of the extended row ``[S_i, s_h]``, with value ``0`` and so
``dP_sink = dO_i . 0 = 0``. The softmax Jacobian on the extended row gives::

    rowsum over the extended row of P * dP = rowsum(P * dP) + P_sink * 0 = rowsum(P * dP)
    dS = P * (dP - rowsum(P * dP))                 the real columns: unchanged
    dS_sink_i = P_sink_i (0 - rowsum(P * dP)_i)    the sink column

and ``s_h`` is the sink column of every row ``i`` of every batch row ``b`` of head ``h``, so its gradient
sums them::

    ds_h = - sum over b, i of P_sink[b,h,i] rowsum(P * dP)[b,h,i]

(a row that sees nothing but the sink has ``P = 0``: no gradient to ``s_h``). With dropout ``dP = (dO V^T) Z``
as above; the sink's weight, dropped or not, multiplies a zero value: dropout does not change it.

The cache keeps ``q, k, v`` and ``P`` of shape ``(B, H, Tq, Tk)`` (with sinks ``P_sink (B, H, Tq, 1)``; with
dropout the boolean mask, as large in bytes as a quarter of ``P`` in float32):
the memory of this op grows with ``T^2``, which is what ``flash_attention`` avoids.
With ``G > 1`` the forward and the backward each also hold the repeated
``k, v`` of shape ``(B, H, Tk, .)`` while they run (the tiled kernel does not).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from ..backend import get_xp
from ..checks import check_bool, check_float, check_same_dtype, is_real
from ._attention_dropout import AttentionDropout, check_dropout, dropped
from ._kv_groups import repeat_kv, sum_over_group
from .scores import score_modifiers, textbook_scores


class AttentionCache(NamedTuple):
    """Saved for the backward: the inputs (``k, v`` of ``H_kv`` heads, as given), the probabilities P
    (B,H,Tq,Tk) before dropout, the scale, and with dropout its mask (bool, B,H,Tq,Tk) and ``1 / (1 - p)``."""

    q: object
    k: object
    v: object
    probs: object
    scale: float
    keep: object = None  # dropout: True where a weight is kept; None without dropout
    drop_scale: object = None  # dropout: 1 / (1 - p) in the inputs' dtype
    sinks: object = None  # the sink logits s (H,); None without sinks
    sink_probs: object = None  # sinks: P_sink (B,H,Tq,1), the mass each row gives its sink
    slope: object = None  # a transform of the scores (softcap): f'(S) (B,H,Tq,Tk); None without one


def check_qkv(q, k, v) -> tuple[int, int, int, int, int, int, int]:
    """Validate ``q (B,H,Tq,D)``, ``k (B,H_kv,Tk,D)``, ``v (B,H_kv,Tk,Dv)`` with ``H`` a multiple of ``H_kv``;
    return ``B, H, H_kv, Tq, Tk, D, Dv``."""
    for name, a in (("q", q), ("k", k), ("v", v)):
        check_float(a, name, ndim=4)
    get_xp(q, k, v)  # a TypeError if NumPy and CuPy arrays are mixed
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    shapes = f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
    if not q.shape[0] == k.shape[0] == v.shape[0]:
        raise ValueError(f"q, k, v must share the batch B: got shapes {shapes}")
    if k.shape[1] != v.shape[1]:
        raise ValueError(f"k and v must have the same number of heads H_kv: got shapes {shapes}")
    if k.shape[1] < 1 or q.shape[1] % k.shape[1]:
        raise ValueError(
            f"the query heads H = {q.shape[1]} must be a multiple of the key/value heads H_kv = {k.shape[1]} "
            f"(q (B,H,Tq,D), k and v (B,H_kv,Tk,.)): got shapes {shapes}"
        )
    if q.shape[3] != k.shape[3]:
        raise ValueError(f"q and k must have the same head width D, got {q.shape[3]} and {k.shape[3]}")
    if k.shape[2] != v.shape[2]:
        raise ValueError(f"k and v must hold the same number of keys, got {k.shape[2]} and {v.shape[2]}")
    B, H, Tq, D = q.shape
    H_kv, Tk, Dv = k.shape[1], v.shape[2], v.shape[3]
    if min(Tq, Tk, D, Dv) < 1:
        raise ValueError(f"attention needs Tq, Tk, D, Dv >= 1, got {Tq}, {Tk}, {D}, {Dv}")
    return B, H, H_kv, Tq, Tk, D, Dv


def check_sinks(sinks, q):
    """``sinks``: None, or one float logit per query head of ``q (B,H,Tq,D)``, ``(H,)``, of ``q``'s dtype and
    backend; returned as given."""
    if sinks is None:
        return None
    check_float(sinks, "sinks", ndim=1)
    get_xp(q, sinks)  # a TypeError if the sinks live on the other backend
    check_same_dtype(sinks, "sinks", q, "q")
    if sinks.shape[0] != q.shape[1]:
        raise ValueError(f"sinks must hold one logit per query head, shape ({q.shape[1]},), got {tuple(sinks.shape)}")
    return sinks


def resolve_scale(scale: object, head_dim: int) -> float:
    """``1/sqrt(D)`` when ``scale`` is None, else ``scale`` as a finite Python float."""
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if not is_real(scale) or not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number or None, got {scale!r}")
    return float(scale)


def check_causal(causal: object) -> bool:
    return check_bool(causal, "causal")


def check_grad_out(dout, like_shape: tuple, like_dtype) -> None:
    """The upstream gradient must match the output's shape and dtype."""
    check_float(dout, "dout", ndim=4)
    if tuple(dout.shape) != tuple(like_shape) or dout.dtype != like_dtype:
        raise ValueError(
            f"dout must have the output's shape {tuple(like_shape)} and dtype {like_dtype}, "
            f"got {tuple(dout.shape)} {dout.dtype}"
        )


def attention_forward(
    q,
    k,
    v,
    causal: bool = True,
    mask=None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    dropout_seed: int = 0,
    modifiers: tuple = (),
    sinks=None,
):
    """``O = dropout(softmax(s Q K^T + terms)) V`` on ``q (B,H,Tq,D)``, ``k (B,H_kv,Tk,D)``, ``v (B,H_kv,Tk,Dv)``.

    ``H`` a multiple of ``H_kv``: query head ``h`` reads kv head ``h // (H / H_kv)``.
    The score modifiers (``ops/scores.py``), each its textbook term on the whole square: ``causal`` hides keys
    ``j > i + Tk - Tq``; ``mask``, boolean, True = may attend, broadcastable to ``(B,H,Tq,Tk)``, hides the
    others; ``modifiers`` adds more by name (``("alibi",)``) or ``(name, argument)``.
    ``dropout_p``: drop each weight with this probability, the mask a function of ``dropout_seed``
    (0 <= seed < 2**64, or one such seed per batch row) and the weight's (batch row, query head, query, key).
    ``sinks``: one learned logit per query head ``(H,)`` in every row's softmax denominator (module docstring,
    Attention sinks); the backward then returns its gradient too.
    Returns ``(o (B,H,Tq,Dv), cache)``.
    """
    B, H, H_kv, Tq, Tk, D, Dv = check_qkv(q, k, v)
    p, seed, row_seeds = check_dropout(dropout_p, dropout_seed, B)
    xp = get_xp(q, k, v, mask)  # a TypeError if the mask lives on the other backend
    scale = resolve_scale(scale, D)
    applied = score_modifiers(check_causal(causal), mask, modifiers, (B, H, Tq, Tk))
    keys, values = repeat_kv(k, H // H_kv), repeat_kv(v, H // H_kv)  # (B,H_kv,Tk,.) -> (B,H,Tk,.): the plain form

    scores = xp.matmul(q, keys.swapaxes(-1, -2))  # (B,H,Tq,D) @ (B,H,D,Tk) -> (B,H,Tq,Tk)
    scores *= scale
    _, slope = textbook_scores(scores, applied)  # S' = f(S) + bias, or -inf where hidden: (B,H,Tq,Tk), in place
    probs, sink_probs = _softmax_rows(scores, check_sinks(sinks, q))  # (B,H,Tq,Tk), (B,H,Tq,1) or None
    with_sinks = {"sinks": sinks, "sink_probs": sink_probs}
    if p == 0:
        out = xp.matmul(probs, values)  # (B,H,Tq,Tk) @ (B,H,Tk,Dv) -> (B,H,Tq,Dv)
        return out, AttentionCache(q, k, v, probs, scale, **with_sinks, slope=slope)
    dropout = AttentionDropout(p, seed, range(B), range(H), Tk, row_seeds)
    keep, drop_scale = dropout.keep(xp, range(Tq), range(Tk)), dropout.scale(probs.dtype)  # (B,H,Tq,Tk)
    out = xp.matmul(dropped(probs, keep, drop_scale), values)  # (B,H,Tq,Tk) @ (B,H,Tk,Dv) -> (B,H,Tq,Dv)
    return out, AttentionCache(q, k, v, probs, scale, keep, drop_scale, **with_sinks, slope=slope)


def _softmax_rows(scores, sinks):
    """``P = softmax(S')`` row by row, in place of ``scores (B,H,Tq,Tk)``; with ``sinks (H,)`` the softmax of
    ``[S'_i, s_h]`` without its last column, and that column ``P_sink (B,H,Tq,1)`` (module docstring).
    Returns ``(P, P_sink or None)``."""
    xp = get_xp(scores)
    row_max = scores.max(axis=-1, keepdims=True)  # (B,H,Tq,Tk) -> (B,H,Tq,1)
    if sinks is not None:
        sink = sinks.reshape(1, -1, 1, 1)  # (H,) -> (1,H,1,1)
        row_max = xp.maximum(row_max, sink)  # m = max(s_h, max_j S'_ij): finite, the sink is seen by every row
    row_max[xp.isneginf(row_max)] = 0.0  # an empty row: exp(-inf - 0) = 0, never NaN
    scores -= row_max
    probs = xp.exp(scores, out=scores)  # (B,H,Tq,Tk), unnormalized, in place
    row_sum = probs.sum(axis=-1, keepdims=True)  # (B,H,Tq,Tk) -> (B,H,Tq,1)
    sink_probs = None
    if sinks is not None:
        sink_probs = xp.exp(sink - row_max)  # exp(s_h - m), (B,H,Tq,1)
        row_sum += sink_probs  # the denominator's sink term
        sink_probs /= row_sum
    row_sum[row_sum == 0] = 1.0  # an empty row (no sink) stays all zeros
    probs /= row_sum
    return probs, sink_probs


def attention_backward(dout, cache: AttentionCache):
    """``(dq, dk, dv)`` from ``dout (B,H,Tq,Dv)``, ``dk, dv`` of ``k, v``'s shape ``(B,H_kv,Tk,.)``, and
    ``dsinks (H,)`` after them when the forward had sinks; formulas in the module docstring."""
    q, k, v, probs, scale = cache.q, cache.k, cache.v, cache.probs, cache.scale
    B, H, Tq, Tk = probs.shape
    check_grad_out(dout, (B, H, Tq, v.shape[3]), q.dtype)
    xp = get_xp(dout, probs)
    group = H // k.shape[1]  # G query heads per kv head
    keys, values = repeat_kv(k, group), repeat_kv(v, group)  # (B,H_kv,Tk,.) -> (B,H,Tk,.), as in the forward

    # forward: out = P V, or with dropout out = (P Z) V
    weights = probs if cache.keep is None else dropped(probs, cache.keep, cache.drop_scale)  # (B,H,Tq,Tk)
    dvalues = xp.matmul(weights.swapaxes(-1, -2), dout)  # (B,H,Tk,Tq) @ (B,H,Tq,Dv) -> (B,H,Tk,Dv)
    del weights  # (B,H,Tq,Tk): not held beside dprobs
    dprobs = xp.matmul(dout, values.swapaxes(-1, -2))  # (B,H,Tq,Dv) @ (B,H,Dv,Tk) -> (B,H,Tq,Tk)
    if cache.keep is not None:
        dprobs = dropped(dprobs, cache.keep, cache.drop_scale)  # forward: weights = P Z, so dP = dweights Z
    # forward: P = softmax(S), so dS = P * (dP - rowsum(P * dP)); hidden keys have P = 0, so dS = 0
    row_dot = (probs * dprobs).sum(axis=-1, keepdims=True)  # (B,H,Tq,Tk) -> (B,H,Tq,1)
    if cache.sinks is not None:  # forward: the sink column s_h of every row, so ds_h = -sum_{b,i} P_sink rowsum
        dsinks = -(cache.sink_probs * row_dot).sum(axis=(0, 2, 3))  # (B,H,Tq,1) -> (H,)
    dprobs -= row_dot
    dscores = xp.multiply(dprobs, probs, out=dprobs)  # (B,H,Tq,Tk), in place
    if cache.slope is not None:  # forward: S' = f(S) (softcap), so dS = f'(S) dS'
        dscores *= cache.slope
    # forward: S = s Q K^T
    dq = xp.matmul(dscores, keys)  # (B,H,Tq,Tk) @ (B,H,Tk,D) -> (B,H,Tq,D)
    dq *= scale
    dkeys = xp.matmul(dscores.swapaxes(-1, -2), q)  # (B,H,Tk,Tq) @ (B,H,Tq,D) -> (B,H,Tk,D)
    dkeys *= scale
    # forward: keys, values = repeat_kv(k), repeat_kv(v), (B,H_kv,Tk,.) -> (B,H,Tk,.): the gradient of a kv head
    # sums over the G query heads that used it, (B,H,Tk,.) -> (B,H_kv,Tk,.)
    grads = dq, sum_over_group(dkeys, group), sum_over_group(dvalues, group)
    return grads if cache.sinks is None else (*grads, dsinks)
