"""Dropout on attention weights: a mask that is a pure function of (seed, batch, head, query, key).

After the softmax, each weight is kept with probability ``1 - p`` and scaled
so that its expectation is unchanged (as in PyTorch's SDPA ``dropout_p``)::

    P_dropped = P * Z,    Z = keep / (1 - p),    keep ~ Bernoulli(1 - p)
    O = P_dropped V

The head is the query head: with grouped-query attention the ``G`` query heads
that share a key/value head drop their weights independently, as if ``k, v``
were repeated: every weight has its own query head, query and key.

Plain attention draws ``Z`` for the whole ``(Tq, Tk)`` square; tiled
attention draws it one tile at a time, in the forward and again in the
backward, and never stores it. Both get the same numbers because a weight's
draw depends only on where it is, never on who asks or how the asker tiles:

Mask blocks
-----------
Queries and keys are cut into fixed mask blocks of ``MASK_BLOCK_Q x MASK_BLOCK_K``
(64 x 256) positions, the same for every caller. The uniforms of mask block
``(qb, kb)`` of batch ``b``, head ``h`` come from one counter-based generator
(NumPy's ``Philox``) with::

    key     = (seed, b)           or, with one seed per row, (seed_b, 0)
    counter = (0, h, qb, kb)

read row by row as 32-bit words (``w = min(256, Tk - 256 kb)`` keys a row). Philox's output is a
fixed function of key and counter, and drawing a block only steps the
counter's first word, so two blocks never share a number, and any rectangle of
the mask is rebuilt by drawing the blocks it overlaps (only as many rows as
needed: a stream read row by row gives the first rows first). Compute tiles
need not line up with mask blocks: the model's 64 x 256 tiles are mask
blocks exactly; the default 128 x 256 tiles each cover two; a tile of 3 x 2
(the tests) reads the corner of one. Example: query 70, key 300 of head 2,
batch 0 is word ``(70 - 64) * w + (300 - 256)`` of the stream with key
``(seed, 0)`` and counter ``(0, 2, 1, 1)``, ``w = min(256, Tk - 256)``.

Each weight takes one random 32-bit word ``u`` (a Philox number is two) and is
dropped when ``u < round(p * 2**32)``: an integer comparison, the same whatever
the attention's dtype, so a float64 gradient check and a float32 run drop the
same weights. The words are drawn on the host with NumPy and the mask copied to
the device on CuPy: the masks are identical on both backends.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..backend import get_xp
from ..checks import is_integer, is_real

MASK_BLOCK_Q, MASK_BLOCK_K = 64, 256
SEED_LIMIT = 2**64  # a Philox key word


def drop_threshold(p: float) -> int:
    """A random 32-bit word ``u`` drops its weight when ``u < round(p * 2**32)``: probability ``p`` to ``2**-33``."""
    return round(p * 2**32)


def check_dropout(dropout_p: object, dropout_seed: object, batch: int) -> tuple[float, int, tuple | None]:
    """``(p, seed, row_seeds)`` from ``dropout_p`` in ``[0, 1)`` and ``dropout_seed``: an int in ``[0, 2**64)``
    (``row_seeds`` None) or one such int per batch row (``seed`` 0); else an error naming the bad value."""
    if not is_real(dropout_p) or not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be a number in [0, 1), got {dropout_p!r}")
    per_row = isinstance(dropout_seed, (list, tuple))
    seeds = list(dropout_seed) if per_row else [dropout_seed]
    if per_row and len(seeds) != batch:
        raise ValueError(f"dropout_seed must hold one seed per batch row ({batch}), got {len(seeds)}")
    for seed in seeds:
        if not is_integer(seed):
            raise TypeError(f"dropout_seed must be an int or a list of ints, got {type(seed).__name__}")
        if not 0 <= seed < SEED_LIMIT:
            raise ValueError(f"dropout_seed must be in [0, 2**64), got {seed}")
    return float(dropout_p), (0 if per_row else int(seeds[0])), (tuple(int(s) for s in seeds) if per_row else None)


def random_words(seed: int, b: int, h: int, qb: int, kb: int, rows: int, width: int) -> np.ndarray:
    # key (seed, b): the call's seed and the row, or (row's own seed, 0) with per-row seeds
    """The first ``rows`` rows of mask block ``(qb, kb)`` of batch ``b``, head ``h``: uint32 ``(rows, width)``.

    Philox gives 64-bit numbers; each is two 32-bit words, in the machine's byte
    order (low word first on x86 and ARM).
    """
    generator = np.random.Philox(
        key=np.array([seed, b], dtype=np.uint64), counter=np.array([0, h, qb, kb], dtype=np.uint64)
    )
    count = rows * width
    words = generator.random_raw((count + 1) // 2).view(np.uint32)  # (2 * ceil(count/2),) uint32
    return words[:count].reshape(rows, width)


class AttentionDropout(NamedTuple):
    """The dropout of one attention call: rate ``p``, ``seed``, the absolute batches and heads it covers, ``Tk``.

    ``keep(xp, queries, keys)`` draws the mask of any rectangle of positions;
    ``part((batches, heads))`` narrows it to the heads one thread of the tiled
    kernel walks (their absolute indices key the draws, so the split changes nothing).
    """

    p: float
    seed: int
    batches: range
    heads: range
    Tk: int
    row_seeds: tuple | None = None  # one seed per batch row: row b keyed (row_seeds[b], 0) instead of (seed, b)

    def scale(self, dtype):
        """``1 / (1 - p)`` as a scalar of ``dtype`` (no promotion of float32 arrays)."""
        return dtype.type(1.0 / (1.0 - self.p))

    def part(self, part: tuple[slice, slice]) -> AttentionDropout:
        return self._replace(batches=self.batches[part[0]], heads=self.heads[part[1]])

    def keep(self, xp, queries: range, keys: range):
        """The mask on ``batches x heads x queries x keys``: bool ``(nb,nh,nq,nk)`` on ``xp``, True = kept.

        ``queries`` and ``keys`` are absolute positions (``range(q_start, q_stop)``);
        each mask block they overlap is drawn, as many of its rows as needed.
        """
        threshold = drop_threshold(self.p)
        keep = np.empty((len(self.batches), len(self.heads), len(queries), len(keys)), dtype=bool)
        for qb in range(queries[0] // MASK_BLOCK_Q, queries[-1] // MASK_BLOCK_Q + 1):
            for kb in range(keys[0] // MASK_BLOCK_K, keys[-1] // MASK_BLOCK_K + 1):
                q0, k0 = qb * MASK_BLOCK_Q, kb * MASK_BLOCK_K  # the mask block's first query and key
                rows = range(max(queries[0], q0), min(queries[-1] + 1, q0 + MASK_BLOCK_Q))  # its queries we need
                cols = range(max(keys[0], k0), min(keys[-1] + 1, k0 + MASK_BLOCK_K))  # its keys we need
                in_rect = (slice(rows[0] - queries[0], rows[-1] + 1 - queries[0]),
                           slice(cols[0] - keys[0], cols[-1] + 1 - keys[0]))  # fmt: skip
                in_block = (slice(rows[0] - q0, None), slice(cols[0] - k0, cols[-1] + 1 - k0))
                width = min(MASK_BLOCK_K, self.Tk - k0)
                for i, b in enumerate(self.batches):
                    key = (self.seed, b) if self.row_seeds is None else (self.row_seeds[b], 0)
                    for j, h in enumerate(self.heads):
                        words = random_words(*key, h, qb, kb, rows[-1] + 1 - q0, width)  # (rows, width)
                        np.greater_equal(words[in_block], threshold, out=keep[(i, j, *in_rect)])
        return xp.asarray(keep)  # (nb,nh,nq,nk), copied to the device on CuPy


def dropped(probs, keep, scale, out=None):
    """``P * keep / (1 - p)``: the weights that multiply ``V``, a new array (or ``out``, e.g. ``probs`` itself)."""
    weights = get_xp(probs).multiply(probs, keep, out=out)
    weights *= scale
    return weights
