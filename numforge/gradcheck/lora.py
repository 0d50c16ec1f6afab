"""Gradient checks of LoRA: the adapter op alone, and whole models whose adapters are the only trained parameters.

The op (``ops/lora.py``) is checked without and with dropout (a fresh generator per evaluation: every
evaluation draws the same mask), at a scale that is not 1 (``alpha / r = 3 / 2``), so a forgotten scale
cannot pass. The model cases freeze a randomized tiny Llama (GQA: the q, k and v adapters write columns of
different widths of the fused q|k|v weight) and check every adapter parameter against central differences
of its loss, with LoRA's dropout on; B is drawn at O(1) scale, not zero, so that dA is not zero too.
"""

from __future__ import annotations

import numpy as np

from ..backend import asarray, default_rng
from ..model.lora import TARGETS, LoraConfig, adapter_shapes
from ..ops import B, C, T
from ..ops import normal as _randn
from ..ops.lora import lora_backward, lora_forward
from .cases import Case, op_case
from .check import check_gradients
from .model import DROPOUT_SEED, GQA, LLAMA, MAX_COORDS, randomized_model, tiny_batch

R, C_OUT = 2, 4  # the adapter's rank and output width (odd C = 5 in: no square shape hides a transpose)
SCALE = 1.5  # alpha / r with alpha = 3, r = 2
LORA_DROPOUT = 0.3


def _adapter_inputs() -> dict:
    return {"x": _randn(B, T, C), "lora_a": _randn(C, R, seed=1), "lora_b": _randn(R, C_OUT, seed=2)}


def _forward_with_dropout(x, lora_a, lora_b):  # a fresh generator per call: every evaluation draws the same mask
    return lora_forward(x, lora_a, lora_b, scale=SCALE, dropout_p=LORA_DROPOUT, rng=default_rng(7))


AXES = {"x": "B T C_in", "lora_a": "C_in r", "lora_b": "r C_out"}
MODEL_OPTIONS = {  # case -> (model options, LoRA targets)
    "q,v": ({**LLAMA, **GQA}, ("q", "v")),
    "all": ({**LLAMA, **GQA}, TARGETS),
}


def check_lora_model(option: str) -> list:
    """Every adapter parameter of the frozen tiny model ``MODEL_OPTIONS[option]``, LoRA's dropout on."""
    options, targets = MODEL_OPTIONS[option]
    model = randomized_model(options)
    lora = LoraConfig(rank=R, alpha=SCALE * R, dropout=LORA_DROPOUT, targets=targets)
    rng = np.random.default_rng(11)
    shapes = adapter_shapes(model.config, lora)
    model.add_lora(lora, values={n: asarray(rng.standard_normal(s) / np.sqrt(s[0])) for n, s in shapes.items()})
    ids, targets_ = tiny_batch(model.config.vocab_size)

    def loss() -> float:
        return float(model.forward(ids, targets_, rng=default_rng(DROPOUT_SEED))[0])

    _, cache = model.forward(ids, targets_, rng=default_rng(DROPOUT_SEED))
    grads = model.backward(cache)
    if set(grads) != set(model.adapters):
        raise AssertionError(f"a LoRA model's backward must give the adapters' gradients alone, got {sorted(grads)}")
    return check_gradients(f"lora_model[{option}]", loss, model.adapters, grads, max_coords=MAX_COORDS)


CASES = [
    op_case(
        "lora", lora_forward, lora_backward, _adapter_inputs, {"scale": SCALE}, axes=AXES,
    ),
    op_case(
        "lora[dropout]", _forward_with_dropout, lora_backward, _adapter_inputs, forward_name="lora_forward", axes=AXES
    ),
    *[Case(f"lora_model[{option}]", lambda learner=None, option=option: check_lora_model(option))
      for option in MODEL_OPTIONS],
]  # fmt: skip
