"""Hugging Face GPT-2 directories in and out, without transformers: safetensors files written directly."""

import json
import os
import sys

import numpy as np
import pytest
from hf_dirs import TINY, gpt2_shapes, gpt2_tensors, tiny_tokenizer, write_gpt2_dir, write_raw_safetensors

from numforge import backend
from numforge.checks import MissingDependencyError
from numforge.generate import generate, generate_ids
from numforge.hf import load_pretrained, save_pretrained
from numforge.model import GPT, GPTConfig
from numforge.study.predictions import position_predictions
from numforge.study.prompt import run_prompt, token_label

safetensors_numpy = pytest.importorskip("safetensors.numpy")

# numforge's name -> GPT-2's, written out by hand for layer 1 and the ends of the network
BY_HAND = {
    "token_embedding": "transformer.wte.weight",
    "position_embedding": "transformer.wpe.weight",
    "layers.1.pre_attn_norm.weight": "transformer.h.1.ln_1.weight",
    "layers.1.pre_attn_norm.bias": "transformer.h.1.ln_1.bias",
    "layers.1.attn.qkv_proj.weight": "transformer.h.1.attn.c_attn.weight",
    "layers.1.attn.qkv_proj.bias": "transformer.h.1.attn.c_attn.bias",
    "layers.1.attn.out_proj.weight": "transformer.h.1.attn.c_proj.weight",
    "layers.1.pre_mlp_norm.bias": "transformer.h.1.ln_2.bias",
    "layers.1.mlp.up_proj.weight": "transformer.h.1.mlp.c_fc.weight",
    "layers.1.mlp.down_proj.weight": "transformer.h.1.mlp.c_proj.weight",
    "layers.1.mlp.down_proj.bias": "transformer.h.1.mlp.c_proj.bias",
    "final_norm.weight": "transformer.ln_f.weight",
}


def params_of(model) -> dict[str, np.ndarray]:
    return {name: backend.to_numpy(p) for name, p in model.params.items()}


# ---------------------------------------------------------------- loading


def test_loads_gpt2s_tensors_under_numforge_names(tmp_path):
    path, tensors = write_gpt2_dir(tmp_path / "gpt2")
    model, tokenizer = load_pretrained(path)
    params = params_of(model)
    assert model.config.max_seq_len == 32 and model.config.d_ff == 64 and model.config.tie_weights
    assert len(params) == len(tensors)  # tied: no lm_head.weight
    for ours, theirs in BY_HAND.items():
        assert params[ours].dtype == np.float32
        np.testing.assert_array_equal(params[ours], tensors[theirs])
    assert tokenizer.to_dict() == tiny_tokenizer().to_dict()


def test_names_without_prefix_buffers_and_a_tied_lm_head_are_accepted(tmp_path):
    tensors = gpt2_tensors()
    bare = {name.removeprefix("transformer."): t for name, t in tensors.items()}
    bare["h.0.attn.bias"] = np.tril(np.ones((1, 1, 32, 32), dtype=np.float32))  # the causal-mask buffer
    bare["h.0.attn.masked_bias"] = np.array(-1e4, dtype=np.float32)
    bare["lm_head.weight"] = tensors["transformer.wte.weight"]  # tied: the same table, stored twice
    path, _ = write_gpt2_dir(tmp_path / "bare", tensors=bare)
    params = params_of(load_pretrained(path)[0])
    for ours, theirs in BY_HAND.items():
        np.testing.assert_array_equal(params[ours], tensors[theirs])


def test_untied_lm_head_and_float64(tmp_path):
    path, tensors = write_gpt2_dir(tmp_path / "untied", tied=False)
    model, _ = load_pretrained(path, dtype="float64")
    params = params_of(model)
    assert not model.config.tie_weights and params["lm_head.weight"].dtype == np.float64
    np.testing.assert_array_equal(params["lm_head.weight"], tensors["lm_head.weight"].astype(np.float64))
    assert not np.array_equal(params["lm_head.weight"], params["token_embedding"])


def test_sharded_files_load_like_one(tmp_path):
    path, tensors = write_gpt2_dir(tmp_path / "sharded")
    os.remove(path / "model.safetensors")
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for shard, shard_names in shards.items():
        safetensors_numpy.save_file({n: tensors[n] for n in shard_names}, str(path / shard))
    weight_map = {name: shard for shard, shard_names in shards.items() for name in shard_names}
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    params = params_of(load_pretrained(path)[0])
    for ours, theirs in BY_HAND.items():
        np.testing.assert_array_equal(params[ours], tensors[theirs])


def test_float16_and_bfloat16_files_widen_exactly(tmp_path):
    tensors = gpt2_tensors()
    half = {name: t.astype(np.float16) for name, t in tensors.items()}
    path, _ = write_gpt2_dir(tmp_path / "f16", tensors=half)
    params = params_of(load_pretrained(path)[0])
    np.testing.assert_array_equal(params["token_embedding"], half["transformer.wte.weight"].astype(np.float32))

    # bfloat16 = float32's upper 16 bits: keep them (truncating), write the 16-bit words by hand
    words = {name: (t.view(np.uint32) >> 16).astype("<u2") for name, t in tensors.items()}
    path, _ = write_gpt2_dir(tmp_path / "bf16", tensors=half)
    write_raw_safetensors(path / "model.safetensors", {n: ("BF16", w.shape, w.tobytes()) for n, w in words.items()})
    model, _ = load_pretrained(path, dtype="float64")
    for ours, theirs in BY_HAND.items():
        truncated = (tensors[theirs].view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
        np.testing.assert_array_equal(params_of(model)[ours], truncated.astype(np.float64))


def test_model_vocabulary_padded_beyond_the_tokenizer_loads_and_never_samples_the_padding(tmp_path):
    fields = TINY | {"vocab_size": 320}  # the tokenizer has 290 ids
    tensors = gpt2_tensors(fields)
    tensors["transformer.wte.weight"][290:] *= 40  # padded rows that would win every argmax
    path, _ = write_gpt2_dir(tmp_path / "padded", fields, tensors)
    model, tokenizer = load_pretrained(path)
    assert model.config.vocab_size == 320 and tokenizer.vocab_size == 290
    prompt = tokenizer.encode("The")
    unmasked = list(generate_ids(model, prompt, 5, temperature=0))
    assert all(i >= 290 for i in unmasked)  # the test has teeth: without the mask, padding comes out
    for temperature in (0, 1.0, 5.0):
        result = generate(model, tokenizer, "The", 20, temperature=temperature, seed=1)
        assert result.ids and all(i < 290 for i in result.ids)
    top = position_predictions(run_prompt(model, tokenizer, "The"), 3)[-1].top  # the study tools name padded ids
    assert top[0][0] >= 290 and token_label(tokenizer, top[0][0]) == "(no token)"


# ---------------------------------------------------------------- refusals


def test_a_pickle_only_directory_is_refused_without_unpickling(tmp_path):
    marker = tmp_path / "unpickled"

    class Trap:
        def __reduce__(self):
            return (os.mkdir, (str(marker),))  # unpickling this would create `marker`

    import pickle

    path, _ = write_gpt2_dir(tmp_path / "pickled")
    os.remove(path / "model.safetensors")
    (path / "pytorch_model.bin").write_bytes(pickle.dumps(Trap()))
    (path / "training_args.pt").write_bytes(pickle.dumps(Trap()))
    with pytest.raises(ValueError, match=r"pytorch_model.bin, training_args.pt: PyTorch pickle files.*safetensors"):
        load_pretrained(path)
    assert not marker.exists()
    pickle.loads((path / "pytorch_model.bin").read_bytes())  # the trap is real
    assert marker.exists()


@pytest.mark.parametrize(
    "change, match",
    [
        (
            {"model_type": "bert"},
            "model_type is 'bert'; numforge loads 'gpt2', 'llama', 'mistral', 'mixtral', 'qwen2', 'qwen3', "
            "'qwen3_moe', 'olmoe'",
        ),
        ({"scale_attn_weights": False}, "scale_attn_weights is False"),
        ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx is True"),
        ({"add_cross_attention": True}, "add_cross_attention is True"),
        ({"activation_function": "silu"}, "activation_function is 'silu'"),
        ({"n_head": 3}, r"n_embd \(16\) must be divisible by n_head \(3\)"),  # the file's keys
    ],
)
def test_unsupported_config_fields_are_named(tmp_path, change, match):
    path, _ = write_gpt2_dir(tmp_path / "gpt2")
    config = json.loads((path / "config.json").read_text()) | change
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=f"config.json: {match}"):
        load_pretrained(path)


def test_harmless_unknown_fields_are_ignored(tmp_path):
    path, _ = write_gpt2_dir(tmp_path / "gpt2")
    extra = {"task_specific_params": {"text-generation": {"max_length": 50}}, "bos_token_id": 289, "n_ctx": 32}
    (path / "config.json").write_text(json.dumps(json.loads((path / "config.json").read_text()) | extra))
    assert load_pretrained(path)[0].config.num_layers == 2


def test_missing_misshapen_unknown_and_unsupported_tensors_are_named(tmp_path):
    def write(name, tensors):
        return write_gpt2_dir(tmp_path / name, tensors=tensors)[0]

    tensors = gpt2_tensors()
    less = {k: v for k, v in tensors.items() if k != "transformer.h.1.mlp.c_fc.bias"}
    with pytest.raises(ValueError, match=r"missing tensors \['h.1.mlp.c_fc.bias'\]"):
        load_pretrained(write("missing", less))
    bent = tensors | {"transformer.h.0.attn.c_attn.weight": tensors["transformer.h.0.attn.c_attn.weight"].T.copy()}
    with pytest.raises(
        ValueError, match=r"'transformer.h.0.attn.c_attn.weight' has shape \(48, 16\).*needs \(16, 48\)"
    ):
        load_pretrained(write("bent", bent))
    with pytest.raises(ValueError, match="'transformer.h.2.ln_1.weight' is not a parameter of this GPT-2 config"):
        load_pretrained(write("deeper", tensors | {"transformer.h.2.ln_1.weight": np.ones(16, np.float32)}))
    ints = tensors | {"transformer.ln_f.bias": np.zeros(16, np.int32)}
    with pytest.raises(ValueError, match="'transformer.ln_f.bias' has dtype 'I32'"):
        load_pretrained(write("ints", ints))


def test_a_model_too_large_for_the_machine_is_refused_before_any_data_is_read(tmp_path):
    # a crafted directory: headers that claim a 2**40-token table, with no data behind them
    huge = TINY | {"vocab_size": 2**40}
    path, _ = write_gpt2_dir(tmp_path / "huge")
    (path / "config.json").write_text(json.dumps({"model_type": "gpt2", **huge}))
    claimed = {name: ("F32", shape, b"") for name, shape in gpt2_shapes(huge).items()}
    write_raw_safetensors(path / "model.safetensors", claimed)
    with pytest.raises(ValueError, match=r"loading .*huge needs about .* of memory"):
        load_pretrained(path)


def test_a_tokenizer_larger_than_the_model_is_refused(tmp_path):
    path, _ = write_gpt2_dir(tmp_path / "small", TINY | {"vocab_size": 280})
    with pytest.raises(ValueError, match="the tokenizer has ids up to 289, but the model's vocab_size is 280"):
        load_pretrained(path)


def test_without_safetensors_the_message_says_how_to_install(tmp_path, monkeypatch):
    path, _ = write_gpt2_dir(tmp_path / "gpt2")
    for name in ("safetensors", "safetensors.numpy"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails
    with pytest.raises(MissingDependencyError, match=r'pip install -e "\.\[hf\]"'):
        load_pretrained(path)


# ---------------------------------------------------------------- saving


def numforge_model(dtype="float32", **options):
    config = GPTConfig(vocab_size=300, max_seq_len=32, d_model=16, num_heads=2, num_layers=2, **options)
    return GPT(config, seed=3, dtype=dtype)


@pytest.mark.parametrize(
    "options",
    [{}, {"tie_weights": False, "activation": "relu"}, {"gelu_approximate": "none"}, {"activation": "relu2"}],
)
def test_numforge_to_hf_to_numforge_is_bit_identical(tmp_path, options):
    for dtype in ("float32", "float64"):
        model = numforge_model(dtype, **options)
        save_pretrained(model, tiny_tokenizer(), tmp_path / dtype)
        loaded, tokenizer = load_pretrained(tmp_path / dtype, dtype=dtype)
        assert loaded.config == model.config
        for name, array in params_of(model).items():
            assert params_of(loaded)[name].dtype == array.dtype
            np.testing.assert_array_equal(params_of(loaded)[name], array)
        assert tokenizer.to_dict() == tiny_tokenizer().to_dict()
        expected = {"config.json", "model.safetensors", "vocab.json", "merges.txt", "tokenizer.json"}
        expected |= {"tokenizer_config.json", "special_tokens_map.json"}
        assert set(os.listdir(tmp_path / dtype)) == expected
        assert json.loads((tmp_path / dtype / "config.json").read_text())["architectures"] == ["GPT2LMHeadModel"]


@pytest.mark.parametrize(
    "options, name",
    [
        ({"activation": "swiglu"}, "activation='swiglu'"),
        ({"position": "sinusoidal"}, "position='sinusoidal'"),
        ({"use_bias": False}, "use_bias=False"),
        ({"scale_embeddings": True}, "scale_embeddings=True"),
        ({"norm": "rmsnorm"}, "norm='rmsnorm'"),
        ({"position": "rope"}, "position='rope'"),
        ({"num_kv_heads": 1}, "num_kv_heads=1"),
        ({"head_dim": 6}, "head_dim=6"),
        ({"qk_norm": True}, "qk_norm=True"),
        ({"mlp_bias": False}, "mlp_bias=False"),  # mixed biases: use_bias stays on
        ({"use_bias": False, "qkv_bias": True}, "use_bias=False"),
    ],
)
def test_what_gpt2_cannot_express_is_refused_before_writing(tmp_path, options, name):
    with pytest.raises(ValueError, match=f"GPT-2 cannot express {name}"):
        save_pretrained(numforge_model(**options), tiny_tokenizer(), tmp_path / "out")
    assert os.listdir(tmp_path) == []


def test_a_failed_export_leaves_no_directory_behind(tmp_path, monkeypatch):
    from numforge.hf import directory

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(directory, "export_tokenizer_json", fail)  # after config.json and the weights
    with pytest.raises(OSError, match="disk full"):
        save_pretrained(numforge_model(), tiny_tokenizer(), tmp_path / "out")
    assert os.listdir(tmp_path) == []
    (tmp_path / "taken").mkdir()
    with pytest.raises(ValueError, match="taken already exists"):
        save_pretrained(numforge_model(), tiny_tokenizer(), tmp_path / "taken")
