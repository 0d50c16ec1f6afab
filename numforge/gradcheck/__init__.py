"""Gradient checks: the finite-difference checker (``check``) and the cases ``numforge gradcheck`` runs.

``check.py`` compares a hand-written backward with central differences in
float64; ``cases.py`` is the registry of every case (``ops.py``,
``attention.py``, ``model.py``), shared by the command and the tests.
"""

from .cases import Case, all_cases
from .check import (
    DEFAULT_EPS,
    DEFAULT_TOL,
    GradResult,
    check_gradients,
    check_op,
    format_results,
    numeric_gradient,
    relative_error,
)

__all__ = [
    "DEFAULT_EPS",
    "DEFAULT_TOL",
    "Case",
    "GradResult",
    "all_cases",
    "check_gradients",
    "check_op",
    "format_results",
    "numeric_gradient",
    "relative_error",
]
