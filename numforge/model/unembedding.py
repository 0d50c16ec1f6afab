"""The loss head: ``loss = cross_entropy(h @ table^T, targets)``, by one of three routes, or the loss alone.

``table (V,C)`` is the token embedding (tied) or ``lm_head.weight``. The
three routes give the same loss and gradients; they differ in what they hold:

- ``"fused"`` (training): the loss and both gradients in one pass over row
  chunks (three matrix products, no ``(N,V)`` array); the backward only
  scales them by ``dloss``.
- ``"materialized"`` (the study tools' cache, small): the ``(N,V)`` logits,
  then the plain cross-entropy.
- ``"chunked"`` (the study tools' cache, large): logits recomputed chunk by
  chunk in the backward, never more than a chunk of rows at once.

The cache names its route in ``route``; ``op_cache`` is that route's op cache.
Evaluation, which runs no backward, takes ``unembedding_loss``: the chunked
forward with nothing kept, so its peak is a chunk of rows of logits, whatever ``N``.
"""

from __future__ import annotations

from typing import NamedTuple

from ..backend import get_xp
from ..ops.cross_entropy import (
    cross_entropy_backward,
    cross_entropy_forward,
    scale_tied_cross_entropy_grads,
    tied_cross_entropy_backward,
    tied_cross_entropy_forward,
    tied_cross_entropy_with_grads,
)
from ..ops.softcap import softcap_backward, softcap_forward

MATERIALIZED_LOGITS_LIMIT = 2**25  # (N, V) logits elements held at once: 128 MiB in float32


class UnembeddingLossCache(NamedTuple):
    route: str  # "fused", "materialized" or "chunked" (see the module docstring)
    op_cache: object  # the route's op cache
    rows: object  # h as (N,C) rows, by reference
    table: object  # (V,C), by reference
    h_shape: tuple
    softcap: object = None  # the materialized route's SoftcapCache (logit_softcap), else None
    cap: float | None = None  # c of the logits c tanh(h table^T / c) on every route (the study tools read it)


def unembedding_loss_forward(
    h,
    table,
    targets,
    ignore_index: int,
    with_gradients: bool = True,
    softcap: float | None = None,
    table_grad: bool = True,
):
    """``(loss, cache)`` for ``h (B,T,C)``, ``table (V,C)``, ``targets (B,T)``; with ``softcap`` c the logits are
    ``c tanh(h table^T / c)`` (Gemma 2's final-logit soft-capping, ``ops/softcap.py``) on every route. A frozen
    table (LoRA: ``table_grad`` False) gets no gradient.

    ``with_gradients`` chooses the fused route; otherwise logits of at most
    ``MATERIALIZED_LOGITS_LIMIT`` elements are materialized and larger ones
    chunked. Every route has a backward. A frozen table (LoRA: ``table_grad`` False) has no gradient on the
    fused route: its backward gives ``dtable`` None.
    """
    B, T, C = h.shape
    rows, flat_targets = h.reshape(B * T, C), targets.reshape(B * T)  # (B,T,C) -> (N,C)
    capped = {"softcap": softcap}
    cap_cache = None
    if with_gradients:
        route = "fused"
        loss, op_cache = tied_cross_entropy_with_grads(
            rows, table, flat_targets, ignore_index, table_grad=table_grad, **capped
        )
    elif B * T * table.shape[0] > MATERIALIZED_LOGITS_LIMIT:
        route = "chunked"
        loss, op_cache = tied_cross_entropy_forward(rows, table, flat_targets, ignore_index, **capped)
    else:
        logits = rows @ table.T  # (N,C) @ (C,V) -> (N,V)
        if softcap is not None:
            logits, cap_cache = softcap_forward(logits, softcap)  # c tanh(z / c), (N,V)
        route, (loss, op_cache) = "materialized", cross_entropy_forward(logits, flat_targets, ignore_index)
    return loss, UnembeddingLossCache(route, op_cache, rows, table, tuple(h.shape), cap_cache, softcap)


def unembedding_loss(h, table, targets, ignore_index: int, softcap: float | None = None):
    """The loss alone (evaluation): the logits ``h @ table^T`` a chunk of rows at a time (``DEFAULT_CHUNK_ROWS``
    of ``ops/cross_entropy.py``), their ``logsumexp(z) - z[t]`` summed as they go. The chunked forward's cache
    (references and an ``(N,)`` logsumexp) is dropped: no backward follows, and no ``(N,V)`` array ever exists.
    The same loss as the materialized route's, to rounding."""
    loss, _ = tied_cross_entropy_forward(h, table, targets, ignore_index, softcap=softcap)  # (B,T,C) -> ()
    return loss


def unembedding_loss_backward(dloss, cache: UnembeddingLossCache):
    """``(dh, dtable)``: ``dlogits = (softmax - onehot) dloss / count``, ``dh = dlogits table``,
    ``dtable = dlogits^T h``."""
    if cache.route == "fused":
        dh, dtable = scale_tied_cross_entropy_grads(dloss, cache.op_cache)
    elif cache.route == "chunked":
        dh, dtable = tied_cross_entropy_backward(dloss, cache.op_cache)
    else:
        dlogits = cross_entropy_backward(dloss, cache.op_cache)  # (N,V)
        if cache.softcap is not None:  # forward: logits = c tanh(z / c), so dz = dlogits (1 - (logits / c)^2)
            dlogits = softcap_backward(dlogits, cache.softcap)
        dh = dlogits @ cache.table  # forward: logits = h table^T, so dh = dlogits table; (N,V) @ (V,C) -> (N,C)
        # ... and dtable = dlogits^T h, computed as (h^T dlogits)^T (the faster order, ops/WHY_FAST.md)
        dtable = get_xp(dh).ascontiguousarray((cache.rows.T @ dlogits).T)  # (C,N) @ (N,V) -> (C,V) -> (V,C)
    return dh.reshape(cache.h_shape), dtable  # (N,C) -> (B,T,C)
