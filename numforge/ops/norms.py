"""The norms a model can use, by name: the one list the config, the model, the checks and the CLI read.

Each entry is one op file's forward/backward pair, its textbook twin, its PyTorch twin, the ``(C,)``
parameters they take (in the forward's argument order, with the value each starts at) and its gradient
checks (with what every right gradient of it satisfies: ``Invariant``)::

    y, cache = norm.forward(x, *[p[name] or None for name in norm.parameters], eps=eps)
    dx, *dparams = norm.backward(dy, cache)      # one gradient per parameter, None where it was absent
    y = norm.textbook(x, *params, eps=eps)                 # model/reference.py
    dx, *dparams = norm.textbook_backward(dy, x, *params, eps=eps)
    y = norm.torch(x, *params, eps=eps)           # torch tensors, bench/train_torch.py

``optional`` names the parameters a model may leave out (LayerNorm's bias);
the others the op cannot do without. Adding a norm is its op file and one
entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from . import B, C, Invariant, OpCheck, T, normal
from .layernorm import (
    layer_norm_backward,
    layer_norm_forward,
    layer_norm_textbook,
    layer_norm_textbook_backward,
    layer_norm_torch,
)
from .rmsnorm import (
    rms_norm_backward,
    rms_norm_forward,
    rms_norm_offset_backward,
    rms_norm_offset_forward,
    rms_norm_offset_textbook,
    rms_norm_offset_textbook_backward,
    rms_norm_offset_torch,
    rms_norm_textbook,
    rms_norm_textbook_backward,
    rms_norm_torch,
)


class Norm(NamedTuple):
    """One normalization over the last axis, as the model, the textbook model and the torch twin call it
    (module docstring)."""

    forward: Callable
    backward: Callable
    parameters: dict[str, float]  # parameter -> its initial value, in the forward's argument order
    optional: tuple[str, ...]  # parameters a model may leave out
    textbook: Callable
    textbook_backward: Callable
    torch: Callable
    checks: tuple[OpCheck, ...]  # the float64 gradient checks of the op pair
    title: str  # its name as the study tools write it in a stage's name ("LayerNorm")


def _xhat(x):
    """The normalized rows of x (eps as in the checks: the default 1e-5)."""
    centred = x - x.mean(axis=-1, keepdims=True)
    return centred / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + 1e-5)


LAYER_NORM_INVARIANTS = (
    Invariant(
        "x",
        "each row of dx sums to 0",
        "the mean path's term (mean(x) reaches every xhat: a constant added to a row of x leaves xhat as it is)",
        lambda inputs, dx: dx,
    ),
    Invariant(
        "x",
        "each row of dx is orthogonal to xhat (up to eps / (var + eps))",
        "the variance path's term (var(x) reaches every xhat: scaling a row's deviations leaves xhat as it is)",
        lambda inputs, dx: dx * _xhat(inputs["x"]),
        tol=1e-3,  # eps / (var + eps) <= 1e-3 for rows of variance 0.01 and up
    ),
)
RMS_NORM_INVARIANTS = (
    Invariant(
        "x",
        "each row of dx is orthogonal to xhat (up to eps / (mean(x^2) + eps))",
        "the term through rstd(x) (scaling a row of x leaves xhat as it is)",
        lambda inputs, dx: dx * inputs["x"] / np.sqrt((inputs["x"] ** 2).mean(axis=-1, keepdims=True) + 1e-6),
        tol=1e-3,
    ),
)
NORMS = {  # name -> Norm
    "layernorm": Norm(
        layer_norm_forward, layer_norm_backward, {"weight": 1.0, "bias": 0.0}, optional=("bias",),
        textbook=layer_norm_textbook, textbook_backward=layer_norm_textbook_backward, torch=layer_norm_torch,
        title="LayerNorm",
        checks=(
            OpCheck("layer_norm", lambda: {"x": normal(B, T, C), "weight": normal(C, seed=1),
                                           "bias": normal(C, seed=2)}, invariants=LAYER_NORM_INVARIANTS),
            OpCheck("layer_norm[no bias]", lambda: {"x": normal(B, T, C), "weight": normal(C, seed=1), "bias": None},
                    invariants=LAYER_NORM_INVARIANTS),
        ),
    ),
    "rmsnorm": Norm(
        rms_norm_forward, rms_norm_backward, {"weight": 1.0}, optional=("weight",),
        textbook=rms_norm_textbook, textbook_backward=rms_norm_textbook_backward, torch=rms_norm_torch,
        title="RMSNorm",
        checks=(
            OpCheck("rms_norm", lambda: {"x": normal(B, T, C), "weight": normal(C, seed=1)},
                    invariants=RMS_NORM_INVARIANTS),
            OpCheck("rms_norm[no weight]", lambda: {"x": normal(B, T, C), "weight": None},
                    invariants=RMS_NORM_INVARIANTS),
        ),
    ),
    "rmsnorm_offset": Norm(  # Gemma's: y = xhat (1 + weight), the weight starting at 0
        rms_norm_offset_forward, rms_norm_offset_backward, {"weight": 0.0}, optional=(),
        textbook=rms_norm_offset_textbook, textbook_backward=rms_norm_offset_textbook_backward,
        torch=rms_norm_offset_torch,
        title="RMSNorm (1 + w)",
        checks=(
            OpCheck("rms_norm_offset", lambda: {"x": normal(B, T, C), "weight": normal(C, seed=1)},
                    invariants=RMS_NORM_INVARIANTS),
        ),
    ),
}  # fmt: skip
