"""The pipeline for one position, as the seed draws it: hidden state -> logits -> softmax at a temperature
-> the chosen token -> its text.

Every number is read from the forward pass ``run_prompt`` made, or made by
the sampling functions ``numforge sample`` uses (``generate.py``)::

    h     = the final norm's output at position t       prompt.cache.loss.rows[t]          (C,)
    z     = h @ table^T                                  the unembedding the loss used      (C,) -> (V,)
    z     = -inf for ids the tokenizer cannot decode     generate.allowed_logits            (V,)
    p     = softmax(z / tau)                             generate.next_token_probs          (V,)
    q     = p after top-k and top-p, renormalized        generate.next_token_probs          (V,)
    next  = argmax z (greedy), or a draw from q          generate.sample_next
            with np.random.default_rng(seed)

A draw with seed S is the first token ``numforge sample --seed S`` draws
after the same ids (the same generator, the same first call); greedy is
``--temperature 0``. The temperature must be > 0 to give a distribution;
greedy takes no temperature (the argmax of ``softmax(z / tau)`` is the argmax
of ``z`` for every ``tau > 0``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..backend import to_numpy
from ..checks import check_index
from ..generate import allowed_logits, check_sampling, next_token_probs, sample_next
from .predictions import unembed_logits


class NextToken(NamedTuple):
    """One position's next-token pipeline (module docstring)."""

    position: int
    hidden: np.ndarray  # (C,) h, the final norm's output at the position
    logits: np.ndarray  # (V,) z = h @ table^T, float64, before the mask of undecodable ids
    probs: np.ndarray  # (V,) p = softmax(z / tau), every id the tokenizer can decode
    kept: np.ndarray  # (V,) q = p after top-k and top-p, renormalized (p when neither is given)
    chosen: int  # the token chosen: argmax z (greedy) or a draw from q
    greedy: bool


def next_token(
    prompt,
    position: int | None = None,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    greedy: bool = True,
    seed: int | None = None,
    allowed: np.ndarray | None = None,
) -> NextToken:
    """The pipeline at ``position`` of ``prompt`` (default: the last, whose next token is not in the prompt).

    ``allowed`` is ``generate.decodable_ids(tokenizer, V)``: the ids ``numforge sample`` can draw.
    """
    T = len(prompt.ids)
    position = T - 1 if position is None else position
    check_index(position, T, "position")
    check_sampling(temperature, top_k, top_p)
    if not temperature > 0:
        raise ValueError("temperature must be > 0 to give a distribution (greedy is greedy=True, at any temperature)")
    rows, table = prompt.cache.loss.rows, prompt.cache.loss.table  # (N,C), (V,C)
    hidden = to_numpy(rows[position])  # (C,)
    logits = unembed_logits(rows[position : position + 1], table, prompt.cache.loss.cap)[0]  # (1,C) -> (V,)
    z = allowed_logits(logits, allowed)  # (V,)
    probs = next_token_probs(z, temperature)  # (V,)
    kept = next_token_probs(z, temperature, top_k, top_p)  # (V,)
    rng = np.random.default_rng(seed)
    chosen = sample_next(z, rng, 0 if greedy else temperature, top_k, top_p)
    return NextToken(position, hidden, logits, probs, kept, chosen, greedy)
