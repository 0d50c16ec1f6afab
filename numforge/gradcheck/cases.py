"""The cases that ``numforge gradcheck`` runs: every op, the tiled attention, the whole model.

Each module listed in ``SUITES`` defines ``CASES``, a list of ``Case``: a
name and a function that runs float64 gradient checks and returns their
``GradResult`` rows. The tests run the same cases, so the command and the
test suite can never disagree about what is checked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module

from .check import GradResult

SUITES: tuple[str, ...] = ("ops", "attention", "model")  # module names in numforge.gradcheck, in run order


@dataclass(frozen=True)
class Case:
    name: str
    run: Callable[[], list[GradResult]]


def all_cases() -> list[Case]:
    """Every registered case, suite by suite, in order."""
    cases = []
    for suite in SUITES:
        cases.extend(import_module(f"numforge.gradcheck.{suite}").CASES)
    return cases
