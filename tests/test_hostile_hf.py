"""Hostile and broken Hugging Face directories (issue 37): transformers-style bases, then mutated. Each is one line
from the command naming the file and its own key or tensor, exit status 2, no traceback, nothing written; a head
beside ``tie_word_embeddings`` is read as transformers 5 reads it."""

import json
import re
import shutil
import tracemalloc

import numpy as np
import pytest
from hf_dirs import (
    gpt2_tensors,
    llama_fields,
    llama_shapes,
    tiny_tokenizer,
    write_gpt2_dir,
    write_llama_dir,
    write_raw_safetensors,
)

from numforge import backend, cli
from numforge.hf import load_pretrained
from numforge.tokenizer.hf_dir import load_tokenizer
from numforge.tokenizer.hf_json import MAX_TOKENIZER_BYTES

safetensors_numpy = pytest.importorskip("safetensors.numpy")

EMBED, NORM = "model.embed_tokens.weight", "model.norm.weight"
NUMFORGE_OPTIONS = ("d_model", "num_heads", "num_kv_heads", "num_layers", "max_seq_len", "d_ff", "norm_eps")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A tiny untied Llama directory (config.json, model.safetensors, tokenizer.json) and its tensors."""
    fields = llama_fields("llama")
    return write_llama_dir(tmp_path_factory.mktemp("base") / "llama", fields, tied=False)


def variant(base, tmp_path, config=None, tensors=None):
    """A copy of ``base`` with config.json's fields updated by ``config`` and model.safetensors replaced by ``tensors``
    (name -> array, or a function of the header and the data bytes that edits the header and returns the data)."""
    path = tmp_path / "dir"
    shutil.copytree(base[0], path)
    if config:
        fields = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps(fields | config))
    if isinstance(tensors, dict):
        safetensors_numpy.save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    elif tensors is not None:
        edit_header(path / "model.safetensors", tensors)
    return path


def edit_header(file, edit) -> None:
    data = file.read_bytes()
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    body = edit(header, data[8 + size :])
    text = json.dumps(header).encode()
    file.write_bytes(len(text).to_bytes(8, "little") + text + body)


def refusal(capsys, path, tmp_path) -> str:
    """The one line ``numforge convert`` prints for ``path``; it exits 2 and writes nothing."""
    out = tmp_path / "converted"
    status = cli.main(["convert", str(path), str(out)])
    err = capsys.readouterr().err
    assert (status, err.count("\n"), "Traceback" in err, out.exists()) == (2, 1, False, False), err
    return err


# ---------------------------------------------------------------- 1. config.json: the file's keys


@pytest.mark.parametrize(
    "model_type, change, words",
    [
        ("llama", {"hidden_size": 0}, "hidden_size must be a positive integer, got 0"),
        ("llama", {"num_key_value_heads": 3}, "num_key_value_heads (3) must divide num_attention_heads (4)"),
        ("llama", {"num_key_value_heads": 0}, "num_key_value_heads must be a positive integer or null, got 0"),
        ("llama", {"num_attention_heads": 0}, "num_attention_heads must be a positive integer, got 0"),
        ("llama", {"num_attention_heads": 3, "num_key_value_heads": 1}, "hidden_size (16) must be divisible by num_at"),
        ("llama", {"num_hidden_layers": -1}, "num_hidden_layers must be a positive integer, got -1"),
        ("llama", {"intermediate_size": 2.5}, "intermediate_size must be a positive integer, got 2.5"),
        ("llama", {"rms_norm_eps": 0}, "rms_norm_eps must be a positive finite number, got 0"),
        ("llama", {"max_position_embeddings": "32"}, "max_position_embeddings must be a positive integer, got '32'"),
        ("llama", {"tie_word_embeddings": "yes"}, "tie_word_embeddings must be True or False, got 'yes'"),
        ("llama", {"attention_bias": 1}, "attention_bias must be True or False, got 1"),
        ("mistral", {"sliding_window": "8"}, "sliding_window must be a positive integer or null, got '8'"),
        ("qwen2", {"use_sliding_window": True, "max_window_layers": "1"}, "max_window_layers must be an integer"),
        ("gpt2", {"n_embd": 0}, "n_embd must be a positive integer, got 0"),
        ("gpt2", {"n_inner": 0}, "n_inner must be a positive integer or null, got 0"),
        ("gpt2", {"n_head": 3}, "n_embd (16) must be divisible by n_head (3)"),
        ("gpt2", {"layer_norm_epsilon": -1.0}, "layer_norm_epsilon must be a positive finite number, got -1.0"),
        ("gpt2", {"tie_word_embeddings": None}, "tie_word_embeddings must be True or False, got None"),
    ],
)
def test_a_bad_config_field_is_named_by_its_own_key(tmp_path, capsys, model_type, change, words):
    # before: "config.json: d_model must be a positive integer, got 0" for hidden_size: 0 (numforge's names)
    if model_type == "gpt2":
        path, _ = write_gpt2_dir(tmp_path / "base")
    else:
        path, _ = write_llama_dir(tmp_path / "base", llama_fields(model_type))
    fields = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(fields | change))
    err = refusal(capsys, path, tmp_path)
    assert err.startswith(f"numforge convert: {path / 'config.json'}: {words}"), err
    assert not re.search(rf"\b({'|'.join(NUMFORGE_OPTIONS)})\b", err), err  # none of numforge's own names


# ---------------------------------------------------------------- 2. a head beside tie_word_embeddings


@pytest.mark.parametrize("architecture", ["llama", "gpt2"])
def test_a_different_head_beside_tied_embeddings_is_read_as_transformers_reads_it(tmp_path, capsys, architecture):
    """transformers 5 ties lm_head.weight to the embeddings only when both hold the same values; a different head
    stays its own (before: numforge tied it silently, logits off by up to 22 from transformers')."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if architecture == "gpt2":
        tensors = gpt2_tensors(tied=False)
        path, _ = write_gpt2_dir(tmp_path / "dir", tensors=tensors, tied=True)
    else:
        fields = llama_fields("llama")
        rng = np.random.default_rng(3)
        tensors = {n: rng.normal(0, 0.3, size=s).astype(np.float32) for n, s in llama_shapes(fields, False).items()}
        path, _ = write_llama_dir(tmp_path / "dir", fields, tensors=tensors, tied=True)
    assert json.loads((path / "config.json").read_text())["tie_word_embeddings"] is True
    with pytest.warns(UserWarning, match=r"config\.json: tie_word_embeddings is true, but lm_head\.weight holds other"):
        model, tokenizer = load_pretrained(path)
    assert not model.config.tie_weights
    np.testing.assert_array_equal(backend.to_numpy(model.params["lm_head.weight"]), tensors["lm_head.weight"])
    ids = np.array([tokenizer.encode("the cat sat on the mat and the dog")])
    theirs = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    with torch.no_grad():
        expected = theirs(torch.tensor(ids)).logits.numpy()
    ours = backend.to_numpy(model.logits(backend.asarray(ids)))
    assert np.abs(ours - expected).max() < 1e-4 * np.abs(expected).max()
    capsys.readouterr()
    status = cli.main(["sample", "--checkpoint", str(path), "--prompt", "the", "--max-new-tokens", "2"])
    err = capsys.readouterr().err
    assert status == 0 and "numforge sample: warning: " in err and "Traceback" not in err and "warn(" not in err


def test_a_head_equal_to_tied_embeddings_is_tied(base, tmp_path):
    tensors = dict(base[1])
    tensors["lm_head.weight"] = tensors[EMBED].copy()  # as a .bin conversion saves a tied model: both, the same
    model, _ = load_pretrained(variant(base, tmp_path, {"tie_word_embeddings": True}, tensors))
    assert model.config.tie_weights and "lm_head.weight" not in model.params


# ---------------------------------------------------------------- 3. damaged safetensors files


def overlapping(header, data):
    header[NORM]["data_offsets"] = [0, 64]  # inside embed_tokens
    return data


def negative(header, data):
    header[NORM]["data_offsets"] = [-64, 0]
    return data


def beyond(header, data):
    header[NORM]["data_offsets"] = [len(data) + 64, len(data) + 128]
    return data


def misshapen(header, data):
    header[NORM]["dtype"] = "F16"  # (16,) of F16 is 32 bytes; it spans 64
    return data


def bad_metadata(header, data):
    header["__metadata__"] = {"format": 1}
    return data


def truncated(header, data):
    return data[:-100]


def unknown_dtype(header, data):  # a buffer numforge skips, in a dtype safetensors does not know: safetensors refuses
    header["model.layers.0.self_attn.rotary_emb.inv_freq"] = {"dtype": "F12", "shape": [2], "data_offsets": [0, 8]}
    for name, entry in header.items():
        if name != "__metadata__" and not name.endswith("inv_freq"):
            entry["data_offsets"] = [n + 8 for n in entry["data_offsets"]]
    return bytes(8) + data


PAST_THE_END = (
    r"data_offsets \[\d+, \d+\] run past the end of the file, \d+ bytes after the header \(is it truncated\?\)"
)


@pytest.mark.parametrize(
    "edit, words",
    [
        (overlapping, r"tensors '[\w.]+' and '[\w.]+' overlap \(bytes 0 to 64\)"),
        (negative, r"tensor 'model.norm.weight': data_offsets \[-64, 0\] must have 0 <= start <= end"),
        (beyond, rf"tensor 'model.norm.weight': {PAST_THE_END}"),
        (misshapen, r"tensor 'model.norm.weight': shape \(16,\) of F16 needs 32 bytes, but .* span 64"),
        (bad_metadata, r"__metadata__ must be an object of strings, got \{'format': 1\}"),
        (truncated, rf"tensor '[\w.]+': {PAST_THE_END}"),
        (unknown_dtype, r"safetensors cannot read it: \S"),
    ],
)  # fmt: skip
def test_a_damaged_safetensors_file_names_the_file_and_the_tensor(base, tmp_path, capsys, edit, words):
    # before: safetensors' SafetensorError (a plain Exception) and its traceback
    path = variant(base, tmp_path, tensors=edit)
    err = refusal(capsys, path, tmp_path)
    assert re.match(f"numforge convert: {re.escape(str(path / 'model.safetensors'))}: {words}", err), err


def test_a_truncated_bfloat16_file_names_the_tensor(base, tmp_path, capsys):
    path = variant(base, tmp_path)
    words = {n: ("BF16", a.shape, (a.view(np.uint32) >> 16).astype("<u2").tobytes()) for n, a in base[1].items()}
    write_raw_safetensors(path / "model.safetensors", words)
    assert load_pretrained(path)[0].config.vocab_size == 300  # whole, it loads
    (path / "model.safetensors").write_bytes((path / "model.safetensors").read_bytes()[:-100])
    err = refusal(capsys, path, tmp_path)
    assert re.search(r"model\.safetensors: tensor '[\w.]+': data_offsets \[\d+, \d+\] run past the end", err), err


# ---------------------------------------------------------------- 4. NaN and infinity


@pytest.mark.parametrize(
    "name, value, words",
    [
        (EMBED, np.nan, "holds 1 NaN or infinite values (as float32)"),
        ("lm_head.weight", -np.inf, "holds 1 NaN or infinite values (as float32)"),
        ("model.layers.1.mlp.up_proj.weight", 1e300, "holds 1 NaN or infinite values (as float32)"),
    ],
)
def test_a_tensor_holding_nan_or_infinity_is_refused_by_name(base, tmp_path, capsys, name, value, words):
    # before: it loaded; sampling failed with "Probabilities contain NaN" or printed nothing and exited 0
    tensors = {n: a.copy() for n, a in base[1].items()}
    tensors[name] = tensors[name].astype(np.float64)  # an F64 tensor: 1e300 is finite in the file, not in float32
    tensors[name][3, 2] = value
    path = variant(base, tmp_path, tensors=tensors)
    with pytest.raises(ValueError, match=re.escape(f"model.safetensors: tensor {name!r} {words}")):
        load_pretrained(path)
    if value == 1e300:
        assert load_pretrained(path, dtype="float64")[0].config.vocab_size == 300  # finite as float64: it loads
    assert f"model.safetensors: tensor {name!r} {words}" in refusal(capsys, path, tmp_path)


# ---------------------------------------------------------------- 5, 6. tokenizer.json


def test_a_template_id_outside_the_vocabulary_is_blamed_on_the_post_processor(base, tmp_path, capsys):
    # before: "tokenizer.json (model.vocab): prefix lists 999999, which is not a token id of this tokenizer"
    path = variant(base, tmp_path)
    tokenizer = json.loads((path / "tokenizer.json").read_text())
    tokenizer["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [999999], "tokens": ["<s>"]}},
    }
    (path / "tokenizer.json").write_text(json.dumps(tokenizer))
    words = "tokenizer.json: post_processor TemplateProcessing gives '<s>' the id 999999, which is not a token of"
    assert words in refusal(capsys, path, tmp_path)
    tokenizer["post_processor"]["special_tokens"]["<s>"]["ids"] = [tiny_tokenizer().special_tokens["<|endoftext|>"]]
    (path / "tokenizer.json").write_text(json.dumps(tokenizer))
    assert load_tokenizer(path).bos_id == 289  # an id of the vocabulary: read


def test_a_tokenizer_json_beyond_the_bound_is_refused_unread(base, tmp_path, capsys):
    # before: a 4 GiB file was read whole (and needed twice that): a MemoryError and its traceback
    path = variant(base, tmp_path)
    with open(path / "tokenizer.json", "r+b") as handle:
        handle.truncate(MAX_TOKENIZER_BYTES + 1)  # sparse: nothing is written on disk
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"tokenizer\.json: 134,217,729 bytes, more than the 134,217,728"):
            load_tokenizer(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20  # refused before reading
    assert f"{path / 'tokenizer.json'}: 134,217,729 bytes, more than" in refusal(capsys, path, tmp_path)
