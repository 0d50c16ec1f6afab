"""Sampling text from a trained GPT: greedy, temperature, top-k, top-p, with a KV cache.

Each step turns the logits of the last position into a next token:

    temperature == 0:  next = argmax(logits)                       (greedy)
    otherwise:         z = logits / temperature
                       top-k: keep the k largest z (ties with the k-th are kept too)
                       top-p: keep the most probable tokens whose total
                              probability first reaches p (at least one)
                       next ~ softmax(z over the kept tokens)

The KV cache keeps every layer's keys and values, so a new token costs one
position instead of the whole prefix; it is allocated for the positions this
call can reach (the prompt and the new tokens, at most ``max_seq_len``), not
for the whole context (131,072 positions for Llama 3.2). The model's learned positions stop at
``max_seq_len``: once the text is longer, each step re-encodes the last
``max_seq_len`` tokens from scratch (a sliding window; the cache cannot slide
because every kept token's position changes). With and without the cache
the model sees exactly the same context, so greedy output is identical.

Sampling runs on the CPU with a seeded NumPy generator (only the ``(V,)``
logits row is copied from the device), so a seed gives the same text on
NumPy and CuPy up to floating-point differences in the logits.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from typing import NamedTuple

import numpy as np

from .backend import asarray, to_numpy
from .checks import check_int_value, check_number, check_positive_int, is_real

RUN_SAMPLE = dict(prompt="", max_new_tokens=60, temperature=0.8, seed=0)  # the sample a run ends with


class Generation(NamedTuple):
    """What ``generate`` returns: the new text and ids (prompt excluded); ``end_id``, the end id it stopped at."""

    text: str
    ids: list[int]
    prompt_ids: list[int]
    stopped_at_end_of_text: bool
    end_id: int | None = None


def check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    """``ValueError`` unless temperature >= 0, top_k >= 1 (or None), 0 < top_p <= 1 (or None)."""
    check_number(temperature, "temperature", 0)
    if top_k is not None:
        check_positive_int(top_k, "top_k")
    if top_p is not None and (not is_real(top_p) or not 0.0 < top_p <= 1.0):
        raise ValueError(f"top_p must be in (0, 1] or None, got {top_p!r}")


def next_token_probs(
    logits: np.ndarray, temperature: float, top_k: int | None = None, top_p: float | None = None
) -> np.ndarray:
    """The sampling distribution over the vocabulary after temperature, top-k, top-p; ``(V,) -> (V,)``.

    Example: logits log([0.5, 0.3, 0.15, 0.05]) at temperature 1 with top_p 0.75
    keep the first two tokens -> [0.625, 0.375, 0, 0].
    """
    z = np.asarray(logits, dtype=np.float64) / temperature  # (V,)
    if top_k is not None and top_k < z.size:
        kth_largest = np.partition(z, z.size - top_k)[z.size - top_k]
        z = np.where(z >= kth_largest, z, -np.inf)
    probs = np.exp(z - z.max())
    probs /= probs.sum()
    if top_p is not None and top_p < 1.0:
        order = np.argsort(-probs, kind="stable")  # (V,) most probable first
        before = np.cumsum(probs[order]) - probs[order]  # probability of the strictly more probable tokens
        keep = np.zeros(probs.size, dtype=bool)
        keep[order[before < top_p]] = True  # the first always has before = 0
        probs = np.where(keep, probs, 0.0)
        probs /= probs.sum()
    return probs


def allowed_logits(logits: np.ndarray, allowed: np.ndarray | None) -> np.ndarray:
    """``(V,) -> (V,)``: the logits of ids outside ``allowed`` (a boolean mask; None: every id) set to -inf,
    so they can never be drawn (a model's vocabulary may be padded beyond its tokenizer's)."""
    return logits if allowed is None else np.where(allowed, logits, -np.inf)


def sample_next(
    logits: np.ndarray,
    rng: np.random.Generator,
    temperature: float,
    top_k: int | None = None,
    top_p: float | None = None,
) -> int:
    """One token id from a ``(V,)`` logits row (greedy when temperature is 0)."""
    if temperature == 0:
        return int(np.argmax(logits))
    probs = next_token_probs(logits, temperature, top_k, top_p)
    return int(rng.choice(probs.size, p=probs))


def generate_ids(
    model,
    prompt_ids: Sequence[int],
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    stop_ids: Collection[int] = (),
    use_kv_cache: bool = True,
    allowed: np.ndarray | None = None,
) -> Iterator[int]:
    """Yield up to ``max_new_tokens`` new ids after ``prompt_ids``, stopping after any of ``stop_ids``.

    ``prompt_ids`` must be non-empty and at most ``max_seq_len`` long
    (``generate`` crops a longer prompt). Without the cache every step runs
    the last ``max_seq_len`` tokens through the whole model: the oracle the
    cached path is tested against. ``allowed`` (a boolean ``(V,)`` mask, or
    None for every id) limits the ids that can come out: the logits of the
    others are set to -inf.
    """
    check_sampling(temperature, top_k, top_p)
    context = model.config.max_seq_len
    ids = [int(i) for i in prompt_ids]
    if not 1 <= len(ids) <= context:
        raise ValueError(f"prompt_ids must hold 1 to max_seq_len = {context} ids, got {len(ids)}")
    rng = np.random.default_rng(seed)
    stop_ids = frozenset(int(i) for i in stop_ids)
    kv_cache = None
    for _ in range(max_new_tokens):
        if not use_kv_cache or len(ids) > context:  # no cache, or past the context: re-encode the window
            feed, cache = ids[-context:], None
        elif kv_cache is None:  # first step: the whole prompt fills the cache
            kv_cache = model.new_kv_cache(1, max_len=min(context, len(ids) + max_new_tokens))
            feed, cache = ids, kv_cache
        else:  # one new position
            feed, cache = ids[-1:], kv_cache
        logits = model.logits(asarray(np.asarray(feed)[None, :]), last_only=True, kv_cache=cache)  # (1,T) -> (1,V)
        row = allowed_logits(to_numpy(logits).reshape(-1), allowed)  # (1,V) -> (V,)
        token = sample_next(row, rng, temperature, top_k, top_p)
        ids.append(token)
        yield token
        if token in stop_ids:
            return


def decodable_ids(tokenizer, vocab_size: int) -> np.ndarray | None:
    """A boolean ``(V,)`` mask of the ids `tokenizer` can decode, or None when it decodes all ``vocab_size``.

    Example: a model padded to V = 8 with a tokenizer of ids 0..5 -> [T, T, T, T, T, T, F, F].
    """
    token_ids = tokenizer.token_ids()
    if token_ids == list(range(vocab_size)):
        return None
    allowed = np.zeros(vocab_size, dtype=bool)
    allowed[[i for i in token_ids if i < vocab_size]] = True
    return allowed


def prompt_token_ids(tokenizer, prompt: str, context: int, on_notice: Callable[[str], None] | None) -> list[int]:
    """The ids ``generate`` starts from: ``prompt`` encoded (``encode_prompt``), or the BOS (else the first end id)
    when it is empty; cropped to the last ``context`` ids, ``on_notice`` told so."""
    prompt_ids = tokenizer.encode_prompt(prompt)
    if not prompt_ids:
        start = tokenizer.bos_id if tokenizer.bos_id is not None else next(iter(tokenizer.eos_ids), None)
        if start is None:
            raise ValueError("the prompt is empty and the tokenizer has no BOS or end token to start from")
        prompt_ids = [start]
    if len(prompt_ids) > context:
        if on_notice is not None:
            on_notice(
                f"the prompt is {len(prompt_ids)} tokens and the model's context is {context}: "
                f"keeping the last {context} tokens"
            )
        prompt_ids = prompt_ids[-context:]
    return prompt_ids


def generate(
    model,
    tokenizer,
    prompt: str,
    max_new_tokens: int = 200,
    *,
    temperature: float = 0.8,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    use_kv_cache: bool = True,
    on_text: Callable[[str], None] | None = None,
    on_notice: Callable[[str], None] | None = None,
) -> Generation:
    """Continue ``prompt``; ``on_text`` receives the new text piece by piece as it is decoded.

    The prompt is encoded as ``transformers``' ``tokenizer(prompt)`` encodes it (``encode_prompt``: a Llama 3
    directory's BOS first; special tokens cut out as themselves, so it may contain ``<|endoftext|>``); an
    empty prompt starts from the BOS, else the first end id (numforge's own tokenizers: ``<|endoftext|>``).
    A prompt longer than the model's context is cropped from the left and ``on_notice`` is told so.
    Generation stops at any of the tokenizer's ``eos_ids`` (a Hugging Face directory's ``eos_token_id``,
    one or several; numforge's own: ``<|endoftext|>``), which is not part of the returned text. Only ids
    the tokenizer can decode are sampled (a model's vocabulary may be padded beyond the tokenizer's).
    """
    check_int_value(max_new_tokens, "max_new_tokens", minimum=0)
    stop_ids = tokenizer.eos_ids
    prompt_ids = prompt_token_ids(tokenizer, prompt, model.config.max_seq_len, on_notice)
    decoder = tokenizer.incremental_decoder()
    pieces, new_ids, stopped = [], [], None
    for token in generate_ids(
        model,
        prompt_ids,
        max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        stop_ids=stop_ids,
        use_kv_cache=use_kv_cache,
        allowed=decodable_ids(tokenizer, model.config.vocab_size),
    ):
        if token in stop_ids:
            stopped = token
            break
        new_ids.append(token)
        pieces.append(decoder.decode([token]))
        if on_text is not None and pieces[-1]:
            on_text(pieces[-1])
    pieces.append(decoder.flush())
    if on_text is not None and pieces[-1]:
        on_text(pieces[-1])
    return Generation("".join(pieces), new_ids, list(prompt_ids), stopped is not None, stopped)
