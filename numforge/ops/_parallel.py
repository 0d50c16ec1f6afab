"""Tiled attention on threads of our own: the ``(batch, head)`` pairs split into parts, one part a thread.

Each tile product of the tiled kernel is small (``128 x 64 @ 64 x 256`` per
head). Handed to OpenBLAS's thread pool, thousands of them a call, the BLAS
threads synchronize on every product: a product lasts as long as its slowest
thread, and one thread descheduled by any other process on the machine stalls
it (measured: ``ops/WHY_FAST.md``).
Heads are independent, so the kernel splits them instead: parts of a few
whole heads (and batch rows), each walked through every tile by one of
``workers`` Python threads with products on one BLAS thread. NumPy releases the GIL inside
matrix products and ufuncs, so the parts run at once; nothing waits for
anything until the last part ends, and a descheduled thread delays only its own
part. ``workers`` follows NumPy's BLAS thread count (``OPENBLAS_NUM_THREADS``
or all cores), so a user who asked for one BLAS thread gets one thread here.

Example: B = 1, H = 8, two workers, 128 x 256 tiles -> parts of heads 0-3 and 4-7, one a thread;
with more heads (or batch rows) than that, each thread takes the next part when it is done with its last.

Grouped-query attention: a part holds the query heads of whole key/value groups, or an equal share of one
group (multi-query attention, H = 8, H_kv = 1: heads 0-3 and 4-7 of the one group, one a thread). Parts
that share a kv head each sum their own ``dk, dv``, added together after the threads are done.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..blas import blas_threads, one_blas_thread

# Below this many scores per call (B H Tq Tk) the kernel runs on the calling thread alone: starting the
# parts costs about as much as a small call (decoding one token with a KV cache is a (B,H,1,Tk) call).
PARALLEL_MIN_SCORES = 2**16
# On several threads, a part's (pairs, block_q, block_k) score tile stays within this (ops/WHY_FAST.md).
PART_TILE_BYTES = 2**19

Part = tuple[slice, slice]  # (batches, heads)


def worker_count(xp, B: int, H: int, Tq: int, Tk: int) -> int:
    """How many threads to split the ``(B, H)`` pairs across: NumPy's BLAS threads, at most ``B * H``;
    1 on the GPU (CuPy runs the products on the device) and for small calls."""
    if xp is not np or B * H * Tq * Tk < PARALLEL_MIN_SCORES:
        return 1
    return max(1, min(blas_threads(), B * H))


def pairs_per_part(workers: int, B: int, H: int, tile_rows: int, tile_cols: int, itemsize: int) -> int:
    """How many ``(batch, head)`` pairs one part holds: all of them on one thread; on several, as many as
    keep a part's score tile within ``PART_TILE_BYTES`` (at least one).

    The bound trades two costs (``ops/WHY_FAST.md``): every tile costs each part a few dozen NumPy
    calls, whose Python between them holds the GIL, so smaller parts mean more calls and more
    waiting for the GIL; larger parts hold larger tiles (two alive per thread). Parts, when
    there are more than threads, are handed out as threads come free. Example: tiles of
    128 x 256 float32 (128 KiB a head) -> 4 heads a part; B = 1, H = 8 -> 2 parts on 2 threads.
    """
    if workers == 1:
        return B * H
    return max(1, PART_TILE_BYTES // (tile_rows * tile_cols * itemsize))


def head_parts(B: int, H: int, pairs: int, group: int = 1) -> list[Part]:
    """The ``(B, H)`` pairs cut into rectangles of at most ``pairs``: heads first, then batches.

    With grouped-query attention (``group`` query heads share a key/value head, ``ops/_kv_groups.py``) a
    part holds whole groups, or, when ``pairs < group``, an equal share of one group (a divisor of
    ``group``): every part then has the same number of query heads per kv head.
    Example: ``head_parts(1, 8, 2) == [(slice(0, 1), slice(0, 2)), ..., (slice(0, 1), slice(6, 8))]``;
    ``head_parts(1, 8, 4, group=8)``: heads 0-3 and 4-7, two halves of the one group.
    """
    heads = min(H, pairs)
    if heads >= group:
        heads -= heads % group  # whole groups
    else:
        heads = max(d for d in range(1, heads + 1) if group % d == 0)  # a share of one group
    batches = max(1, min(B, pairs // heads))
    return [
        (slice(b, min(b + batches, B)), slice(h, min(h + heads, H)))
        for b in range(0, B, batches)
        for h in range(0, H, heads)
    ]


@functools.cache
def _pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="numforge-attention")


def run_parts(work: Callable[[Part], object], parts: list, workers: int) -> list:
    """``[work(part) for part in parts]``: on ``workers`` threads, each taking the next part as it comes
    free, every product on one BLAS thread; in order on the calling thread when ``workers`` is 1."""
    if workers == 1 or len(parts) == 1:
        return [work(part) for part in parts]
    with one_blas_thread():
        return list(_pool(workers).map(work, parts))
