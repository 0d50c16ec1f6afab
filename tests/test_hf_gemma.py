"""Gemma, Gemma 2 and Gemma 3 config.json files read without transformers: the class defaults, the older Gemma 3 fields
(``rope_theta`` + ``rope_scaling`` for the global layers, ``rope_local_base_freq``, ``sliding_window_pattern``),
what is refused by name, and a config written and read back unchanged."""

import pytest

from numforge.hf import gemma
from numforge.hf.config import config_from_hf, config_to_hf

SHAPE = dict(vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=6, num_attention_heads=2,
             num_key_value_heads=1, head_dim=8, max_position_embeddings=64)  # fmt: skip


def read(d: dict):
    return config_from_hf({**SHAPE, **d}, "config.json")[0]


def test_gemmas_defaults_are_its_classes_and_its_legacy_gelu_is_the_tanh_form():
    config = read({"model_type": "gemma", "hidden_act": "gelu"})  # the first releases' field, as transformers reads it
    assert (config.activation, config.gelu_approximate) == ("geglu", "tanh")
    assert config.norm == "rmsnorm_offset" and config.scale_embeddings and config.tie_weights
    assert not config.post_norms and not config.qk_norm and config.window_layers is None
    assert (config.sliding_window, config.attn_softcap, config.logit_softcap, config.query_pre_attn_scalar) == (
        (None,) * 4
    )
    assert read({"model_type": "gemma", "query_pre_attn_scalar": 24}).query_pre_attn_scalar is None  # unread by it


@pytest.mark.parametrize(
    "option, value",
    [("sliding_window", 8), ("attn_softcap", 2.0), ("logit_softcap", 3.0), ("qk_norm", True),
     ("query_pre_attn_scalar", 24.0)],
)  # fmt: skip
def test_a_gemma_2_or_3_option_without_post_norms_is_refused_by_name(option, value):
    import dataclasses

    config = dataclasses.replace(read({"model_type": "gemma"}), **{option: value})
    with pytest.raises(ValueError, match=f"Gemma cannot express {option}={value!r} without post_norms"):
        config_to_hf(config, {})


def test_gemma2s_defaults_are_its_classes():
    config = read({"model_type": "gemma2"})
    assert (config.attn_softcap, config.logit_softcap, config.query_pre_attn_scalar) == (50.0, 30.0, 256.0)
    assert config.window_layers == (0, 2, 4) and config.sliding_window == 4096  # every other layer local, the first
    assert config.tie_weights and config.post_norms and config.scale_embeddings and config.norm == "rmsnorm_offset"
    assert config.rope_theta == 10000.0 and config.rope_local_theta is None and not config.qk_norm


def test_gemma3s_older_fields_and_its_pattern():
    config = read({"model_type": "gemma3_text", "rope_theta": 1e6, "rope_local_base_freq": 1e4,
                   "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "sliding_window_pattern": 3})  # fmt: skip
    assert config.window_layers == (0, 1, 3, 4)  # layers 2 and 5 global
    assert (config.rope_theta, config.rope_local_theta) == (1e6, 1e4)
    assert config.rope_scaling == {"rope_type": "linear", "factor": 8.0}
    assert config.qk_norm and config.attn_softcap is None and config.logit_softcap is None


def test_gemma3_with_one_base_everywhere_has_no_local_tables():
    rope = {"full_attention": {"rope_type": "default", "rope_theta": 1e4},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}  # fmt: skip
    assert read({"model_type": "gemma3_text", "rope_parameters": rope}).rope_local_theta is None


@pytest.mark.parametrize(
    "change, message",
    [
        ({"use_bidirectional_attention": True}, "use_bidirectional_attention is true"),
        ({"hidden_activation": "relu"}, "hidden_activation is 'relu'"),  # silu is read: SwiGLU, as the class computes
        ({"rope_parameters": {"sliding_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}}},
         "the sliding_attention layers' rope is scaled"),
        ({"sliding_window": 0}, "sliding_window must be a positive integer"),
        ({"attn_logit_softcapping": -1.0}, "attn_logit_softcapping must be a positive finite number"),
    ],
)  # fmt: skip
def test_what_numforge_cannot_run_is_refused_by_name(change, message):
    with pytest.raises(ValueError, match=message):
        read({"model_type": "gemma3_text", **change})


@pytest.mark.parametrize(
    "d", [{"model_type": "gemma"}, {"model_type": "gemma2"}, {"model_type": "gemma3_text", "rope_local_base_freq": 5e3}]
)
def test_a_config_written_reads_back_the_same(d):
    config = read(d)
    written, layout = config_to_hf(config, {})
    assert written["architectures"] == [gemma.FAMILIES[d["model_type"]].architecture]
    assert config_from_hf(written, "again")[0] == config
    assert layout.name == gemma.FAMILY_NAMES
