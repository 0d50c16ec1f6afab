"""GPTConfig: defaults, validation that names the field, JSON round trip."""

import itertools
import json
import math
from pathlib import Path

import pytest

from numforge.model import POSITIONS, GPTConfig, parameter_shapes
from numforge.model.config import ARCHS, BIAS_SWITCHES, QK_NORM_ORDERS
from numforge.ops.norms import NORMS

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


# ---------------------------------------------------------------- the modern decoder's fields (issue 22)

OLD_CONFIGS = json.loads((Path(__file__).parent / "data" / "configs_before_issue22.json").read_text())


@pytest.mark.parametrize("old", OLD_CONFIGS, ids=range(len(OLD_CONFIGS)))
def test_a_config_json_written_before_issue_22_builds_the_same_parameters(old):
    """config.json files written by numforge before these fields existed (tests/data, made with that code)."""
    config = GPTConfig.from_dict(old["config"])
    shapes = [[name, list(shape)] for name, shape in parameter_shapes(config).items()]
    assert shapes == old["parameter_shapes"]  # names, shapes and order (the order of the init's draws)
    assert config.norm_eps == old["config"].get("ln_eps", old["config"].get("norm_eps"))
    assert (config.norm, config.position in ("learned", "sinusoidal"), config.qk_norm) == ("layernorm", True, False)
    assert config.num_kv_heads == config.num_heads and config.head_dim * config.num_heads == config.d_model
    if "reads_as" in old:  # the oldest names (ffn, naive, no attention_dropout) read as that code read them
        assert config == GPTConfig.from_dict(old["reads_as"])


def test_the_defaults_of_the_new_fields_are_gpt2s():
    config = GPTConfig(**TINY)
    assert (config.norm, config.norm_eps, config.norm_weight, config.position) == ("layernorm", 1e-5, True, "learned")
    assert (config.num_kv_heads, config.head_dim, config.qk_norm, config.rope_theta) == (4, 8, False, 10000.0)
    assert config.rope_scaling is None and config.qk_norm_order == "before_rope"
    assert all(config.has_bias(switch) for switch in BIAS_SWITCHES)


def test_use_bias_sets_every_switch_left_none_and_a_switch_overrides_it():
    qwen2 = GPTConfig(**TINY, use_bias=False, qkv_bias=True)
    assert [qwen2.has_bias(s) for s in BIAS_SWITCHES] == [True, False, False, False]
    assert sorted(n for n in parameter_shapes(qwen2) if n.endswith(".bias")) == [
        "layers.0.attn.qkv_proj.bias",
        "layers.1.attn.qkv_proj.bias",
    ]
    no_mlp = GPTConfig(**TINY, mlp_bias=False)
    assert not any(".mlp." in n for n in parameter_shapes(no_mlp) if n.endswith(".bias"))
    assert "final_norm.bias" in parameter_shapes(no_mlp) and "layers.0.attn.out_proj.bias" in parameter_shapes(no_mlp)
    rms = GPTConfig(**TINY, norm="rmsnorm")  # use_bias on, but RMSNorm has no bias to give
    assert not rms.has_bias("norm_bias") and "final_norm.bias" not in parameter_shapes(rms)
    assert "layers.0.mlp.up_proj.bias" in parameter_shapes(rms)


def test_gqa_head_dim_and_qk_norm_shapes():
    config = GPTConfig(vocab_size=11, max_seq_len=8, d_model=12, num_heads=4, num_kv_heads=2, head_dim=5,
                       num_layers=1, qk_norm=True, norm="rmsnorm", use_bias=False, qkv_bias=True)  # fmt: skip
    shapes = parameter_shapes(config)
    assert shapes["layers.0.attn.qkv_proj.weight"] == (12, (4 + 2 * 2) * 5)  # q | k | v: H D + 2 H_kv D
    assert shapes["layers.0.attn.qkv_proj.bias"] == (40,)
    assert shapes["layers.0.attn.out_proj.weight"] == (20, 12)  # (H D, C)
    assert shapes["layers.0.attn.q_norm.weight"] == shapes["layers.0.attn.k_norm.weight"] == (5,)
    without_weight = GPTConfig(**{**config.to_dict(), "norm_weight": False})
    assert not any("norm" in name for name in parameter_shapes(without_weight))  # parameter-free norms
    rope = GPTConfig(**{**config.to_dict(), "position": "rope", "head_dim": 6})
    assert "position_embedding" not in parameter_shapes(rope)


COMPONENT_CHOICES = {  # every value of each component field, the impossible combinations included
    "norm": tuple(NORMS),
    "position": tuple(POSITIONS),
    "norm_weight": (True, False),
    "qk_norm": (False, True),
    "qk_norm_order": QK_NORM_ORDERS,
    "num_kv_heads": (None, 1, 2),
    "head_dim": (None, 6, 5),
    "use_bias": (True, False),
    "qkv_bias": (None, True),
    "norm_bias": (None, True),
}


def field_combinations():
    """Every combination of the component fields, the impossible ones included."""
    for values in itertools.product(*COMPONENT_CHOICES.values()):
        yield dict(zip(COMPONENT_CHOICES, values))


def test_every_possible_combination_round_trips_and_every_impossible_one_names_its_fields():
    possible = []
    for fields_ in field_combinations():
        try:
            config = GPTConfig(**TINY, **fields_)
        except ValueError as err:
            named = [name for name in fields_ if name in str(err)]
            assert named, f"{fields_}: {err} names none of the fields"
            continue
        possible.append(fields_)
        assert GPTConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config, fields_
    for field, values in COMPONENT_CHOICES.items():  # no value is refused in every combination: each can be built
        assert {fields_[field] for fields_ in possible} == set(values), field
    unrotated = [fields_ for fields_ in possible if POSITIONS[fields_["position"]].rotation is None]
    assert unrotated and all(fields_["qk_norm_order"] == "before_rope" for fields_ in unrotated)  # nothing to follow


@pytest.mark.parametrize(
    "fields_, named",
    [
        ({"num_kv_heads": 3}, "num_kv_heads"),  # does not divide num_heads = 4
        ({"num_kv_heads": 0}, "num_kv_heads"),
        ({"head_dim": 0}, "head_dim"),
        ({"num_heads": 5}, "head_dim"),  # 32 / 5 is no head width: head_dim must be given
        ({"position": "rope", "head_dim": 5}, "head_dim"),  # rotates pairs
        ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling"),  # learned positions rotate nothing
        ({"position": "rope", "rope_scaling": {"rope_type": "yarn", "factor": 2.0}}, "rope_type"),
        ({"position": "rope", "rope_scaling": {"rope_type": "linear"}}, "factor"),
        ({"rope_theta": 0.0}, "rope_theta"),
        ({"qk_norm": True, "qk_norm_order": "after_rope"}, "qk_norm_order"),  # no rotation to come after
        ({"qk_norm_order": "between"}, "qk_norm_order"),
        ({"norm_weight": False}, "norm_weight"),  # LayerNorm has no form without a weight
        ({"norm": "rmsnorm", "norm_bias": True}, "norm_bias"),  # RMSNorm has no bias
        ({"norm": "batchnorm"}, "norm"),
        ({"qkv_bias": 1}, "qkv_bias"),
        ({"norm_eps": -1.0}, "norm_eps"),
    ],
)
def test_an_impossible_combination_is_a_value_error_naming_the_field(fields_, named):
    with pytest.raises((ValueError, TypeError), match=named):
        GPTConfig(**{**TINY, **fields_})


def test_the_sliding_window_and_its_layers_round_trip_and_give_each_layer_its_modifiers():
    every = GPTConfig(**{**TINY, "num_layers": 3}, sliding_window=4)
    assert [every.layer_window(i) for i in range(3)] == [4, 4, 4]
    assert every.score_modifiers(0) == (("window", 4),)  # the window is causal itself
    some = GPTConfig(**{**TINY, "num_layers": 3}, sliding_window=4, window_layers=[2, 0], position="alibi")
    assert some.window_layers == (0, 2) and [some.layer_window(i) for i in range(3)] == [4, None, 4]
    assert some.score_modifiers(1) == ("causal", "alibi") and some.score_modifiers(2) == (("window", 4), "alibi")
    for config in (every, some):
        assert GPTConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert some.to_dict()["window_layers"] == [0, 2]  # as JSON reads it back
    assert GPTConfig(**TINY).score_modifiers(0) == ("causal",)


@pytest.mark.parametrize(
    "fields_, error, message",
    [
        ({"sliding_window": 0}, ValueError, "sliding_window must be a positive integer, got 0"),
        ({"sliding_window": 2.5}, ValueError, "sliding_window must be a positive integer, got 2.5"),
        ({"window_layers": [0]}, ValueError, "window_layers=.* but sliding_window is None"),
        ({"sliding_window": 2, "window_layers": "0,1"}, TypeError, "window_layers must be a list"),
        (
            {"sliding_window": 2, "window_layers": [2]},
            ValueError,
            r"each of window_layers must be an integer in \[0, 1\]",
        ),
        ({"sliding_window": 2, "window_layers": [1, 1]}, ValueError, "window_layers must name distinct layers"),
        ({"sliding_window": 2, "window_layers": []}, ValueError, "at least one"),
    ],
)
def test_a_bad_window_is_named(fields_, error, message):
    with pytest.raises(error, match=message):
        GPTConfig(**{**TINY, "num_layers": 2, **fields_})


def test_rope_scaling_is_normalised_and_round_trips():
    config = GPTConfig(**TINY, position="rope", rope_scaling={"type": "linear", "factor": 4})  # HF's older key
    assert config.rope_scaling == {"rope_type": "linear", "factor": 4.0}
    assert GPTConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


# The families issue 23 imports, at their real sizes (no arrays are made: parameter_shapes only): the
# parameter counts their model cards give.
FAMILIES = {
    "SmolLM2-135M": (
        dict(vocab_size=49152, max_seq_len=8192, d_model=576, num_heads=9, num_kv_heads=3, num_layers=30,
             d_ff=1536, rope_theta=100000.0, tie_weights=True),
        134_515_008,
    ),
    "Llama-3.2-1B": (
        dict(vocab_size=128256, max_seq_len=131072, d_model=2048, num_heads=32, num_kv_heads=8, num_layers=16,
             d_ff=8192, rope_theta=500000.0, tie_weights=True,
             rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 8192}),
        1_235_814_400,
    ),
    "Qwen2.5-0.5B": (
        dict(vocab_size=151936, max_seq_len=32768, d_model=896, num_heads=14, num_kv_heads=2, num_layers=24,
             d_ff=4864, rope_theta=1000000.0, tie_weights=True, qkv_bias=True, norm_eps=1e-6),
        494_032_768,
    ),
}  # fmt: skip


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_llama_family_at_its_real_sizes(family):
    fields_, expected = FAMILIES[family]
    config = GPTConfig(**{**ARCHS["llama"], **fields_})
    assert sum(math.prod(shape) for shape in parameter_shapes(config).values()) == expected


HF_FAMILIES = {  # transformers config class -> (its fields, numforge's), a tiny model of each family
    "LlamaConfig": ({}, {}),
    "MistralConfig": ({"sliding_window": None}, {}),
    "Qwen2Config": ({}, {"qkv_bias": True}),
    "Qwen3Config": ({"head_dim": 6}, {"qk_norm": True, "head_dim": 6}),  # head_dim != hidden / heads
}


@pytest.mark.parametrize("family", list(HF_FAMILIES))
@pytest.mark.parametrize("tied", [True, False])
def test_the_config_expresses_each_hf_family_with_its_parameter_count(family, tied):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf_fields, ours = HF_FAMILIES[family]
    sizes = dict(vocab_size=37, hidden_size=16, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                 intermediate_size=24, tie_word_embeddings=tied)  # fmt: skip
    hf_config = getattr(transformers, family)(**sizes, **hf_fields)
    with torch.device("meta"):
        hf_model = transformers.AutoModelForCausalLM.from_config(hf_config)
    sizes = dict(vocab_size=37, max_seq_len=16, d_model=16, num_heads=4, num_kv_heads=2, num_layers=2, d_ff=24)
    config = GPTConfig(**{**ARCHS["llama"], **ours, **sizes, "tie_weights": tied})
    hf_count = sum(p.numel() for p in hf_model.parameters())  # a tied table counts once there too
    assert sum(math.prod(shape) for shape in parameter_shapes(config).values()) == hf_count


def test_a_projection_wide_qk_norm_has_a_weight_per_projection_value_and_needs_qk_norm():
    config = GPTConfig(vocab_size=50, max_seq_len=8, d_model=12, num_heads=4, num_kv_heads=2, num_layers=1,
                       head_dim=5, qk_norm=True, qk_norm_extent="projection")  # fmt: skip
    shapes = parameter_shapes(config)
    assert shapes["layers.0.attn.q_norm.weight"] == (20,) and shapes["layers.0.attn.k_norm.weight"] == (10,)  # H D
    assert GPTConfig.from_dict({k: v for k, v in config.to_dict().items() if k != "qk_norm_extent"}).qk_norm_extent == (
        "head"
    )  # an older dict: each head
    with pytest.raises(ValueError, match="qk_norm_extent='projection' set, but qk_norm is False"):
        GPTConfig(vocab_size=50, max_seq_len=8, d_model=12, num_heads=4, num_layers=1, qk_norm_extent="projection")
    with pytest.raises(ValueError, match="qk_norm_extent must be one of \\('head', 'projection'\\), got 'row'"):
        GPTConfig(vocab_size=50, max_seq_len=8, d_model=12, num_heads=4, num_layers=1, qk_norm=True,
                  qk_norm_extent="row")  # fmt: skip


@pytest.mark.parametrize(
    "options, message",
    [
        ({"attn_softcap": 0.0}, "attn_softcap must be a positive finite number"),
        ({"logit_softcap": float("inf")}, "logit_softcap must be a positive finite number"),
        ({"query_pre_attn_scalar": -1}, "query_pre_attn_scalar must be a positive finite number"),
        ({"post_norms": 1}, "post_norms"),
        (
            {"post_norms": True, "activation": "swiglu", "num_experts": 2, "use_bias": False},
            "post_norms=True: the sandwich of norms",
        ),
        ({"position": "rope", "rope_local_theta": 10.0}, "rope_local_theta is the rotation's base on the windowed"),
        ({"position": "rope", "rope_local_theta": 10.0, "sliding_window": 2}, "needs a rotary position and window"),
    ],
)
def test_gemmas_options_are_checked_by_name(options, message):
    with pytest.raises((ValueError, TypeError), match=message):
        GPTConfig(vocab_size=16, max_seq_len=8, d_model=8, num_heads=2, num_layers=2, **options)
