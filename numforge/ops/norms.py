"""The norms a model can use, by name: the one list the config, the model, the checks and the CLI read.

Each entry is one op file's forward/backward pair and the ``(C,)`` parameters
it takes, in the forward's argument order, with the value each starts at::

    y, cache = norm.forward(x, *[p[name] or None for name in norm.parameters], eps=eps)
    dx, *dparams = norm.backward(dy, cache)      # one gradient per parameter, None where it was absent

``optional`` names the parameters a model may leave out (LayerNorm's bias);
the others the op cannot do without. Adding a norm is its op file and one
entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from .layernorm import layer_norm_backward, layer_norm_forward
from .rmsnorm import rms_norm_backward, rms_norm_forward


class Norm(NamedTuple):
    """One normalization over the last axis, as the model calls it (module docstring)."""

    forward: Callable
    backward: Callable
    parameters: dict[str, float]  # parameter -> its initial value, in the forward's argument order
    optional: tuple[str, ...]  # parameters a model may leave out


NORMS = {  # name -> Norm
    "layernorm": Norm(layer_norm_forward, layer_norm_backward, {"weight": 1.0, "bias": 0.0}, optional=("bias",)),
    "rmsnorm": Norm(rms_norm_forward, rms_norm_backward, {"weight": 1.0}, optional=("weight",)),
}
