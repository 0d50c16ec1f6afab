"""Llama, Mistral, Qwen2 and Qwen3 directories in and out, without transformers: safetensors files written directly.

The names and shapes are the family's own, written out by hand in ``hf_dirs.llama_shapes``, so that a test of
the mapping compares against something it did not produce. ``test_hf_llama_transformers.py`` compares the
numbers with transformers' own models.
"""

import json
import os
import tracemalloc

import numpy as np
import pytest
from hf_dirs import llama_fields, llama_shapes, tiny_tokenizer, write_llama_dir, write_raw_safetensors

from numforge import backend
from numforge.hf import load_pretrained, pretrained_config, save_pretrained
from numforge.hf.llama import QWEN2_REBUILT
from numforge.hf.weights import READ_TEMPORARIES
from numforge.model import GPT, GPTConfig
from numforge.model.config import ARCHS
from numforge.tokenizer import BPETokenizer

safetensors_numpy = pytest.importorskip("safetensors.numpy")

FAMILIES = ("llama", "mistral", "qwen2", "qwen3")


def params_of(model) -> dict[str, np.ndarray]:
    return {name: backend.to_numpy(p) for name, p in model.params.items()}


# ---------------------------------------------------------------- loading


@pytest.mark.parametrize("model_type", FAMILIES)
def test_loads_the_familys_tensors_under_numforge_names(tmp_path, model_type):
    fields = llama_fields(model_type)
    path, t = write_llama_dir(tmp_path / model_type, fields, tied=False)
    model, _ = load_pretrained(path)
    params, config = params_of(model), model.config
    D = 6 if model_type == "qwen3" else 4  # Qwen3's head_dim 6, not hidden / heads = 4
    assert (config.num_heads, config.num_kv_heads, config.head_dim, config.d_ff) == (4, 2, D, 40)
    assert (config.norm, config.position, config.activation, config.norm_eps) == ("rmsnorm", "rope", "swiglu", 1e-5)
    assert config.qk_norm == (model_type == "qwen3") and config.qk_norm_order == "before_rope"
    assert config.rope_theta == (1e6 if model_type == "mistral" else 10000.0) and config.rope_scaling is None
    assert [config.has_bias(s) for s in ("qkv_bias", "out_bias", "mlp_bias")] == [model_type == "qwen2", False, False]
    assert len(t) - len(params) == 2 * 2 * (2 if model_type == "qwen2" else 1)  # per layer q, k, v -> qkv_proj
    layer = "model.layers.1."
    qkv = np.concatenate([t[layer + f"self_attn.{x}_proj.weight"] for x in "qkv"], axis=0).T  # (C, (H + 2 H_kv) D)
    by_hand = {
        "token_embedding": t["model.embed_tokens.weight"],
        "lm_head.weight": t["lm_head.weight"],  # (V, C) on both sides
        "final_norm.weight": t["model.norm.weight"],
        "layers.1.pre_attn_norm.weight": t[layer + "input_layernorm.weight"],
        "layers.1.attn.qkv_proj.weight": qkv,
        "layers.1.attn.out_proj.weight": t[layer + "self_attn.o_proj.weight"].T,
        "layers.1.pre_mlp_norm.weight": t[layer + "post_attention_layernorm.weight"],
        "layers.1.mlp.gate_proj.weight": t[layer + "mlp.gate_proj.weight"].T,
        "layers.1.mlp.up_proj.weight": t[layer + "mlp.up_proj.weight"].T,
        "layers.1.mlp.down_proj.weight": t[layer + "mlp.down_proj.weight"].T,
    }
    if model_type == "qwen2":
        by_hand["layers.1.attn.qkv_proj.bias"] = np.concatenate([t[layer + f"self_attn.{x}_proj.bias"] for x in "qkv"])
    if model_type == "qwen3":
        by_hand["layers.1.attn.q_norm.weight"] = t[layer + "self_attn.q_norm.weight"]
        by_hand["layers.1.attn.k_norm.weight"] = t[layer + "self_attn.k_norm.weight"]
    for ours, theirs in by_hand.items():
        assert params[ours].dtype == np.float32
        np.testing.assert_array_equal(params[ours], theirs, err_msg=ours)


def test_tied_heads_buffers_and_names_without_prefix(tmp_path):
    fields = llama_fields()
    tensors = {n: np.full(s, 0.1, np.float32) for n, s in llama_shapes(fields).items()}
    tensors["model.embed_tokens.weight"] = np.random.default_rng(1).normal(size=(300, 16)).astype(np.float32)
    bare = {name.removeprefix("model."): t for name, t in tensors.items()}
    bare["layers.0.self_attn.rotary_emb.inv_freq"] = np.ones(2, np.float32)  # an older file's buffer
    bare["lm_head.weight"] = bare["embed_tokens.weight"].copy()  # the same values: tied, as transformers ties it
    path, _ = write_llama_dir(tmp_path / "bare", fields, bare)
    model, _ = load_pretrained(path)
    assert model.config.tie_weights and "lm_head.weight" not in model.params
    np.testing.assert_array_equal(params_of(model)["token_embedding"], tensors["model.embed_tokens.weight"])


def test_the_rope_settings_of_every_file_generation(tmp_path):
    """transformers 5's rope_parameters (rope_theta inside), older files' rope_theta + rope_scaling, the "type" alias,
    llama3's original_max_position_embeddings defaulting to the context; rope_scaling wins, as in transformers 5."""
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
    cases = [
        ({"rope_parameters": {"rope_type": "default", "rope_theta": 5e5}}, 5e5, None),
        ({"rope_theta": 123.0, "rope_scaling": None}, 123.0, None),
        ({}, 10000.0, None),
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, 10000.0, {"rope_type": "linear", "factor": 2.0}),
        ({"rope_parameters": {**llama3, "rope_theta": 5e5}}, 5e5, {**llama3, "original_max_position_embeddings": 32}),
        (
            {"rope_theta": 7.0, "rope_scaling": {"rope_type": "linear", "factor": 3.0},
             "rope_parameters": {"rope_type": "default", "rope_theta": 9.0}},
            7.0, {"rope_type": "linear", "factor": 3.0},
        ),
    ]  # fmt: skip
    for i, (rope, theta, scaling) in enumerate(cases):
        fields = {k: v for k, v in llama_fields().items() if k != "rope_parameters"} | rope
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / "config.json").write_text(json.dumps(fields))
        config = pretrained_config(tmp_path / str(i))  # config.json alone: no weights needed
        assert (config.rope_theta, config.rope_scaling) == (theta, scaling), rope


def test_a_sliding_window_not_shorter_than_the_context_is_accepted(tmp_path):
    accepted = [
        ("mistral", {"sliding_window": None}),
        ("mistral", {"sliding_window": 32}),  # = max_position_embeddings: query 31 still sees key 0
        ("qwen2", {"use_sliding_window": False, "sliding_window": 4}),  # off
        ("qwen2", {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 2}),  # no layer slides
        ("qwen3", {"use_sliding_window": True, "sliding_window": 4, "layer_types": ["full_attention"] * 2}),
    ]
    for i, (model_type, window) in enumerate(accepted):
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / "config.json").write_text(json.dumps(llama_fields(model_type, **window)))
        assert pretrained_config(tmp_path / str(i)).max_seq_len == 32


def test_a_sliding_window_shorter_than_the_context_loads_into_the_config(tmp_path):
    windows = [
        ("mistral", {"sliding_window": 31}, (31, None)),  # every layer
        ("qwen2", {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1}, (4, [1])),
        ("qwen2", {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 0}, (4, None)),
        (
            "qwen3",
            {"use_sliding_window": True, "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"]},
            (8, (0,)),
        ),  # fmt: skip
    ]
    for i, (model_type, window, (width, layers)) in enumerate(windows):
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / "config.json").write_text(json.dumps(llama_fields(model_type, **window)))
        config = pretrained_config(tmp_path / str(i))
        assert config.sliding_window == width and config.window_layers == (None if layers is None else tuple(layers))


REFUSED = [
    (
        "llama",
        {"hidden_act": "gelu"},
        "hidden_act is 'gelu'; numforge runs this family only with 'gelu_new', 'gelu_pytorch_tanh', 'silu'",
    ),
    ("llama", {"rope_parameters": {"rope_type": "yarn", "factor": 4.0}}, "rope_parameters's rope_type is 'yarn'"),
    ("llama", {"rope_scaling": {"type": "dynamic", "factor": 2.0}}, "rope_scaling's rope_type is 'dynamic'"),
    (
        "qwen2",
        {"rope_scaling": {"rope_type": "longrope", "short_factor": [1]}},
        "rope_scaling's rope_type is 'longrope'",
    ),
    ("llama", {"partial_rotary_factor": 0.5}, "partial_rotary_factor is 0.5"),
    ("llama", {"rope_parameters": {"rope_type": "linear"}}, "rope_scaling of rope_type 'linear' needs factor"),
    ("qwen2", {"use_sliding_window": True, "layer_types": ["sliding_attention"]}, "layer_types must name 2 layers"),
    (
        "qwen3",
        {"use_sliding_window": True, "layer_types": ["local", "full_attention"]},
        r"layer_types must name 2 layers, each one of \('sliding_attention', 'full_attention'\), got \['local'",
    ),
    ("llama", {"num_local_experts": 8}, "num_local_experts is 8: a mixture of experts"),
    ("qwen2", {"num_experts": 60}, "num_experts is 60: a mixture of experts"),
    ("mixtral", {"router_jitter_noise": 0.1}, "router_jitter_noise is 0.1; numforge's router has no noise"),
    ("mixtral", {"num_local_experts": 0}, "num_local_experts must be a positive integer, got 0"),
    ("qwen2_moe", {}, "model_type is 'qwen2_moe', a mixture of experts"),
    ("qwen3_moe", {"decoder_sparse_step": 2}, "decoder_sparse_step is 2; it puts dense layers between the sparse"),
    ("qwen3_moe", {"mlp_only_layers": [1]}, r"mlp_only_layers is \[1\]; it makes those layers dense"),
    ("qwen3_moe", {"norm_topk_prob": "yes"}, "norm_topk_prob must be true or false, got 'yes'"),
    ("qwen3_moe", {"moe_intermediate_size": 0}, "moe_intermediate_size must be a positive integer, got 0"),
    ("olmoe", {"clip_qkv": 8.0}, "clip_qkv is 8.0; numforge does not clip q, k and v"),
    ("olmoe", {"head_dim": 6}, "head_dim is 6 with hidden_size 16 and num_attention_heads 4: OlmoeForCausalLM's"),
    ("deepseek_v3", {}, "model_type is 'deepseek_v3', a mixture of experts"),
    (
        "phi3",
        {},
        "model_type is 'phi3'; numforge loads 'gpt2', 'llama', 'mistral', 'mixtral', 'qwen2', 'qwen3', 'qwen3_moe', "
        "'olmoe'",
    ),
    (
        "llama",
        {"quantization_config": {"quant_method": "gptq"}},
        "quantization_config is set \\(quant_method 'gptq'\\)",
    ),
    ("llama", {"num_key_value_heads": 3}, r"num_key_value_heads \(3\) must divide num_attention_heads \(4\)"),
]


@pytest.mark.parametrize("model_type, change, match", REFUSED, ids=[m for _, _, m in REFUSED])
def test_what_numforge_cannot_run_exactly_is_refused_by_name_before_any_weight(tmp_path, model_type, change, match):
    base = llama_fields("llama" if model_type not in FAMILIES else model_type)
    path = tmp_path / "model"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(base | {"model_type": model_type} | change))
    (path / "model.safetensors").write_bytes(b"not read: the config is refused first")
    with pytest.raises(ValueError, match=f"config.json: {match}"):
        load_pretrained(path)


def test_float16_bfloat16_and_sharded_files_widen_exactly(tmp_path):
    fields = llama_fields("qwen2")
    rng = np.random.default_rng(2)
    tensors = {n: rng.normal(0, 0.3, size=s).astype(np.float32) for n, s in llama_shapes(fields).items()}
    half = {n: t.astype(np.float16) for n, t in tensors.items()}
    f16 = params_of(load_pretrained(write_llama_dir(tmp_path / "f16", fields, half)[0])[0])
    np.testing.assert_array_equal(f16["token_embedding"], half["model.embed_tokens.weight"].astype(np.float32))
    np.testing.assert_array_equal(
        f16["layers.0.mlp.up_proj.weight"], half["model.layers.0.mlp.up_proj.weight"].T.astype(np.float32)
    )
    # bfloat16 = float32's upper 16 bits (truncated here), in two shards with an index
    path, _ = write_llama_dir(tmp_path / "bf16", fields, half)
    os.remove(path / "model.safetensors")
    words = {name: (t.view(np.uint32) >> 16).astype("<u2") for name, t in tensors.items()}
    names = sorted(words)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for shard, shard_names in shards.items():
        write_raw_safetensors(path / shard, {n: ("BF16", words[n].shape, words[n].tobytes()) for n in shard_names})
    weight_map = {name: shard for shard, shard_names in shards.items() for name in shard_names}
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    truncated = {n: (t.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32) for n, t in tensors.items()}
    expected = params_of(load_pretrained(write_llama_dir(tmp_path / "cut", fields, truncated)[0], dtype="float64")[0])
    loaded = params_of(load_pretrained(path, dtype="float64")[0])
    assert loaded.keys() == expected.keys()
    for name in expected:
        np.testing.assert_array_equal(loaded[name], expected[name], err_msg=name)


def test_missing_misshapen_and_unknown_tensors_are_named(tmp_path):
    fields = llama_fields("qwen3")
    tensors = {n: np.zeros(s, np.float32) for n, s in llama_shapes(fields).items()}
    less = {k: v for k, v in tensors.items() if k != "model.layers.1.self_attn.k_norm.weight"}
    with pytest.raises(ValueError, match=r"missing tensors \['layers.1.self_attn.k_norm.weight'\]"):
        load_pretrained(write_llama_dir(tmp_path / "missing", fields, less)[0])
    bent = tensors | {"model.layers.0.self_attn.k_proj.weight": np.zeros((16, 12), np.float32)}
    with pytest.raises(ValueError, match=r"'model.layers.0.self_attn.k_proj.weight' has shape \(16, 12\).*\(12, 16\)"):
        load_pretrained(write_llama_dir(tmp_path / "bent", fields, bent)[0])
    biased = tensors | {"model.layers.0.self_attn.o_proj.bias": np.zeros(16, np.float32)}
    with pytest.raises(ValueError, match="'model.layers.0.self_attn.o_proj.bias' is not a parameter of this Llama"):
        load_pretrained(write_llama_dir(tmp_path / "biased", fields, biased)[0])


def test_a_model_too_large_is_refused_before_any_data_is_read(tmp_path):
    fields = llama_fields(vocab_size=2**40, tie_word_embeddings=True)
    path, _ = write_llama_dir(tmp_path / "huge", llama_fields())
    (path / "config.json").write_text(json.dumps(fields))
    write_raw_safetensors(path / "model.safetensors", {n: ("F32", s, b"") for n, s in llama_shapes(fields).items()})
    with pytest.raises(ValueError, match=r"loading .*huge needs about .* of memory"):
        load_pretrained(path)


def test_loading_holds_one_copy_of_the_weights_and_the_estimate_bounds_it(tmp_path):
    # before: the arrays read, transposed views, were copied into a model drawn at random first (1.8x the weights)
    fields = llama_fields(num_hidden_layers=8, hidden_size=128, intermediate_size=320, tie_word_embeddings=True)
    path, _ = write_llama_dir(tmp_path / "eight", fields)
    sizes = [int(np.prod(shape)) for shape in llama_shapes(fields).values()]
    tracemalloc.start()
    try:
        model, _ = load_pretrained(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    weights = sum(int(p.nbytes) for p in model.params.values())
    assert weights == 4 * sum(sizes)
    assert all(p.flags.c_contiguous for p in model.params.values())
    largest = (READ_TEMPORARIES + 2 * 4) * max(sizes)  # what the memory check adds for the tensor being read
    assert weights < peak <= weights + largest + 2**20  # 1 MiB: the tokenizer and the JSON read beside them
    assert peak < 1.5 * weights


def test_a_pickle_only_llama_directory_is_refused(tmp_path):
    path, _ = write_llama_dir(tmp_path / "pickled", llama_fields())
    os.remove(path / "model.safetensors")
    (path / "pytorch_model.bin").write_bytes(b"\x80\x04not opened")
    with pytest.raises(ValueError, match="pytorch_model.bin: PyTorch pickle files, which numforge never opens"):
        load_pretrained(path)


# ---------------------------------------------------------------- saving


def llama_model(dtype="float32", seed=3, **options):
    sizes = dict(vocab_size=300, max_seq_len=32, d_model=16, num_heads=4, num_layers=2)
    return GPT(GPTConfig(**{**ARCHS["llama"], **sizes, **options}), seed=seed, dtype=dtype)


EXPORTS = {
    "llama (untied, GQA)": ({"num_kv_heads": 2}, "llama"),
    "llama (tied, MQA, llama3 rope)": (
        {"tie_weights": True, "num_kv_heads": 1, "rope_theta": 5e5,
         "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 16}},
        "llama",
    ),
    "llama (every bias)": ({"use_bias": True}, "llama"),
    "qwen3 (QK-norm, head_dim 6)": ({"qk_norm": True, "head_dim": 6, "num_kv_heads": 2}, "qwen3"),
    "qwen3 (QK-norm, attention biases)": ({"qk_norm": True, "qkv_bias": True, "out_bias": True}, "qwen3"),
    "mistral (a window on every layer)": ({"sliding_window": 8, "num_kv_heads": 2}, "mistral"),
    "qwen3 (a window on layer 1)": ({"qk_norm": True, "sliding_window": 8, "window_layers": [1]}, "qwen3"),
}  # fmt: skip


@pytest.mark.parametrize("options, model_type", EXPORTS.values(), ids=EXPORTS.keys())
def test_numforge_to_hf_to_numforge_is_bit_identical(tmp_path, options, model_type):
    for dtype in ("float32", "float64"):
        model = llama_model(dtype, **options)
        save_pretrained(model, tiny_tokenizer(), tmp_path / dtype)
        written = json.loads((tmp_path / dtype / "config.json").read_text())
        assert written["model_type"] == model_type and written["dtype"] == dtype
        loaded, tokenizer = load_pretrained(tmp_path / dtype, dtype=dtype)
        assert loaded.config == model.config
        for name, array in params_of(model).items():
            assert params_of(loaded)[name].dtype == array.dtype
            np.testing.assert_array_equal(params_of(loaded)[name], array, err_msg=name)
        assert tokenizer.to_dict() == tiny_tokenizer().to_dict()
        files = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}
        assert set(os.listdir(tmp_path / dtype)) == files | {"special_tokens_map.json", "generation_config.json"}
        assert json.loads((tmp_path / dtype / "generation_config.json").read_text()) == {
            "bos_token_id": 289, "eos_token_id": 289,
        }  # fmt: skip


def qwen2_style(tok):
    """``tok``'s merges cut as transformers' Qwen2Tokenizer cuts every qwen2 directory's text (NFC, Qwen2's split)."""
    return BPETokenizer(tok.merges, tok.special_tokens, None, tok.byte_ids, tok.merge_ids, pipeline=QWEN2_REBUILT)


def test_qwen2s_shape_is_written_as_qwen2_when_transformers_would_cut_its_text_alike(tmp_path):
    model = llama_model(qkv_bias=True, num_kv_heads=2)
    save_pretrained(model, qwen2_style(tiny_tokenizer()), tmp_path / "qwen2")
    assert json.loads((tmp_path / "qwen2" / "config.json").read_text())["model_type"] == "qwen2"
    loaded, tokenizer = load_pretrained(tmp_path / "qwen2")
    assert loaded.config == model.config and tokenizer.to_dict() == qwen2_style(tiny_tokenizer()).to_dict()
    for name, array in params_of(model).items():
        np.testing.assert_array_equal(params_of(loaded)[name], array, err_msg=name)
    # numforge's own tokenizer (GPT-2's pattern) would be rebuilt by transformers as Qwen2's: a Llama instead,
    # the same function, its o_proj bias zero
    save_pretrained(model, tiny_tokenizer(), tmp_path / "llama")
    written = json.loads((tmp_path / "llama" / "config.json").read_text())
    assert (written["model_type"], written["attention_bias"], written["mlp_bias"]) == ("llama", True, False)
    loaded, _ = load_pretrained(tmp_path / "llama")
    assert loaded.config.has_bias("out_bias") and set(loaded.params) - set(model.params) == {
        "layers.0.attn.out_proj.bias", "layers.1.attn.out_proj.bias",
    }  # fmt: skip
    assert not params_of(loaded)["layers.1.attn.out_proj.bias"].any()
    ids = backend.asarray(np.array([tiny_tokenizer().encode("the standard library")]))
    np.testing.assert_array_equal(backend.to_numpy(loaded.logits(ids)), backend.to_numpy(model.logits(ids)))


def test_the_exported_tensors_are_the_familys_by_hand(tmp_path):
    model = llama_model(num_kv_heads=2, qkv_bias=True)  # Qwen2: H D = 16, H_kv D = 8
    save_pretrained(model, qwen2_style(tiny_tokenizer()), tmp_path / "out")
    stored = safetensors_numpy.load_file(str(tmp_path / "out" / "model.safetensors"))
    assert set(stored) == set(llama_shapes(llama_fields("qwen2"), tied=False))
    p = params_of(model)
    qkv, bias = p["layers.0.attn.qkv_proj.weight"], p["layers.0.attn.qkv_proj.bias"]
    np.testing.assert_array_equal(stored["model.layers.0.self_attn.q_proj.weight"], qkv[:, :16].T)
    np.testing.assert_array_equal(stored["model.layers.0.self_attn.k_proj.weight"], qkv[:, 16:24].T)
    np.testing.assert_array_equal(stored["model.layers.0.self_attn.v_proj.weight"], qkv[:, 24:].T)
    np.testing.assert_array_equal(stored["model.layers.0.self_attn.v_proj.bias"], bias[24:])
    np.testing.assert_array_equal(stored["model.layers.0.mlp.down_proj.weight"], p["layers.0.mlp.down_proj.weight"].T)
    np.testing.assert_array_equal(stored["lm_head.weight"], p["lm_head.weight"])


@pytest.mark.parametrize(
    "options, names",
    [
        ({"norm": "layernorm"}, ["GPT-2 cannot express activation='swiglu'", "cannot express norm='layernorm'"]),
        ({"activation": "gelu"}, ["GPT-2 cannot express norm='rmsnorm'", "cannot express activation='gelu'"]),
        ({"position": "learned"}, ["cannot express position='learned'"]),
        ({"norm_weight": False}, ["cannot express norm_weight=False"]),
        ({"scale_embeddings": True}, ["cannot express scale_embeddings=True"]),
        ({"qk_norm": True, "qk_norm_order": "after_rope"}, ["cannot express qk_norm_order='after_rope'"]),
        ({"qk_norm": True, "qkv_bias": True}, ["QK-norm with qkv_bias=True, out_bias=False"]),
        ({"qk_norm": True, "mlp_bias": True}, ["QK-norm with qkv_bias=False, out_bias=False, mlp_bias=True"]),
        ({"out_bias": True}, ["cannot express qkv_bias=False with out_bias=True"]),
        ({"qkv_bias": True, "mlp_bias": True}, ["cannot express qkv_bias=True with out_bias=False"]),
        ({"sliding_window": 4, "window_layers": [0]}, ["cannot express sliding_window=4 on layers (0,)"]),
        ({"sliding_window": 4, "use_bias": True}, ["cannot express sliding_window=4 on layers None with qkv_bias"]),
    ],
)
def test_what_no_family_can_express_is_refused_before_writing(tmp_path, options, names):
    with pytest.raises(ValueError, match="this model cannot be saved for transformers") as refusal:
        save_pretrained(llama_model(**options), tiny_tokenizer(), tmp_path / "out")
    for name in names:
        assert name in str(refusal.value)
    assert os.listdir(tmp_path) == []
