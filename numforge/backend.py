"""Array backend: NumPy on the CPU, CuPy on a CUDA GPU, one code path for both.

Math code never imports NumPy or CuPy for its arithmetic. It asks its inputs
which module they belong to::

    xp = get_xp(x, weight)      # numpy or cupy, following the arrays
    y = xp.matmul(x, weight)

Code that *creates* arrays from nothing (parameter init, test data) uses the
selected backend: ``xp = array_module()``. The backend is chosen by the
environment variable ``NUMFORGE_BACKEND`` (``numpy``, the default, or
``cupy``), by ``set_backend(name)``, or for a block of code by
``with use_backend(name): ...``.

``import numforge`` never imports CuPy; it is imported the first time the
CuPy backend is selected.

Dtype policy: float32 is the default; float64 is for gradient checks. A
float32 input must never come out float64. NumPy >= 2 promotes
``float32_array * np.float64(2.0)`` to float64, so scalars that enter array
math are Python floats or ``array.dtype.type(value)``, never NumPy float64
scalars.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Iterator
from types import ModuleType

import numpy as np

BACKENDS = ("numpy", "cupy")
FLOAT_DTYPES = ("float32", "float64")
CUDA_INSTALL_HINT = 'pip install "numforge[cuda]"'


class BackendUnavailableError(RuntimeError):
    """The CuPy backend was asked for where CuPy or a CUDA GPU is missing."""


_selected: str | None = None  # None: read NUMFORGE_BACKEND on first use


def _check_name(name: object, source: str) -> str:
    if not isinstance(name, str) or name.lower() not in BACKENDS:
        raise ValueError(f"{source} must be one of {BACKENDS}, got {name!r}")
    return name.lower()


def _import_cupy() -> ModuleType:
    """Import CuPy and check that a GPU answers; raise a clear error if not."""
    try:
        import cupy
    except ImportError as err:
        raise BackendUnavailableError(
            f"the cupy backend needs CuPy, which is not installed: {CUDA_INSTALL_HINT}"
        ) from err
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # CUDA driver missing or broken
        raise BackendUnavailableError(
            f"the cupy backend needs a CUDA GPU, and CUDA reports: {err}. "
            f"Install a CuPy that matches your CUDA: {CUDA_INSTALL_HINT}"
        ) from err
    if count < 1:
        raise BackendUnavailableError(f"the cupy backend needs a CUDA GPU and none was found ({CUDA_INSTALL_HINT})")
    return cupy


def backend_name() -> str:
    """The selected backend's name, ``"numpy"`` or ``"cupy"``."""
    global _selected
    if _selected is None:
        env = os.environ.get("NUMFORGE_BACKEND", "numpy")
        _selected = _check_name(env, "NUMFORGE_BACKEND")
        if _selected == "cupy":
            _import_cupy()
    return _selected


def set_backend(name: str) -> None:
    """Select ``"numpy"`` or ``"cupy"`` for arrays created from now on."""
    global _selected
    name = _check_name(name, "backend")
    if name == "cupy":
        _import_cupy()
    _selected = name


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[ModuleType]:
    """``with use_backend("cupy") as xp: ...`` selects a backend for a block."""
    previous = backend_name()
    set_backend(name)
    try:
        yield array_module()
    finally:
        set_backend(previous)


def array_module() -> ModuleType:
    """The selected backend's array module (``numpy`` or ``cupy``)."""
    if backend_name() == "cupy":
        return _import_cupy()
    return np


def is_cupy_array(a: object) -> bool:
    """True for a ``cupy.ndarray``; never imports CuPy to find out."""
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(a, cupy.ndarray)


def get_xp(*arrays: object) -> ModuleType:
    """The array module of the given arrays: ``cupy`` if they are CuPy arrays, else ``numpy``.

    Non-array arguments (None, Python scalars) are ignored. Mixing NumPy and
    CuPy arrays is a ``TypeError``: numforge never copies between devices
    behind your back.
    """
    if sys.modules.get("cupy") is None:
        return np  # no CuPy loaded, so no CuPy array exists (the common case, checked first: it is hot)
    kinds = {}
    for position, a in enumerate(arrays):
        if is_cupy_array(a):
            kinds.setdefault("cupy", position)
        elif isinstance(a, np.ndarray):
            kinds.setdefault("numpy", position)
    if len(kinds) > 1:
        raise TypeError(
            f"arrays from two backends were mixed: argument {kinds['numpy']} is a "
            f"numpy.ndarray and argument {kinds['cupy']} is a cupy.ndarray; move them to "
            "one device first (numforge.backend.asarray or to_numpy)"
        )
    if "cupy" in kinds:
        return sys.modules["cupy"]
    return np


def to_numpy(a: object) -> np.ndarray:
    """A NumPy copy (CuPy) or view (NumPy) of ``a``, for printing, saving and tests."""
    if is_cupy_array(a):
        return a.get()
    return np.asarray(a)


def asarray(a: object, dtype: object = None):
    """``a`` as an array of the selected backend (copied to the GPU if needed)."""
    return array_module().asarray(a, dtype=dtype)


def resolve_dtype(dtype: object) -> np.dtype:
    """Validate a float dtype name or object; numforge computes in float32 or float64."""
    try:
        resolved = None if dtype is None else np.dtype(dtype)
    except TypeError:
        resolved = None
    if resolved is None or resolved.name not in FLOAT_DTYPES:
        raise ValueError(f"dtype must be one of {FLOAT_DTYPES}, got {dtype!r}")
    return resolved


def scatter_add(target, indices, values) -> None:
    """In place: ``target[indices[i]] += values[i]`` for every i, repeats accumulated.

    ``target[indices] += values`` is wrong when an index repeats: the
    buffered assignment keeps only one of the updates. This routes to the
    unbuffered ``numpy.add.at`` or ``cupyx.scatter_add``.

    Example: target = [0, 0, 0], indices = [2, 0, 2], values = [1, 10, 100]
    gives [10, 0, 101]. Rows work the same way: ``target (V, C)``,
    ``indices (N,)``, ``values (N, C)``.

    A contiguous target is updated through its flat view, one index per
    element: NumPy's ``add.at`` is much slower into rows (ops/WHY_FAST.md).
    """
    xp = get_xp(target, indices, values)
    if xp is np:
        row_size = math.prod(target.shape[1:])
        whole_rows = tuple(values.shape) == (*indices.shape, *target.shape[1:])  # no broadcasting
        if target.ndim > 1 and target.flags.c_contiguous and whole_rows:  # flat view: (i, c) at i * row_size + c
            flat_indices = indices.reshape(-1, 1).astype(np.intp) * row_size + np.arange(row_size)  # (N, row_size)
            np.add.at(target.reshape(-1), flat_indices.reshape(-1), values.reshape(-1))
        else:
            np.add.at(target, indices, values)
    else:
        import cupyx

        cupyx.scatter_add(target, indices, values)


def overflow_to_inf_allowed():
    """A ``with`` block in which a float overflow to ``inf`` is intended: NumPy does not warn.

    For formulas such as ``1 / (1 + exp(t))`` whose overflow gives the right
    answer (0). CuPy never warns; NumPy's error state does not touch it.
    """
    return np.errstate(over="ignore")


def default_rng(seed: int | tuple[int, ...] | None = None):
    """A seeded random generator of the selected backend (NumPy PCG64 or CuPy's XORWOW).

    ``seed`` is an int or a tuple of ints (both backends hash it through NumPy's
    ``SeedSequence``), so ``(run_seed, stream, step)`` names an independent stream.
    """
    return array_module().random.default_rng(seed)
