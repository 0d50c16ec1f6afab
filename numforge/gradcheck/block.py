"""Gradient checks of one transformer block and of each of its branches, in float64.

A block (``model/blocks.py``: the residual fan-out) and each branch
(``model/attention_branch.py``, ``model/mlp_branch.py``) is checked as an op
whose inputs are its input ``x (B,T,C)`` and each of the parameters it uses
by short name (``attn.qkv_proj.weight``), the objective ``sum(forward(x) *
dy)``. Each backward returns ``(dx, grads)`` (numforge's branches a NamedTuple
that starts with them); the case reads ``grads`` by those names. With a
learner's module, its backward is graded in numforge's place (the exercises
``blocks``, ``attention_branch``, ``mlp_branch``), numforge's own serving as
the reference. Parameters are drawn as for the
whole model (``gradcheck/model.py``): random, O(1), no zero bias to hide a path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ..backend import asarray, default_rng
from ..model.attention_branch import attention_branch_backward, attention_branch_forward
from ..model.blocks import block_backward, block_forward
from ..model.mlp_branch import mlp_branch_backward, mlp_branch_forward
from ..model.names import attention_layout, layer_layout, mlp_layout
from .cases import option_cases
from .check import GradResult, check_op, upstream
from .diagnose import diagnosed
from .mistakes import MISTAKES
from .model import DEFAULTS, GQA, LLAMA, randomized_model

BATCH, SEQ = 2, 5
MAX_COORDS = 12  # sampled coordinates per array, as for the whole model
DROPOUT_SEED = 5
BLOCK_OPTIONS = {  # the residual fan-out under a plain activation, a gated one (the two paths into h add), dropout
    "gelu": {},
    "swiglu[plain attention]": {"activation": "swiglu", "attention": "plain"},
    "relu[dropout]": {"activation": "relu", "drop_prob": 0.2},
    "llama": LLAMA,  # RMSNorm, RoPE, SwiGLU, no biases, one key/value head
}
# Each branch option names only what the branch reads, and its cases vary one thing at a time, so that the
# grader's "wrong on the cases where ..." names the step a backward gets wrong.
LLAMA_ATTENTION = {"norm": "rmsnorm", "position": "rope", "use_bias": False, "num_kv_heads": 1}  # of Llama's options
ATTENTION_OPTIONS = {  # what happens between the split and the attention: nothing, grouped heads, RoPE, QK-norm
    "gpt2": {},
    "gqa[plain attention]": {**GQA, "attention": "plain"},
    "head_dim": {"head_dim": 6, "num_heads": 3},  # H D = 18 != C = 8
    "llama": LLAMA_ATTENTION,  # RMSNorm, RoPE, one key/value head, no biases
    "qk_norm_before_rope": {**LLAMA_ATTENTION, "qk_norm": True, "qk_norm_order": "before_rope"},  # Qwen3
    "qk_norm_projection": {**LLAMA_ATTENTION, "qk_norm": True, "qk_norm_extent": "projection"},  # OLMoE
    "qk_norm_after_rope": {**LLAMA_ATTENTION, "norm_weight": False, "qk_norm": True, "qk_norm_order": "after_rope"},
    "dropout": {"drop_prob": 0.2},  # the branch's output and the attention weights
}
MLP_OPTIONS = {  # a plain activation, a gated one, no biases, dropout
    "gelu": {},
    "swiglu": {"activation": "swiglu"},
    "swiglu[rmsnorm, no bias]": {"activation": "swiglu", "norm": "rmsnorm", "use_bias": False},
    "relu[dropout]": {"activation": "relu", "drop_prob": 0.2},
}


class Part(NamedTuple):
    forward: Callable
    backward: Callable
    options: dict[str, dict]
    layout: Callable  # config -> the parts of a layer it uses, by short name (``model/names.py``)
    attends: bool  # its forward takes ``for_backward`` and the position ``tables`` (it holds an attention)


PARTS = {
    "block": Part(block_forward, block_backward, BLOCK_OPTIONS, layer_layout, attends=True),
    "attention_branch": Part(
        attention_branch_forward, attention_branch_backward, ATTENTION_OPTIONS, attention_layout, attends=True
    ),
    "mlp_branch": Part(mlp_branch_forward, mlp_branch_backward, MLP_OPTIONS, mlp_layout, attends=False),
}


def _inputs(part: str, option: str):
    """``(config, position tables, {"x": x, parameter: array by short name})``: what ``part`` reads of layer 0 of
    the randomized tiny model with the part's option ``option``."""
    model = randomized_model(PARTS[part].options[option])
    parts = PARTS[part].layout(model.config)
    x = np.random.default_rng(1).standard_normal((BATCH, SEQ, model.config.d_model))
    layer = model.layers[0]
    params = {name: layer[name].copy() for name in layer if name.rpartition(".")[0] in parts}
    return model.config, model.position_tables, {"x": asarray(x, dtype="float64"), **params}


def _adapters(part: str, config, tables: dict, names: list[str]):
    """``(forward(x, *parameters), as_op(backward))``: the part and a backward of it as an op of the contract."""
    part_forward, attends = PARTS[part].forward, PARTS[part].attends

    def forward(x, *values):
        rng = default_rng(DROPOUT_SEED) if config.drop_prob > 0 else None  # every evaluation drops the same
        p = dict(zip(names, values))
        if attends:
            return part_forward(x, p, config, rng=rng, for_backward=True, tables=tables)
        return part_forward(x, p, config, rng=rng)

    def as_op(backward):
        def op_backward(dy, cache):
            dx, grads = backward(dy, cache, config)[:2]  # numforge's branches return more: the gradients on the way
            missing = [name for name in names if name not in grads]
            if missing:
                raise ValueError(f"{backward.__name__} returned no gradient for {missing}")
            return (dx, *(grads[name] for name in names))

        op_backward.__name__ = backward.__name__
        return op_backward

    return forward, as_op


def check_part(part: str, option: str, learner=None) -> list[GradResult]:
    """Gradient-check the backward of ``part`` (numforge's, or the learner's) under its option ``option``."""
    config, tables, inputs = _inputs(part, option)
    forward, as_op = _adapters(part, config, tables, list(inputs)[1:])
    backward = PARTS[part].backward
    name = f"{part}[{option}]"
    if learner is None:
        return check_op(name, forward, as_op(backward), inputs, max_coords=MAX_COORDS)
    mine = as_op(getattr(learner, backward.__name__))
    results = check_op(name, forward, mine, inputs, max_coords=MAX_COORDS, reference=as_op(backward))
    found = ()
    if not all(r.passed for r in results) and backward.__name__ in MISTAKES:  # this check's dy (seed 0) and cache
        y, cache = forward(*inputs.values())
        found = tuple(m.bound(upstream(y, 0), cache, config) for m in MISTAKES[backward.__name__])
    return [diagnosed(r, inputs, found) for r in results]


def _describer(part: str):
    def describe(function: str) -> str:
        option = next(iter(PARTS[part].options))
        _, _, inputs = _inputs(part, option)
        shapes = ", ".join(f"{name} {'x'.join(map(str, v.shape))}" for name, v in list(inputs.items())[1:])
        cache = PARTS[part].forward.__name__
        return (
            "(dx, grads): the gradient of the input x, and a dict of the parameters' gradients by short name (the "
            "names of p: 'attn.qkv_proj.weight', ...; an absent parameter, a bias under use_bias=False, has none), "
            f"from the gradient of the output and the cache {cache} returns. (numforge's branch backwards return "
            "a NamedTuple that starts with these two, .dx and .grads, then the gradients on the way that the "
            "study tools show; the pair is all a check reads.)\n\n"
            f"In the check '{part}[{option}]': x {'x'.join(map(str, inputs['x'].shape))}; the parameters {shapes}."
        )

    return describe


CASES = [
    case
    for part, p in PARTS.items()
    for case in option_cases(
        part,
        p.options,
        lambda option, learner, part=part: check_part(part, option, learner),
        defaults=DEFAULTS,
        module=p.backward.__module__,
        learner=(p.backward.__name__,),
        forwards=(p.forward.__name__,),
        describe=_describer(part),
    )
]
