"""An ordered map over worker processes, with a bounded number of tasks in flight.

``ordered_map(make_worker, worker_args, tasks, workers)`` yields
``worker(task)`` for each task, in the order of the tasks, where each process
builds its ``worker = make_worker(*worker_args)`` once (a tokenizer, say).
At most ``2 * workers`` tasks are queued or running at a time, and the tasks are
drawn from their iterator only as results are taken, so memory holds a few
tasks, never the whole input (``multiprocessing.Pool.imap`` would drain the
iterator as fast as it could). With one worker everything runs in this process.

Stopping: the map is a job's safe point, ``interrupts.check()`` before each
result, so Ctrl-C or SIGTERM (recorded by the job's ``interrupts.deferred``
block) ends it within a task: the queued tasks are cancelled and the running
ones finish (a task is about a second of work). The workers ignore those
signals (a signal sent to the whole process group reaches them too; the parent
decides) and end by themselves if the parent is killed outright. A worker that
dies (out of memory, say) is an error here (``concurrent.futures``'
``BrokenProcessPool``), not a hang.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor

from .. import interrupts
from ..checks import check_positive_int

_worker = None  # in a worker process: the callable made by make_worker


def default_workers() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def ordered_map(make_worker: Callable, worker_args: tuple, tasks: Iterable, workers: int) -> Iterator:
    """``make_worker(*worker_args)(task)`` for each task, in order, on ``workers`` processes."""
    if check_positive_int(workers, "workers") == 1:
        work = make_worker(*worker_args)
        for task in tasks:
            yield _checked(work(task))
        return
    pool = ProcessPoolExecutor(workers, initializer=_start_worker, initargs=(make_worker, worker_args))
    try:
        pending = deque()
        for task in tasks:
            pending.append(pool.submit(_run, task))
            if len(pending) >= 2 * workers:
                yield _checked(pending.popleft().result())
        while pending:
            yield _checked(pending.popleft().result())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _checked(result):
    """``result``, unless the job was asked to stop while it was computed (a safe point)."""
    interrupts.check()
    return result


def _start_worker(make_worker: Callable, worker_args: tuple) -> None:
    global _worker
    interrupts.worker_ignores_signals()  # stopping is the parent's to decide
    _worker = make_worker(*worker_args)


def _run(task):
    return _worker(task)
