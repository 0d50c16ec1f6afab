"""One forward pass on a prompt, kept for study: the ids, the targets, the loss and the model's cache.

Every study tool starts here: ``run_prompt(model, tokenizer, text)`` encodes
``text`` to ids ``(1,T)``, sets the targets to the ids shifted left by one
(the last one ``-1``, the ignore index: nothing follows the prompt), and runs
``loss, cache = model.forward(ids, targets, for_backward=False, keep_caches=True)``
once. The tools then read the returned cache (``GPT.forward``'s ``ModelCache``),
never a second pass.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..backend import asarray, to_numpy
from ..checks import check_index
from ..model.gpt import IGNORE_INDEX


class Prompt(NamedTuple):
    """A prompt and the forward pass the model made on it."""

    ids: tuple[int, ...]  # (T,) token ids
    targets: tuple[int, ...]  # (T,) the next token of each position; IGNORE_INDEX after the last
    tokens: tuple[str, ...]  # (T,) each token's text, as ``token_label`` writes it
    shown: tuple[str, ...]  # (T,) each token as the study tools show it, ``shown_token``
    loss: float | None  # the forward's loss; None for a one-token prompt (no target)
    cache: object  # the ModelCache of model.forward


def token_label(tokenizer, token_id: int) -> str:
    """The text of one token; a token that is not whole UTF-8 (a piece of a multi-byte character)
    is written as its bytes in hex, ``<e4 b8>``, instead of the replacement character; an id
    the tokenizer has no token for (a model's vocabulary padded beyond it) as ``(no token)``."""
    if not tokenizer.has_token(token_id):
        return "(no token)"
    text = _whole_text(tokenizer, token_id)
    return "<" + tokenizer.token_bytes(token_id).hex(" ") + ">" if text is None else text


def shown_token(tokenizer, token_id: int) -> str:
    """A token as every study tool writes it (the terminal's tables, the pages, the PNG): ``token_label``
    with, in a token of whole characters, a space as ``·`` (U+00B7, so a token's edges show) and an
    unprintable character escaped as ``repr`` does (``\\n``). ``" the\\n"`` -> ``·the\\n``; a piece of a
    character stays ``<e4 b8>``, an id without a token ``(no token)``."""
    text = _whole_text(tokenizer, token_id) if tokenizer.has_token(token_id) else None
    return token_label(tokenizer, token_id) if text is None else shown_text(text)


def shown_text(text: str) -> str:
    """``text`` as ``shown_token`` writes a token's characters: ``" a\\n"`` -> ``·a\\n``."""
    return "".join("\u00b7" if c == " " else c if c.isprintable() else repr(c)[1:-1] for c in text)


def _whole_text(tokenizer, token_id: int) -> str | None:
    """The token's bytes decoded, or None when they are not whole UTF-8 characters."""
    try:
        return tokenizer.token_bytes(token_id).decode("utf-8")
    except UnicodeDecodeError:
        return None


def run_prompt(model, tokenizer, text: str) -> Prompt:
    """Encode ``text`` (``encode_prompt``) and run the model's forward pass on it once."""
    return run_ids(model, tokenizer, encode_prompt(model, tokenizer, text))


def encode_prompt(model, tokenizer, text: str) -> list[int]:
    """The ids of ``text`` as ``transformers``' ``tokenizer(text)`` gives them (``encode_prompt``: special tokens
    allowed; a Llama 3 directory's BOS first): 1 to ``max_seq_len`` of them, else a ``ValueError``."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    ids = tokenizer.encode_prompt(text)
    if not ids:
        raise ValueError("text encodes to no tokens; give a non-empty text")
    if len(ids) > model.config.max_seq_len:
        raise ValueError(
            f"text encodes to {len(ids)} tokens, more than the model's context "
            f"max_seq_len {model.config.max_seq_len}; give a shorter text"
        )
    return ids


def check_ids(model, ids) -> tuple[int, ...]:
    """``ids`` as a tuple if they are a list of 1 to ``max_seq_len`` ints in ``[0, vocab_size)``, else a
    ``ValueError`` naming what is wrong."""
    V, context = model.config.vocab_size, model.config.max_seq_len
    if not isinstance(ids, (list, tuple)) or not 1 <= len(ids) <= context:
        what = f"{len(ids)} ids" if isinstance(ids, (list, tuple)) else type(ids).__name__
        raise ValueError(f"ids must be a list of 1 to max_seq_len = {context} token ids, got {what}")
    for i in ids:
        check_index(i, V, "every id (of the model's vocabulary)")
    return tuple(ids)


def run_ids(model, tokenizer, ids) -> Prompt:
    """The forward pass on ``ids`` (``check_ids``): the cache every study tool reads."""
    ids = list(check_ids(model, ids))
    targets = ids[1:] + [IGNORE_INDEX]
    ids_array, targets_array = asarray(np.asarray([ids])), asarray(np.asarray([targets]))  # (1,T) each
    loss, cache = model.forward(ids_array, targets_array, for_backward=False, keep_caches=True)
    return Prompt(
        tuple(ids),
        tuple(targets),
        tuple(token_label(tokenizer, i) for i in ids),
        tuple(shown_token(tokenizer, i) for i in ids),
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
