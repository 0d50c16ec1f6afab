"""The backward pass, stage by stage: each upstream gradient as the model's own backward makes it.

``backward_stages(model, prompt)`` calls ``model.backward(prompt.cache,
record=...)`` once: the backward hands every upstream gradient to the
recorder as it computes it (``GPT.backward``, ``model/blocks.py``), with the
parameter gradients that step produced, so every number here is read from the
real backward; nothing is recomputed. The stages come in the backward's own
order, top down:

- ``loss`` (``dloss = 1``); ``final norm output h`` and, with tied weights,
  the output side of the token table's gradient (``dlogits^T h``);
- ``residual after the last layer``, then per layer, last first: the MLP branch
  (activation, pre-activation, norm output, its gradient into the residual),
  the residual after attention (``skip + MLP branch``), the attention branch
  (heads merged, q, k, v, norm output, into the residual), and the residual
  entering the block (``skip + attention branch``). The skips carry the
  gradient from the top to layer 0 unchanged; each branch adds its part;
- ``embedding sum``, with the token table's input side (scatter-add), the
  tied sum ``input side + output side`` (the gradient ``backward`` returns),
  and the position table's gradient, summed over the batch.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..backend import to_numpy
from ..table import format_table


class GradStage(NamedTuple):
    """One upstream gradient, summarized, and the parameter gradients the same step produced."""

    name: str
    shape: tuple[int, ...]
    norm: float
    mean: float
    std: float
    max_abs: float
    params: tuple[tuple[str, tuple[int, ...], float], ...]  # (name, shape, norm)
    array: object  # the gradient itself (NumPy or CuPy), for --dump
    param_arrays: dict  # name -> parameter gradient


def _norm(array) -> float:
    return float(np.linalg.norm(to_numpy(array).astype(np.float64).ravel()))


def backward_stages(model, prompt) -> tuple[list[GradStage], dict]:
    """``(stages, grads)``: the recorded stages of one backward on ``prompt.cache``, and its gradients."""
    if prompt.loss is None:
        raise ValueError("a one-token prompt has no target, so no loss to differentiate; give at least two tokens")
    stages = []

    def record(name: str, grad, params: dict) -> None:
        values = to_numpy(grad).astype(np.float64)
        stages.append(
            GradStage(
                name,
                tuple(values.shape),
                float(np.linalg.norm(values.ravel())),
                float(values.mean()),
                float(values.std()),
                float(np.abs(values).max()),
                tuple((p, tuple(g.shape), _norm(g)) for p, g in params.items()),
                grad,
                dict(params),
            )
        )

    grads = model.backward(prompt.cache, record=record)
    return stages, grads


def format_backward(stages: list[GradStage]) -> str:
    """One line per upstream gradient; below it, the parameter gradients of that step with their norms."""
    rows = []
    for s in stages:
        rows.append((s.name, str(s.shape), f"{s.norm:.4g}", f"{s.mean:.3g}", f"{s.std:.3g}", f"{s.max_abs:.3g}"))
        rows += [(f"    param {name}", str(shape), f"{norm:.4g}", "", "", "") for name, shape, norm in s.params]
    header = ("upstream gradient (d loss / d ...)", "shape", "norm", "mean", "std", "max |.|")
    return format_table(header, rows, align=("left", "left", "right", "right", "right", "right"))
