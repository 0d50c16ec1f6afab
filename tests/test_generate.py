"""Sampling: the filters, greedy decoding with and without the KV cache, stopping, streaming, cropping."""

import numpy as np
import pytest

from numforge.generate import generate, generate_ids, next_token_probs, sample_next
from numforge.model import GPT, GPTConfig


def tiny_model(max_seq_len=8, dtype="float64", seed=3, vocab_size=300):
    config = GPTConfig(vocab_size=vocab_size, max_seq_len=max_seq_len, d_model=16, num_heads=2, num_layers=2)
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
    np.testing.assert_allclose(
        next_token_probs(logits, 1.0, top_p=0.85), [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0], atol=1e-12
    )
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
    p = np.array([0.6, 0.25, 0.1, 0.05])
    four_standard_errors = 4 * np.sqrt(p * (1 - p) / len(draws))  # per entry: 0.031 down to 0.014
    assert np.all(np.abs(frequencies - p) <= four_standard_errors), (frequencies, p)
    assert {sample_next(logits, rng, 1.0, top_k=1) for _ in range(50)} == {0}
    assert sample_next(np.array([0.1, 5.0, 4.9]), rng, 0.0) == 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"temperature": -1.0}, "temperature must be a finite number >= 0"),
        ({"temperature": True}, "temperature must be a finite number >= 0, got True"),
        ({"top_p": True}, r"top_p must be in \(0, 1\] or None, got True"),
        ({"top_k": 0}, "top_k must be a positive integer, got 0"),
        ({"top_k": True}, "top_k must be a positive integer, got True"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
    ],
)
def test_bad_sampling_settings_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        list(generate_ids(tiny_model(), [1, 2], 3, **kwargs))


# ---------------------------------------------------------------- the model loop


class LogitsSpy:
    """Wraps a model and records the length of every ``logits`` call."""

    def __init__(self, model):
        self.model, self.config, self.lengths, self.cache_lengths = model, model.config, [], []

    def logits(self, ids, **kwargs):
        self.lengths.append(int(ids.shape[1]))
        return self.model.logits(ids, **kwargs)

    def new_kv_cache(self, batch_size, max_len=None):
        self.cache_lengths.append(max_len)
        return self.model.new_kv_cache(batch_size, max_len)


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
    assert with_cache.lengths[n_cached + 1 :] == [8] * (14 - n_cached - 1)  # the sliding window
    assert without_cache.lengths == [min(len(prompt) + i, 8) for i in range(14)]
    assert with_cache.cache_lengths == [8]  # the prompt and 14 new tokens would need more than the context


@pytest.mark.parametrize("attention", ["tiled", "plain"])
@pytest.mark.parametrize("position", ["learned", "alibi", "rope"])
def test_decoding_token_by_token_with_the_cache_gives_the_full_forward_s_logits(position, attention):
    """The cached queries sit at offset positions (the cache's length): the causal mask and ALiBi's bias
    -m_h (i - j) must see them there, in both kernels."""
    config = GPTConfig(vocab_size=50, max_seq_len=12, d_model=16, num_heads=4, num_kv_heads=2, num_layers=2,
                       position=position, attention=attention)  # fmt: skip
    model = GPT(config, seed=1, dtype="float64")
    ids = np.random.default_rng(0).integers(0, 50, (2, 9))
    full = model.logits(ids)  # (B,T,V)
    cache = model.new_kv_cache(2)
    steps = [model.logits(ids[:, :3], kv_cache=cache)]  # a 3-token prompt, then one token at a time
    steps += [model.logits(ids[:, t : t + 1], kv_cache=cache) for t in range(3, 9)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("attention", ["tiled", "plain"])
@pytest.mark.parametrize("position, window_layers", [("rope", None), ("alibi", [1]), ("learned", [0, 2])])
def test_decoding_with_a_window_gives_the_full_forward_s_logits(position, window_layers, attention):
    """A window of W = 3 over 13 positions: a 5-token prompt (longer than W), 3 more at once, then one at a time."""
    config = GPTConfig(vocab_size=50, max_seq_len=16, d_model=16, num_heads=4, num_kv_heads=2, num_layers=3,
                       position=position, attention=attention, sliding_window=3,
                       window_layers=window_layers)  # fmt: skip
    model = GPT(config, seed=1, dtype="float64")
    ids = np.random.default_rng(0).integers(0, 50, (2, 13))
    full = model.logits(ids)  # (B,T,V)
    unwindowed = GPT(
        GPTConfig(**{**config.to_dict(), "sliding_window": None, "window_layers": None}), seed=1, dtype="float64"
    )
    assert np.abs(unwindowed.logits(ids)[:, 3:] - full[:, 3:]).max() > 1e-3  # the window changes the logits
    cache = model.new_kv_cache(2)
    steps = [model.logits(ids[:, :5], kv_cache=cache), model.logits(ids[:, 5:8], kv_cache=cache)]
    steps += [model.logits(ids[:, t : t + 1], kv_cache=cache) for t in range(8, 13)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("attention", ["tiled", "plain"])
def test_a_windowed_layer_caches_a_ring_of_W_positions(attention):
    """W = 4: a 2-token prompt, then 3 W = 12 tokens one by one; layer 1 is global and keeps all 14 positions."""
    W, T = 4, 14
    config = GPTConfig(vocab_size=50, max_seq_len=T, d_model=16, num_heads=4, num_kv_heads=2, num_layers=3,
                       position="rope", attention=attention, sliding_window=W, window_layers=[0, 2])  # fmt: skip
    model = GPT(config, seed=2, dtype="float64")
    ids = np.random.default_rng(1).integers(0, 50, (2, T))
    cache = model.new_kv_cache(2)
    steps = [model.logits(ids[:, :2], kv_cache=cache)] + [model.logits(ids[:, t : t + 1], kv_cache=cache)
                                                         for t in range(2, T)]  # fmt: skip
    assert [keys.shape[2] for keys in cache.keys] == [W, T, W] == [values.shape[2] for values in cache.values]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), model.logits(ids), rtol=1e-10, atol=1e-12)
    # the ring holds the W latest positions, position p in slot p mod W: the keys of the full run's last W
    full = model.new_kv_cache(2)
    model.logits(ids, kv_cache=full)  # all at once: the newest W positions overwrite the ring
    for layer in (0, 2):
        np.testing.assert_allclose(full.keys[layer], cache.keys[layer], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(full.keys[1], cache.keys[1], rtol=1e-12, atol=1e-13)


def test_the_kv_cache_holds_what_the_call_can_reach():
    model = tiny_model()  # a context of 8
    short = LogitsSpy(model)
    assert list(generate_ids(short, [5, 6], 3, temperature=0.0)) == list(generate_ids(model, [5, 6], 3, temperature=0))
    assert short.cache_lengths == [5]  # 2 + 3 positions, not the model's 8
    assert model.new_kv_cache(1, max_len=5).keys[0].shape[2] == 5
    with pytest.raises(ValueError, match="max_len 9 exceeds max_seq_len 8"):
        model.new_kv_cache(1, max_len=9)


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
    stopped = list(generate_ids(model, [1, 2], 6, temperature=0.0, stop_ids=[free[2]]))
    assert stopped == free[: free.index(free[2]) + 1]
    either = list(generate_ids(model, [1, 2], 6, temperature=0.0, stop_ids=(free[3], free[1])))
    assert either == free[: min(free.index(free[1]), free.index(free[3])) + 1]


def test_prompt_must_fit_the_context():
    with pytest.raises(ValueError, match="prompt_ids must hold 1 to max_seq_len = 8 ids, got 9"):
        list(generate_ids(tiny_model(), list(range(9)), 1))
    with pytest.raises(ValueError, match="got 0"):
        list(generate_ids(tiny_model(), [], 1))


# ---------------------------------------------------------------- text in, text out


@pytest.fixture(scope="module")
def tokenizer():
    from numforge.tokenizer import BPETokenizer

    return BPETokenizer.train("héllo wörld, the cat sat on the mat; " * 20 + "日本語 ✓", 280)


class ScriptedModel:
    """Logits that pick the given tokens in turn (a stand-in to test ``generate``'s bookkeeping)."""

    def __init__(self, script, vocab_size, max_seq_len=8):
        self.script, self.vocab_size, self.calls = list(script), vocab_size, 0
        self.config = GPTConfig(vocab_size=vocab_size, max_seq_len=max_seq_len, d_model=2, num_heads=1, num_layers=1)

    def logits(self, ids, last_only=True, kv_cache=None):
        row = np.zeros((1, self.vocab_size))
        row[0, self.script[self.calls]] = 1.0
        self.calls += 1
        return row

    def new_kv_cache(self, batch_size, max_len=None):
        return None


def test_generate_streams_exactly_the_decoded_text(tokenizer):
    model = tiny_model(dtype="float32", vocab_size=tokenizer.vocab_size)
    pieces = []
    result = generate(model, tokenizer, "the cat", 30, temperature=1.0, seed=2, on_text=pieces.append)
    assert "".join(pieces) == result.text == tokenizer.decode(result.ids)
    assert len(result.ids) == 30 and result.prompt_ids == tokenizer.encode("the cat")


@pytest.mark.parametrize("count", [-1, True, 2.0])
def test_a_bad_max_new_tokens_is_named(tokenizer, count):
    with pytest.raises(ValueError, match=f"max_new_tokens must be an integer >= 0, got {count!r}"):
        generate(tiny_model(vocab_size=tokenizer.vocab_size), tokenizer, "the cat", count)


def test_multibyte_characters_stream_whole(tokenizer):
    wanted = tokenizer.encode_ordinary("日本語 ✓")  # several byte tokens per character
    eot = tokenizer.special_tokens["<|endoftext|>"]
    pieces = []
    result = generate(
        ScriptedModel(wanted + [eot], tokenizer.vocab_size), tokenizer, "a", 50, temperature=0.0, on_text=pieces.append
    )
    assert result.text == "日本語 ✓" and result.stopped_at_end_of_text
    assert "\ufffd" not in "".join(pieces) and "".join(pieces) == "日本語 ✓"
    assert result.ids == wanted  # <|endoftext|> ends the text and is not part of it


def test_long_prompt_is_cropped_from_the_left_with_a_notice(tokenizer):
    prompt = "the cat sat on the mat; héllo wörld"
    ids = tokenizer.encode(prompt)
    assert len(ids) > 8
    notices = []
    result = generate(
        tiny_model(vocab_size=tokenizer.vocab_size), tokenizer, prompt, 3, temperature=0.0, on_notice=notices.append
    )
    assert result.prompt_ids == ids[-8:]
    assert notices == [f"the prompt is {len(ids)} tokens and the model's context is 8: keeping the last 8 tokens"]


def test_empty_prompt_starts_a_new_document(tokenizer):
    result = generate(tiny_model(vocab_size=tokenizer.vocab_size), tokenizer, "", 2, temperature=0.0)
    assert result.prompt_ids == [tokenizer.special_tokens["<|endoftext|>"]]
