"""Packed rows: several sequences end to end in one row of the batch, each computed as if it were alone.

``GPT.forward(ids, targets, segments=...)`` takes each position's segment ``(B,T)``, non-decreasing along a
row (``[0 0 0 1 1 2]``: three sequences). Two things make a packed sequence compute what it would alone:

- attention: query ``i`` sees key ``j`` only within its own segment (and causally): the ``segments`` score
  modifier (``ops/segments.py``), added to every layer's modifiers;
- positions: each token takes its place in its own sequence, ``[0 1 2 0 1 0]``
  (``ops.segments.segment_positions``), not its place in the row: an added table's rows (learned,
  sinusoidal) are gathered at those positions, and the rotation (RoPE) turns q and k by them.

The rest of the model works token by token (norms, MLPs, the loss), so a packed row's loss summed over its
targets is the sum of each sequence's alone, and so are the gradients (``tests/test_packing.py``). ALiBi and
a sliding window read only ``i - j``, which is the same within a segment as within the sequence alone.
"""

from __future__ import annotations

from typing import NamedTuple

from ..ops.segments import check_segments, segment_positions


class Packing(NamedTuple):
    """A packed batch's segment ids ``(B,T)`` and each token's position in its own sequence ``(B,T)``."""

    ids: object
    positions: object


def packing(segments, ids_shape: tuple) -> Packing | None:
    """The ``Packing`` of ``segments (B,T)`` for token ids of ``ids_shape``; None when ``segments`` is None
    (each row one sequence). A ValueError or TypeError names a bad array."""
    if segments is None:
        return None
    B, T = ids_shape
    check_segments(segments, (B, 1, T, T))
    return Packing(segments, segment_positions(segments))
