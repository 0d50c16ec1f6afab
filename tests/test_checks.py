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


@pytest.mark.parametrize(
    "value, python, any_integer",
    [(3, True, True), (2**70, True, True), (np.int64(3), False, True), (np.uint64(2**63), False, True),
     (True, False, False), (np.bool_(True), False, False), (3.0, False, False), ("3", False, False)],
)  # fmt: skip
def test_is_int_is_a_python_int_and_is_integer_a_numpy_one_too(value, python, any_integer):
    assert checks.is_int(value) is python
    assert checks.is_integer(value) is any_integer


@pytest.mark.parametrize(
    "value, bounds, message",
    [
        (-1, {"minimum": 0}, "step must be an integer >= 0, got -1"),
        (True, {"minimum": 0}, "step must be an integer >= 0, got True"),
        (4.0, {"minimum": 0}, "step must be an integer >= 0, got 4.0"),
        (np.int64(4), {}, r"step must be an integer, got np.int64\(4\)"),
        (5, {"minimum": 0, "maximum": 4}, r"step must be an integer in \[0, 4\], got 5"),
        (5, {"maximum": 4}, "step must be an integer <= 4, got 5"),
    ],
)
def test_check_int_value_names_the_value_and_the_range(value, bounds, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        checks.check_int_value(value, "step", **bounds)


def test_check_int_value_returns_a_good_value_of_any_size():
    assert checks.check_int_value(10**400, "n", minimum=1) == 10**400
    assert checks.check_int_value(0, "n", minimum=0, maximum=0) == 0


@pytest.mark.parametrize(
    "value, bounds, message",
    [
        (0, {"low": 0, "low_open": True}, "lr must be a finite number > 0, got 0"),
        (float("nan"), {}, "lr must be a finite number, got nan"),
        (float("inf"), {"low": 0}, "lr must be a finite number >= 0, got inf"),
        (True, {}, "lr must be a finite number, got True"),
        ("0.1", {}, "lr must be a finite number, got '0.1'"),
        (1, {"low": 0, "high": 1, "high_open": True}, r"lr must be a finite number in \[0, 1\), got 1"),
    ],
)
def test_check_number_names_the_value_and_the_interval(value, bounds, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        checks.check_number(value, "lr", **bounds)


def test_check_number_returns_a_good_value():
    assert checks.check_number(np.float32(0.5), "p", 0, 1, high_open=True) == np.float32(0.5)
    assert checks.check_number(10**400, "n", 0) == 10**400  # an int too big for a float is still finite
