"""GPTConfig: defaults, validation that names the field, JSON round trip."""

import json

import pytest

from numforge.model import GPTConfig

TINY = dict(vocab_size=50, max_seq_len=16, d_model=32, num_heads=4, num_layers=2)


def test_defaults_match_the_issue():
    config = GPTConfig(**TINY)
    assert config.d_ff == 128
    assert config.head_dim == 8
    assert (config.activation, config.gelu_approximate, config.position, config.attention) == (
        "gelu",
        "tanh",
        "learned",
        "tiled",
    )
    assert config.use_bias and config.tie_weights and not config.scale_embeddings
    assert config.drop_prob == 0.0 and config.norm_eps == 1e-5


@pytest.mark.parametrize("d_model, expected", [(32, 128), (96, 256), (128, 384), (192, 512), (256, 704)])
def test_swiglu_width_is_eight_thirds_rounded_up_to_64(d_model, expected):
    # 8/3 * 256 = 682.67 -> 704; 8/3 * 192 = 512 exactly
    config = GPTConfig(**{**TINY, "d_model": d_model, "activation": "swiglu"})
    assert config.d_ff == expected


def test_explicit_d_ff_is_kept():
    assert GPTConfig(**TINY, d_ff=40, activation="swiglu").d_ff == 40


def test_json_round_trip():
    config = GPTConfig(
        **TINY,
        activation="swiglu",
        use_bias=False,
        tie_weights=False,
        drop_prob=0.1,
        position="sinusoidal",
        scale_embeddings=True,
        attention="plain",
        norm_eps=1e-6,
    )
    restored = GPTConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert restored == config


@pytest.mark.parametrize(
    "field, value, error",
    [
        ("vocab_size", 0, ValueError),
        ("max_seq_len", -1, ValueError),
        ("d_model", 2.0, ValueError),
        ("num_heads", True, ValueError),
        ("num_layers", 0, ValueError),
        ("d_ff", 0, ValueError),
        ("activation", "tanh", ValueError),
        ("gelu_approximate", "erf", ValueError),
        ("use_bias", 1, TypeError),
        ("tie_weights", "yes", TypeError),
        ("drop_prob", 1.0, ValueError),
        ("drop_prob", -0.1, ValueError),
        ("position", "rotary", ValueError),
        ("scale_embeddings", None, TypeError),
        ("attention", "flash", ValueError),
        ("norm_eps", 0.0, ValueError),
        ("norm_eps", float("nan"), ValueError),
    ],
)
def test_invalid_field_is_named(field, value, error):
    with pytest.raises(error, match=field):
        GPTConfig(**{**TINY, field: value})


def test_heads_must_divide_width():
    with pytest.raises(ValueError, match="num_heads"):
        GPTConfig(**{**TINY, "num_heads": 5})


def test_from_dict_rejects_unknown_and_missing_keys():
    with pytest.raises(ValueError, match="n_embd"):
        GPTConfig.from_dict({**TINY, "n_embd": 32})
    incomplete = dict(TINY)
    del incomplete["d_model"]
    with pytest.raises(ValueError, match="d_model"):
        GPTConfig.from_dict(incomplete)


def test_older_checkpoints_names_still_load():
    old = {**GPTConfig(**TINY).to_dict(), "attention": "naive"}
    old["ffn"] = old.pop("activation")
    config = GPTConfig.from_dict(old)
    assert (config.activation, config.attention) == ("gelu", "plain")


def test_a_config_from_before_attention_dropout_loads_without_it():
    old = GPTConfig(**TINY, drop_prob=0.1).to_dict()
    assert old.pop("attention_dropout") is True  # today's default
    assert GPTConfig.from_dict(old).attention_dropout is False  # trained without: resumed without
    assert GPTConfig.from_dict({**old, "attention_dropout": True}).attention_dropout is True
