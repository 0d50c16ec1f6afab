"""Shared test set-up.

Tests build arrays through the selected backend (``NUMFORGE_BACKEND``, NumPy
by default) and compare through ``to_numpy``, so the whole suite runs on
NumPy or, on a GPU machine, on CuPy.
"""

import os

import pytest
from hypothesis import HealthCheck, settings

from numforge import backend

# Locally each run draws new examples; under CI (CI=true) the draws are fixed, so a
# landing is judged on the same examples every time (new ones are found by local runs,
# e.g. NUMFORGE_HYPOTHESIS_EXAMPLES=1000 python -m pytest -q).
settings.register_profile(
    "default",
    max_examples=int(os.environ.get("NUMFORGE_HYPOTHESIS_EXAMPLES", "30")),
    derandomize=os.environ.get("CI", "").lower() in ("1", "true", "yes"),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("default")


@pytest.fixture
def xp():
    """The selected backend's array module."""
    return backend.array_module()
