"""NumPy's BLAS thread pool: how many threads it runs, and one thread for a block of code.

NumPy's wheels bundle OpenBLAS (the scipy-openblas build). Every matrix
product is handed to its thread pool; for a large product that is the fastest
way to use the cores, but for a small one (a ``128 x 64 @ 64 x 256`` tile of
tiled attention) the threads spend as long waiting for each other as working,
and one of them descheduled by another process stalls the whole product.
Callers that split work across threads of their own (``ops/_parallel.py``)
run each product on one BLAS thread instead::

    blas_threads()            # 2 on a 2-core machine (OPENBLAS_NUM_THREADS if set)
    with one_blas_thread():   # every product in this block (in any thread) runs on one thread
        ...
    with blas_threads_set(4): # and in this one (from one thread at a time) on four
        ...

``OPENBLAS_NUM_THREADS`` is read once, when NumPy loads OpenBLAS; a process
that has imported NumPy already (every numforge process) changes the count
through ``numpy_openblas().set_num_threads(n)`` instead. The library is
reached by ``ctypes`` (no dependency). Where NumPy links
another BLAS (MKL, Accelerate, a system OpenBLAS) ``numpy_openblas()`` is None:
``blas_threads()`` says 1 and ``one_blas_thread()`` leaves the threads alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import os
import threading
from collections.abc import Iterator

import numpy as np


class OpenBlas:
    """NumPy's bundled OpenBLAS, reached by ctypes to read and set its threads."""

    def __init__(self, lib: ctypes.CDLL, suffix: str):
        self._set = getattr(lib, f"scipy_openblas_set_num_threads{suffix}")
        self._get = getattr(lib, f"scipy_openblas_get_num_threads{suffix}")
        self._core = getattr(lib, f"scipy_openblas_get_corename{suffix}")
        self._core.restype = ctypes.c_char_p

    def set_num_threads(self, n: int) -> None:
        self._set(n)

    def num_threads(self) -> int:
        return self._get()

    def corename(self) -> str:
        return self._core().decode()


@functools.cache
def numpy_openblas() -> OpenBlas | None:
    """NumPy's OpenBLAS, or None where NumPy links another BLAS."""
    libs = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    for path in glob.glob(os.path.join(libs, "*openblas*")):
        lib = ctypes.CDLL(path)
        for suffix in ("64_", ""):
            if hasattr(lib, f"scipy_openblas_set_num_threads{suffix}"):
                return OpenBlas(lib, suffix)
    return None


def blas_threads() -> int:
    """The threads NumPy's OpenBLAS runs a product on now (1 where it is not reachable)."""
    blas = numpy_openblas()
    return 1 if blas is None else blas.num_threads()


_lock = threading.Lock()
_holders = 0  # nested or concurrent `one_blas_thread` blocks open now
_saved = 1  # the thread count to restore when the last one closes


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run NumPy's products on one BLAS thread inside the block, then restore the count.

    The setting is process-wide; blocks may nest or overlap (in several threads):
    the count is restored when the last one closes.
    """
    global _holders, _saved
    blas = numpy_openblas()
    if blas is None:
        yield
        return
    with _lock:
        if _holders == 0:
            _saved = blas.num_threads()
            blas.set_num_threads(1)
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                blas.set_num_threads(_saved)


@contextlib.contextmanager
def blas_threads_set(count: int) -> Iterator[None]:
    """Run NumPy's products on ``count`` BLAS threads inside the block, then restore the count.

    Unlike ``one_blas_thread`` it does not count its holders: open it from one thread at a time.
    """
    blas = numpy_openblas()
    if blas is None:
        yield
        return
    saved = blas.num_threads()
    blas.set_num_threads(count)
    try:
        yield
    finally:
        blas.set_num_threads(saved)
