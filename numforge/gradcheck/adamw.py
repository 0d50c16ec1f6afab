"""The AdamW exercise's cases: a learner's ``AdamW.step`` against ``optim.py``'s over several steps.

Each case builds the same parameters twice (a matrix, a bias, a table), runs
numforge's ``AdamW`` on one copy and the learner's on the other with the same
gradients and learning rates, and compares what the steps did to each
parameter, ``p_after - p_before``, by the relative error (rounding: 1e-16;
the threshold 1e-10). A wrong step's report gives its scale against the true
one: without bias correction the first step of ``betas = (0.9, 0.95)`` is
``(1 - 0.9) / sqrt(1 - 0.95) = 0.447`` times as large. The cases differ in
what they exercise: the first step (bias correction at its largest), five
steps with a changing learning rate, and weight decay (matrices only).
"""

from __future__ import annotations

import numpy as np

from .. import optim
from ..backend import asarray
from .cases import option_cases
from .check import GradResult, relative_error
from .diagnose import diagnosed

TOL = 1e-10
BETAS = (0.9, 0.95)  # what numforge trains with
SHAPES = {"weight": (4, 3), "bias": (3,), "table": (5, 2)}
OPTIONS = {
    "1 step": {"steps": 1, "weight_decay": 0.0},
    "5 steps": {"steps": 5, "weight_decay": 0.0},
    "5 steps, weight decay": {"steps": 5, "weight_decay": 0.1},
}


def _params(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {name: asarray(rng.standard_normal(shape), dtype="float64") for name, shape in SHAPES.items()}


def _run(optimizer_class, steps: int, weight_decay: float) -> tuple[dict, dict]:
    """``(params before, params after)`` of ``steps`` steps of ``optimizer_class`` on the seeded problem."""
    params = _params(0)
    before = {name: p.copy() for name, p in params.items()}
    optimizer = optimizer_class(params, lr=0.05, betas=BETAS, eps=1e-8, weight_decay=weight_decay)
    rng = np.random.default_rng(1)
    for step in range(steps):
        optimizer.lr = 0.05 * (1.0 - 0.1 * step)  # a schedule: each step's own learning rate
        grads = {
            name: asarray(rng.standard_normal(p.shape) * (1 + step), dtype="float64") for name, p in params.items()
        }
        originals = dict(params)
        optimizer.step(grads)
        for name, p in params.items():
            if p is not originals[name]:
                raise ValueError(f"AdamW.step must change params[{name!r}] in place (p -= ...), not bind a new array")
    return before, params


def check_adamw(option: str, learner=None) -> list[GradResult]:
    steps, weight_decay = OPTIONS[option]["steps"], OPTIONS[option]["weight_decay"]
    before, true = _run(optim.AdamW, steps, weight_decay)
    _, mine = _run(optim.AdamW if learner is None else learner.AdamW, steps, weight_decay)
    rows = []
    for name in SHAPES:
        want = np.asarray(true[name] - before[name])  # what numforge's steps did
        got = np.asarray(mine[name] - before[name])
        coords = np.arange(want.size)
        row = GradResult(
            f"adamw[{option}]", name, want.shape, relative_error(got, want), want.size, TOL,
            analytic=got, numeric=want.reshape(-1), coords=coords, reference=want, against="numforge's AdamW",
            quantity="update",
        )  # fmt: skip
        rows.append(diagnosed(row, before))
    return rows


CASES = option_cases(
    "adamw",
    OPTIONS,
    check_adamw,
    module=optim.__name__,
    learner=("AdamW.step",),
    exercise="adamw",
    keep_docstrings=True,
    scope=(optim.__name__,),
)
