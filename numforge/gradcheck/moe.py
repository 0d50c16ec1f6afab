"""Gradient-check cases of the mixture-of-experts layer (``ops/moe.py``), float64, h (B, T, C) = (2, 3, 5) read as
N = 6 rows, E = 4 experts of width F = 4.

The top-k choice is piecewise constant: a finite difference that moved a row's k-th and (k+1)-th expert past
each other would measure a jump, not a derivative. The inputs keep every row's gap at that cut far above what a
step of 1e-6 can close (``cut_gaps``, which the tests check); ties are placed where crossing them changes
nothing: two experts tied for the top two places (both are chosen whichever the order, and the gated sum does
not depend on the order) and two tied for the last two (neither is chosen). A tie at the cut itself cannot be
checked by finite differences: its one-sided derivatives differ.

The cases with an auxiliary loss check it as one more output: the forward returns ``y`` flattened with
``aux_loss`` appended, so the objective is ``sum(y dy) + aux_loss daux``, and the backward gets ``daux``.
"""

from __future__ import annotations

import numpy as np

from ..backend import asarray, get_xp, to_numpy
from ..ops import B, C, F, T
from ..ops import normal as _randn
from ..ops.moe import moe_backward, moe_forward
from .cases import Case, op_case
from .check import check_op, upstream
from .diagnose import diagnosed
from .mistakes import MOE_MISTAKES

E = 4  # experts of the cases


def moe_inputs(layout: str = "random") -> dict:
    """The arguments of ``moe_forward``. ``layout``: "random"; "idle": expert 3's logit is far below the others
    on every row, so it receives no row; "ties": the logits of experts 0 and 1 are equal on every row and far
    above the others, and so are those of experts 2 and 3 (equal columns of W_r: an exact tie)."""
    h = to_numpy(_randn(B, T, C))
    w_router = to_numpy(_randn(C, E, seed=1))
    if layout != "random":
        h[..., 0] += 3.0  # a feature near 3 on every row: W_r's row 0 sets an offset per expert
    if layout == "idle":
        w_router[0, 3] = -4.0  # z_3 ~ -12
    if layout == "ties":
        w_router[:, 1] = w_router[:, 0]
        w_router[:, 3] = w_router[:, 2]
        w_router[0, :2] = 4.0  # z_0 = z_1 ~ 12
    return {
        "h": asarray(h),
        "w_router": asarray(w_router),
        "w_gate": _randn(E, C, F, seed=2),
        "w_up": _randn(E, C, F, seed=3),
        "w_down": _randn(E, F, C, seed=4),
    }


def cut_gaps(inputs: dict, top_k: int):
    """Each row's gap between its k-th and (k+1)-th router logit (N,): what a finite difference must not close."""
    z = to_numpy(inputs["h"]).reshape(-1, C) @ to_numpy(inputs["w_router"])  # (N, E)
    ranked = -np.sort(-z, axis=1)  # (N, E) by decreasing logit
    return ranked[:, top_k - 1] - ranked[:, top_k] if top_k < z.shape[1] else np.full(len(z), np.inf)


def _with_aux_output(*arrays, **options):
    """``moe_forward`` with ``aux_loss`` appended to the flattened ``y``: (N C + 1,)."""
    y, cache = moe_forward(*arrays, **options)
    xp = get_xp(y)
    return xp.concatenate([y.reshape(-1), xp.reshape(xp.asarray(cache.aux_loss, dtype=y.dtype), (1,))]), cache


def _split_upstream(backward):
    """The backward of ``_with_aux_output`` from a ``moe_backward``: dy and daux out of one upstream gradient."""
    return lambda d, cache: backward(d[:-1].reshape(cache.shape), cache, daux=float(d[-1]))


def _aux_case(name: str, layout: str, options: dict) -> Case:
    """A check of ``moe_backward`` with the auxiliary losses on: numforge's, or a learner's against it."""
    inputs = lambda: moe_inputs(layout)

    def run(learner=None):
        mine = moe_backward if learner is None else learner.moe_backward
        reference = None if learner is None else _split_upstream(moe_backward)
        arrays = inputs()
        results = check_op(name, _with_aux_output, _split_upstream(mine), arrays, options, reference=reference)
        return results if learner is None else [diagnosed(r, arrays, _mistakes(arrays, options)) for r in results]

    return Case(name, run, moe_backward.__module__, ("moe_backward",), ("moe_forward",), inputs=inputs)


def _mistakes(arrays: dict, options: dict) -> tuple:
    """The known mistakes of ``moe_backward`` bound to an auxiliary check's dy (seed 0, split) and cache."""
    y, cache = _with_aux_output(*arrays.values(), **options)
    d = upstream(y, 0)
    return tuple(m.bound(d[:-1].reshape(cache.shape), cache, float(d[-1])) for m in MOE_MISTAKES)


def _case(name: str, layout: str, **options) -> Case:
    if options.get("balance_coef") or options.get("z_coef"):
        return _aux_case(name, layout, options)
    return op_case(name, moe_forward, moe_backward, lambda: moe_inputs(layout), options)


AUX = {"balance_coef": 0.5, "z_coef": 0.25}
SETTINGS = {  # case name -> (the layout of its inputs, moe_forward's options)
    "moe[top1]": ("random", {"top_k": 1, "renormalize": False}),
    "moe[top2]": ("random", {"top_k": 2, "renormalize": True}),
    "moe[top2, not renormalized]": ("random", {"top_k": 2, "renormalize": False}),
    "moe[top2, idle expert]": ("idle", {"top_k": 2, "renormalize": True}),
    "moe[top2, ties]": ("ties", {"top_k": 2, "renormalize": False}),
    "moe[top2, aux]": ("random", {"top_k": 2, "renormalize": True, **AUX}),
    "moe[top1, renormalized, aux]": ("random", {"top_k": 1, "renormalize": True, **AUX}),
    "moe[top2, ties, aux]": ("ties", {"top_k": 2, "renormalize": True, **AUX}),
    "moe[top2, idle expert, aux]": ("idle", {"top_k": 2, "renormalize": False, **AUX}),
}
CASES = [_case(name, layout, **options) for name, (layout, options) in SETTINGS.items()]
