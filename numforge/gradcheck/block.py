"""Gradient checks of one transformer block (``model/blocks.py``): the residual fan-out, in float64.

A block is checked as an op whose inputs are the block's input ``x (B,T,C)``
and each of its parameters by short name (``attn.qkv_proj.weight``), the
objective ``sum(block_forward(x) * dy)``. ``block_backward`` returns ``(dx,
grads)``; the case reads ``grads`` by those names. With a learner's module,
its ``block_backward`` is graded in numforge's place (the exercise ``blocks``),
numforge's own serving as the reference. Parameters are drawn as for the whole
model (``gradcheck/model.py``): random, O(1), no zero bias to hide a path.
"""

from __future__ import annotations

import numpy as np

from ..backend import asarray, default_rng
from ..model.blocks import block_backward, block_forward
from .cases import option_cases
from .check import GradResult, check_op
from .diagnose import diagnosed
from .model import randomized_model

BATCH, SEQ = 2, 5
MAX_COORDS = 12  # sampled coordinates per array, as for the whole model
DROPOUT_SEED = 5
OPTIONS = {  # the residual fan-out under a plain activation, a gated one (the two paths into h add), dropout
    "gelu": {},
    "swiglu[plain attention]": {"activation": "swiglu", "attention": "plain"},
    "relu[dropout]": {"activation": "relu", "drop_prob": 0.2},
}


def _block(option: str):
    """``(config, x, params by short name)`` of layer 0 of the randomized tiny model with ``OPTIONS[option]``."""
    model = randomized_model(OPTIONS[option])
    x = np.random.default_rng(1).standard_normal((BATCH, SEQ, model.config.d_model))
    params = {name: model.layers[0][name].copy() for name in model.layers[0]}
    return model.config, {"x": asarray(x, dtype="float64"), **params}


def _adapters(config, names: list[str]):
    def forward(x, *values):
        rng = default_rng(DROPOUT_SEED) if config.drop_prob > 0 else None  # every evaluation drops the same
        return block_forward(x, dict(zip(names, values)), config, rng)

    def as_op(backward):
        def op_backward(dy, cache):
            dx, grads = backward(dy, cache, config)
            missing = [name for name in names if name not in grads]
            if missing:
                raise ValueError(f"{backward.__name__} returned no gradient for {missing}")
            return (dx, *(grads[name] for name in names))

        op_backward.__name__ = backward.__name__
        return op_backward

    return forward, as_op


def check_block(option: str, learner=None) -> list[GradResult]:
    """Gradient-check ``block_backward`` (or the learner's) on the block with ``OPTIONS[option]``."""
    config, inputs = _block(option)
    forward, as_op = _adapters(config, list(inputs)[1:])
    name = f"block[{option}]"
    if learner is None:
        return check_op(name, forward, as_op(block_backward), inputs, max_coords=MAX_COORDS)
    mine = as_op(learner.block_backward)
    results = check_op(name, forward, mine, inputs, max_coords=MAX_COORDS, reference=as_op(block_backward))
    return [diagnosed(r, inputs) for r in results]


def describe(function: str) -> str:
    config, inputs = _block("gelu")
    shapes = ", ".join(f"{name} {'x'.join(map(str, v.shape))}" for name, v in list(inputs.items())[1:])
    return (
        "(dx, grads): the gradient of the block's input x, and a dict of its parameters' gradients by short "
        "name (the names of p: 'attn.qkv_proj.weight', ...; None for an absent bias), from the gradient of the "
        "block's output and the BlockCache block_forward returns.\n\n"
        f"In the check 'block[gelu]': x {'x'.join(map(str, inputs['x'].shape))}; the parameters {shapes}."
    )


CASES = option_cases(
    "block",
    OPTIONS,
    check_block,
    module=block_backward.__module__,
    learner=("block_backward",),
    forwards=("block_forward",),
    describe=describe,
)
