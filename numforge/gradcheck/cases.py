"""The cases that ``numforge gradcheck`` runs: every op, the tiled attention, the whole model.

Each module listed in ``SUITES`` defines ``CASES``, a list of ``Case``: a
name and a function that runs float64 gradient checks and returns their
``GradResult`` rows. The tests run the same cases, so the command and the
test suite can never disagree about what is checked.

A case of one op (``op_case``) names the backward it checks, so that
``numforge gradcheck --impl FILE`` can run it with a learner's function of
that name in place of numforge's, numforge's own then serving as the reference.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import import_module

from .check import GradResult, check_op

SUITES: tuple[str, ...] = ("ops", "attention", "model")  # module names in numforge.gradcheck, in run order


@dataclass(frozen=True)
class Case:
    """``run()`` checks numforge's gradients; ``backward`` names the op backward the case checks
    (``"layer_norm_backward"``), None for a case that is no single op's (the whole model)."""

    name: str
    run: Callable[..., list[GradResult]]
    backward: str | None = None


def op_case(
    name: str,
    forward: Callable,
    backward: Callable,
    inputs: Callable[[], dict],
    kwargs: Mapping | Callable[[], Mapping] | None = None,
    seed: int = 0,
) -> Case:
    """A check of ``backward`` against ``forward`` on fresh ``inputs()`` (and ``kwargs``, or ``kwargs()`` when
    it holds arrays, built when the case runs); ``run(substitute)`` checks ``substitute`` (a learner's
    function) in ``backward``'s place, with ``backward`` as the reference."""

    def run(substitute: Callable | None = None) -> list[GradResult]:
        options = kwargs() if callable(kwargs) else kwargs
        if substitute is None:
            return check_op(name, forward, backward, inputs(), options, seed=seed)
        return check_op(name, forward, substitute, inputs(), options, seed=seed, reference=backward)

    return Case(name, run, backward.__name__)


def all_cases() -> list[Case]:
    """Every registered case, suite by suite, in order."""
    cases = []
    for suite in SUITES:
        cases.extend(import_module(f"numforge.gradcheck.{suite}").CASES)
    return cases
