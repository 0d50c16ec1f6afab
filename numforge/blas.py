"""NumPy's bundled OpenBLAS (the scipy-openblas build), reached by ctypes to read and set its threads.

``OPENBLAS_NUM_THREADS`` is read once, when NumPy loads OpenBLAS; a process
that has imported NumPy already (every numforge process) changes the count
through ``numpy_openblas().set_num_threads(n)`` instead.
"""

from __future__ import annotations

import ctypes
import glob
import os

import numpy as np


class OpenBlas:
    """The thread and kernel functions of one loaded OpenBLAS library."""

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


def numpy_openblas() -> OpenBlas | None:
    """NumPy's OpenBLAS, or None where NumPy links another BLAS (then threads are left as they are)."""
    libs = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    for path in glob.glob(os.path.join(libs, "*openblas*")):
        lib = ctypes.CDLL(path)
        for suffix in ("64_", ""):
            if hasattr(lib, f"scipy_openblas_set_num_threads{suffix}"):
                return OpenBlas(lib, suffix)
    return None
