"""One forward pass on a prompt, kept for study: the ids, the targets, the loss and the model's cache.

Every study tool starts here: ``run_prompt(model, tokenizer, text)`` encodes
``text`` to ids ``(1,T)``, sets the targets to the ids shifted left by one
(the last one ``-1``, the ignore index: nothing follows the prompt), and runs
``loss, cache = model.forward(ids, targets, for_backward=False)`` once. The tools
then read the returned cache (``GPT.forward``'s ``ModelCache``), never a
second pass.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..backend import asarray, to_numpy
from ..model.gpt import IGNORE_INDEX


class Prompt(NamedTuple):
    """A prompt and the forward pass the model made on it."""

    ids: tuple[int, ...]  # (T,) token ids
    targets: tuple[int, ...]  # (T,) the next token of each position; IGNORE_INDEX after the last
    tokens: tuple[str, ...]  # (T,) each token's text, as ``token_label`` writes it
    loss: float | None  # the forward's loss; None for a one-token prompt (no target)
    cache: object  # the ModelCache of model.forward


def token_label(tokenizer, token_id: int) -> str:
    """The text of one token; a token that is not whole UTF-8 (a piece of a multi-byte character)
    is written as its bytes in hex, ``<e4 b8>``, instead of the replacement character; an id
    the tokenizer has no token for (a model's vocabulary padded beyond it) as ``(no token)``."""
    if not tokenizer.has_token(token_id):
        return "(no token)"
    raw = tokenizer.token_bytes(token_id)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "<" + raw.hex(" ") + ">"


def run_prompt(model, tokenizer, text: str) -> Prompt:
    """Encode ``text`` (special tokens allowed) and run the model's forward pass on it once."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    ids = tokenizer.encode(text, allowed_special="all")
    if not ids:
        raise ValueError("text encodes to no tokens; give a non-empty text")
    if len(ids) > model.config.max_seq_len:
        raise ValueError(
            f"text encodes to {len(ids)} tokens, more than the model's context "
            f"max_seq_len {model.config.max_seq_len}; give a shorter text"
        )
    targets = ids[1:] + [IGNORE_INDEX]
    loss, cache = model.forward(asarray(np.asarray([ids])), asarray(np.asarray([targets])), for_backward=False)
    return Prompt(
        tuple(ids),
        tuple(targets),
        tuple(token_label(tokenizer, i) for i in ids),
        float(to_numpy(loss)) if len(ids) > 1 else None,
        cache,
    )


def describe_model(model) -> str:
    """``"2 layers, d_model 32, 2 heads, context 64, gelu, tiled attention, 12,345 parameters"``."""
    c = model.config
    return (
        f"{c.num_layers} layers, d_model {c.d_model}, {c.num_heads} heads, context {c.max_seq_len}, "
        f"{c.activation}, {c.attention} attention, {model.num_params():,} parameters"
    )
