"""Score modifiers: what changes the attention scores ``S = s Q K^T`` before the softmax, declared once each.

A causal mask, a boolean mask (key padding), a sliding window, packed segments, ALiBi and soft-capping all
act on the score matrix, entry by entry, knowing only where an entry sits: its query's position ``i``, its
key's position ``j``, its query head ``h`` (and batch row)::

    S'[b, h, i, j] = f(S[b, h, i, j]) + term(b, h, i, j)      term = bias (a number) or 0 / -inf (a mask)

``f`` is the identity but for a transform (``softcap``: ``f(S) = c tanh(S / c)``, Gemma 2), applied first, before
any term: a mask's ``-inf`` must stay ``-inf`` (transformers' Gemma 2 caps, then adds its mask).

``SCORE_MODIFIERS`` holds each one as a ``ScoreModifier``. The plain kernel (``ops/attention.py``) adds
each ``textbook`` term, the whole ``(Tq, Tk)`` square at once; the tiled kernel (``ops/flash_attention.py``)
adds each ``tile`` term to one score tile at a time, in its forward and again in its backward's recomputation
of ``P = exp(S' - L)``; ``attention_weights`` (``ops/attention_weights.py``) rebuilds the tiled kernel's
weights through the same ``tile`` terms. The reference model uses ``textbook``, the PyTorch comparison
``torch_twin`` (an additive float ``attn_mask`` for ``scaled_dot_product_attention``), the gradient checks
``gradcheck``. KV-cache decoding needs nothing more: the ``Tq`` new queries are the last positions of
``Tk`` keys (bottom-right alignment), so query row ``r`` sits at position ``i = r + Tk - Tq``, the
cached length added (``ScoreTile.offset``).

An attention sink (gpt-oss) is not a modifier: it adds a column to each row instead of changing an entry,
enters once per row rather than per tile, and is a learned parameter with a gradient; it is the kernels'
``sinks`` argument (``ops/attention.py``, Attention sinks).

The backward: a modifier without parameters adds a constant to ``S``, so ``dS`` reaches ``s Q K^T``
unchanged; where a mask hides an entry, ``P = 0`` and so ``dS = P * (dP - D) = 0``. Neither kernel's
backward has anything to add: the recomputation of ``P`` applies the same terms. A transform is not a
constant: its ``slope`` ``f'(S)`` multiplies the gradient, ``dS = f'(S) * P * (dP - D)``
(softcap: ``f'(S) = 1 - (f(S) / c)^2``, read from the capped scores); the plain kernel keeps the slope,
the tiled one recomputes it with each tile (``ScoreSeam.transform``), and keeps no probability tiles then.

Skipping: a mask (``hides``) also says which keys a run of queries may see (``visible_keys``), so the tiled
kernel skips every tile it hides wholly and adds the mask only to the tiles it crosses (causal attention:
about half the tiles skipped, the diagonal ones masked; a window of W keys: all but about ``T W`` of the
``T^2`` scores skipped, forward and backward; packed segments, ``ops/segments.py``: the tiles that lie between
two segments of every row of a part). A mask's keys may depend on the batch rows of the part a walk covers
(segments do; ``visible_keys`` is given them). A bias is added to every tile.

Example, Tq = 2, Tk = 4 (decoding 2 tokens after 2 cached), causal and ALiBi with slope m::

    query 0 (position 2): terms [-2m, -m, 0, -inf]
    query 1 (position 3): terms [-3m, -2m, -m, 0]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from ..backend import get_xp, to_numpy
from ..checks import check_array, check_positive_int
from .segments import (
    check_segments,
    segments_gradcheck,
    segments_keys,
    segments_textbook,
    segments_tile,
    segments_torch,
)
from .softcap import check_cap, softcap_in_place, softcap_slope, softcap_textbook, softcap_torch


class ScoreTile(NamedTuple):
    """Where a score tile sits, the tile seen as ``(b, r, nq, g, nk)``: ``r`` groups of ``g`` query heads.

    The tiled kernel stacks the ``g`` query heads that share a key/value head row by row (``ops/_kv_groups.py``):
    its ``(b, r, nq g, nk)`` tile is the ``(b, r, nq, g, nk)`` view. The plain kernel's ``(B, H, Tq, Tk)`` square is
    one tile with ``r = H``, ``g = 1``. A term broadcasts to ``(b, r, nq, g, nk)``.
    """

    batches: slice  # the tile's batch rows
    heads: object  # (r,1,g,1) ints: the query head of each (group, stacked row)
    num_heads: int  # H, every query head of the call (ALiBi's slopes depend on it)
    queries: range  # query rows [q_start, q_stop)
    keys: range  # keys [k_start, k_stop)
    offset: int  # Tk - Tq: query row r is at position r + offset

    def query_positions(self, xp):
        """``(nq, 1, 1)`` positions ``i`` of the tile's queries."""
        return xp.arange(self.queries.start + self.offset, self.queries.stop + self.offset)[:, None, None]

    def key_positions(self, xp):
        """``(nk,)`` positions ``j`` of the tile's keys."""
        return xp.arange(self.keys.start, self.keys.stop)


class ScoreModifier(NamedTuple):
    """One way of changing the scores (module docstring), declared once.

    ``hides``: a mask (terms 0 or -inf; hidden entries get P = 0, so dS = 0 there) rather than a bias
    (a number added; without parameters dS passes through unchanged). A transform (``slope`` given) changes
    the scores themselves: its ``tile`` is ``(xp, arg, scores, unit) -> None``, in place on a score tile in base
    ``unit`` (``log2 e`` in the tiled kernel), its ``textbook`` ``(xp, arg, scores) -> f(scores)``, its
    ``torch_twin`` ``(arg, scores) -> f(scores)`` on a torch tensor, and ``slope(xp, arg, transformed, unit)``
    gives ``f'(S)`` from the transformed tile.
    """

    about: str
    hides: bool
    tile: Callable  # (xp, arg, ScoreTile, dtype) -> term broadcastable to (b,r,nq,g,nk)
    textbook: Callable  # (xp, arg, (B,H,Tq,Tk), dtype) -> term broadcastable to (B,H,Tq,Tk), the plain formula
    torch_twin: Callable  # (arg, (B,H,Tq,Tk), torch dtype) -> a float attn_mask broadcastable to (B,H,Tq,Tk)
    gradcheck: Callable  # (rng, (B,H,Tq,Tk)) -> the arg of a gradient check (a NumPy array, an int or None)
    check: Callable  # (arg, (B,H,Tq,Tk)) -> None, or a TypeError / ValueError naming the bad argument
    visible_keys: Callable | None = None  # masks: (arg, batches, queries, offset, Tk) -> (any, every) ranges of keys
    slope: Callable | None = None  # transforms: (xp, arg, f(S) in base unit, unit) -> f'(S); None: a term

    @property
    def transforms(self) -> bool:
        """Whether it transforms the scores (``f``) rather than adding a term."""
        return self.slope is not None


# ------------------------------------------------------------------ causal: query i sees keys j <= i


def _causal_tile(xp, arg, tile: ScoreTile, dtype):
    allowed = tile.key_positions(xp) <= tile.query_positions(xp)[:, 0]  # (nk,) <= (nq,1) -> (nq,nk)
    return xp.where(allowed, dtype.type(0), dtype.type(-np.inf))[:, None, :]  # (nq,1,nk): one row per position


def _causal_textbook(xp, arg, shape, dtype):
    B, H, Tq, Tk = shape
    future = xp.triu(xp.ones((Tq, Tk), dtype=bool), k=Tk - Tq + 1)  # True where key j > position i = row + Tk - Tq
    return xp.where(future, dtype.type(-np.inf), dtype.type(0))  # (Tq,Tk)


def _causal_torch(arg, shape, dtype):
    import torch

    B, H, Tq, Tk = shape
    seen = torch.ones(Tq, Tk, dtype=torch.bool).tril(diagonal=Tk - Tq)
    return torch.zeros(Tq, Tk, dtype=dtype).masked_fill(~seen, -math.inf)  # (Tq,Tk)


def _causal_keys(arg, batches: slice, queries: range, offset: int, Tk: int) -> tuple[range, range]:
    """Query rows ``[q0, q1)`` see keys ``j <= row + offset``: some of them ``[0, q1 + offset)``,
    all of them ``[0, q0 + offset + 1)``."""
    return range(max(0, min(Tk, queries.stop + offset))), range(max(0, min(Tk, queries.start + offset + 1)))


# ------------------------------------------------------------------ mask: a boolean (B,H,Tq,Tk), True = may attend


def _as_4d(mask):
    return mask.reshape((1,) * (4 - mask.ndim) + tuple(mask.shape))  # (...) -> (B|1,H|1,Tq|1,Tk|1)


def _mask_tile(xp, mask, tile: ScoreTile, dtype):
    m = _as_4d(mask)
    m = m if m.shape[0] == 1 else m[tile.batches]  # (b|1,H|1,Tq|1,Tk|1)
    rows = slice(tile.queries.start, tile.queries.stop) if m.shape[2] > 1 else slice(None)
    keys = slice(tile.keys.start, tile.keys.stop) if m.shape[3] > 1 else slice(None)
    m = m[:, :, rows, keys]  # (b|1,H|1,nq|1,nk|1)
    if m.shape[1] == 1:
        m = m[:, :, :, None, :]  # (b|1,1,nq|1,1,nk|1)
    else:  # the tile's query heads, then (b,r g,nq,nk) -> (b,r,g,nq,nk) -> (b,r,nq,g,nk)
        r, _, g, _ = tile.heads.shape
        m = m[:, xp.asarray(tile.heads).ravel()].reshape(m.shape[0], r, g, *m.shape[2:]).swapaxes(2, 3)
    return xp.where(m, dtype.type(0), dtype.type(-np.inf))


def _mask_textbook(xp, mask, shape, dtype):
    return xp.where(mask, dtype.type(0), dtype.type(-np.inf))  # broadcastable to (B,H,Tq,Tk)


def _mask_torch(mask, shape, dtype):
    import torch

    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~torch.as_tensor(to_numpy(mask)), -math.inf)


def _mask_gradcheck(rng, shape):
    B, H, Tq, Tk = shape
    allowed = rng.random((B, 1, Tq, Tk)) < 0.6
    allowed[:, :, 0, :] = False  # a row that sees nothing: its gradients must be exactly 0
    return allowed


def _check_mask(mask, shape) -> None:
    check_array(mask, "mask")
    if mask.dtype.kind != "b":
        raise TypeError(f"mask must be boolean (True = may attend), got dtype {mask.dtype}")
    trailing = tuple(mask.shape)[-4:] if mask.ndim else ()
    if not (mask.ndim <= 4 and all(m in (1, n) for m, n in zip(reversed(trailing), reversed(shape)))):
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to (B,H,Tq,Tk) = {tuple(shape)}")


def _any_keys(arg, batches: slice, queries: range, offset: int, Tk: int) -> tuple[range, range]:
    return range(Tk), range(0)  # any key may be seen, none is seen by all: every tile is masked


# ------------------------------------------------------------------ window: query i sees keys i - W < j <= i


def _window_seen(distance, width: int):
    """Seen where ``0 <= i - j < W``: the key is not in the future and fewer than ``W`` positions back."""
    return (distance >= 0) & (distance < width)


def _window_tile(xp, width, tile: ScoreTile, dtype):
    distance = tile.query_positions(xp)[:, 0] - tile.key_positions(xp)  # i - j: (nq,1) - (nk,) -> (nq,nk)
    return xp.where(_window_seen(distance, width), dtype.type(0), dtype.type(-np.inf))[:, None, :]  # (nq,1,nk)


def _window_textbook(xp, width, shape, dtype):
    B, H, Tq, Tk = shape
    distance = xp.arange(Tq)[:, None] + (Tk - Tq) - xp.arange(Tk)[None, :]  # i - j, i = row + Tk - Tq: (Tq,Tk)
    return xp.where(_window_seen(distance, width), dtype.type(0), dtype.type(-np.inf))  # (Tq,Tk)


def _window_torch(width, shape, dtype):
    import torch

    B, H, Tq, Tk = shape
    distance = torch.arange(Tq)[:, None] + (Tk - Tq) - torch.arange(Tk)[None, :]  # (Tq,Tk)
    return torch.zeros(Tq, Tk, dtype=dtype).masked_fill(~_window_seen(distance, width), -math.inf)


def _window_keys(width, batches: slice, queries: range, offset: int, Tk: int) -> tuple[range, range]:
    """Query rows ``[q0, q1)`` (positions ``[q0 + offset, q1 + offset)``) see keys ``i - W < j <= i``: some of
    them ``[q0 + offset - W + 1, q1 + offset)``, all of them ``[q1 + offset - W, q0 + offset + 1)``."""
    first, last = queries.start + offset, queries.stop - 1 + offset  # the positions of the first and last rows
    clip = lambda n: max(0, min(Tk, n))  # noqa: E731
    return range(clip(first - width + 1), clip(last + 1)), range(clip(last - width + 1), clip(first + 1))


def _check_window(width, shape) -> None:
    check_positive_int(width, "the window's width W (score modifier 'window')")


# ------------------------------------------------------------------ ALiBi: bias -m_h (i - j)


def alibi_slopes(num_heads: int) -> np.ndarray:
    """ALiBi's slope per head ``(H,)`` float64: ``m_h = 2^(-8 h / H)``, ``h = 1 .. H``, for ``H`` a power of two;
    otherwise those of the power of two ``n < H`` just below, then every other one of ``2n``'s, to ``H`` slopes.

    Example: H = 8 -> 1/2, 1/4, ..., 1/256; H = 6 -> the four of 4 (1/4, 1/16, 1/64, 1/256), then 1/2, 1/8.
    """
    n = 2 ** int(math.floor(math.log2(num_heads)))
    geometric = lambda count: 2.0 ** (-8.0 * np.arange(1, count + 1) / count)  # noqa: E731
    return np.concatenate([geometric(n), geometric(2 * n)[0::2][: num_heads - n]])


def _alibi_tile(xp, arg, tile: ScoreTile, dtype):
    slopes = xp.asarray(alibi_slopes(tile.num_heads), dtype=dtype)[xp.asarray(tile.heads)]  # (r,1,g,1)
    distance = (tile.query_positions(xp) - tile.key_positions(xp)).astype(dtype)  # i - j: (nq,1,nk)
    return -slopes * distance  # (r,1,g,1) * (nq,1,nk) -> (r,nq,g,nk)


def _alibi_textbook(xp, arg, shape, dtype):
    B, H, Tq, Tk = shape
    i = xp.arange(Tq)[:, None] + (Tk - Tq)  # (Tq,1) positions of the queries
    j = xp.arange(Tk)[None, :]  # (1,Tk)
    slopes = xp.asarray(alibi_slopes(H), dtype=dtype)[:, None, None]  # (H,1,1)
    return -slopes * (i - j).astype(dtype)  # (H,1,1) * (Tq,Tk) -> (H,Tq,Tk)


def _alibi_torch(arg, shape, dtype):
    import torch

    B, H, Tq, Tk = shape
    n = 2 ** int(math.floor(math.log2(H)))
    slopes = torch.cat([2.0 ** (-8.0 * torch.arange(1, c + 1, dtype=torch.float64) / c) for c in (n, 2 * n)])
    slopes = torch.cat([slopes[:n], slopes[n::2][: H - n]]).to(dtype)  # (H,)
    distance = (torch.arange(Tq)[:, None] + Tk - Tq - torch.arange(Tk)[None, :]).to(dtype)  # (Tq,Tk)
    return -slopes[:, None, None] * distance  # (H,Tq,Tk)


# ------------------------------------------------------------------ softcap: f(S) = c tanh(S / c) (Gemma 2)


def _softcap_tile(xp, cap, scores, unit: float) -> None:
    softcap_in_place(scores, cap * unit)  # in base unit: unit c tanh(S_unit / (unit c)) = unit f(S)


def _softcap_slope(xp, cap, capped, unit: float):
    return softcap_slope(capped, cap * unit)  # 1 - (f(S) / c)^2, the same in any base


def _softcap_textbook(xp, cap, scores):
    return softcap_textbook(scores, cap)  # c tanh(S / c)


def _softcap_torch(cap, scores):
    return softcap_torch(scores, cap)


def _check_softcap(cap, shape) -> None:
    check_cap(cap, "the soft cap c (score modifier 'softcap')")


def _no_arg(arg, shape) -> None:
    if arg is not None:
        raise TypeError(f"this score modifier takes no argument, got {type(arg).__name__}")


SCORE_MODIFIERS = {  # name -> ScoreModifier
    "causal": ScoreModifier(
        "causal: query i sees keys j <= i (bottom-right aligned when Tq < Tk)",
        hides=True,
        tile=_causal_tile,
        textbook=_causal_textbook,
        torch_twin=_causal_torch,
        gradcheck=lambda rng, shape: None,
        check=_no_arg,
        visible_keys=_causal_keys,
    ),
    "mask": ScoreModifier(
        "mask: a boolean array, True = may attend, broadcast to (B,H,Tq,Tk); key padding is (B,1,1,Tk)",
        hides=True,
        tile=_mask_tile,
        textbook=_mask_textbook,
        torch_twin=_mask_torch,
        gradcheck=_mask_gradcheck,
        check=_check_mask,
        visible_keys=_any_keys,
    ),
    "window": ScoreModifier(
        "window: query i sees keys i - W < j <= i, the W latest positions, itself included (argument W)",
        hides=True,
        tile=_window_tile,
        textbook=_window_textbook,
        torch_twin=_window_torch,
        gradcheck=lambda rng, shape: 2,  # Tq = 3 after 4 cached keys, tiles 2 x 3: some key tiles wholly outside
        check=_check_window,
        visible_keys=_window_keys,
    ),
    "segments": ScoreModifier(
        "segments: query i sees key j only in the same segment of its row (packed sequences; argument ids (B,Tk))",
        hides=True,
        tile=segments_tile,
        textbook=segments_textbook,
        torch_twin=segments_torch,
        gradcheck=segments_gradcheck,
        check=check_segments,
        visible_keys=segments_keys,
    ),
    "alibi": ScoreModifier(
        "alibi: a bias -m_h (i - j), one slope m_h per head, no parameters",
        hides=False,
        tile=_alibi_tile,
        textbook=_alibi_textbook,
        torch_twin=_alibi_torch,
        gradcheck=lambda rng, shape: None,
        check=_no_arg,
    ),
    "softcap": ScoreModifier(
        "softcap: the scores capped, c tanh(S / c), before every term (argument c)",
        hides=False,
        tile=_softcap_tile,
        textbook=_softcap_textbook,
        torch_twin=_softcap_torch,
        gradcheck=lambda rng, shape: 0.7,  # near the scores' scale: tanh far from the identity
        check=_check_softcap,
        slope=_softcap_slope,
    ),
}


def as_use(modifier) -> tuple[str, object]:
    """A name, or a ``(name, argument)`` pair, as ``(name, argument)``."""
    return (modifier, None) if isinstance(modifier, str) else tuple(modifier)


def torch_attention_options(modifiers: Sequence, shape: tuple, dtype, float_mask: bool = False) -> dict:
    """``scaled_dot_product_attention``'s keyword arguments for ``modifiers`` (names or ``(name, argument)``
    pairs, as the kernels take them) on ``(B,H,Tq,Tk)``: their torch twins summed into one additive float
    ``attn_mask``; ``is_causal=True`` for the causal mask alone with ``Tq == Tk`` (the same mask, tested equal,
    by SDPA's own causal kernel: faster on the CPU than an array; ``float_mask``: always the array). A transform
    is not a mask: ``torch_transform`` applies it to explicit scores."""
    uses = [as_use(m) for m in modifiers if not SCORE_MODIFIERS[as_use(m)[0]].transforms]
    if uses == [("causal", None)] and shape[2] == shape[3] and not float_mask:
        return {"is_causal": True}
    return {"attn_mask": sum(SCORE_MODIFIERS[name].torch_twin(arg, shape, dtype) for name, arg in uses)}


def torch_transform(modifiers: Sequence):
    """The transforms among ``modifiers`` as one function of a torch score tensor (None when there are none)."""
    uses = [as_use(m) for m in modifiers if SCORE_MODIFIERS[as_use(m)[0]].transforms]
    if not uses:
        return None

    def transformed(scores):
        for name, arg in uses:
            scores = SCORE_MODIFIERS[name].torch_twin(arg, scores)
        return scores

    return transformed


# ------------------------------------------------------------------ the seam the kernels call


class Applied(NamedTuple):
    """A modifier as one kernel call applies it: its name, its entry, its argument (the mask array, W, or None)."""

    name: str
    modifier: ScoreModifier
    arg: object


def score_modifiers(causal: bool, mask, modifiers: Sequence, shape: tuple) -> tuple[Applied, ...]:
    """The modifiers a kernel call applies, in order: ``"causal"`` when ``causal``, ``"mask"`` with ``mask`` when
    given, then ``modifiers``, each a name of ``SCORE_MODIFIERS`` or a ``(name, arg)`` pair; each checked
    against the call's ``shape = (B,H,Tq,Tk)``."""
    if isinstance(modifiers, str) or not isinstance(modifiers, (list, tuple)):
        raise TypeError(f"modifiers must be a tuple of names or (name, argument) pairs, got {modifiers!r}")
    uses = [("causal", None)] * bool(causal) + [("mask", mask)] * (mask is not None)
    uses += [as_use(m) for m in modifiers]
    names = [name for name, _ in uses]
    for name in names:
        if name not in SCORE_MODIFIERS:
            raise ValueError(f"unknown score modifier {name!r}; expected one of {sorted(SCORE_MODIFIERS)}")
        if names.count(name) > 1:
            raise ValueError(f"the score modifier {name!r} is given twice (causal=True is 'causal', mask= is 'mask')")
    for name, arg in uses:
        SCORE_MODIFIERS[name].check(arg, shape)
    return tuple(Applied(name, SCORE_MODIFIERS[name], arg) for name, arg in uses)


def textbook_scores(scores, applied: Sequence[Applied]):
    """``S' = f(S) + sum of the textbook terms`` on a whole ``(B,H,Tq,Tk)`` score array (the plain kernel), in
    place; returns ``(S', slope)``, ``slope = f'(S)`` (B,H,Tq,Tk) of the transforms, None without one."""
    xp, slope = get_xp(scores), None
    for a in applied:
        if a.modifier.transforms:  # f(S), before every term; the slopes of two transforms multiply
            scores[...] = a.modifier.textbook(xp, a.arg, scores)
            step = a.modifier.slope(xp, a.arg, scores, 1.0)
            slope = step if slope is None else slope * step
    for a in applied:
        if not a.modifier.transforms:
            scores += a.modifier.textbook(xp, a.arg, scores.shape, scores.dtype)  # (B,H,Tq,Tk) += (..,Tq,Tk)
    return scores, slope


class ScoreSeam(NamedTuple):
    """The modifiers of one tiled kernel call, placed on the part of ``(batches, heads)`` that one walk covers."""

    applied: tuple[Applied, ...]
    batches: slice
    heads: object  # (r,1,g,1) the part's query heads, r groups of g stacked heads
    num_heads: int

    @classmethod
    def whole(cls, applied, num_heads: int) -> ScoreSeam:
        """Every batch row and head, unstacked (``g = 1``)."""
        return cls(tuple(applied), slice(None), np.arange(num_heads).reshape(num_heads, 1, 1, 1), num_heads)

    def part(self, part: tuple[slice, slice], stack: int) -> ScoreSeam:
        """The seam of the part ``(batches, query heads)``, its heads stacked ``stack`` to a kv head."""
        batches, heads = part
        count = heads.stop - heads.start
        stacked = np.arange(heads.start, heads.stop).reshape(count // stack, 1, stack, 1)  # (r,1,g,1)
        return self._replace(batches=batches, heads=stacked)

    def key_span(self, queries: range, offset: int, Tk: int) -> tuple[range, range]:
        """``(any, every)``: the keys some query of ``queries`` may see under every mask, and those all of them see."""
        any_keys, every_keys = range(Tk), range(Tk)
        for a in self.applied:
            if a.modifier.hides:
                some, all_ = a.modifier.visible_keys(a.arg, self.batches, queries, offset, Tk)
                any_keys = range(max(any_keys.start, some.start), max(min(any_keys.stop, some.stop), 0))
                every_keys = range(max(every_keys.start, all_.start), max(min(every_keys.stop, all_.stop), 0))
        return any_keys, every_keys

    def add(self, scores, queries: range, keys: range, offset: int, masked: bool, unit: float = 1.0) -> None:
        """In place: each term on a ``(b, r, nq g, nk)`` tile; the masks only when ``masked`` (a tile no mask
        crosses is left alone), the biases times ``unit`` (``log2 e`` when the scores are in base 2;
        a mask's 0 and -inf are the same in any base)."""
        xp, dtype = get_xp(scores), scores.dtype
        tile = ScoreTile(self.batches, self.heads, self.num_heads, queries, keys, offset)
        b, r, rows, nk = scores.shape
        view = scores.reshape(b, r, len(queries), rows // len(queries), nk)  # (b,r,nq,g,nk), a view
        for a in self.applied:
            if (a.modifier.hides and not masked) or a.modifier.transforms:
                continue
            term = a.modifier.tile(xp, a.arg, tile, dtype)
            view += term if a.modifier.hides or unit == 1.0 else term * dtype.type(unit)

    def transform(self, scores, unit: float = 1.0, with_slope: bool = True):
        """In place: every transform ``f`` on a score tile in base ``unit`` (before ``add``); returns the slope
        ``f'(S)`` of the tile (``with_slope``), None when the seam has no transform or without ``with_slope``."""
        xp, slope = get_xp(scores), None
        for a in self.applied:
            if a.modifier.transforms:
                a.modifier.tile(xp, a.arg, scores, unit)
                if not with_slope:
                    continue
                step = a.modifier.slope(xp, a.arg, scores, unit)
                slope = step if slope is None else slope * step
        return slope

    @property
    def biased(self) -> bool:
        """Whether a bias is added to every tile (not only masks to the tiles they cross)."""
        return any(not a.modifier.hides and not a.modifier.transforms for a in self.applied)

    @property
    def transformed(self) -> bool:
        """Whether a transform changes every tile's scores (``transform``)."""
        return any(a.modifier.transforms for a in self.applied)
