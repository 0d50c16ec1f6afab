"""Data parallelism over threads inside one process: each micro-batch's rows split into parts, one thread a part.

``parallel.py`` splits the global batch over MPI ranks, and each rank's share
into ``--grad-accum`` micro-batches. Here each micro-batch of ``m`` rows is cut
once more, into ``P`` consecutive parts (``P`` = the thread count, at most
``m``), and ``P`` Python threads run the forward and backward of one part
each, at once: NumPy releases the GIL inside its ufunc loops and matrix
products, which is nearly all of a step. Every product inside a part runs on
one BLAS thread (``blas.one_blas_thread``), so ``P`` threads keep ``P`` cores
busy, never ``P x`` BLAS's; the tiled attention, whose own head split follows
NumPy's BLAS threads (``ops/_parallel.py``), then runs on its part's thread.

The parts' losses and gradients are added in the parts' order, never in the
order the threads finish: a run at a fixed thread count repeats bit for bit,
and resumes exactly; against one thread it differs by the order of float
additions only. Each part's loss is the mean over its ``c_p`` counted targets
(those not ``IGNORE_INDEX``), so the mean over the ``C`` counted targets of the
whole batch, cut into ``Q`` parts (ranks x micro-batches x threads), is
``sum_p (c_p / C) loss_p``, and the same weights hold for the gradients. Parts
that count alike (16 full rows on 2 threads) are added as they are and the
``1 / Q`` joins the division by the number of parts; the others (10 rows on 3
threads: 4, 3, 3; or rows with ignored targets) are first scaled by
``Q c_p / C`` (1.2, 0.9, 0.9), in their own threads. A part with no counted
target has loss 0 and zero gradients (``ops/cross_entropy.py``) and weight 0;
a batch with none at all has loss 0 and zero gradients, as on one thread.

The count: ``--threads N``, else ``$NUMFORGE_THREADS``, else every core this
process may run on (``os.sched_getaffinity``); one under ``mpiexec`` (the
ranks fill the cores) and on the GPU (CuPy runs the work on the device).
Why threads rather than processes, and what they gain, measured:
``ops/WHY_FAST.md``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ..backend import backend_name
from ..blas import blas_threads_set, numpy_openblas, one_blas_thread
from ..checks import check_positive_int

THREADS_VARIABLE = "NUMFORGE_THREADS"


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (``taskset``, cgroups' cpusets), else all of them."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no affinity call
        return os.cpu_count() or 1


def thread_count(threads: int | None = None, ranks: int = 1) -> int:
    """``threads`` when given, else ``$NUMFORGE_THREADS``, else ``usable_cores()``; 1 by default under MPI
    (``ranks`` > 1: a rank per core) and on CuPy. Example: on 8 cores, ``thread_count() == 8``."""
    if threads is not None:
        return check_positive_int(threads, "threads")
    text = os.environ.get(THREADS_VARIABLE, "")
    if text:
        if not text.isdigit() or int(text) < 1:
            raise ValueError(f"{THREADS_VARIABLE} must be an integer >= 1, got {text!r}")
        return int(text)
    if ranks > 1 or backend_name() == "cupy":
        return 1
    return usable_cores()


def set_blas_threads(count: int) -> None:
    """Run NumPy's products on ``count`` BLAS threads from now on (process-wide)."""
    blas = numpy_openblas()
    if blas is not None and blas.num_threads() != count:  # setting it at all maps OpenBLAS another 32 MB buffer
        blas.set_num_threads(count)


def row_parts(rows: range, count: int) -> list[range]:
    """``rows`` cut into ``min(count, len(rows))`` consecutive ranges whose sizes differ by at most one.

    Example: ``row_parts(range(0, 10), 3) == [range(0, 4), range(4, 7), range(7, 10)]``.
    """
    count = min(count, len(rows))
    share, extra = divmod(len(rows), count)
    parts, start = [], rows.start
    for p in range(count):
        stop = start + share + (p < extra)
        parts.append(range(start, stop))
        start = stop
    return parts


def part_weight(counted: int, total: int, parts: int) -> float | None:
    """``Q c_p / C``, the factor that makes the mean of a part's ``counted`` targets (``c_p``) count as its share of
    the ``total`` (``C``) of the batch's ``parts`` (``Q``) parts; None when it is 1 (the part counts ``C / Q``).

    Example: 10 full rows on 3 threads, ``part_weight(4 * T, 10 * T, 3) == 1.2``.
    """
    if parts * counted == total:  # also a batch with no counted target: every part 0, loss 0
        return None
    return parts * counted / total  # ints: one rounding, as P n_p / m for full rows


class Threads:
    """``count`` threads that run the parts of a micro-batch at once; with one, the caller runs them in turn.

    ``map(work, parts)`` is ``[work(part) for part in parts]``, computed on the
    threads (started at the first call, kept for the next) with every product on
    one BLAS thread; an exception in any part is raised in the caller. A
    micro-batch of one row, which cannot split, runs in the caller with its
    products on ``count`` BLAS threads instead.
    """

    def __init__(self, count: int = 1):
        self.count = check_positive_int(count, "threads")
        self._pool = None

    def map(self, work: Callable[[range], object], parts: list[range]) -> list:
        if self.count == 1:
            return [work(part) for part in parts]
        if len(parts) == 1:
            with blas_threads_set(self.count):
                return [work(parts[0])]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.count, thread_name_prefix="numforge-rows")
        with one_blas_thread():
            return list(self._pool.map(work, parts))
