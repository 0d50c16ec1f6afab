"""Sums over one axis as BLAS matrix-vector products: ``a @ ones`` and ``ones @ a``.

NumPy's ``a.sum(axis=-1)`` over short rows and ``a.sum(axis=0)`` down the
rows of a C-contiguous ``(N, C)`` array run far below memory speed; one BLAS
call does the same sum 2.5-4x faster at the model's shapes (N = 2048,
C = 128 and 256, float32, one thread: 34 against 118 microseconds for the
row sums, 29 against 82 for the column sums). The order of the additions
differs, so results differ from NumPy's by rounding.
"""

from __future__ import annotations

from ..backend import get_xp


def row_sums(a):
    """Sum over the last axis: ``(..., C) -> (...)``. Example: ``row_sums([[1, 2], [3, 4]]) = [3, 7]``."""
    return a @ get_xp(a).ones(a.shape[-1], dtype=a.dtype)  # (..., C) @ (C,) -> (...)


def column_sums(rows):
    """Sum over the rows of ``rows (N, C)``: ``-> (C,)``. Example: ``column_sums([[1, 2], [3, 4]]) = [4, 6]``."""
    return get_xp(rows).ones(rows.shape[0], dtype=rows.dtype) @ rows  # (N,) @ (N, C) -> (C,)
