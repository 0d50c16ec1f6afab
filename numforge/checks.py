"""Argument checks for every layer: one message style; ``TypeError`` for a wrong type, ``ValueError`` for a value.

Example: ``check_positive_int(0, "batch_size")`` raises
``ValueError("batch_size must be a positive integer, got 0")``; ``check_int_value`` and ``check_number`` check
any integer or number range in the same words;
``check_float(ids, "x")`` on an integer array raises ``TypeError``.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

import numpy as np

from .backend import FLOAT_DTYPES, is_cupy_array

_FLOAT_DTYPES = tuple(np.dtype(name) for name in FLOAT_DTYPES)


def is_real(value: object) -> bool:
    """A Python or NumPy real number that is not a bool (``True`` is an int in Python)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def check_bool(value: object, name: str) -> bool:
    """``value`` if it is ``True`` or ``False``, else a ``TypeError`` naming it."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def is_int(value: object) -> bool:
    """A Python int that is not a bool (``True`` is an int in Python; ``2.0`` and ``"2"`` are not ints)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_integer(value: object) -> bool:
    """A Python or NumPy integer that is not a bool (``np.uint64(7)`` is; ``True`` and ``7.0`` are not)."""
    return is_int(value) or isinstance(value, np.integer)


def _integers(minimum: int | None, maximum: int | None) -> str:
    """The integers from ``minimum`` to ``maximum`` (None: unbounded), in words: "an integer in [0, 3]"."""
    if minimum is not None and maximum is not None:
        return f"an integer in [{minimum}, {maximum}]"
    if minimum == 1:
        return "a positive integer"
    if minimum is not None:
        return f"an integer >= {minimum}"
    return "an integer" if maximum is None else f"an integer <= {maximum}"


def check_int_value(value: object, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` if it is an int (``True`` is not) from ``minimum`` to ``maximum``, else a ``ValueError`` naming it.

    Examples: ``check_int_value(-1, "step", minimum=0)`` raises "step must be an integer >= 0, got -1";
    ``check_int_value(0, "batch_size", minimum=1)`` raises "batch_size must be a positive integer, got 0".
    A non-int is a wrong value here too (an argument given as ``2.0`` or ``"2"``), so the flag or field is
    named with one message.
    """
    if not is_int(value) or (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be {_integers(minimum, maximum)}, got {value!r}")
    return value


def check_positive_int(value: object, name: str) -> int:
    """``check_int_value(value, name, minimum=1)``: "batch_size must be a positive integer, got 0"."""
    return check_int_value(value, name, minimum=1)


def check_index(value: object, count: int, name: str) -> int:
    """``value`` if it is an int in ``[0, count)``: "layer must be an integer in [0, 3], got 4" otherwise."""
    return check_int_value(value, name, minimum=0, maximum=count - 1)


def interval(low: float = -math.inf, high: float = math.inf, *, low_open: bool = False, high_open: bool = False):
    """An interval in words: "> 0", ">= 0", "in [0, 1)"; "" when it is the whole line."""
    if high == math.inf:
        return "" if low == -math.inf else f"{'>' if low_open else '>='} {low:g}"
    if low == -math.inf:
        return f"{'<' if high_open else '<='} {high:g}"
    return f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


def in_interval(value: float, low: float, high: float, low_open: bool, high_open: bool) -> bool:
    """Whether ``value`` is a finite number in the interval (NaN is in none; an int of any size is finite)."""
    above = value > low if low_open else value >= low
    below = value < high if high_open else value <= high
    return (isinstance(value, (int, np.integer)) or math.isfinite(value)) and above and below


def check_number(
    value: object,
    name: str,
    low: float = -math.inf,
    high: float = math.inf,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` if it is a finite real number (not a bool) in the interval, else a ``ValueError`` naming it.

    Example: ``check_number(0, "lr", 0, low_open=True)`` raises "lr must be a finite number > 0, got 0".
    """
    if not is_real(value) or not in_interval(value, low, high, low_open, high_open):
        words = interval(low, high, low_open=low_open, high_open=high_open)
        raise ValueError(f"{name} must be a finite number{' ' + words if words else ''}, got {value!r}")
    return value


def check_array(a: object, name: str, ndim: int | tuple[int, ...] | None = None):
    """Raise ``TypeError`` unless ``a`` is a NumPy or CuPy array of the expected rank."""
    if not (isinstance(a, np.ndarray) or is_cupy_array(a)):
        raise TypeError(f"{name} must be a numpy or cupy array, got {type(a).__name__}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else ndim
        if a.ndim not in allowed:
            want = " or ".join(str(n) for n in allowed)
            raise ValueError(f"{name} must have {want} dimensions, got shape {tuple(a.shape)}")
    return a


def check_float(a: object, name: str, ndim: int | tuple[int, ...] | None = None):
    """``check_array`` plus: the dtype is float32 or float64."""
    check_array(a, name, ndim)
    if a.dtype not in _FLOAT_DTYPES:  # not ``a.dtype.name``: NumPy computes names slowly, and decoding checks often
        raise TypeError(f"{name} must be float32 or float64, got {a.dtype}")
    return a


def check_int(a: object, name: str, ndim: int | tuple[int, ...] | None = None):
    """``check_array`` plus: the dtype is an integer type (token ids, targets)."""
    check_array(a, name, ndim)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array, got dtype {a.dtype}")
    return a


def check_same_dtype(a, name: str, like, like_name: str) -> None:
    """A ``TypeError`` unless ``a`` has ``like``'s dtype (no silent promotion: float32 stays float32)."""
    if a.dtype != like.dtype:
        raise TypeError(f"{name} must have {like_name}'s dtype {like.dtype}, got {a.dtype}")


def describe_error(error: Exception) -> str:
    """The message of ``error``; an ``OSError`` with its file name (``"No such file or directory: 'x'"``)."""
    if isinstance(error, OSError) and error.strerror and error.filename is not None:
        return f"{error.strerror}: {error.filename}"
    return str(error) or type(error).__name__


# ---------------------------------------------------------------- command-line flags (argparse types)
# A flag's bad value is an argparse usage error that names the flag: "--seed -1" gives
# "argument --seed: expected an integer >= 0, got '-1'".


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def float_between(low: float, high: float = math.inf, *, low_open: bool = False, high_open: bool = False):
    """An argparse type: a finite float in the interval from ``low`` to ``high`` (open ends where asked)."""
    words = interval(low, high, low_open=low_open, high_open=high_open)

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not in_interval(value, low, high, low_open, high_open):
            raise argparse.ArgumentTypeError(f"expected a finite number {words}, got {text!r}")
        return value

    parse.__name__ = f"number {words}"
    return parse


def path_flag(text: str) -> str:
    """An argparse type: a path that is not empty (``--data ''`` is not "the current directory")."""
    if text == "" or "\0" in text:
        raise argparse.ArgumentTypeError(f"expected a path, got {text!r}")
    return text


def text_flag(text: str) -> str:
    """An argparse type: UTF-8 text. Bytes of the command line that are not UTF-8 reach Python as
    lone surrogates ("\\udcff" for byte 0xff); they are refused here, the same way in every command."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        byte = ord(text[error.start]) - 0xDC00
        where = f"byte 0x{byte:02x}" if 0x80 <= byte <= 0xFF else f"character {text[error.start]!r}"
        raise argparse.ArgumentTypeError(f"expected UTF-8 text, got {where} at position {error.start}") from None
    return text


class MissingDependencyError(ImportError):
    """An optional package that a command needs is not installed; the message says how to install it.

    ``cli.main`` reports it like a bad input (exit status 2), without a traceback.
    """
