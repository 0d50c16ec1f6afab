"""Helpers the tests share: arrays of the selected backend, and a gradient-check assertion."""

import numpy as np

from numforge import backend
from numforge.gradcheck import format_results


def randn(*shape, dtype="float64", seed=0):
    """A standard-normal array of the selected backend (drawn with NumPy, so identical on both)."""
    values = np.random.default_rng(seed).standard_normal(shape)
    return backend.asarray(values, dtype=dtype)


def assert_gradients_pass(rows):
    """Every gradient-check row passed; on failure the message is the whole table."""
    assert all(r.passed for r in rows), format_results(rows)
