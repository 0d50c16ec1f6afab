"""Gradient checks of plain and tiled attention: causal, full, masked, Tq != Tk, in float64.

Shapes are small and odd so that tiles are ragged (T = 5 and 7 with blocks of
2 and 3), and the cases include rows that see no key at all (Tq > Tk causal,
a mask row of False), whose gradients must be exactly zero. The dropout cases
fix ``dropout_seed``, so every evaluation of the objective drops the same
weights (the mask is a function of the seed, not of the values). The ``gqa``
and ``mqa`` cases give ``k, v`` fewer heads than ``q`` (grouped-query and
multi-query attention): their ``dk, dv`` sum over the query heads of a group.
Every score modifier of ``ops.scores.SCORE_MODIFIERS`` is checked on both kernels
with the arguments its entry draws (``gradcheck``), alone and after the causal
mask, with Tq != Tk and grouped-query heads: ``attention.scores.alibi``,
``flash_attention.scores.causal+alibi``, ...
The ``sinks`` cases give the kernels one sink logit per query head (gpt-oss), an input with its own gradient
``dsinks``, after ``dv``: causal, windowed, masked, with dropout, grouped-query, Tq != Tk, rows that see only
their sink.
The ``window`` cases run the tiled kernel with a sliding window alone, as the model does (ragged tiles: some
skipped, some the window's edge crosses, some wholly inside); its known mistakes are ``window_mistakes.py``'s.
The ``segments`` cases pack several sequences into each row, cut differently in each row (``ops/segments.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import backend
from ..ops import Invariant
from ..ops.attention import attention_backward, attention_forward
from ..ops.flash_attention import flash_attention_backward, flash_attention_forward
from ..ops.scores import SCORE_MODIFIERS
from .cases import Case, op_case

AXES = {"q": "B H Tq D", "k": "B H_kv Tk D", "v": "B H_kv Tk Dv"}  # H_kv = H but in the gqa, mqa cases
KEYS_INVARIANT = Invariant(
    "k",
    "dk sums to 0 over the keys (of each batch row and head), because each row of dS sums to 0",
    "the rowsum term of dS = P * (dP - rowsum(P * dP)) (one vector added to every key adds one constant to a "
    "query's scores, which the softmax does not see)",
    lambda inputs, dk: dk,
    axis=2,
)


def _qkv(B: int, H: int, Tq: int, Tk: int, D: int, Dv: int, seed: int, kv_heads: int | None = None, sinks=False):
    """``q (B,H,Tq,D)``, ``k (B,H_kv,Tk,D)``, ``v (B,H_kv,Tk,Dv)`` in float64, ``H_kv = kv_heads`` (default H),
    and with ``sinks`` the sink logits ``(H,)``."""
    rng = np.random.default_rng(seed)
    H_kv = H if kv_heads is None else kv_heads
    shapes = {"q": (B, H, Tq, D), "k": (B, H_kv, Tk, D), "v": (B, H_kv, Tk, Dv)} | ({"sinks": (H,)} if sinks else {})
    return {name: backend.asarray(rng.standard_normal(shape), dtype="float64") for name, shape in shapes.items()}


def _mask(B: int, Tq: int, Tk: int, seed: int):
    """A random (B, 1, Tq, Tk) mask whose first query row sees nothing."""
    allowed = np.random.default_rng(seed).random((B, 1, Tq, Tk)) < 0.6
    allowed[:, :, 0, :] = False
    return backend.asarray(allowed)


def _segments_case(name: str, shape: tuple, seed: int, lengths: list[list[int]], kv_heads=None, **kwargs) -> Case:
    """A causal check with packed segments, row ``b`` cut into segments of ``lengths[b]`` (``[[3, 2]]``: ids
    ``[[0, 0, 0, 1, 1]]``), the kernel's other options ``kwargs``."""
    ids = lambda: np.stack([np.repeat(np.arange(len(row)), row) for row in lengths])  # noqa: E731 (B,T)
    options = lambda: {"causal": True, "modifiers": (("segments", backend.asarray(ids())),), **kwargs}  # noqa: E731
    return _case(name, shape, seed=seed, kv_heads=kv_heads, options=options)


def _case(
    name: str, shape: tuple, seed: int, masked=False, kv_heads: int | None = None, options=None, sinks=False, **kwargs
) -> Case:
    """A check of ``attention`` or ``flash_attention`` (by the name's prefix) on ``shape = (B, H, Tq, Tk, D, Dv)``,
    with ``kv_heads`` key/value heads (default H), and with ``sinks`` a sink logit per query head; ``options``
    (a function making the kernel's options) in place of ``kwargs``."""
    tiled = name.startswith("flash_attention")
    kernel = flash_attention_forward if tiled else attention_forward
    backward = flash_attention_backward if tiled else attention_backward
    B, H, Tq, Tk, D, Dv = shape
    if options is None:
        options = (lambda: {**kwargs, "mask": _mask(B, Tq, Tk, seed)}) if masked else kwargs
    inputs = lambda: _qkv(*shape, seed=seed, kv_heads=kv_heads, sinks=sinks)
    # a sink takes its share of each row: dS's rows sum to -dS_sink, not 0, and dk over the keys neither
    invariants = () if sinks else (KEYS_INVARIANT,)
    forward = _sinks_positional(kernel) if sinks else kernel
    return op_case(
        name, forward, backward, inputs, options, seed=seed, forward_name=kernel.__name__,
        axes=AXES | ({"sinks": "H"} if sinks else {}), invariants=invariants,
    )  # fmt: skip


def _sinks_positional(kernel: Callable) -> Callable:
    """``kernel(q, k, v, sinks, **options)``: a check passes its inputs by position, the kernels take ``sinks=``."""

    def with_sinks(q, k, v, sinks, **options):
        return kernel(q, k, v, sinks=sinks, **options)

    return with_sinks


def _modifier_case(kernel: str, names: tuple[str, ...], shape: tuple, seed: int) -> Case:
    """A check of ``kernel`` with the score modifiers ``names`` (each with the argument its entry's ``gradcheck``
    draws), on ``shape = (B, H, Tq, Tk, D, Dv)`` with 2 key/value heads; the tiled kernel on ragged 2 x 3 tiles."""
    B, H, Tq, Tk = shape[:4]
    tiles = {"block_q": 2, "block_k": 3} if kernel == "flash_attention" else {}

    def options() -> dict:
        rng = np.random.default_rng(seed)
        args = [SCORE_MODIFIERS[name].gradcheck(rng, (B, H, Tq, Tk)) for name in names]
        uses = tuple(
            (name, backend.asarray(arg) if isinstance(arg, np.ndarray) else arg) for name, arg in zip(names, args)
        )
        return {"causal": False, "modifiers": uses, **tiles}

    return _case(f"{kernel}.scores.{'+'.join(names)}", shape, seed=seed, kv_heads=2, options=options)


def _modifier_cases() -> list[Case]:
    """Every score modifier on both kernels, alone and after the causal mask; Tq < Tk (decoding after a cache)."""
    uses = [(name,) for name in SCORE_MODIFIERS] + [("causal", name) for name in SCORE_MODIFIERS if name != "causal"]
    return [
        _modifier_case(kernel, names, (1, 4, 3, 7, 3, 2), seed=40 + i)
        for i, names in enumerate(uses)
        for kernel in ("attention", "flash_attention")
    ]


# shape: (B, H, Tq, Tk, D, Dv)
CASES = [
    _case("attention.causal", (2, 2, 5, 5, 3, 4), seed=1, causal=True),
    _case("attention.full", (1, 3, 4, 6, 2, 3), seed=2, causal=False),
    _case("attention.masked", (2, 2, 4, 5, 3, 2), seed=3, masked=True, causal=False),
    _case("attention.masked_causal", (1, 2, 5, 5, 3, 2), seed=4, masked=True, causal=True),
    _case("attention.causal_tq<tk", (1, 2, 2, 6, 3, 3), seed=5, causal=True),
    _case("attention.causal_tq>tk", (1, 2, 6, 3, 3, 3), seed=6, causal=True),
    _case("flash_attention.causal", (2, 2, 7, 7, 3, 4), seed=7, causal=True, block_q=2, block_k=3),
    _case("flash_attention.full", (1, 3, 5, 7, 2, 3), seed=8, causal=False, block_q=3, block_k=2),
    _case("flash_attention.causal_tq<tk", (1, 2, 3, 8, 3, 3), seed=9, causal=True, block_q=2, block_k=3),
    _case("flash_attention.causal_tq>tk", (1, 2, 7, 3, 3, 3), seed=10, causal=True, block_q=2, block_k=2),
    _case("flash_attention.one_tile", (1, 2, 5, 5, 4, 4), seed=11, causal=True, block_q=64, block_k=64),
    _case(
        "flash_attention.keep_probs", (2, 2, 7, 7, 3, 4), seed=12, causal=True, block_q=3, block_k=2, keep_probs=True
    ),
    _case("attention.dropout", (2, 2, 6, 6, 3, 4), seed=14, causal=True, dropout_p=0.3, dropout_seed=3),
    _case("attention.dropout_full", (1, 2, 4, 7, 3, 2), seed=15, causal=False, dropout_p=0.5, dropout_seed=4),
    _case(
        "flash_attention.dropout",
        (2, 2, 7, 7, 3, 4),
        seed=16,
        causal=True,
        block_q=3,
        block_k=2,
        dropout_p=0.3,
        dropout_seed=3,
    ),  # fmt: skip
    _case(
        "flash_attention.dropout_keep_probs",
        (1, 2, 7, 5, 3, 3),
        seed=17,
        causal=False,
        block_q=2,
        block_k=3,
        keep_probs=True,
        dropout_p=0.5,
        dropout_seed=4,
    ),  # fmt: skip
    _case(
        "flash_attention.keep_probs_tq>tk",
        (1, 2, 7, 3, 3, 3),
        seed=13,
        causal=True,
        block_q=2,
        block_k=2,
        keep_probs=True,
    ),
    # grouped-query (H 4 or 6, H_kv 2) and multi-query (H_kv 1) attention: dk, dv of shape (B,H_kv,Tk,.)
    _case("attention.gqa_causal", (2, 4, 5, 5, 3, 4), seed=18, kv_heads=2, causal=True),
    _case("attention.gqa_masked", (1, 6, 4, 5, 3, 2), seed=19, kv_heads=2, masked=True, causal=False),
    _case("attention.mqa_causal_tq<tk", (1, 3, 2, 6, 3, 3), seed=20, kv_heads=1, causal=True),
    _case(
        "attention.gqa_dropout", (2, 4, 6, 4, 3, 2), seed=21, kv_heads=2, causal=False, dropout_p=0.3, dropout_seed=5
    ),
    _case("flash_attention.gqa_causal", (2, 4, 7, 7, 3, 4), seed=22, kv_heads=2, causal=True, block_q=2, block_k=3),
    _case("flash_attention.mqa_full", (1, 3, 5, 7, 2, 3), seed=23, kv_heads=1, causal=False, block_q=3, block_k=2),
    _case(
        "flash_attention.gqa_causal_tq<tk", (1, 4, 3, 8, 3, 3), seed=24, kv_heads=2, causal=True, block_q=2, block_k=3
    ),
    _case(
        "flash_attention.mqa_causal_tq>tk", (1, 2, 7, 3, 3, 3), seed=25, kv_heads=1, causal=True, block_q=2, block_k=2
    ),
    _case(
        "flash_attention.gqa_dropout_keep_probs",
        (2, 4, 7, 5, 3, 4),
        seed=26,
        kv_heads=2,
        causal=True,
        block_q=3,
        block_k=2,
        keep_probs=True,
        dropout_p=0.3,
        dropout_seed=6,
    ),  # fmt: skip
    _case(
        "flash_attention.mqa_dropout_tq<tk",
        (1, 4, 3, 7, 2, 3),
        seed=27,
        kv_heads=1,
        causal=True,
        block_q=2,
        block_k=3,
        dropout_p=0.5,
        dropout_seed=7,
    ),  # fmt: skip
    # attention sinks (gpt-oss): dsinks (H,) after dv; rows that see only their sink (Tq > Tk causal, a mask row)
    _case("attention.sinks_causal", (2, 2, 5, 5, 3, 4), seed=50, sinks=True, causal=True),
    _case("attention.sinks_masked_tq>tk", (1, 2, 6, 3, 3, 2), seed=51, sinks=True, masked=True, causal=True),
    _case(
        "attention.sinks_gqa_window_tq<tk",
        (2, 4, 3, 7, 3, 2),
        seed=52,
        sinks=True,
        kv_heads=2,
        causal=False,
        modifiers=(("window", 3),),
    ),  # fmt: skip
    _case(
        "attention.sinks_dropout", (1, 2, 5, 6, 3, 2), seed=53, sinks=True, causal=True, dropout_p=0.3, dropout_seed=8
    ),  # fmt: skip
    _case(
        "flash_attention.sinks_causal", (2, 2, 7, 7, 3, 4), seed=54, sinks=True, causal=True, block_q=2, block_k=3
    ),  # fmt: skip
    _case(
        "flash_attention.sinks_mqa_causal_tq>tk",
        (1, 3, 7, 3, 3, 3),
        seed=55,
        sinks=True,
        kv_heads=1,
        causal=True,
        block_q=2,
        block_k=2,
    ),  # fmt: skip
    _case(
        "flash_attention.sinks_gqa_window_tq<tk",
        (2, 4, 3, 8, 3, 2),
        seed=56,
        sinks=True,
        kv_heads=2,
        causal=False,
        block_q=2,
        block_k=3,
        modifiers=(("window", 3), "alibi"),
    ),  # fmt: skip
    _case(
        "flash_attention.sinks_masked",
        (1, 2, 5, 6, 3, 2),
        seed=57,
        sinks=True,
        masked=True,
        causal=False,
        block_q=2,
        block_k=3,
    ),  # fmt: skip
    _case(
        "flash_attention.sinks_gqa_dropout_keep_probs",
        (2, 4, 7, 5, 3, 4),
        seed=58,
        sinks=True,
        kv_heads=2,
        causal=True,
        block_q=3,
        block_k=2,
        keep_probs=True,
        dropout_p=0.3,
        dropout_seed=9,
    ),  # fmt: skip
    # sliding windows as the model runs them (the window alone, causal itself): ragged tiles, some wholly outside
    # the window (skipped), some its left edge crosses, some wholly inside, the diagonal's
    _case(
        "flash_attention.window",
        (1, 2, 11, 11, 3, 4),
        seed=70,
        causal=False,
        block_q=2,
        block_k=2,
        modifiers=(("window", 4),),
    ),
    _case(
        "flash_attention.window_gqa_tq<tk",
        (1, 4, 5, 12, 3, 2),
        seed=71,
        kv_heads=2,
        causal=False,
        block_q=2,
        block_k=3,
        modifiers=(("window", 4),),
    ),
    _case(
        "flash_attention.window_alibi_tq>tk",
        (2, 2, 7, 4, 3, 3),
        seed=72,
        causal=False,
        block_q=2,
        block_k=2,
        modifiers=(("window", 3), "alibi"),
    ),
    # packed segments (ops/segments.py): rows of several sequences, each row cut differently, none seeing another
    _segments_case("attention.segments_gqa_causal", (2, 4, 7, 7, 3, 2), 60, [[3, 1, 3], [2, 5]], kv_heads=2),
    _segments_case(
        "flash_attention.segments_gqa_causal",
        (2, 4, 7, 7, 3, 2),
        61,
        [[3, 1, 3], [2, 5]],
        kv_heads=2,
        block_q=2,
        block_k=3,
    ),
    _segments_case(
        "flash_attention.segments_dropout_keep_probs_tq<tk",
        (2, 2, 3, 8, 3, 2),
        62,
        [[4, 2, 2], [7, 1]],
        block_q=2,
        block_k=3,
        keep_probs=True,
        dropout_p=0.3,
        dropout_seed=10,
    ),
] + _modifier_cases()
