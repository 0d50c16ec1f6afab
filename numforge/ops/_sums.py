"""Sums over one axis as BLAS matrix-vector products: ``a @ ones`` and ``ones @ a``.

The same sums as ``a.sum(axis=-1)`` and ``a.sum(axis=0)``, as one BLAS call
each, which NumPy's reductions over short rows do not keep up with (the
measurements: ``ops/WHY_FAST.md``). The order of the additions differs, so
results differ from NumPy's by rounding.
"""

from __future__ import annotations

from ..backend import get_xp


def row_sums(a):
    """Sum over the last axis: ``(..., C) -> (...)``. Example: ``row_sums([[1, 2], [3, 4]]) = [3, 7]``."""
    return a @ get_xp(a).ones(a.shape[-1], dtype=a.dtype)  # (..., C) @ (C,) -> (...)


def column_sums(rows):
    """Sum over the rows of ``rows (N, C)``: ``-> (C,)``. Example: ``column_sums([[1, 2], [3, 4]]) = [4, 6]``."""
    return get_xp(rows).ones(rows.shape[0], dtype=rows.dtype) @ rows  # (N,) @ (N, C) -> (C,)
