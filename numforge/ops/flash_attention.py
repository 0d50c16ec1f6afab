"""Tiled attention (FlashAttention-style): exact softmax attention whose extra memory grows with T
(unless ``keep_probs`` trades that for speed, at short sequences).

Plain attention (``ops.attention``) builds the score matrix ``S = s Q K^T`` of
shape ``(B, H, Tq, Tk)`` and keeps ``P = softmax(S)`` for the backward: memory
``O(T^2)``. Here the queries are cut into tiles of ``block_q`` rows and the
keys/values into tiles of ``block_k`` rows; only one ``(block_q, block_k)``
tile of scores exists at a time (for all batches and heads at once), and the
result is the same numbers, not an approximation.

Online softmax (forward)
------------------------
For one query row the output is ``o = sum_j exp(S_j - m) v_j / l`` with
``m = max_j S_j`` and ``l = sum_j exp(S_j - m)``. Reading the keys tile by
tile, keep a running max ``m``, a running sum ``l`` and an unnormalized output
``acc`` that are exact for the keys seen so far. When a tile brings scores
``S_t``::

    m_new = max(m, max(S_t))
    P_t   = exp(S_t - m_new)
    l     = exp(m - m_new) * l   + rowsum(P_t)
    acc   = exp(m - m_new) * acc + P_t V_t

Every term of ``l`` and ``acc`` was written relative to the old max; multiplying
by ``exp(m - m_new)`` (at most 1, so nothing overflows) moves it to the new
one. After the last tile ``o = acc / l``, one division per row. The forward
saves ``L = m + log(l)``, the row's log-sum-exp, so the backward can rebuild
any probability tile exactly as ``P = exp(S - L)`` without the running
statistics.

Backward
--------
With ``dP = dO V^T``, the softmax gradient is ``dS = P * (dP - rowsum(P * dP))``.
The row sum needs a whole row of ``P``, which a tile does not have; but::

    rowsum(P * dP)_i = sum_j P_ij (dO_i . V_j) = dO_i . (sum_j P_ij V_j) = dO_i . O_i

so ``D = rowsum(dO * O)`` comes from the saved output, before any tile (one
query tile at a time: the whole ``dO * O`` at once would be a transient as
large as ``O``). Then, for each tile pair (queries ``I``, keys ``J``)::

    S = s Q_I K_J^T,   P = exp(S - L_I)           recomputed (or kept, with keep_probs)
    dV_J += P^T dO_I
    dP    = dO_I V_J^T
    dS    = P * (dP - D_I)
    dQ_I += s dS K_J,  dK_J += s dS^T Q_I

Two subtractions ride inside the products: the backward builds ``[Q_I, -L_I log2 e]``
and ``[(s log2 e) K_J^T; 1]``, whose product is ``S2 - L2``, and ``[dO_I, -D_I]`` and
``[V_J^T; 1]``, whose product is ``dP - D``: one more column in each product instead
of a pass over the tile (without dropout, whose ``Z`` multiplies ``dP`` before ``D``
is subtracted).

How the code runs it
--------------------
The same sums, rewritten in ways that change only rounding (measured in
``ops/WHY_FAST.md``; derived in ``demos/derivations/flash_attention.md``), the
subtractions inside the backward's products above and two more:

- Key tile first: both passes loop over the key tiles outside and the query
  tiles that see each one inside (``_query_tiles``). Every query row still
  meets its key tiles in order, so the forward's ``m, l, acc`` (kept for all
  rows; ``acc`` is ``out`` itself) follow the recurrence above. Each key tile
  is transposed once into a contiguous ``s K_J^T``: products with a contiguous
  right operand run faster than with a transposed view.
- Base 2: the scores are ``S2 = S log2(e)`` (the factor rides on ``K^T``), so
  every exponential is ``exp2(S2 - m2) = exp(S - m)``, which NumPy runs about
  2.5x faster than ``exp`` in float32. ``L`` stays in natural log.

Dropout
-------
With ``dropout_p = p > 0`` the weights are dropped after the softmax,
``O = (P * Z) V`` with ``Z = keep / (1 - p)``. A row's weights are only known
up to the factor ``exp(m_final - m) / l`` while the tiles stream by, but
dropping commutes with a per-row factor, so the forward drops the unnormalized
tile, ``acc += (P_t * Z_t) V_t``, while ``l`` still sums the undropped
``P_t`` (the softmax's normalization does not see dropout). No mask is stored:
``ops/_attention_dropout.py`` draws each tile's mask from a counter-based
generator keyed by (seed, batch, query head, mask block), so the backward draws the
same one again, and plain attention, drawing its whole ``(Tq, Tk)`` mask from
the same blocks, drops the same weights.

Backward with dropout: ``dV += (P Z)^T dO``, ``dP = (dO V^T) * Z``, and
``D = rowsum(dO * O)`` still equals ``rowsum(P * dP)`` (``O`` is the dropped output).

Grouped-query attention
-----------------------
``k`` and ``v`` may have fewer heads than ``q``: ``H_kv`` dividing ``H``, query
head ``h`` reading kv head ``h // G`` with ``G = H / H_kv`` (``ops/_kv_groups.py``;
multi-query attention when ``H_kv = 1``). The kernel never repeats ``k, v``:
it stacks the ``G`` query heads of a group row by row, position by position,
``(G, Tq, D) -> (Tq G, D)``, so a query tile ``[q_start, q_stop)`` is the
``(q_stop - q_start) G`` contiguous rows ``[q_start G, q_stop G)``, and each
key tile meets the whole group in one product::

    S    = [Q_I of G heads, stacked] (s K_J)^T            (nq G, nk)

The running statistics, ``out`` and ``L`` follow the stacked rows; a causal tile
masks a stacked row by its position, and the dropout mask of a row is still
drawn for its own query head. The stacking copies ``q`` (and ``dO``, ``L``,
``D`` in the backward) once, and ``o``, ``dq`` back, per part; with ``G = 1``
(``H_kv = H``) it is the heads themselves, no copy, and every step is the
multi-head kernel's.

Backward with grouped-query attention: the products of the backward sum over
the group inside themselves, ``dK_J`` of the shared head being the sum of the
``G`` heads' ``s dS^T Q_I``, the gradient of a variable used ``G`` times
(``demos/derivations/gqa.md``)::

    dV_J += P^T dO_I   and   dK_J += s dS^T Q_I           inner size nq G

Score modifiers
---------------
The causal mask, a boolean mask, a sliding window, ALiBi's bias and the soft cap act on each score tile
through one seam (``ops/scores.py``): ``S' = f(S) + term(b, h, i, j)``, applied in the forward and again in
the backward's recomputation ``P = exp(S' - L)`` (in base 2, a bias times ``log2 e``, the cap ``c log2 e``),
with no code of the kernel's own for any of them. A transform ``f`` (softcap) needs ``S`` before ``L`` is
subtracted, so its recomputation leaves the ``-L`` column out of the product and adds it after ``f``; its slope
``f'(S)`` multiplies ``dS`` tile by tile, and no probability tile is kept (``keep_probs`` is ignored).
A mask also says which keys a query tile may see,
so tiles it hides wholly are skipped: causal masking (bottom-right aligned: query ``i`` sees
keys ``j <= i + Tk - Tq``) skips every key tile that lies wholly above the diagonal (about
half the work when ``Tq == Tk``) and masks only the tiles the diagonal crosses; a sliding window
of ``W`` keys (``i - W < j <= i``) also skips every key tile wholly left of the window, so a query
tile meets about ``(W + block_q) / block_k + 1`` key tiles and both passes cost ``O(T W)``, not
``O(T^2)``; packed segments (``ops/segments.py``, several sequences in one row) skip every tile that
lies between two segments of every row of a part. A query row
that sees no key at all (``Tq > Tk``) has ``l = 0``: its output is 0 and its
``L`` is ``-inf``; every one of its scores is masked, so the backward subtracts
0 instead: ``P = exp(-inf) = 0`` and its gradients are 0, never ``NaN``.

Attention sinks
---------------
With ``sinks`` (gpt-oss: a learned logit ``s_h`` per query head, ``ops/attention.py``), every row's softmax
has one more column, a key of score ``s_h`` and value 0 that every query sees. It enters the online softmax
once per row, as if read before the first key tile: the running statistics start at ``m = s_h`` and
``l = exp(s_h - m) = 1`` instead of ``-inf`` and 0, and ``acc`` at 0 (the sink adds no value). The tiles
then run as they do without it, so ``L = m + log(l)`` is the log-sum-exp of the extended row and
``P = exp(S' - L)`` (the backward's recomputation, and ``attention_weights``) the weights with the sink's
share taken out: each row sums to ``1 - P_sink``, ``P_sink = exp(s_h - L)``. A row that sees no key has
``L = s_h``, ``P_sink = 1`` and output 0. The backward's tiles need nothing more (``D = rowsum(dO * O)``
is still ``rowsum(P * dP)``: the sink's value is 0), and the sink's gradient is one sum after them::

    ds_h = - sum over b, i of exp(s_h - L_bhi) D_bhi

Memory (``n`` bytes per number: 4 for float32)
---------------------------------------------
Saved for the backward: ``q, k, v`` (referenced, not copied), ``o`` and ``L``,
``n * B * H * Tq * (Dv + 1)`` bytes beyond the inputs. Working memory: the
running statistics (``n B H Tq`` each), one key tile's transposed keys and
values (``n B H_kv (D + 1) block_k`` each), and at most two
``(B, H, block_q, block_k)`` tiles alive at once per thread (scores or
probabilities, ``dP``), ``n B H block_q block_k`` bytes each. The backward adds the
gradients ``dq, dk, dv`` (as large as the inputs) and ``D`` (``n B H Tq``).
With ``H_kv < H`` the stacked copies of a part's ``q`` and ``o`` (forward) and ``q, dO, dq``
(backward) add at most ``n B H Tq D`` bytes each, and parts that share a kv head
(multi-query attention on several threads) one ``dk, dv`` each; nothing of shape
``(B, H, Tk, D)``: ``k`` and ``v`` are never repeated.
With ``keep_probs=True`` the forward also keeps every probability tile it
computed, up to ``n B H Tq Tk`` bytes (about half for causal self-attention):
plain attention's memory, for a faster backward at short sequences.
Example, B = 1, H = 8, T = 2048, D = 64, float32, blocks of 128 x 256: ``o``
is 4 MiB, ``L`` 64 KiB, a tile 1 MiB, the gradients 12 MiB; plain attention's
``P`` alone is ``4 * 8 * 2048^2`` bytes = 128 MiB, and its backward holds
``dP`` of the same size beside it.

Threads
-------
Heads never exchange numbers, so the ``(B, H)`` pairs are cut into parts of a
few heads (heads 0-3 and 4-7 with the default tiles; with GQA whole groups, or
equal shares of one group whose ``dk, dv`` are added up after) and as many Python
threads as NumPy's BLAS has (2 on 2 cores) walk them, each part through all
its tiles, every product on one BLAS thread (``ops/_parallel.py``; NumPy
releases the GIL inside products and ufuncs). On one thread the whole
``(B, H)`` is one part. Handing each small tile product to OpenBLAS's own
threads instead makes them wait for each other thousands of times a call, and
a stall of any one of them (another process on the core) stalls the product
(measurements: ``ops/WHY_FAST.md``). The backward reuses the forward's parts.

Block sizes
-----------
Any ``block_q, block_k >= 1`` work (T need not divide; a block >= T is one
tile); the result does not depend on them. The defaults, 128 queries x 256
keys, keep a tile small (128 KiB per head in float32) and the Python loop
short (T = 2048: 16 query tiles, 72 of the 128 tile pairs after causal
skipping). When decoding one token at a time (Tq = 1) a score tile is a
single row, so there is no memory to save by splitting the keys: pass
``block_k >= Tk``. How the sizes were chosen, with the measurements:
``ops/WHY_FAST.md``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from typing import NamedTuple

from ..backend import get_xp
from ..checks import check_bool, check_positive_int
from ._attention_dropout import AttentionDropout, check_dropout, dropped
from ._kv_groups import repeat_kv, stack_heads, stacked_buffer, unstack_into
from ._parallel import head_parts, pairs_per_part, run_parts, worker_count
from ._tiles import tiles
from .attention import AttentionCache, check_causal, check_grad_out, check_qkv, check_sinks, resolve_scale
from .scores import ScoreSeam, score_modifiers

DEFAULT_BLOCK_Q = 128
DEFAULT_BLOCK_K = 256
LOG2_E = math.log2(math.e)  # the scores are kept in base 2, S2 = S log2(e), so that exp(S - m) = exp2(S2 - m2)
LN_2 = math.log(2.0)


class FlashAttentionCache(NamedTuple):
    """Saved for the backward: inputs (``k, v`` of ``H_kv`` heads, never repeated), output, per-row
    log-sum-exp L (B,H,Tq,1), settings.

    Unless ``keep_probs``, no ``(Tq, Tk)`` array is kept: the backward
    recomputes each probability tile from ``q, k`` and ``L``.
    """

    q: object
    k: object
    v: object
    out: object
    lse: object
    scale: float
    seam: ScoreSeam  # the score modifiers of the call (ops/scores.py), for the backward's recomputation
    block_q: int
    block_k: int
    parts: list  # the (batches, heads) slices the threads walked (ops/_parallel.py); the backward reuses them
    workers: int  # how many threads walked them
    probs: list | None  # keep_probs: per part, (q_start, k_start) -> normalized P tile (b,r,nq g,nk); else None
    dropout: AttentionDropout | None  # the rate and seed that redraw each tile's mask; None without dropout
    sinks: object = None  # the sink logits s (H,), in every row's softmax denominator; None without sinks


def _query_tiles(k_start, k_stop, Tq, Tk, seam: ScoreSeam, block_q) -> Iterator[tuple[int, int, int, int, bool]]:
    """The query tiles that see any key of ``[k_start, k_stop)``, each with the keys ``[lo, hi)`` it may see
    there (its masks asked: a causal tile may stop short of ``k_stop``) and "needs its masks" (one crosses it)."""
    offset = Tk - Tq  # query row i is at position i + offset
    for q_start, q_stop in tiles(Tq, block_q):
        some, every = seam.key_span(range(q_start, q_stop), offset, Tk)
        lo, hi = max(k_start, some.start), min(k_stop, some.stop)
        if lo < hi:  # else every key of the tile is hidden from every query: skipped
            yield q_start, q_stop, lo, hi, not (every.start <= lo and hi <= every.stop)


def _with_column(a, column):
    """``[a, column]``: ``(..., n, D)`` and ``(..., n, 1)`` -> ``(..., n, D + 1)``."""
    return get_xp(a).concatenate((a, column), axis=-1)


def flash_attention_forward(
    q,
    k,
    v,
    causal: bool = True,
    scale: float | None = None,
    block_q: int = DEFAULT_BLOCK_Q,
    block_k: int = DEFAULT_BLOCK_K,
    keep_probs: bool = False,
    dropout_p: float = 0.0,
    dropout_seed: int = 0,
    mask=None,
    modifiers: tuple = (),
    sinks=None,
):
    """``O = dropout(softmax(s Q K^T + terms)) V`` tile by tile, with the online softmax.

    ``q (B,H,Tq,D)``, ``k (B,H_kv,Tk,D)``, ``v (B,H_kv,Tk,Dv)``, ``H`` a multiple of
    ``H_kv`` (query head ``h`` reads kv head ``h // (H / H_kv)``, module docstring,
    Grouped-query attention); ``s = 1/sqrt(D)`` by default. Returns
    ``(o (B,H,Tq,Dv), cache)``; equal to ``attention_forward`` up to rounding.
    The score modifiers (``ops/scores.py``: ``causal``, a boolean ``mask``, more by name in
    ``modifiers``) are added tile by tile; a tile every query of which a mask hides is skipped.
    The ``(B, H)`` pairs are split into parts walked by threads of their own
    (``ops/_parallel.py``); ``_forward_part`` is one part's walk, on the part's
    query heads stacked by kv head (``ops/_kv_groups.py``).

    ``keep_probs=True`` trades memory for speed: the cache keeps every
    probability tile the forward computed, normalized to ``P = exp(S - L)``,
    and the backward uses them instead of recomputing ``S`` and ``exp``: per
    tile one matrix product, the mask and one ``exp`` fewer. The kept tiles
    take ``n B H Tq Tk`` bytes at most (about half that when causal), which
    is small at short sequences, where it pays most.

    ``dropout_p > 0`` drops each weight after the softmax with that probability
    (module docstring, Dropout): the same mask as ``attention_forward`` with the
    same ``dropout_seed``, drawn tile by tile and drawn again by the backward. ``sinks (H,)``: a logit per
    query head in every row's softmax denominator (module docstring, Attention sinks; its gradient follows dv).
    """
    B, H, H_kv, Tq, Tk, D, Dv = check_qkv(q, k, v)
    p, seed, row_seeds = check_dropout(dropout_p, dropout_seed, B)
    xp = get_xp(q, k, v, mask)
    seam = ScoreSeam.whole(score_modifiers(check_causal(causal), mask, modifiers, (B, H, Tq, Tk)), H)
    block_q, block_k = check_positive_int(block_q, "block_q"), check_positive_int(block_k, "block_k")
    check_bool(keep_probs, "keep_probs")
    workers = worker_count(xp, B, H, Tq, Tk)
    pairs = pairs_per_part(workers, B, H, min(block_q, Tq), min(block_k, Tk), q.dtype.itemsize)
    parts = head_parts(B, H, pairs, group=H // H_kv)
    out, lse = xp.empty((B, H, Tq, Dv), dtype=q.dtype), xp.empty((B, H, Tq, 1), dtype=q.dtype)
    dropout = AttentionDropout(p, seed, range(B), range(H), Tk, row_seeds) if p > 0 else None
    cache = FlashAttentionCache(
        q, k, v, out, lse, resolve_scale(scale, D), seam, block_q, block_k, parts, workers, None, dropout,
        check_sinks(sinks, q),
    )  # fmt: skip
    keep_probs = keep_probs and not seam.transformed  # a transform's slope is recomputed with P, tile by tile
    kept = run_parts(functools.partial(_forward_part, cache, keep_probs), parts, workers)
    return out, cache._replace(probs=kept if keep_probs else None)


def _forward_part(cache: FlashAttentionCache, keep_probs: bool, part):
    """One part's walk: writes ``out[part]`` and ``lse[part]`` of the cache; returns the part's kept tiles or None."""
    group = cache.q.shape[1] // cache.k.shape[1]
    stack = _stacked_heads(cache.parts, group)
    dropout = None if cache.dropout is None else cache.dropout.part(part)
    kv = _kv_part(part, group)
    out, lse = cache.out[part], cache.lse[part]
    out_rows, lse_rows = stacked_buffer(out, stack), stacked_buffer(lse, stack)  # (b,r,Tq g,.)
    seam = cache.seam.part(part, stack)
    start = _start_rows(cache, part, stack)
    kept = _forward_tiles(stack_heads(cache.q[part], stack), cache.k[kv], cache.v[kv], out_rows, lse_rows, stack, seam,
                          cache, keep_probs, dropout, start)  # fmt: skip
    unstack_into(out, out_rows, stack)
    unstack_into(lse, lse_rows, stack)
    return kept


def _start_rows(cache: FlashAttentionCache, part, stack: int):
    """The online softmax's ``m, l`` (base 2) for a part's stacked rows ``(b,r,Tq g,1)`` before any key tile:
    ``-inf, 0`` (nothing seen yet), or with sinks the sink column seen first, ``m = s_h log2 e`` and
    ``l = exp2(m - m) = 1`` (module docstring, Attention sinks)."""
    q = cache.q[part]
    xp, dtype, (b, h, Tq, _) = get_xp(q), q.dtype, q.shape
    shape = (b, h // stack, Tq * stack, 1)
    if cache.sinks is None:
        return xp.full(shape, -xp.inf, dtype=dtype), xp.zeros(shape, dtype=dtype)
    logits = xp.broadcast_to(cache.sinks[part[1]].reshape(1, h, 1, 1), (b, h, Tq, 1))  # s_h of each row
    row_max = stack_heads(logits, stack) * dtype.type(LOG2_E)  # (b,r,Tq g,1), stacked like q
    return row_max, xp.ones(shape, dtype=dtype)


def _stacked_heads(parts: list, group: int) -> int:
    """How many query heads share a kv head within a part: the group, or the part's share of one."""
    heads = parts[0][1]
    return min(group, heads.stop - heads.start)


def _kv_part(part, group: int) -> tuple[slice, slice]:
    """The ``(batches, kv heads)`` that a part's ``(batches, query heads)`` read."""
    batches, heads = part
    return batches, slice(heads.start // group, (heads.stop - 1) // group + 1)


def _forward_tiles(q, k, v, out, lse, group, seam, settings, keep_probs, dropout, start) -> dict | None:
    """The online softmax over every tile of one part, key tile by key tile (the outer loop), then the query
    tiles that see it: fills ``out (b,r,Tq g,Dv)`` and ``lse (b,r,Tq g,1)`` in place; returns the normalized
    probability tiles when ``keep_probs``, keyed ``(q_start, k_start)``. ``seam``: the score modifiers placed
    on the part; ``settings``: the call's cache (scale, block sizes); ``start``: the running ``m, l`` before any
    key tile (``_start_rows``).

    ``q (b,r,Tq g,D)`` holds the ``g = group`` query heads that read each of the ``r`` kv heads of ``k, v
    (b,r,Tk,.)``, stacked row by row (``ops/_kv_groups.py``; ``g = 1``, the heads themselves, without GQA):
    the query tile ``[q_start, q_stop)`` is rows ``[q_start g, q_stop g)``, one product with a key tile.
    Every query row still meets its key tiles in order, so its running ``m, l`` (one per row, for the whole
    part) and ``acc`` (``out`` itself, divided by ``l`` at the end) follow the module docstring exactly.
    """
    xp = get_xp(q)
    B, R, stacked_rows, _ = q.shape  # stacked_rows = Tq g
    Tq, Tk = stacked_rows // group, v.shape[2]
    dtype = q.dtype
    row_max, row_sum = start  # m (in base 2 like the scores) and l, (B,R,Tq g,1) each
    out[...] = 0  # acc, the unnormalized output
    ones = xp.ones((min(settings.block_k, Tk), 1), dtype=dtype)  # row sums as products: P @ 1 (ops/_sums.py)
    tile_probs = []  # keep_probs: (q_start, k_start, exp2(S2_t - m_t), m_t) for each tile
    for k_start, k_stop in tiles(Tk, settings.block_k):
        keys_t = _transposed(k[:, :, k_start:k_stop], settings.scale * LOG2_E)  # (s log2 e) K^T (B,R,D,nk)
        for q_start, q_stop, lo, hi, masked in _query_tiles(k_start, k_stop, Tq, Tk, seam, settings.block_q):
            rows, keys = slice(q_start * group, q_stop * group), slice(lo, hi)
            scores = xp.matmul(q[:, :, rows], keys_t[..., lo - k_start : hi - k_start])  # S2 = S log2(e)
            seam.transform(scores, LOG2_E, with_slope=False)  # f(S) log2(e) in place (softcap), if any
            if masked or seam.biased:  # (B,R,nq g,D) @ (B,R,D,nk) -> (B,R,nq g,nk), then S2 + terms log2(e)
                seam.add(scores, range(q_start, q_stop), range(lo, hi), Tk - Tq, masked, LOG2_E)
            old_max = row_max[:, :, rows]  # (B,R,nq g,1)
            new_max = xp.maximum(old_max, scores.max(axis=-1, keepdims=True))
            safe_max = xp.where(xp.isneginf(new_max), 0.0, new_max).astype(dtype, copy=False)  # no -inf - -inf
            scores -= safe_max
            probs = xp.exp2(scores, out=scores)  # P_t = exp2(S2_t - m_new) = exp(S_t - m_new ln 2), in place
            rescale = xp.exp2(old_max - safe_max)  # exp2(m - m_new), (B,R,nq g,1); 0 while m = -inf
            row_sum[:, :, rows] *= rescale
            row_sum[:, :, rows] += xp.matmul(probs, ones[: hi - lo])  # rowsum(P_t): (B,R,nq g,nk) @ (nk,1)
            weights = probs  # forward: O = P V, or with dropout O = (P Z) V (l sums P, not P Z)
            if dropout is not None:
                keep = _stacked_keep(xp, dropout, q_start, q_stop, lo, hi, group)  # (B,R,nq g,nk) bool
                weights = dropped(probs, keep, dropout.scale(dtype), out=None if keep_probs else probs)  # kept: a copy
            out[:, :, rows] *= rescale
            out[:, :, rows] += xp.matmul(weights, v[:, :, keys])  # acc: (B,R,nq g,nk) @ (B,R,nk,Dv) -> (B,R,nq g,Dv)
            row_max[:, :, rows] = new_max
            if keep_probs:
                tile_probs.append((q_start, k_start, probs, safe_max))
    row_sum[row_sum == 0] = 1.0  # a row that saw no key: o = 0 / 1 = 0
    out /= row_sum
    lse[...] = row_max * LN_2 + xp.log(row_sum)  # L = m ln 2 + log(l); -inf for an empty row
    if not keep_probs:
        return None
    final_max = xp.where(xp.isneginf(row_max), 0.0, row_max).astype(dtype, copy=False)
    kept = {}
    for q_start, k_start, probs, tile_max in tile_probs:
        rows = slice(q_start * group, q_start * group + probs.shape[-2])
        probs *= xp.exp2(tile_max - final_max[:, :, rows]) / row_sum[:, :, rows]  # exp2(S2 - m) / l = exp(S - L)
        kept[q_start, k_start] = probs
    return kept


def attention_weights(cache):
    """The weights ``P (B,H,Tq,Tk)`` (before dropout) of a plain or tiled attention cache, on its backend, read
    from the cache, never re-derived (the study tools call this):

    - plain (``AttentionCache``): the ``P`` it keeps, ``cache.probs``;
    - tiled (``FlashAttentionCache``): ``P = exp(S' - L)`` from its ``q, k``, scale, score modifiers
      (``cache.seam``) and log-sum-exp ``L``, ``S' = s Q K^T + terms`` with the very terms its forward added:
      the line its backward recomputes each tile with, on the whole square. A row that saw no key has
      ``L = -inf`` and weights 0; every other row sums to 1.

    With sinks, ``L`` is the extended row's, so each row sums to ``1 - P_sink`` (``sink_weights``), 0 for a row
    that saw only its sink.
    """
    if isinstance(cache, AttentionCache):
        return cache.probs
    if not isinstance(cache, FlashAttentionCache):
        raise TypeError(f"expected an AttentionCache or FlashAttentionCache, got {type(cache).__name__}")
    q, k = cache.q, repeat_kv(cache.k, cache.q.shape[1] // cache.k.shape[1])  # (B,H_kv,Tk,D) -> (B,H,Tk,D)
    xp = get_xp(q)
    scores = xp.matmul(q, k.swapaxes(-1, -2))  # (B,H,Tq,D) @ (B,H,D,Tk) -> (B,H,Tq,Tk)
    scores *= cache.scale
    Tq, Tk = scores.shape[-2:]
    cache.seam.transform(scores, with_slope=False)  # f(S), as the forward did
    cache.seam.add(scores, range(Tq), range(Tk), Tk - Tq, masked=True)  # S' = S + terms, one tile (g = 1)
    lse = xp.where(xp.isneginf(cache.lse), xp.inf, cache.lse)  # a row that sees no key: P = exp(S' - inf) = 0
    scores -= lse
    return xp.exp(scores, out=scores)  # P = exp(S' - L), (B,H,Tq,Tk)


def sink_weights(cache):
    """The mass ``P_sink (B,H,Tq,1)`` each row gave its sink, of a plain or tiled attention cache (0 everywhere
    without sinks): plain, the ``P_sink`` it keeps; tiled, ``exp(s_h - L)`` from its log-sum-exp (module
    docstring, Attention sinks). With ``attention_weights``, each row sums to 1 but for a row that sees nothing."""
    if not isinstance(cache, (AttentionCache, FlashAttentionCache)):
        raise TypeError(f"expected an AttentionCache or FlashAttentionCache, got {type(cache).__name__}")
    xp, (B, H, Tq) = get_xp(cache.q), cache.q.shape[:3]
    if cache.sinks is None:
        return xp.zeros((B, H, Tq, 1), dtype=cache.q.dtype)
    if isinstance(cache, AttentionCache):
        return cache.sink_probs
    return xp.exp(cache.sinks.reshape(1, H, 1, 1) - cache.lse)  # (1,H,1,1) - (B,H,Tq,1) -> (B,H,Tq,1)


def flash_attention_backward(dout, cache: FlashAttentionCache):
    """``(dq, dk, dv)`` from ``dout (B,H,Tq,Dv)``, recomputing ``P`` tile by tile (module docstring),
    or reading the tiles the forward kept (``keep_probs``); the same parts as the forward, on threads.
    With sinks ``dsinks (H,)`` follows: ``ds_h = -sum_{b,i} P_sink D`` (module docstring, Attention sinks)."""
    q, k, v, out = cache.q, cache.k, cache.v, cache.out
    check_grad_out(dout, out.shape, out.dtype)
    xp = get_xp(dout, out)
    group = q.shape[1] // k.shape[1]
    stack = _stacked_heads(cache.parts, group)
    dq, dk, dv = xp.zeros_like(q), xp.zeros_like(k), xp.zeros_like(v)
    kept = cache.probs or [None] * len(cache.parts)

    def backward_part(part_and_kept):  # writes dq[part] and dk, dv of its kv heads, or returns its share of them
        part, probs = part_and_kept
        dropout = None if cache.dropout is None else cache.dropout.part(part)
        kv = _kv_part(part, group)
        shared = stack < group  # the part holds a share of a group: other parts read the same kv heads
        dk_part, dv_part = (xp.zeros_like(k[kv]), xp.zeros_like(v[kv])) if shared else (dk[kv], dv[kv])
        dq_rows = stacked_buffer(dq[part], stack)  # (b,r,Tq g,D)
        neg_delta = _neg_delta(dout[part], out[part], cache.block_q)  # (b,h,Tq,1)
        stacked = (stack_heads(a, stack) for a in (dout[part], q[part], cache.lse[part], neg_delta))  # (b,r,Tq g,.)
        seam = cache.seam.part(part, stack)
        _backward_tiles(*stacked, k[kv], v[kv], stack, seam, probs, dropout, dq_rows, dk_part, dv_part, cache)
        unstack_into(dq[part], dq_rows, stack)
        return (kv, dk_part, dv_part) if shared else None

    for share in run_parts(backward_part, list(zip(cache.parts, kept)), cache.workers):
        if share is not None:  # dK_j, dV_j sum over every query head that read kv head j
            kv, dk_part, dv_part = share
            dk[kv] += dk_part
            dv[kv] += dv_part
    if cache.sinks is None:
        return dq, dk, dv
    # forward: the sink column s_h of every row, P_sink = exp(s_h - L), so ds_h = sum_{b,i} P_sink (-D)
    dsinks = (sink_weights(cache) * _neg_delta(dout, out, cache.block_q)).sum(axis=(0, 2, 3))  # (B,H,Tq,1) -> (H,)
    return dq, dk, dv, dsinks


def _neg_delta(dout, out, block_q: int):
    """``-D = -rowsum(dO * O)`` ``(b,h,Tq,1)``, the softmax gradient's row term (module docstring, Backward)."""
    neg_delta = get_xp(dout).empty(out.shape[:-1] + (1,), dtype=out.dtype)  # (b,h,Tq,1)
    for q_start, q_stop in tiles(out.shape[2], block_q):  # one tile at a time: no (Tq, Dv) transient
        rows = slice(q_start, q_stop)
        neg_delta[:, :, rows] = -(dout[:, :, rows] * out[:, :, rows]).sum(axis=-1, keepdims=True)
    return neg_delta


def _stacked_keep(xp, dropout: AttentionDropout, q_start, q_stop, k_start, k_stop, group: int):
    """A tile's dropout mask, drawn for its query heads ``(b,h,nq,nk)``, stacked like the rows: ``(b,h/g,nq g,nk)``."""
    return stack_heads(dropout.keep(xp, range(q_start, q_stop), range(k_start, k_stop)), group)


def _transposed(a, scale=1.0, ones_row=False):
    """``s A^T`` over the last two axes, contiguous, ``(b,h,n,D) -> (b,h,D,n)``; or ``[s A^T; 1]``,
    ``(b,h,D+1,n)``, with ``ones_row``. A product whose right operand is contiguous runs faster than
    one with a transposed view (``ops/WHY_FAST.md``)."""
    xp = get_xp(a)
    n, D = a.shape[-2:]
    out = xp.empty(a.shape[:-2] + (D + 1 if ones_row else D, n), dtype=a.dtype)
    xp.multiply(a.swapaxes(-1, -2), scale, out=out[..., :D, :])
    if ones_row:
        out[..., -1, :] = 1
    return out


def _recomputed_probs(queries, keys_t, seam, query_rows: range, key_rows: range, offset: int, masked: bool):
    """``(P, slope)``: ``P = exp(S' - L)`` of one tile from ``[Q, -L] (b,r,nq g,D+1)`` and ``[s K^T; 1]
    (b,r,D+1,nk)``, ``S'`` the scores with the seam's terms, as the forward added them; ``slope`` the seam's
    transform's ``f'(S)`` (None without one). A transform needs ``S`` itself before ``L`` is subtracted: then
    ``S2 = Q (s K^T)`` without the extra column, ``f``, the terms, and ``-L`` after them."""
    xp = get_xp(queries)
    if seam.transformed:  # forward: S2' = f(S2) + terms
        scores = xp.matmul(queries[..., :-1], keys_t[..., :-1, :])  # S2: (b,r,nq g,D) @ (b,r,D,nk)
        slope = seam.transform(scores, LOG2_E)
        scores += queries[..., -1:]  # - L log2(e), (b,r,nq g,1)
    else:
        scores, slope = xp.matmul(queries, keys_t), None  # S2 - L2: (b,r,nq g,D+1) @ (b,r,D+1,nk) -> (b,r,nq g,nk)
    if masked or seam.biased:
        seam.add(scores, query_rows, key_rows, offset, masked, LOG2_E)  # + terms log2(e)
    return xp.exp2(scores, out=scores), slope  # exp2(S2' - L log2 e) = exp(S' - L), in place


def _backward_tiles(dout, q, lse, neg_delta, k, v, group, seam, kept, dropout, dq, dk, dv, cache) -> None:
    """The backward over every tile of one part, key tile by key tile (the outer loop), then the query tiles
    that see it: adds into ``dq (b,r,Tq g,D)``, ``dk, dv (b,r,Tk,.)`` in place.

    ``dout, q, lse, neg_delta (-D), dq`` hold the ``g = group`` query heads of each kv head stacked row by row, as in
    ``_forward_tiles``: ``dK_J += s dS^T Q_I`` and ``dV_J += P^T dO_I`` then sum over the group inside the
    product, whose inner size is the tile's ``nq g`` stacked rows. ``seam``: the score modifiers on the part.

    Two subtractions ride inside matrix products, with one more column: ``S - L = [Q, -L] [s K^T; 1]``
    and ``dP - D = [dO, -D] [V^T; 1]`` (without dropout). The key tile's ``[s K^T; 1]`` and ``[V^T; 1]``
    are built once, for all its query tiles.
    """
    xp = get_xp(dout)
    Tq, Tk = q.shape[2] // group, k.shape[2]
    scale = cache.scale
    # -L log2(e), base 2 like the scores; a row that sees no key has L = -inf but every score masked
    # (P = 0), so any finite L serves: 0
    neg_lse = xp.where(xp.isneginf(lse), 0.0, lse * -LOG2_E).astype(q.dtype, copy=False)  # (b,r,Tq g,1)
    for k_start, k_stop in tiles(Tk, cache.block_k):
        keys_t = _transposed(k[:, :, k_start:k_stop], scale * LOG2_E, ones_row=True)  # [(s log2 e) K^T; 1]
        values_t = _transposed(v[:, :, k_start:k_stop], ones_row=True)  # [V^T; 1] (b,r,Dv+1,nk)
        for q_start, q_stop, lo, hi, masked in _query_tiles(k_start, k_stop, Tq, Tk, seam, cache.block_q):
            rows, keys, seen = slice(q_start * group, q_stop * group), slice(lo, hi), slice(lo - k_start, hi - k_start)
            dout_tile = dout[:, :, rows]  # (b,r,nq g,Dv)
            slope = None  # f'(S) of a transform (softcap), recomputed with P; kept tiles have none
            if kept is not None:
                probs = kept[q_start, k_start]  # P, kept by the forward (keep_probs)
            else:  # forward: S = s Q K^T, P = exp(S - L)
                queries = _with_column(q[:, :, rows], neg_lse[:, :, rows])  # [Q, -L] (b,r,nq g,D+1)
                probs, slope = _recomputed_probs(queries, keys_t[..., seen], seam, range(q_start, q_stop),
                                                 range(lo, hi), Tk - Tq, masked)  # fmt: skip
                del queries  # not held beside dprobs
            # forward: O = P V, so dV = P^T dO and dP = dO V^T; with dropout O = (P Z) V, so
            # dV = (P Z)^T dO and dP = (dO V^T) Z, Z drawn again from the seed
            keep = None if dropout is None else _stacked_keep(xp, dropout, q_start, q_stop, lo, hi, group)
            weights = probs if keep is None else dropped(probs, keep, dropout.scale(q.dtype))  # keep (b,r,nq g,nk) bool
            dv[:, :, keys] += xp.matmul(weights.swapaxes(-1, -2), dout_tile)  # (b,r,nk,nq g) @ (b,r,nq g,Dv)
            del weights  # (b,r,nq g,nk): not held beside dprobs
            # forward: P = softmax(S), so dS = P * (dP - D)
            if keep is None:
                dprobs = xp.matmul(_with_column(dout_tile, neg_delta[:, :, rows]), values_t[..., seen])  # dP - D
            else:  # (b,r,nq g,Dv+1) @ (b,r,Dv+1,nk) -> (b,r,nq g,nk)
                dprobs = xp.matmul(dout_tile, values_t[:, :, :-1, seen])  # dO V^T: (b,r,nq g,Dv) @ (b,r,Dv,nk)
                xp.multiply(dprobs, keep, out=dprobs)
                dprobs *= dropout.scale(q.dtype)
                dprobs += neg_delta[:, :, rows]
            dscores = xp.multiply(dprobs, probs, out=dprobs)  # (b,r,nq g,nk) in place
            if slope is not None:  # forward: S' = f(S) (softcap), so dS = f'(S) dS'
                dscores *= slope
            del probs  # not held beside the two products below
            # forward: S = s Q K^T, so dQ = s dS K and dK = s dS^T Q (the factor s once, at the end); dK and dV
            # sum over the group's stacked rows inside their products
            dq[:, :, rows] += xp.matmul(dscores, k[:, :, keys])  # (b,r,nq g,nk) @ (b,r,nk,D) -> (b,r,nq g,D)
            dk[:, :, keys] += xp.matmul(dscores.swapaxes(-1, -2), q[:, :, rows])  # (b,r,nk,nq g) @ (b,r,nq g,D)
            del dprobs, dscores, keep, slope  # not held beside the next tile's
    dq *= scale
    dk *= scale
