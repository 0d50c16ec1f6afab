"""The cases that ``numforge gradcheck`` runs: every op, the tiled attention, a block, the whole model.

Each module listed in ``SUITES`` defines ``CASES``, a list of ``Case``: a
name and a function that runs float64 gradient checks and returns their
``GradResult`` rows. The tests run the same cases, so the command and the
test suite can never disagree about what is checked. ``EXERCISE_SUITES`` hold
cases that only grade a learner (the tokenizer, AdamW: nothing to
differentiate), compared with numforge's own functions.

A case names the functions a learner writes for it (``learner``, in
``module``), so that ``numforge gradcheck --impl FILE`` can run it with the
learner's functions in place of numforge's, numforge's own serving as the
reference; these names are what makes an exercise of a file
(``gradcheck/exercise.py``): a new op's case is all its exercise needs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from importlib import import_module

from .check import GradResult, check_op, upstream
from .diagnose import diagnosed
from .mistakes import MISTAKES

SUITES: tuple[str, ...] = ("ops", "attention", "block", "model", "lora")  # modules in numforge.gradcheck, in run order
EXERCISE_SUITES: tuple[str, ...] = ("tiling", "tokenizer", "adamw")  # graded only: numforge against itself says little


@dataclass(frozen=True)
class Case:
    """``run(learner=None)`` checks numforge's functions, or with ``learner`` (the learner's loaded module) the
    learner's functions named ``learner`` in their place.

    ``module`` is the numforge module those functions come from; ``forwards`` the forward functions a learner's
    backward must not call (a finite-difference "backward" would pass every check); ``features()`` the named
    sizes and options of the case (``{"Tq": 5, "Tk": 5, "causal": True}``), by which the grader says on which
    shapes a backward fails. ``exercise`` names the exercise (default: ``module``'s last part); ``describe(name)``
    says what the learner's function ``name`` returns, with the shapes of this case (a scaffold's docstring);
    ``keep_docstrings``: the real docstrings are a specification, kept in the scaffold (the tokenizer's tie
    rule); ``scope``: numforge packages whose every function is an answer to this exercise (the fast tokenizer).
    """

    name: str
    run: Callable[..., list[GradResult]]
    module: str | None = None
    learner: tuple[str, ...] = ()
    forwards: tuple[str, ...] = ()
    features: Callable[[], tuple[dict, dict]] | None = None
    exercise: str | None = None
    describe: Callable[[str], str] | None = None
    keep_docstrings: bool = False
    scope: tuple[str, ...] = ()
    inputs: Callable[[], dict] | None = None  # an op case's inputs, for ``--show`` (its invariants' values)
    invariants: tuple = ()

    @property
    def exercise_name(self) -> str | None:
        return self.exercise or (self.module.rsplit(".", 1)[-1] if self.module else None)


def op_case(
    name: str,
    forward: Callable,
    backward: Callable,
    inputs: Callable[[], dict],
    kwargs: Mapping | Callable[[], Mapping] | None = None,
    seed: int = 0,
    *,
    fused: bool = False,
    forward_name: str | None = None,
    axes: Mapping[str, str] | None = None,
    invariants: tuple = (),
) -> Case:
    """A check of ``backward`` against ``forward`` on fresh ``inputs()`` (and ``kwargs``, or ``kwargs()`` when
    it holds arrays, built when the case runs).

    ``run(learner)`` checks the learner's function of ``backward``'s name in its place, with ``backward`` as the
    reference; with ``fused`` (a forward that computes the gradients, the backward only scales them) the
    learner writes both and the learner's forward makes the cache. ``forward_name``: the op's forward when
    ``forward`` wraps it. ``axes`` names each input's axes (``{"q": "B H Tq D"}``), ``invariants`` what every
    right gradient satisfies: both go into the report on a wrong gradient.
    """

    def options() -> dict:
        return dict(kwargs() if callable(kwargs) else (kwargs or {}))

    def run(learner=None) -> list[GradResult]:
        arrays = inputs()
        if learner is None:
            return check_op(name, forward, backward, arrays, options(), seed=seed)
        mine = getattr(learner, backward.__name__)
        cache_forward = getattr(learner, forward.__name__) if fused else None
        results = check_op(
            name, forward, mine, arrays, options(), seed=seed, reference=backward, cache_forward=cache_forward
        )
        sizes, _ = features()
        return [diagnosed(r, arrays, invariants + _mistakes(backward, arrays), axes, sizes) for r in results]

    def _mistakes(backward, arrays) -> tuple:
        """The known mistakes of ``backward`` (``mistakes.py``), bound to this check's ``dy`` and cache."""
        known = MISTAKES.get(backward.__name__, ())
        if not known:
            return ()
        y, cache = forward(*arrays.values(), **options())
        return tuple(m.bound(upstream(y, seed), cache) for m in known)

    features = partial(_features, inputs, options, axes)
    describe = partial(_describe, name, forward, backward, inputs, options, fused, forward_name)
    learner = (forward.__name__, backward.__name__) if fused else (backward.__name__,)
    forwards = (forward_name or forward.__name__,)
    return Case(
        name, run, backward.__module__, learner, forwards, features, describe=describe, inputs=inputs,
        invariants=tuple(i for i in invariants if hasattr(i, "values")),
    )  # fmt: skip


def _features(inputs: Callable, options: Callable, axes: Mapping[str, str] | None) -> tuple[dict, dict]:
    """An op case's named sizes (by ``axes``) and its options (``causal``, ``dropout_p``, a ``mask`` or not)."""
    arrays, settings = inputs(), options()
    sizes = {}
    for argument, letters in (axes or {}).items():
        sizes.update(zip(letters.split(), arrays[argument].shape))
    if "mask" in settings:
        settings["mask"] = settings["mask"] is not None
    return sizes, {k: v for k, v in settings.items() if isinstance(v, (bool, int, float))}


def _describe(name, forward, backward, inputs, options, fused: bool, forward_name: str | None, function: str) -> str:
    """What the learner's ``function`` of an op case returns, with the case's shapes (a scaffold's docstring)."""
    arrays = inputs()
    y, cache = forward(*arrays.values(), **options())
    shapes = ", ".join(f"{k} {_shape(v.shape)}" for k, v in arrays.items() if hasattr(v, "shape"))
    op = forward_name or forward.__name__
    if fused and function == forward.__name__:
        return (
            f"A forward that computes its gradients too: (loss, cache), the loss as the plain forward computes "
            f"it and a cache that holds its gradients already, which {backward.__name__} only scales by the "
            f"upstream gradient.\n\nIn the check {name!r}: {shapes} -> loss {_shape(y.shape)}."
        )
    slots = [k for k, v in arrays.items() if v is None or getattr(getattr(v, "dtype", None), "kind", "") == "f"]
    grads = ", ".join(f"d{k} {_shape(arrays[k].shape)}" for k in slots if arrays[k] is not None)
    return (
        f"The gradients of {op}'s float array arguments ({', '.join(slots)}), in that order (a single array when "
        f"there is one; None for an argument given as None), from the gradient of its output and the cache it "
        f"returns ({type(cache).__name__}).\n\nIn the check {name!r}: {shapes}; the output's gradient "
        f"{_shape(y.shape)} -> {grads}."
    )


def _shape(shape) -> str:
    return "x".join(str(n) for n in shape) or "scalar"


def option_cases(
    prefix: str, options: Mapping[str, Mapping], check: Callable, defaults: Mapping | None = None, **fields
) -> list[Case]:
    """One case ``prefix[option]`` per entry of ``options``, running ``check(option, learner)``; the option's
    settings over ``defaults`` (a config's: ``tie_weights`` is True where an option does not say) are the case's
    features (``weight_decay > 0``, ``tie_weights``), ``fields`` the rest of each case."""
    return [
        Case(
            f"{prefix}[{option}]",
            lambda learner=None, option=option: check(option, learner),
            features=lambda option=option: ({}, {**(defaults or {}), **options[option]}),
            **fields,
        )
        for option in options
    ]


def all_cases() -> list[Case]:
    """Every registered gradient check, suite by suite, in order."""
    return _cases(SUITES)


def exercise_cases() -> list[Case]:
    """Every case that can grade a learner: the gradient checks with a learner's part, then the graded-only ones."""
    return [c for c in all_cases() if c.learner] + _cases(EXERCISE_SUITES)


def _cases(suites: tuple[str, ...]) -> list[Case]:
    cases = []
    for suite in suites:
        cases.extend(import_module(f"numforge.gradcheck.{suite}").CASES)
    return cases
