"""Sampling: the filters, greedy decoding with and without the KV cache, stopping, streaming, cropping."""

import numpy as np
import pytest

from numforge.config import GPTConfig
from numforge.generate import generate, generate_ids, next_token_probs, sample_next
from numforge.model import GPT


def tiny_model(max_seq_len=8, dtype="float64", seed=3):
    config = GPTConfig(vocab_size=300, max_seq_len=max_seq_len, d_model=16, num_heads=2, num_layers=2)
    return GPT(config, seed=seed, dtype=dtype)


def softmax(z):
    e = np.exp(z - np.max(z))
    return e / e.sum()


# ---------------------------------------------------------------- filters


def test_temperature_scales_logits_before_softmax():
    logits = np.array([2.0, 1.0, -1.0, 0.5])
    np.testing.assert_allclose(next_token_probs(logits, 0.5), softmax(logits / 0.5), rtol=1e-12)
    np.testing.assert_allclose(next_token_probs(logits, 1.0), softmax(logits), rtol=1e-12)


def test_top_p_keeps_the_smallest_set_reaching_p():
    logits = np.log([0.5, 0.3, 0.15, 0.05])
    np.testing.assert_allclose(next_token_probs(logits, 1.0, top_p=0.75), [0.625, 0.375, 0, 0], atol=1e-12)
    np.testing.assert_allclose(next_token_probs(logits, 1.0, top_p=0.85), [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0], atol=1e-12)
    np.testing.assert_allclose(next_token_probs(logits, 1.0, top_p=0.1), [1, 0, 0, 0], atol=1e-12)


def test_top_k_keeps_the_k_largest_and_their_ties():
    logits = np.array([1.0, 3.0, 2.0, 0.0])
    expected = np.array([0, np.exp(3), np.exp(2), 0]) / (np.exp(3) + np.exp(2))
    np.testing.assert_allclose(next_token_probs(logits, 1.0, top_k=2), expected, rtol=1e-12)
    tied = next_token_probs(np.array([1.0, 2.0, 2.0, 0.0]), 1.0, top_k=1)
    np.testing.assert_allclose(tied, [0, 0.5, 0.5, 0], atol=1e-12)
    np.testing.assert_allclose(next_token_probs(logits, 1.0, top_k=10), softmax(logits), rtol=1e-12)


def test_sampling_follows_the_distribution_and_greedy_is_argmax():
    logits = np.log([0.6, 0.25, 0.1, 0.05])
    rng = np.random.default_rng(0)
    draws = [sample_next(logits, rng, 1.0) for _ in range(4000)]
    frequencies = np.bincount(draws, minlength=4) / len(draws)
    np.testing.assert_allclose(frequencies, [0.6, 0.25, 0.1, 0.05], atol=0.03)  # ~4 standard errors
    assert {sample_next(logits, rng, 1.0, top_k=1) for _ in range(50)} == {0}
    assert sample_next(np.array([0.1, 5.0, 4.9]), rng, 0.0) == 1


@pytest.mark.parametrize("kwargs, message", [
    ({"temperature": -1.0}, "temperature must be a finite number >= 0"),
    ({"top_k": 0}, "top_k must be a positive int"),
    ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
])
def test_bad_sampling_settings_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        list(generate_ids(tiny_model(), [1, 2], 3, **kwargs))


# ---------------------------------------------------------------- the model loop


class LogitsSpy:
    """Wraps a model and records the length of every ``logits`` call."""

    def __init__(self, model):
        self.model, self.config, self.lengths = model, model.config, []

    def logits(self, ids, **kwargs):
        self.lengths.append(int(ids.shape[1]))
        return self.model.logits(ids, **kwargs)

    def new_kv_cache(self, batch_size):
        return self.model.new_kv_cache(batch_size)


@pytest.mark.parametrize("prompt", [[5], [7, 8, 9], list(range(10, 18))])
def test_greedy_tokens_identical_with_and_without_kv_cache(prompt):
    """Past the context (8) too: both paths then see the same last 8 tokens."""
    model = tiny_model()
    with_cache, without_cache = LogitsSpy(model), LogitsSpy(model)
    cached = list(generate_ids(with_cache, prompt, 14, temperature=0.0, use_kv_cache=True))
    plain = list(generate_ids(without_cache, prompt, 14, temperature=0.0, use_kv_cache=False))
    assert cached == plain and len(cached) == 14
    n_cached = 8 - len(prompt)  # steps that fit in the cache after the prompt fills it
    assert with_cache.lengths[: n_cached + 1] == [len(prompt)] + [1] * n_cached
    assert with_cache.lengths[n_cached + 1:] == [8] * (14 - n_cached - 1)  # the sliding window
    assert without_cache.lengths == [min(len(prompt) + i, 8) for i in range(14)]


def test_sampled_tokens_identical_with_and_without_kv_cache_for_a_seed():
    model = tiny_model()
    kwargs = dict(temperature=1.0, top_k=50, top_p=0.9, seed=11)
    cached = list(generate_ids(model, [3, 4], 10, use_kv_cache=True, **kwargs))
    plain = list(generate_ids(model, [3, 4], 10, use_kv_cache=False, **kwargs))
    assert cached == plain
    assert len(set(cached)) > 1  # really sampled, not stuck on one token


def test_generation_stops_after_the_stop_token():
    model = tiny_model()
    free = list(generate_ids(model, [1, 2], 6, temperature=0.0))
    stopped = list(generate_ids(model, [1, 2], 6, temperature=0.0, stop_id=free[2]))
    assert stopped == free[: free.index(free[2]) + 1]


def test_prompt_must_fit_the_context():
    with pytest.raises(ValueError, match="prompt_ids must hold 1 to max_seq_len = 8 ids, got 9"):
        list(generate_ids(tiny_model(), list(range(9)), 1))
    with pytest.raises(ValueError, match="got 0"):
        list(generate_ids(tiny_model(), [], 1))
