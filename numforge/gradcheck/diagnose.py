"""What is wrong with a wrong gradient: its scale, its sign, the term an invariant says is missing, its shape.

For a gradient ``a`` (the learner's, at the checked coordinates) and the true
one ``n`` (finite differences):

- the cosine ``a.n / (|a| |n|)`` and the best scale ``s = a.n / n.n`` (the
  least-squares fit ``a ~ s n``): when ``a - s n`` is rounding, ``a`` is ``s``
  times the true gradient (``s = -1``: the sign is flipped; ``s = 2``: a factor
  counted twice; ``s = 1.73 = sqrt(3)``: a missing ``1/sqrt(D)``);
- the worst coordinate, with both values; where one of them is exactly zero and
  the other is not (a mask, a kink, an unused row);
- the op's invariants (``ops.Invariant``, declared with its checks): what every right gradient satisfies,
  and the term that makes it so. LayerNorm: each row of ``dx`` sums to 0 (the
  mean path) and is orthogonal to ``xhat`` (the variance path); softmax: each
  row of ``dS`` sums to 0, seen from outside attention as ``dk`` summing to 0
  over the keys; cross-entropy: each row of ``dlogits`` sums to 0;
- for a table looked up by ids (``RepeatedIds``): which rows differ, and
  whether they are the ids that occur more than once.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..backend import to_numpy
from ..checks import is_int
from ..ops import EXACT

SCALE_EXACT = 1e-5  # a wrong gradient this close to a multiple of the true one is that multiple (eps, rounding)


@dataclass(frozen=True)
class RepeatedIds:
    """For the gradient of a table looked up by ``ids``: which rows are wrong, and are they the repeated ids?"""

    argument: str = "table"
    ids: str = "ids"

    def notes(self, result, inputs: Mapping) -> list[str]:
        if result.argument != self.argument or result.analytic is None or result.reference is None:
            return []
        mine, true = result.analytic, result.reference
        scale = np.max(np.abs(mine) + np.abs(true), axis=1)  # (V,)
        wrong = np.flatnonzero(np.max(np.abs(mine - true), axis=1) > EXACT * np.maximum(scale, 1e-30))
        counts = np.bincount(to_numpy(inputs[self.ids]).reshape(-1), minlength=true.shape[0])
        repeated = np.flatnonzero(counts > 1)
        if wrong.size == 0:
            return []
        note = f"the rows of your {self.argument} gradient that are wrong: {wrong.tolist()}"
        if set(wrong.tolist()) <= set(repeated.tolist()):
            times = ", ".join(f"id {v} {counts[v]} times" for v in wrong)
            return [f"{note}, exactly ids that occur more than once ({times}): each occurrence must add its row "
                    "(a scatter-add), an indexed += keeps only one"]  # fmt: skip
        unused = [int(v) for v in wrong if counts[v] == 0]
        return [note + (f"; rows {unused} are looked up by no id and must be 0" if unused else "")]


def describe(result) -> list[str]:
    """The scale, sign, cosine, worst coordinate and zero pattern of a wrong gradient (by its kept arrays)."""
    if result.analytic is None or result.numeric is None or not result.coords_checked:
        return []
    a = np.asarray(result.analytic, dtype=np.float64).reshape(-1)[result.coords]
    n = np.asarray(result.numeric, dtype=np.float64)
    notes = []
    norm_a, norm_n = float(np.linalg.norm(a)), float(np.linalg.norm(n))
    if norm_a == 0.0:
        notes.append("yours is zero everywhere; the true one is not")
    elif norm_n > 0.0:
        cosine = float(a @ n) / (norm_a * norm_n)
        scale = float(a @ n) / (norm_n * norm_n)
        left = float(np.max(np.abs(a - scale * n))) / max(float(np.max(np.abs(a) + np.abs(scale * n))), 1e-30)
        notes.append(_scale_note(scale, cosine, left))
    index = int(np.argmax(np.abs(a - n)))
    where = tuple(int(i) for i in np.unravel_index(int(result.coords[index]), result.shape))
    notes.append(f"the worst coordinate is {where}: yours {a[index]:.6g}, the true one {n[index]:.6g}")
    notes.extend(_zero_pattern(a, n, result))
    return notes


def _scale_note(scale: float, cosine: float, left: float) -> str:
    name = _simple_number(abs(scale))
    size = f"{abs(scale):.3g}" + (f" = {name}" if name and name != f"{abs(scale):.3g}" else "")
    if left <= SCALE_EXACT:
        if abs(scale + 1.0) <= SCALE_EXACT:
            return "it points the opposite way: yours is -1 times the true one (a flipped sign)"
        if scale < 0:
            return f"it points the opposite way, and is {size} times as large (yours is {scale:.3g} times the true one)"
        return f"yours is {size} times the true one (cosine {cosine:.6f}): a factor too many or missing"
    way = "mostly the opposite way" if cosine < 0 else ("nearly the right direction" if cosine > 0.99 else "")
    return (
        f"not a scale factor: the cosine with the true one is {cosine:.3f}{f' ({way})' if way else ''}, "
        f"and the best factor, {scale:.3g}, still leaves a relative error of {left:.2e}"
    )


def _simple_number(x: float) -> str:
    """``"2"``, ``"1/3"``, ``"sqrt(3)"``, ``"1/sqrt(8)"`` when ``x`` is one (n <= 64), else ``""``."""
    for n in range(2, 65):
        for value, text in (
            (n, f"{n}"),
            (1 / n, f"1/{n}"),
            (math.sqrt(n), f"sqrt({n})"),
            (1 / math.sqrt(n), f"1/sqrt({n})"),
        ):
            if abs(x - value) <= 1e-6 * value and not (text.startswith(("sqrt", "1/sqrt")) and math.isqrt(n) ** 2 == n):
                return text
    return ""


def _zero_pattern(a: np.ndarray, n: np.ndarray, result) -> list[str]:
    notes = []
    for mine, other, text in ((a, n, "the true one is exactly 0 where yours is not"),
                              (n, a, "yours is exactly 0 where the true one is not")):  # fmt: skip
        where = np.flatnonzero((other == 0) & (mine != 0))
        if where.size:
            first = [tuple(int(i) for i in np.unravel_index(int(result.coords[k]), result.shape)) for k in where[:2]]
            notes.append(f"{text}: at {where.size} of {a.size} coordinates, e.g. {', '.join(map(str, first))}")
    return notes


def shape_note(result, axes: Mapping[str, str] | None, features: Mapping[str, object]) -> str:
    """For a gradient of the wrong shape: its shape, and each axis that is off by the case's axis names
    (``axis 2 has 2 entries, the size of Tq; v's axis 2 is Tk = 6``)."""
    mine, want = tuple(np.shape(result.analytic)), result.shape
    note = f"your gradient of {result.argument!r} has shape {_shape(mine)}, {result.argument} has {_shape(want)}"
    letters = (axes or {}).get(result.argument, "").split()
    if len(mine) != len(want) or len(letters) != len(want):
        return note
    sizes = {name: value for name, value in features.items() if is_int(value)}
    for axis, (got, expected, letter) in enumerate(zip(mine, want, letters)):
        if got != expected:
            alike = [name for name, value in sizes.items() if value == got and name != letter]
            alike = [name for name in alike if name[0] == letter[0]] or alike  # Tq for a Tk first: a time axis
            like = f", the size of {' or '.join(alike)}" if alike else ""
            note += f"; its axis {axis} has {got} entries{like}, where {result.argument}'s is {letter} = {expected}"
    return note


def _shape(shape) -> str:
    return "x".join(str(n) for n in shape) or "scalar"


def diagnosed(result, inputs: Mapping, diagnoses=(), axes=None, features: Mapping[str, object] | None = None):
    """``result`` with its ``notes`` filled in when it failed (unchanged when it passed)."""
    if result.passed:
        return result
    if result.problem is not None:
        return dataclasses.replace(result, notes=(shape_note(result, axes, features or {}),))
    notes = describe(result)
    for diagnosis in diagnoses:
        notes.extend(diagnosis.notes(result, inputs))
    return dataclasses.replace(result, notes=tuple(notes))
