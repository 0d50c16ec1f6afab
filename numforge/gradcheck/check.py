"""Finite-difference gradient checks: is a hand-written backward right?

A backward pass computes a vector-Jacobian product: given the upstream
gradient ``dy`` it returns ``dx = J(x)^T dy``. Pick a random ``dy`` and define
the scalar objective

    f(x) = sum(forward(x) * dy)

then ``df/dx = J^T dy`` exactly, so the analytic ``dx`` can be compared with
central differences, coordinate by coordinate:

    numeric[i] = (f(x + h e_i) - f(x - h e_i)) / (2 h)      error O(h^2)

in float64 with ``h = 1e-6`` (truncation error ~h^2 = 1e-12, rounding error
~eps_64 / h = 1e-10, both far below the 1e-7 pass threshold).

The error of one argument is a single relative number,

    rel = max_i |analytic_i - numeric_i| / max(max_i (|analytic_i| + |numeric_i|), tiny)

which is scale-free and does not blow up on coordinates whose gradient is
exactly zero. For large tensors ``max_coords`` samples coordinates at random
(sparse mode); every forward evaluation is still of the full function.

Public: the tests, ``numforge gradcheck`` and the demos all use it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from ..backend import get_xp, to_numpy
from ..table import format_table

DEFAULT_EPS = 1e-6
DEFAULT_TOL = 1e-7
TINY = 1e-30


@dataclass(frozen=True)
class GradResult:
    """One row of a gradient check: which gradient, how far off, pass or fail.

    ``vs_reference`` is the relative difference from a reference backward
    (numforge's own, when a learner's backward is graded), else None.
    ``problem`` says why a gradient could not be compared (its shape);
    ``notes`` what the grader found out about a wrong one (``diagnose.py``),
    from the arrays kept beside: ``analytic`` (the whole gradient),
    ``numeric`` (at the flat indices ``coords``) and ``reference``.
    """

    op: str
    argument: str
    shape: tuple[int, ...]
    max_rel_error: float
    coords_checked: int
    tol: float
    vs_reference: float | None = None
    problem: str | None = None
    notes: tuple[str, ...] = ()
    against: str = "finite differences"
    quantity: str = "gradient"  # what is compared: a gradient, or (AdamW) a parameter's update
    analytic: object = field(default=None, compare=False, repr=False)
    numeric: object = field(default=None, compare=False, repr=False)
    coords: object = field(default=None, compare=False, repr=False)
    reference: object = field(default=None, compare=False, repr=False)

    @property
    def passed(self) -> bool:
        close = self.max_rel_error <= self.tol and (self.vs_reference is None or self.vs_reference <= self.tol)
        return bool(self.problem is None and close)


@dataclass(frozen=True)
class MatchResult:
    """One row of an exact comparison (nothing to differentiate): a learner's function against numforge's on one
    input; ``detail`` says where they first differ."""

    op: str
    argument: str
    passed: bool
    detail: str = ""
    notes: tuple[str, ...] = ()


def relative_error(analytic, numeric) -> float:
    """``max|a - n| / max(max(|a| + |n|), tiny)`` over all elements, as a Python float."""
    a = to_numpy(analytic).astype(np.float64)
    n = to_numpy(numeric).astype(np.float64)
    if a.shape != n.shape:
        raise ValueError(f"analytic shape {a.shape} != numeric shape {n.shape}")
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - n)) / max(float(np.max(np.abs(a) + np.abs(n))), TINY))


def _sample_coords(size: int, max_coords: int | None, rng: np.random.Generator) -> np.ndarray:
    if max_coords is None or size <= max_coords:
        return np.arange(size)
    return np.sort(rng.choice(size, size=max_coords, replace=False))


def numeric_gradient(
    objective: Callable[[], float],
    x,
    coords: np.ndarray,
    eps: float = DEFAULT_EPS,
) -> np.ndarray:
    """Central-difference derivative of ``objective()`` w.r.t. ``x.flat[coords]``.

    ``x`` is perturbed in place and restored exactly after each coordinate,
    so ``objective`` must read ``x`` (a closure over it), not a copy.
    Returns a float64 NumPy vector of length ``len(coords)``.
    """
    if x.dtype != np.float64:
        raise TypeError(f"gradient checks run in float64, got an array of dtype {x.dtype}")
    if not x.flags.c_contiguous:  # reshape would copy, and the perturbations would never reach x
        raise ValueError(f"x must be C-contiguous to be perturbed in place, got strides {x.strides}")
    flat = x.reshape(-1)  # a view of x
    grad = np.empty(len(coords), dtype=np.float64)
    for out_index, i in enumerate(coords.tolist()):
        saved = flat[i].item()
        flat[i] = saved + eps
        f_plus = objective()
        flat[i] = saved - eps
        f_minus = objective()
        flat[i] = saved
        grad[out_index] = (f_plus - f_minus) / (2.0 * eps)
    return grad


def check_gradients(
    op: str,
    objective: Callable[[], float],
    inputs: Mapping[str, object],
    analytic: Mapping[str, object],
    *,
    eps: float = DEFAULT_EPS,
    tol: float = DEFAULT_TOL,
    max_coords: int | None = None,
    seed: int = 0,
    reference: Mapping[str, object] | None = None,
) -> list[GradResult]:
    """Compare ``analytic[name]`` with the numeric gradient of ``objective`` for every name.

    ``objective()`` must compute the scalar from the current contents of the
    arrays in ``inputs`` (which are perturbed in place). Returns one
    ``GradResult`` per name in ``analytic``; with ``reference`` (name ->
    gradient), each row also says how far ``analytic`` is from it, over every element.
    A gradient of the wrong shape is a failed row whose ``problem`` says so.
    """
    rng = np.random.default_rng(seed)
    results = []
    for name, grad in analytic.items():
        x = inputs[name]
        coords = _sample_coords(x.size, max_coords, rng)
        numeric = numeric_gradient(objective, x, coords, eps)
        expected = None if reference is None else to_numpy(reference[name])
        grad = to_numpy(grad)
        kept = {"analytic": grad, "numeric": numeric, "coords": coords, "reference": expected}
        if tuple(grad.shape) != tuple(x.shape):
            problem = f"its shape is {grad.shape}, the input's {tuple(x.shape)}"
            results.append(GradResult(op, name, tuple(x.shape), float("inf"), 0, tol, problem=problem, **kept))
            continue
        versus = None if expected is None else relative_error(grad, expected)
        error = relative_error(grad.reshape(-1)[coords], numeric)
        results.append(GradResult(op, name, tuple(x.shape), error, len(coords), tol, versus, **kept))
    return results


def check_op(
    op: str,
    forward: Callable,
    backward: Callable,
    inputs: Mapping[str, object],
    kwargs: Mapping[str, object] | None = None,
    *,
    wrt: tuple[str, ...] | None = None,
    eps: float = DEFAULT_EPS,
    tol: float = DEFAULT_TOL,
    max_coords: int | None = None,
    seed: int = 0,
    reference: Callable | None = None,
    cache_forward: Callable | None = None,
) -> list[GradResult]:
    """Gradient-check an op that follows the numforge contract.

    ``y, cache = forward(*inputs.values(), **kwargs)`` and
    ``grads = backward(dy, cache)``, gradients in the order of the forward's
    array arguments (a single array when there is one). ``inputs`` lists the
    forward's positional arguments by name, in order; ``wrt`` names the
    float arguments to check (default: every float array in ``inputs``).
    Every float array or ``None`` (an absent bias) has a gradient slot, and
    an absent input's gradient is ``None``; integer arguments (token ids,
    targets) have no slot.

    With ``reference`` (another backward, numforge's own when a learner's is
    graded), each row also gives the difference from the reference's gradient.
    With ``cache_forward`` (a learner's forward that computes the gradients itself), the cache ``backward``
    reads comes from it; its output must equal ``forward``'s, which the finite differences evaluate.
    A backward that changes ``dy`` or an input in place is a ``ValueError``.
    """
    kwargs = dict(kwargs or {})
    names, values = list(inputs), list(inputs.values())
    y, cache = forward(*values, **kwargs)
    xp = get_xp(y)
    dy = upstream(y, seed)

    slots = [i for i, v in enumerate(values) if v is None or _is_float_array(v)]
    expected = None if reference is None else _by_name(op, reference(dy, cache), names, values, slots)
    if cache_forward is not None:
        cache = _learner_cache(op, cache_forward, values, kwargs, y, tol)
    by_name = _by_name(op, _backward_untouched(op, backward, dy, cache, inputs), names, values, slots)
    analytic = {name: by_name[name] for name in (tuple(by_name) if wrt is None else wrt)}

    def objective() -> float:
        out, _ = forward(*values, **kwargs)
        return float(xp.sum(out * dy))

    return check_gradients(
        op, objective, inputs, analytic, eps=eps, tol=tol, max_coords=max_coords, seed=seed, reference=expected
    )


def upstream(y, seed: int):
    """The random upstream gradient ``dy`` (float64, ``y``'s shape and backend) that ``check_op`` draws for ``seed``."""
    return get_xp(y).asarray(np.random.default_rng(seed + 1).standard_normal(np.shape(y)), dtype=np.float64)


def _learner_cache(op: str, cache_forward: Callable, values: list, kwargs: dict, y, tol: float):
    """The cache of a learner's forward that computes the gradients itself; its output must be ``y``."""
    y_mine, cache = cache_forward(*values, **kwargs)
    if np.shape(y_mine) != np.shape(y) or relative_error(y_mine, y) > tol:
        raise ValueError(f"{op}: {cache_forward.__name__} returns {y_mine!r}, where numforge's forward gives {y!r}")
    return cache


def _backward_untouched(op: str, backward: Callable, dy, cache, inputs: Mapping[str, object]):
    """``backward(dy, cache)``; a ``ValueError`` if it changed ``dy`` or an input in place."""
    before = {name: v.copy() for name, v in [("dy", dy), *inputs.items()] if hasattr(v, "copy")}
    grads = backward(dy, cache)
    for name, v in [("dy", dy), *inputs.items()]:
        if name in before and not bool((v == before[name]).all()):
            raise ValueError(f"{op}: the backward changed {name!r} in place; a backward must leave it as it is")
    return grads


def _by_name(op: str, grads, names: list[str], values: list, slots: list[int]) -> dict:
    """A backward's gradients by input name: one per float input (or absent one), absent ones left out."""
    if not isinstance(grads, tuple):
        grads = (grads,)
    if len(grads) != len(slots):
        raise ValueError(
            f"{op}: backward returned {len(grads)} gradients for the "
            f"{len(slots)} float inputs {[names[i] for i in slots]}"
        )
    by_name = {names[i]: g for i, g in zip(slots, grads) if values[i] is not None}
    for name, g in by_name.items():
        if not (hasattr(g, "shape") and hasattr(g, "dtype")):
            raise TypeError(f"{op}: the gradient of {name!r} must be an array, got {type(g).__name__}")
    return by_name


def _is_float_array(v: object) -> bool:
    return hasattr(v, "dtype") and hasattr(v, "shape") and v.dtype.kind == "f"


def format_results(results: list[GradResult]) -> str:
    """The gradient-check table: op, argument, shape, max relative error, [vs numforge,] pass/fail."""
    versus = any(r.vs_reference is not None for r in results)
    header = ("op", "argument", "shape", "max rel error", *(["vs numforge"] if versus else []), "coords", "result")
    rows = [
        (
            r.op,
            r.argument,
            "x".join(str(n) for n in r.shape) or "scalar",
            f"{r.max_rel_error:.2e}",
            *([f"{r.vs_reference:.2e}" if r.vs_reference is not None else "-"] if versus else []),
            str(r.coords_checked),
            "pass" if r.passed else "FAIL",
        )
        for r in results
    ]
    return format_table(header, rows, align="left")
