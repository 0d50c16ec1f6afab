"""Long jobs stop cleanly: a stop signal is a request that the job honours at its next safe point.

Python raises ``KeyboardInterrupt`` wherever the main thread happens to be
when Ctrl-C arrives, a ``finally`` block, a finalizer or a lock's release
included, where it is printed as "Exception ignored" and lost (measured:
``numforge prepare`` then ran to the end and exited 0). So inside a job the
signal handler only records the signal, and the job looks at the record at
its own safe points (after each task, each merge, each training step)::

    with interrupts.deferred():    # from here SIGINT and SIGTERM are recorded, not raised
        for task in tasks:
            interrupts.check()      # raises Interrupted if one was recorded
            ...

- ``Interrupted`` is a ``KeyboardInterrupt`` whose ``exit_status`` is 128 + the
  signal's number: 130 for Ctrl-C (SIGINT), 143 for SIGTERM (what Slurm,
  Kubernetes, systemd and ``timeout`` send before they kill). Cleanup written
  for Ctrl-C (``except KeyboardInterrupt``, ``finally``) runs for both.
- A second stop signal raises at once: whoever sent it insists.
- A stop recorded after the job's last safe point is raised when the outermost
  ``deferred`` block ends, unless the job said it stopped for it
  (``stopping``): a signal is never lost.
- SIGUSR1 (``deferred(checkpoints=True)``, training only) asks for a
  checkpoint: ``take_checkpoint_request`` says whether one was asked since
  the last call, and the job goes on.
- Outside ``deferred`` blocks, ``raising`` (used by the command line) makes
  SIGTERM raise ``Interrupted`` the way Ctrl-C raises ``KeyboardInterrupt``.
- Worker processes (``worker_ignores_signals``) ignore all three (their parent
  decides when they stop) and end when their parent dies.

Signal handlers run in the main thread only; in another thread these blocks
change nothing and ``check`` never raises.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # in rising precedence: when ranks saw both, SIGTERM's status wins
CHECKPOINT_SIGNAL = getattr(signal, "SIGUSR1", None)  # None on Windows


class Interrupted(KeyboardInterrupt):
    """The job stopped for a signal; ``exit_status`` is 128 + its number (130 Ctrl-C, 143 SIGTERM)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum

    def __str__(self) -> str:
        return describe(self.signum)


def describe(signum: int) -> str:
    """'interrupted' for Ctrl-C, 'interrupted (SIGTERM)' for the others."""
    return "interrupted" if signum == signal.SIGINT else f"interrupted ({signal.Signals(signum).name})"


class _Requests:
    """What the handlers recorded for the job now running in this process."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.depth = 0  # deferred blocks open
        self.stop: int | None = None  # the first stop signal received
        self.stopping = False  # the job stops for it and says so itself
        self.checkpoint = False  # a SIGUSR1 not yet taken


_requests = _Requests()


def _record(signum, frame) -> None:
    if signum == CHECKPOINT_SIGNAL:
        _requests.checkpoint = True
    elif _requests.stop is None:
        _requests.stop = signum
    else:
        raise Interrupted(signum)


def _raise(signum, frame) -> None:
    raise Interrupted(signum)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def _handlers(handler, signals) -> Iterator[None]:
    previous = {signum: signal.signal(signum, handler) for signum in signals}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


@contextlib.contextmanager
def raising() -> Iterator[None]:
    """SIGTERM raises ``Interrupted`` as Ctrl-C does (and Ctrl-C raises it too), until the block ends."""
    if not _in_main_thread():
        yield
        return
    with _handlers(_raise, STOP_SIGNALS):
        yield


@contextlib.contextmanager
def deferred(checkpoints: bool = False) -> Iterator[None]:
    """A job's block: the first SIGINT or SIGTERM is recorded for ``check``; a second one raises at once.

    ``checkpoints``: SIGUSR1 is recorded too (``take_checkpoint_request``).
    Blocks nest; the outermost one installs the handlers, restores the
    previous ones at its end, and raises a stop that no safe point saw.
    """
    if not _in_main_thread():
        yield
        return
    if _requests.depth:  # nested in a job already deferring (a tokenizer trained for a run)
        _requests.depth += 1
        try:
            yield
        finally:
            _requests.depth -= 1
        return
    signals = STOP_SIGNALS + ((CHECKPOINT_SIGNAL,) if checkpoints and CHECKPOINT_SIGNAL is not None else ())
    _requests.reset()
    _requests.depth = 1
    try:
        with _handlers(_record, signals):
            yield
            if _requests.stop is not None and not _requests.stopping:
                raise Interrupted(_requests.stop)
    finally:
        _requests.reset()


def stop_requested() -> int | None:
    """The stop signal recorded in this job, or None."""
    return _requests.stop


def check() -> None:
    """A safe point: raise ``Interrupted`` if a stop signal was recorded (never outside a ``deferred`` block)."""
    if _requests.stop is not None:
        raise Interrupted(_requests.stop)


def stopping() -> None:
    """The job stops for the recorded signal and reports it itself: the ``deferred`` block will not raise it."""
    _requests.stopping = True


def take_checkpoint_request() -> bool:
    """Whether SIGUSR1 arrived since the last call."""
    asked, _requests.checkpoint = _requests.checkpoint, False
    return asked


# ---------------------------------------------------------------- worker processes


def worker_ignores_signals(poll_seconds: float = 0.5) -> None:
    """In a worker process: ignore SIGINT, SIGTERM and SIGUSR1 (the parent decides), and end when the parent dies.

    A signal sent to the whole process group (Ctrl-C on a terminal, Slurm,
    systemd) reaches the workers too; the parent stops them. A parent killed
    outright (kill -9) cannot: a thread of each worker sees its parent change
    and ends the worker, which would otherwise wait for tasks forever.
    """
    _requests.reset()  # what the parent had recorded when it forked this worker is the parent's
    for signum in (*STOP_SIGNALS, CHECKPOINT_SIGNAL):
        if signum is not None:
            signal.signal(signum, signal.SIG_IGN)
    parent = os.getppid()

    def end_with_parent() -> None:
        while os.getppid() == parent:
            time.sleep(poll_seconds)
        os._exit(1)

    threading.Thread(target=end_with_parent, name="end-with-parent", daemon=True).start()
