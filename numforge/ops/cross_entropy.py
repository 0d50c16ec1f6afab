"""Cross-entropy of next-token predictions, plain and over a weight-tied unembedding.

For one row of logits z (V,) and target t:  loss_row = logsumexp(z) - z[t].
The loss is the mean of loss_row over the rows whose target is not
``ignore_index``; when every row is ignored the loss is 0 and so are the gradients.

Backward: the gradient of one counted row is (softmax(z) - onehot(t)) * dloss / count.

The tied losses take a ``softcap`` c (Gemma 2's final-logit soft-capping, ``ops/softcap.py``): the logits are
then ``z = c tanh(h table^T / c)``, and the backward multiplies each chunk's dz by the slope ``1 - (z / c)^2``
before its two products, the chain rule through the cap: ``d(h table^T) = dz (1 - (z / c)^2)``.
"""

from __future__ import annotations

from typing import NamedTuple

from ..backend import get_xp
from ..checks import check_float, check_int, check_positive_int, is_int
from ._sums import row_sums
from ._tiles import tiles
from .softcap import check_cap, softcap_in_place, softcap_slope

DEFAULT_CHUNK_ROWS = 256  # rows of logits alive at once in the tied loss; chosen by `numforge bench cross_entropy`
FUSED_CHUNK_ROWS = 512  # rows per chunk of the fused loss-and-gradients (why 512: ops/WHY_FAST.md)


class CrossEntropyCache(NamedTuple):
    """softmax(z) = exp(z - max) / total. The forward computes the numerator anyway and the backward
    needs the softmax; it is kept unnormalized, because the backward's one pass over (N, V), which
    makes its new dlogits array, can apply 1 / total with the dloss / count factor for free."""

    exp_shifted: object  # (N, V) exp(z - row max)
    total: object  # (N, 1) row sums of exp_shifted
    targets: object  # (N,) targets, ignored rows replaced by 0 so they can index
    valid: object  # (N,) bool, False where the target is ignore_index
    count: int  # number of counted rows
    logits_shape: tuple[int, ...]


class TiedCrossEntropyCache(NamedTuple):
    """Only O(N) numbers are kept beyond references to the inputs: the logits
    chunks are recomputed in the backward from h, table and the saved logsumexp."""

    h_rows: object  # (N, C) view of h
    table: object  # (V, C)
    targets: object  # (N,) as in CrossEntropyCache
    valid: object  # (N,) bool
    count: int
    logsumexp: object  # (N,) logsumexp of every logits row
    h_shape: tuple[int, ...]
    chunk_rows: int
    softcap: float | None = None  # c of z = c tanh(h table^T / c), or None


class TiedCrossEntropyGrads(NamedTuple):
    """The gradients of the summed (not yet averaged) loss, computed by the forward; the backward scales them."""

    dh_of_sum: object  # (N, C) d(sum of counted nll) / dh
    dtable_of_sum: object  # (V, C) d(sum of counted nll) / dtable; None for a frozen table (table_grad False)
    count: int
    h_shape: tuple[int, ...]


# ---------------------------------------------------------------- shared pieces


def _check_targets(targets, rows_shape: tuple[int, ...], vocab_size: int, ignore_index: int):
    """Flatten and validate targets; return (targets with ignored rows set to 0, valid mask, count)."""
    check_int(targets, "targets")
    if tuple(targets.shape) != tuple(rows_shape):
        raise ValueError(f"targets must have shape {tuple(rows_shape)}, got {tuple(targets.shape)}")
    if not is_int(ignore_index):
        raise TypeError(f"ignore_index must be an int, got {ignore_index!r}")
    xp = get_xp(targets)
    flat = targets.reshape(-1)  # (...) -> (N,)
    valid = flat != ignore_index
    out_of_range = valid & ((flat < 0) | (flat >= vocab_size))
    if bool(out_of_range.any()):
        bad = int(flat[out_of_range][0])
        raise ValueError(f"targets must lie in [0, {vocab_size}) or equal ignore_index={ignore_index}, got {bad}")
    return xp.where(valid, flat, 0), valid, int(valid.sum())


def _exp_and_logsumexp(z):
    """(exp(z - m), sum of it, logsumexp(z)) per row, m the row max (so exp never overflows)."""
    xp = get_xp(z)
    row_max = z.max(axis=-1, keepdims=True)  # (n, V) -> (n, 1)
    shifted = z - row_max  # (n, V)
    xp.exp(shifted, out=shifted)
    total = shifted.sum(axis=-1, keepdims=True)  # (n, V) -> (n, 1)
    logsumexp = xp.log(total)
    logsumexp += row_max
    return shifted, total, logsumexp[:, 0]  # (n, V), (n, 1), (n,)


def _nll_sum(z, logsumexp, targets, valid) -> float:
    """sum over counted rows of logsumexp(z_row) - z_row[target], as a Python float."""
    xp = get_xp(z)
    picked = z[xp.arange(z.shape[0]), targets]  # (n, V) -> (n,)
    nll = logsumexp - picked
    nll *= valid
    return float(nll.sum(dtype="float64"))


def _row_weights(valid, coef: float, dtype):
    """coef on counted rows, 0 on ignored rows: the factor of each row of dlogits, (n,)."""
    weight = valid.astype(dtype)  # (n,)
    weight *= coef
    return weight


def _subtract_onehot(dlogits, targets, weight) -> None:
    """In place: dlogits[i, targets[i]] -= weight[i], the onehot(t) term of softmax - onehot(t)."""
    xp = get_xp(dlogits)
    dlogits[xp.arange(dlogits.shape[0]), targets] -= weight


def _softmax_minus_onehot(exp_shifted, total, targets, valid, coef: float):
    """dlogits = (softmax(z) - onehot(t)) * coef on counted rows, 0 on ignored rows, from exp(z - max) and its
    row sums, as a new array."""
    weight = _row_weights(valid, coef, exp_shifted.dtype)  # (n,)
    row_scale = weight[:, None] / total  # (n, 1)
    dlogits = exp_shifted * row_scale  # softmax(z) * weight, (n, V)
    _subtract_onehot(dlogits, targets, weight)
    return dlogits


def _loss_array(total: float, count: int, dtype, xp):
    return xp.asarray(total / count if count else 0.0, dtype=dtype)  # 0-d


def _coef(dloss, count: int) -> float:
    """dloss / count as a Python float (keeps float32 math float32); 0 when nothing counted."""
    if getattr(dloss, "shape", ()) != ():
        raise ValueError(f"dloss must be a scalar (0-d), got shape {tuple(dloss.shape)}")
    return float(dloss) / count if count else 0.0


# ---------------------------------------------------------------- plain


def cross_entropy_forward(logits, targets, ignore_index: int = -1):
    """loss = mean over counted rows of logsumexp(z) - z[t].  logits (N, V) or (B, T, V), targets (N,) or (B, T).

    Returns a 0-d array of logits' dtype. Example: V equal logits and any
    target give loss = ln V (e.g. ln 4 = 1.3862944 for V = 4).
    """
    check_float(logits, "logits", ndim=(2, 3))
    vocab_size = logits.shape[-1]
    targets, valid, count = _check_targets(targets, logits.shape[:-1], vocab_size, ignore_index)
    z = logits.reshape(-1, vocab_size)  # (B, T, V) -> (N, V)
    exp_shifted, total, logsumexp = _exp_and_logsumexp(z)
    loss = _loss_array(_nll_sum(z, logsumexp, targets, valid), count, logits.dtype, get_xp(logits))
    return loss, CrossEntropyCache(exp_shifted, total, targets, valid, count, tuple(logits.shape))


def cross_entropy_backward(dloss, cache: CrossEntropyCache):
    """dlogits = (softmax(z) - onehot(t)) * dloss / count on counted rows, 0 on ignored rows."""
    coef = _coef(dloss, cache.count)  # forward: loss = (sum of counted rows' losses) / count
    dlogits = _softmax_minus_onehot(cache.exp_shifted, cache.total, cache.targets, cache.valid, coef)  # new (N, V)
    return dlogits.reshape(cache.logits_shape)  # (N, V) -> (B, T, V)


# ---------------------------------------------------------------- tied to the embedding table


def tied_cross_entropy_forward(
    h, table, targets, ignore_index: int = -1, chunk_rows: int = DEFAULT_CHUNK_ROWS, softcap: float | None = None
):
    """The cross-entropy of logits = h @ table^T (with ``softcap`` c: c tanh(h @ table^T / c)), computed
    chunk_rows rows at a time.

    h (N, C) or (B, T, C), table (V, C), targets h.shape[:-1]. Only a
    (chunk_rows, V) block of logits exists at any time, never the full (N, V).
    Same loss as ``cross_entropy_forward(h @ table.T, targets)``.
    """
    h_rows, targets, valid, count = _check_tied_inputs(h, table, targets, ignore_index, chunk_rows)
    softcap = None if softcap is None else check_cap(softcap, "softcap")
    xp = get_xp(h, table)
    logsumexp = xp.empty(h_rows.shape[0], dtype=h.dtype)  # (N,)
    total = 0.0
    for start, stop in tiles(h_rows.shape[0], chunk_rows):
        rows = slice(start, stop)
        z = _logits(h_rows[rows], table, softcap)  # (n, C) @ (C, V) -> (n, V)
        logsumexp[rows] = _exp_and_logsumexp(z)[2]  # (n, V) -> (n,)
        total += _nll_sum(z, logsumexp[rows], targets[rows], valid[rows])
    loss = _loss_array(total, count, h.dtype, xp)
    cache = TiedCrossEntropyCache(h_rows, table, targets, valid, count, logsumexp, tuple(h.shape), chunk_rows, softcap)
    return loss, cache


def _logits(h_rows, table, softcap: float | None):
    """``z = h table^T``, or ``c tanh(h table^T / c)`` with a soft cap c, a new ``(n, V)`` array."""
    z = h_rows @ table.T  # (n, C) @ (C, V) -> (n, V)
    return z if softcap is None else softcap_in_place(z, softcap)


def tied_cross_entropy_backward(dloss, cache: TiedCrossEntropyCache):
    """With dlogits = (softmax(z) - onehot(t)) * dloss / count, chunk by chunk:

        dh    = dlogits @ table          (forward: z = h @ table^T)
        dtable = sum over chunks of dlogits^T @ h

    Returns (dh, dtable). dtable is only the output side's share: a model that
    ties the table to its input embedding adds the embedding's own gradient.
    """
    h_rows, table = cache.h_rows, cache.table
    xp = get_xp(h_rows, table)
    coef = _coef(dloss, cache.count)
    dh = xp.empty_like(h_rows)  # (N, C)
    dtable = xp.zeros_like(table)  # (V, C)
    table_part = xp.empty_like(table)  # (V, C) one chunk's share, reused
    for start, stop in tiles(h_rows.shape[0], cache.chunk_rows):
        rows = slice(start, stop)
        z = _logits(h_rows[rows], table, cache.softcap)  # recomputed: (n, C) @ (C, V) -> (n, V)
        slope = None if cache.softcap is None else softcap_slope(z, cache.softcap)  # (n, V) 1 - (z / c)^2
        z -= cache.logsumexp[rows, None]
        dlogits = xp.exp(z, out=z)  # softmax rows, (n, V), turned into dlogits in place:
        weight = _row_weights(cache.valid[rows], coef, z.dtype)  # (n,)
        dlogits *= weight[:, None]  # (n, V)
        _subtract_onehot(dlogits, cache.targets[rows], weight)
        if slope is not None:  # forward: z = c tanh(h table^T / c), so d(h table^T) = dz (1 - (z / c)^2)
            dlogits *= slope
        xp.matmul(dlogits, table, out=dh[rows])  # forward: z = h table^T, so dh = dz table; (n, V) @ (V, C) -> (n, C)
        xp.matmul(dlogits.T, h_rows[rows], out=table_part)  # ... and dtable = dz^T h; (V, n) @ (n, C) -> (V, C)
        dtable += table_part
    return dh.reshape(cache.h_shape), dtable  # (N, C) -> (B, T, C)


def tied_cross_entropy_with_grads(
    h,
    table,
    targets,
    ignore_index: int = -1,
    chunk_rows: int = FUSED_CHUNK_ROWS,
    softcap: float | None = None,
    table_grad: bool = True,
):
    """The tied cross-entropy and its gradients in one pass over chunks of rows, for training.

    For each chunk, while its logits are still in cache (z = h @ table^T, (n, V)):
    logsumexp(z), nll = logsumexp(z) - z[t], dz = softmax(z) - onehot(t) (0 on
    ignored rows), then dh = dz @ table and dtable += dz^T @ h. That is three
    matrix products and no (N, V) array, where materialized logits take one
    (N, V) array and several passes over it, and the chunked tied loss
    recomputes the logits in its backward (four products). The cache keeps the
    gradients of the summed nll; the backward scales them by dloss / count,
    exact because they are linear in dloss. Same loss and gradients as
    ``tied_cross_entropy_forward`` / ``_backward`` (``softcap`` likewise: dz times the slope ``1 - (z / c)^2``).
    A frozen table (LoRA: ``table_grad`` False) gets no gradient: the dtable product is skipped and
    ``dtable_of_sum`` is None.
    """
    h_rows, targets, valid, count = _check_tied_inputs(h, table, targets, ignore_index, chunk_rows)
    softcap = None if softcap is None else check_cap(softcap, "softcap")
    xp = get_xp(h, table)
    dh_of_sum = xp.empty_like(h_rows)  # (N, C)
    # dtable^T = sum over chunks of h^T dz, accumulated as (C, V) and transposed once (the faster
    # product order, ops/WHY_FAST.md)
    if table_grad:
        dtable_transposed = xp.zeros((table.shape[1], table.shape[0]), dtype=table.dtype)  # (C, V)
        chunk_part = xp.empty_like(dtable_transposed)  # (C, V) one chunk's share, reused
    total = 0.0
    for start, stop in tiles(h_rows.shape[0], chunk_rows):
        rows = slice(start, stop)
        h_chunk, t, counted = h_rows[rows], targets[rows], valid[rows]  # (n, C), (n,), (n,)
        pick = (xp.arange(t.shape[0]), t)
        z = _logits(h_chunk, table, softcap)  # (n, C) @ (C, V) -> (n, V)
        slope = None if softcap is None else softcap_slope(z, softcap)  # (n, V) 1 - (z / c)^2
        exp_shifted, row_total, nll_sum = _exp_shifted_and_nll(z, pick, counted, xp)  # z becomes E, (n, V)
        total += nll_sum
        # dz = E / l - onehot(t) = r (E - l onehot(t)) with r = [counted] / l per row. The row factor r
        # scales the two (n, C) operands of the products instead of the (n, V) array: a pass over
        # (n, V) saved, the same products. Ignored rows get r = 0.
        exp_shifted[pick] -= row_total  # E - l onehot(t)
        if slope is not None:  # forward: z = c tanh(h table^T / c), so d(h table^T) = dz (1 - (z / c)^2)
            exp_shifted *= slope
        r = counted / row_total  # (n,)
        xp.matmul(exp_shifted, table, out=dh_of_sum[rows])  # forward: z = h table^T, so dh = dz table;
        dh_of_sum[rows] *= r[:, None]  # ... (n, V) @ (V, C) -> (n, C), times r
        if table_grad:
            xp.matmul(
                (h_chunk * r[:, None]).T, exp_shifted, out=chunk_part
            )  # ... and dtable^T = h^T dz = (r h)^T (E - l onehot)
            dtable_transposed += chunk_part  # (C, n) @ (n, V) -> (C, V)
    loss = _loss_array(total, count, h.dtype, xp)
    dtable_of_sum = xp.ascontiguousarray(dtable_transposed.T) if table_grad else None  # (C, V) -> (V, C)
    return loss, TiedCrossEntropyGrads(dh_of_sum, dtable_of_sum, count, tuple(h.shape))


def _exp_shifted_and_nll(z, pick, counted, xp):
    """``(E, l, sum of nll)`` of a chunk's logits ``z (n, V)``, in place: ``E = exp(z - max) <= 1`` overwrites
    ``z``, ``l`` is its row sums ``(n,)``, and ``nll = logsumexp(z) - z[t]`` is summed over the ``counted`` rows."""
    picked = z[pick]  # z[t], (n,), read before z is overwritten
    row_max = z.max(axis=1)  # (n,)
    z -= row_max[:, None]
    exp_shifted = xp.exp(z, out=z)  # E = exp(z - max) <= 1, in place, (n, V)
    row_total = row_sums(exp_shifted)  # l = sum of E, (n,)
    nll = xp.log(row_total)
    nll += row_max  # logsumexp(z)
    nll -= picked
    nll *= counted
    return exp_shifted, row_total, float(nll.sum(dtype="float64"))


def scale_tied_cross_entropy_grads(dloss, cache: TiedCrossEntropyGrads):
    """(dh, dtable) = (dh_of_sum, dtable_of_sum) * dloss / count: new arrays, the cache is left as it is."""
    coef = _coef(dloss, cache.count)  # forward: loss = (sum of counted rows' losses) / count
    dtable = None if cache.dtable_of_sum is None else cache.dtable_of_sum * coef
    return (cache.dh_of_sum * coef).reshape(cache.h_shape), dtable  # (N, C) -> (B, T, C)


def _check_tied_inputs(h, table, targets, ignore_index: int, chunk_rows: int):
    """Validate the tied losses' inputs; return (h as (N, C) rows, targets, valid, count) as _check_targets does."""
    check_float(h, "h", ndim=(2, 3))
    check_float(table, "table", ndim=2)
    width = table.shape[1]
    if h.shape[-1] != width or h.dtype != table.dtype:
        raise ValueError(
            f"h's last axis and dtype must match table {tuple(table.shape)} {table.dtype}, "
            f"got h {tuple(h.shape)} {h.dtype}"
        )
    check_positive_int(chunk_rows, "chunk_rows")
    targets, valid, count = _check_targets(targets, h.shape[:-1], table.shape[0], ignore_index)
    return h.reshape(-1, width), targets, valid, count  # (B, T, C) -> (N, C)
