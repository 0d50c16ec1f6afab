"""Gradient-check cases for every core op (attention has its own suite), float64, 3-D shapes; 4-D
(B, H, T, D) heads for the rotary embedding and QK-norm (RMSNorm and RoPE composed, in both orders).

The components' cases (every norm, position rotation and activation) are the checks their registry
entries declare (``ops.OpCheck``), enumerated here: a component entered in its registry is
checked with nothing written here. Sizes are small and odd on purpose (T = 3, C = 5, V = 7) so a
transposed or mis-broadcast axis cannot hide behind a square shape.
"""

from __future__ import annotations

import numpy as np

from ..backend import asarray, default_rng
from ..model.positions import POSITIONS, rope_rows
from ..model.qk_norm import QK_NORM_EXTENTS
from ..ops import B, C, F, Invariant, OpCheck, T
from ..ops import normal as _randn
from ..ops.activations import ACTIVATIONS
from ..ops.cross_entropy import (
    cross_entropy_backward,
    cross_entropy_forward,
    scale_tied_cross_entropy_grads,
    tied_cross_entropy_backward,
    tied_cross_entropy_forward,
    tied_cross_entropy_with_grads,
)
from ..ops.dropout import dropout_backward, dropout_forward
from ..ops.embedding import embedding_backward, embedding_forward
from ..ops.linear import linear_backward, linear_forward
from ..ops.norms import NORMS
from ..ops.rmsnorm import rms_norm_backward, rms_norm_forward
from ..ops.rope import rope_backward, rope_forward
from ..ops.softcap import softcap_backward, softcap_forward
from .cases import Case, op_case
from .check import check_op
from .diagnose import RepeatedIds
from .moe import CASES as MOE_CASES

V = 7  # vocabulary of the cross-entropy cases
H, D = 3, 8  # heads and head width of the QK-norm cases (D even: D/2 rotated pairs)


LOGITS_INVARIANT = Invariant(
    "logits",
    "each row of dlogits sums to 0",
    "the softmax's own gradient (softmax minus one-hot: a constant added to a row of logits leaves the loss as it is)",
    lambda inputs, dlogits: dlogits,
)
TABLE_INVARIANT = Invariant(
    "table",
    "the rows of dtable add up to the zero vector",
    "the softmax's own gradient (a vector u added to every row of the table adds h.u to all the logits of a row, "
    "which leaves the loss as it is)",
    lambda inputs, dtable: dtable,
    axis=0,
)


def _targets(*shape, ignored: int = 1, seed: int = 3):
    """Targets in [0, V) with the first `ignored` set to -1 (ignore_index)."""
    t = np.random.default_rng(seed).integers(0, V, size=shape)
    t.reshape(-1)[:ignored] = -1
    return asarray(t)


def _linear_inputs(bias: bool) -> dict:
    return {"x": _randn(B, T, C), "weight": _randn(C, F, seed=1), "bias": _randn(F, seed=2) if bias else None}


def _embedding_inputs() -> dict:
    ids = asarray(np.array([[1, 4, 1], [6, 1, 0]]))  # id 1 three times: repeats must accumulate
    return {"ids": ids, "table": _randn(V, C)}


def _norm_then_rope(x, weight, cos, sin):
    """Qwen3's QK-norm: each head's q (or k) normalized over D with a weight (D,), then rotated."""
    h, norm_cache = rms_norm_forward(x, weight)
    y, rope_cache = rope_forward(h, cos, sin)
    return y, (norm_cache, rope_cache)


def _norm_then_rope_backward(dy, cache):
    norm_cache, rope_cache = cache
    dh = rope_backward(dy, rope_cache)  # the chain rule, the last op first
    return rms_norm_backward(dh, norm_cache)


def _projection_norm_then_rope(x, weight, cos, sin):
    """OLMoE's QK-norm: each position's heads side by side, (B,T,H D), normalized with a weight (H D,), then each
    head rotated."""
    extent = QK_NORM_EXTENTS["projection"]
    h, norm_cache = rms_norm_forward(extent.to_rows(x), weight)  # (B,H,T,D) -> (B,T,H D)
    y, rope_cache = rope_forward(extent.from_rows(h, x.shape[1]), cos, sin)  # -> (B,H,T,D)
    return y, (norm_cache, rope_cache)


def _projection_norm_then_rope_backward(dy, cache):
    norm_cache, rope_cache = cache
    extent = QK_NORM_EXTENTS["projection"]
    dh = rope_backward(dy, rope_cache)  # (B,H,T,D)
    dx, dweight = rms_norm_backward(extent.to_rows(dh), norm_cache)  # (B,T,H D)
    return extent.from_rows(dx, dy.shape[1]), dweight


def _rope_then_norm(x, cos, sin):
    """nanochat's QK-norm: each head rotated, then normalized over D without a weight."""
    h, rope_cache = rope_forward(x, cos, sin)
    y, norm_cache = rms_norm_forward(h, None)
    return y, (rope_cache, norm_cache)


def _rope_then_norm_backward(dy, cache):
    rope_cache, norm_cache = cache
    dh, _ = rms_norm_backward(dy, norm_cache)
    return rope_backward(dh, rope_cache)


def _qk_norm(name: str, forward, backward, weight: bool, width: int = D) -> Case:
    """RMSNorm and RoPE composed on (B, H, T, D) heads at positions [2, 2 + T): no single op's backward; the
    norm's weight ``(width,)``."""

    def run() -> list:
        inputs = {"x": _randn(B, H, T, D), **({"weight": _randn(width, seed=1)} if weight else {})}
        return check_op(name, forward, backward, inputs, rope_rows(2, T))

    return Case(name, run)


def _dropout(training: bool) -> Case:
    def forward(x):  # a fresh generator per call: every evaluation draws the same mask
        return dropout_forward(x, 0.3, default_rng(7), training=training)

    name = "dropout" + ("" if training else "[eval]")
    return op_case(name, forward, dropout_backward, lambda: {"x": _randn(B, T, C)}, forward_name="dropout_forward")


def _cross_entropy(ignored: int) -> Case:
    name = "cross_entropy" + ("[all ignored]" if ignored == B * T else "")
    inputs = lambda: {"logits": _randn(B, T, V), "targets": _targets(B, T, ignored=ignored)}
    return op_case(name, cross_entropy_forward, cross_entropy_backward, inputs, invariants=(LOGITS_INVARIANT,))


def _tied_cross_entropy(name: str, forward, backward, fused: bool, softcap: float | None = None) -> Case:
    inputs = lambda: {"h": _randn(B, T, C), "table": _randn(V, C, seed=1), "targets": _targets(B, T)}
    options = {"chunk_rows": 4}  # N = 6 rows: one full chunk and a partial
    if softcap is not None:  # a cap near the logits' scale: tanh far from the identity
        name, options = f"{name}[softcap]", {**options, "softcap": softcap}
    return op_case(name, forward, backward, inputs, options, fused=fused, invariants=(TABLE_INVARIANT,))


def _component_cases(pair, checks: tuple[OpCheck, ...]) -> list[Case]:
    """One case per check a registry entry declares, of its op pair (an entry: ``.forward``, ``.backward``)."""
    return [op_case(c.name, pair.forward, pair.backward, c.inputs, c.options, invariants=c.invariants) for c in checks]


ROTATIONS = [scheme.rotation for scheme in POSITIONS.values() if scheme.rotation is not None]
CASES = [
    op_case("linear", linear_forward, linear_backward, lambda: _linear_inputs(bias=True)),
    op_case("linear[no bias]", linear_forward, linear_backward, lambda: _linear_inputs(bias=False)),
    op_case("embedding", embedding_forward, embedding_backward, _embedding_inputs, invariants=(RepeatedIds(),)),
    *[case for norm in NORMS.values() for case in _component_cases(norm, norm.checks)],
    *[case for rotation in ROTATIONS for case in _component_cases(rotation, rotation.checks)],
    _qk_norm("qk_norm[norm, rope]", _norm_then_rope, _norm_then_rope_backward, weight=True),
    _qk_norm("qk_norm[rope, norm]", _rope_then_norm, _rope_then_norm_backward, weight=False),
    _qk_norm("qk_norm[projection, rope]", _projection_norm_then_rope, _projection_norm_then_rope_backward, True, H * D),
    *[case for activation in ACTIVATIONS.values() for case in _component_cases(activation, activation.checks)],
    _dropout(training=True),
    _dropout(training=False),
    _cross_entropy(ignored=1),
    _cross_entropy(ignored=B * T),
    _tied_cross_entropy("tied_cross_entropy", tied_cross_entropy_forward, tied_cross_entropy_backward, fused=False),
    _tied_cross_entropy(
        "tied_cross_entropy_and_grads", tied_cross_entropy_with_grads, scale_tied_cross_entropy_grads, fused=True
    ),
    _tied_cross_entropy(
        "tied_cross_entropy", tied_cross_entropy_forward, tied_cross_entropy_backward, fused=False, softcap=1.5
    ),
    _tied_cross_entropy(
        "tied_cross_entropy_and_grads",
        tied_cross_entropy_with_grads,
        scale_tied_cross_entropy_grads,
        fused=True,
        softcap=1.5,
    ),  # fmt: skip
    op_case("softcap", softcap_forward, softcap_backward, lambda: {"z": _randn(B, T, C, scale=2.0)}, {"cap": 1.5}),
    *MOE_CASES,
]
