"""``tiles(length, size)``: the ``[start, stop)`` ranges of ``size`` rows covering ``range(length)``.

The tiled attention walks query and key tiles with it, the chunked losses
their row chunks. Example: ``list(tiles(5, 2)) == [(0, 2), (2, 4), (4, 5)]``.
"""

from __future__ import annotations

from collections.abc import Iterator


def tiles(length: int, size: int) -> Iterator[tuple[int, int]]:
    """``[start, stop)`` ranges of ``size`` rows covering ``range(length)``; the last may be short."""
    for start in range(0, length, size):
        yield start, min(start + size, length)
