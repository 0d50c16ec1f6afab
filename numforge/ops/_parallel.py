"""Tiled attention on threads of our own: the ``(batch, head)`` pairs split into parts, one part a thread.

Each tile product of the tiled kernel is small (``128 x 64 @ 64 x 256`` per
head). Handed to OpenBLAS's thread pool, thousands of them a call, the BLAS
threads synchronize on every product: a product lasts as long as its slowest
thread, and one thread descheduled by any other process on the machine stalls
it (measured on 2 cores under load: median 0.3 ms, one in ten over 300 ms).
Heads are independent, so the kernel splits them instead: ``workers`` parts of
whole heads (or whole batch rows), each walked through every tile by its own
Python thread with products on one BLAS thread. NumPy releases the GIL inside
matrix products and ufuncs, so the parts run at once; nothing waits for
anything until the last part ends, and a descheduled thread delays only its own
part. ``workers`` follows NumPy's BLAS thread count (``OPENBLAS_NUM_THREADS``
or all cores), so a user who asked for one BLAS thread gets one thread here.

Example: B = 1, H = 8, two workers -> heads 0-3 on one thread, 4-7 on the other.
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

Part = tuple[slice, slice]  # (batches, heads)


def worker_count(xp, B: int, H: int, Tq: int, Tk: int) -> int:
    """How many threads to split the ``(B, H)`` pairs across: NumPy's BLAS threads, at most ``B * H``;
    1 on the GPU (CuPy runs the products on the device) and for small calls."""
    if xp is not np or B * H * Tq * Tk < PARALLEL_MIN_SCORES:
        return 1
    return max(1, min(blas_threads(), B * H))


def head_parts(B: int, H: int, workers: int) -> list[Part]:
    """``workers`` even parts of the ``(B, H)`` pairs, cut along heads (or along batches when ``B > H``).

    Example: ``head_parts(1, 8, 2) == [(slice(0, 1), slice(0, 4)), (slice(0, 1), slice(4, 8))]``.
    """
    along_heads = H >= B
    n = H if along_heads else B
    workers = min(workers, n)
    cuts = [i * n // workers for i in range(workers + 1)]
    spans = [slice(start, stop) for start, stop in zip(cuts, cuts[1:])]
    return [(slice(0, B), span) if along_heads else (span, slice(0, H)) for span in spans]


@functools.cache
def _pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="numforge-attention")


def run_parts(work: Callable[[Part], object], parts: list[Part]) -> list:
    """``[work(part) for part in parts]``, the parts on threads at once, each product on one BLAS thread."""
    if len(parts) == 1:
        return [work(parts[0])]
    with one_blas_thread():
        return list(_pool(len(parts)).map(work, parts))
