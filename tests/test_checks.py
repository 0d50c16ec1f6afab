"""numforge.checks: every argument check names the argument, TypeError for a type, ValueError for a value."""

import numpy as np
import pytest

from numforge import checks


def test_check_helpers_name_the_argument():
    with pytest.raises(TypeError, match="ids must be a numpy or cupy array, got list"):
        checks.check_int([1, 2], "ids")
    with pytest.raises(ValueError, match=r"x must have 2 or 3 dimensions, got shape \(4,\)"):
        checks.check_float(np.zeros(4), "x", ndim=(2, 3))
    with pytest.raises(TypeError, match="ids must be an integer array, got dtype float64"):
        checks.check_int(np.zeros(4), "ids")
    with pytest.raises(TypeError, match="x must be float32 or float64, got int64"):
        checks.check_float(np.zeros(4, dtype=np.int64), "x")


@pytest.mark.parametrize("value", [0, -3, 2.0, True, "4", None])
def test_check_positive_int_names_the_value(value):
    with pytest.raises(ValueError, match=r"^width must be a positive integer, got "):
        checks.check_positive_int(value, "width")


def test_check_positive_int_returns_a_good_value():
    assert checks.check_positive_int(7, "width") == 7


def test_check_bool_is_a_type_check():
    assert checks.check_bool(False, "flag") is False
    with pytest.raises(TypeError, match="flag must be True or False, got 1"):
        checks.check_bool(1, "flag")


@pytest.mark.parametrize("value, real", [(1, True), (2.5, True), (np.float32(1), True), (True, False), ("1", False)])
def test_is_real_excludes_bools_and_strings(value, real):
    assert checks.is_real(value) is real
