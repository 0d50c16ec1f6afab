"""The norms a model can use, by name: the one list the config, the model, the checks and the CLI read.

Each entry is one op file's forward/backward pair, its textbook twin, its PyTorch twin, the ``(C,)``
parameters they take (in the forward's argument order, with the value each starts at) and its gradient
checks::

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

from . import B, C, OpCheck, T, normal
from .layernorm import (
    layer_norm_backward,
    layer_norm_forward,
    layer_norm_textbook,
    layer_norm_textbook_backward,
    layer_norm_torch,
)
from .rmsnorm import rms_norm_backward, rms_norm_forward, rms_norm_textbook, rms_norm_textbook_backward, rms_norm_torch


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


NORMS = {  # name -> Norm
    "layernorm": Norm(
        layer_norm_forward, layer_norm_backward, {"weight": 1.0, "bias": 0.0}, optional=("bias",),
        textbook=layer_norm_textbook, textbook_backward=layer_norm_textbook_backward, torch=layer_norm_torch,
        checks=(
            OpCheck("layer_norm", lambda: {"x": normal(B, T, C), "weight": normal(C, seed=1),
                                           "bias": normal(C, seed=2)}),
            OpCheck("layer_norm[no bias]", lambda: {"x": normal(B, T, C), "weight": normal(C, seed=1), "bias": None}),
        ),
    ),
    "rmsnorm": Norm(
        rms_norm_forward, rms_norm_backward, {"weight": 1.0}, optional=("weight",),
        textbook=rms_norm_textbook, textbook_backward=rms_norm_textbook_backward, torch=rms_norm_torch,
        checks=(
            OpCheck("rms_norm", lambda: {"x": normal(B, T, C), "weight": normal(C, seed=1)}),
            OpCheck("rms_norm[no weight]", lambda: {"x": normal(B, T, C), "weight": None}),
        ),
    ),
}  # fmt: skip
