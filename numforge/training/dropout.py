"""Dropout masks that depend on the seed, the step and each row's place in the global batch, nothing else.

Row ``b`` of step ``s``'s global batch draws its masks from its own generator,
``default_rng((seed, DROPOUT_STREAM, s, b))``. So a resumed run draws exactly
the masks of a straight run (no generator state to save), and a rank or a
micro-batch holding rows 8..15 draws for them exactly what one process
holding all 16 rows draws: the masks do not depend on how the batch is split.
"""

from __future__ import annotations

import math

from ..backend import default_rng, get_xp
from ..model import GPTConfig

# Dropout's seeds are (seed, DROPOUT_STREAM, step, row): never the bare seed of init and batches, which NumPy's
# SeedSequence would take (seed, 0) for, so without the 1 step 0's masks could reuse the batches' stream.
DROPOUT_STREAM = 1


class RowStreams:
    """A generator for ``dropout_forward`` whose draws for row ``b`` come from row ``b``'s own stream.

    ``random(shape, dtype)`` serves any array whose leading axis holds the
    batch's rows outermost: ``(B,T,C)`` or its ``(B*T,C)`` reshape. Each
    row's generator gives its ``prod(shape) / B`` numbers in turn, so the
    model's successive dropout layers read successive draws of each stream.
    Example: rows ``range(2, 4)`` of a batch draw exactly rows 2 and 3 of
    what ``range(0, 4)`` draws.
    """

    def __init__(self, seed: int, step: int, rows: range):
        self.rows = rows
        self.generators = [default_rng((seed, DROPOUT_STREAM, step, row)) for row in rows]

    def random(self, shape, dtype):
        count = len(self.generators)
        if not shape or shape[0] % count:
            raise ValueError(f"a draw of shape {tuple(shape)} does not hold the {count} rows {self.rows} outermost")
        per_row = math.prod(shape) // count
        draws = [generator.random(per_row, dtype=dtype) for generator in self.generators]  # count x (per_row,)
        return get_xp(draws[0]).concatenate(draws).reshape(shape)  # (count*per_row,) -> shape


def dropout_rng(config: GPTConfig, seed: int, step: int, rows: range, lora=None) -> RowStreams | None:
    """The generator of the dropout masks of ``rows`` of ``step``'s batch, or None when ``config.drop_prob`` is 0
    and no LoRA adapter (``lora``, a ``LoraConfig``) drops its input.

    A fresh generator per row (about 30 us each on NumPy), a function of the
    seed, the step and the row's index in the global batch alone.
    """
    if config.drop_prob == 0 and (lora is None or lora.dropout == 0):
        return None
    return RowStreams(seed, step, rows)
