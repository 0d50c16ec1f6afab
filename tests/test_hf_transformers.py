"""numforge against transformers and tokenizers on tiny random GPT-2 directories (skipped without them).

Every directory here is saved by ``transformers`` itself (``GPT2LMHeadModel(config).save_pretrained``),
so the files are exactly what a user has on disk, only small.
"""

import numpy as np
import pytest
from hf_dirs import DOCS, tiny_tokenizer

from numforge import backend
from numforge.generate import generate_ids
from numforge.hf import load_pretrained, save_pretrained
from numforge.hf.gpt2 import MLP_INPUTS
from numforge.model import GPT, GPTConfig
from numforge.model.config import activation_fields
from numforge.ops.activations import ACTIVATIONS
from numforge.tokenizer.interop import export_gpt2

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

BASE = dict(vocab_size=300, n_positions=48, n_embd=32, n_layer=2, n_head=4, initializer_range=0.3)
NASTY = [
    "Hello world's  2 cats 🙂 世界\r\n\tend",
    "👩\u200d👩\u200d👧 e\u0301 ﬁ \x00\x1b \u200b",
    "12345678901234567890 3.14159 '''s 'll",
    "   indented\n\n\n\tcode(x) -> y  ",
    "<|endoftext|> as text, twice<|endoftext|>",
    DOCS[40_000:42_000],
]


def save_hf(path, dtype=torch.float32, model_class=None, max_shard_size=None, **fields):
    """A random GPT-2 saved by transformers (seed 0), with numforge's tiny tokenizer's vocab.json + merges.txt."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(**(BASE | fields))
    model = (model_class or transformers.GPT2LMHeadModel)(config).eval().to(dtype)
    options = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    model.save_pretrained(path, **options)
    export_gpt2(tiny_tokenizer(), path / "vocab.json", path / "merges.txt")
    return path


def hf_logits(path, ids, dtype):
    model = transformers.GPT2LMHeadModel.from_pretrained(path).eval().to(dtype)
    with torch.no_grad():
        return model(torch.tensor(ids)).logits.numpy()


def ids_of(tokenizer, text: str = DOCS[1000:1400], length: int = 40):
    return np.array([tokenizer.encode(text)[:length]])


CONFIGS = {
    "tied gelu_new": {},
    "untied": {"tie_word_embeddings": False},
    "n_inner 40": {"n_inner": 40},
    "gelu (exact)": {"activation_function": "gelu"},
    "gelu_pytorch_tanh": {"activation_function": "gelu_pytorch_tanh"},
    "gelu_fast": {"activation_function": "gelu_fast"},
    "relu": {"activation_function": "relu"},
    "relu2": {"activation_function": "relu2"},
    "layer_norm_epsilon 1e-3": {"layer_norm_epsilon": 1e-3},
}


@pytest.mark.parametrize("fields", CONFIGS.values(), ids=CONFIGS.keys())
def test_logits_equal_transformers(tmp_path, fields):
    path = save_hf(tmp_path / "gpt2", **fields)
    model64, tokenizer = load_pretrained(path, dtype="float64")
    ids = ids_of(tokenizer)
    theirs64 = hf_logits(path, ids, torch.float64)
    assert np.abs(backend.to_numpy(model64.logits(backend.asarray(ids))) - theirs64).max() < 1e-10
    model32, _ = load_pretrained(path)
    ours32 = backend.to_numpy(model32.logits(backend.asarray(ids)))
    assert ours32.dtype == np.float32
    np.testing.assert_allclose(ours32, hf_logits(path, ids, torch.float32), rtol=0, atol=2e-5 * np.abs(theirs64).max())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_half_precision_files_load_the_same_numbers(tmp_path, dtype):
    path = save_hf(tmp_path / "half", dtype=dtype)
    model, tokenizer = load_pretrained(path, dtype="float64")
    ids = ids_of(tokenizer)
    theirs = hf_logits(path, ids, torch.float64)  # the half-precision weights widened by torch
    assert np.abs(backend.to_numpy(model.logits(backend.asarray(ids))) - theirs).max() < 1e-10


def test_sharded_and_unprefixed_directories(tmp_path):
    sharded = save_hf(tmp_path / "sharded", max_shard_size="40KB")
    assert (sharded / "model.safetensors.index.json").is_file() and not (sharded / "model.safetensors").exists()
    model, tokenizer = load_pretrained(sharded, dtype="float64")
    ids = ids_of(tokenizer)
    assert (
        np.abs(backend.to_numpy(model.logits(backend.asarray(ids))) - hf_logits(sharded, ids, torch.float64)).max()
        < 1e-10
    )
    # GPT2Model (no LM head) saves its tensors without the "transformer." prefix
    bare = save_hf(tmp_path / "bare", model_class=transformers.GPT2Model)
    from safetensors import safe_open

    with safe_open(str(bare / "model.safetensors"), framework="numpy") as handle:
        assert "wte.weight" in handle.keys() and "transformer.wte.weight" not in handle.keys()
    model_bare, _ = load_pretrained(bare, dtype="float64")
    for name, array in model_bare.params.items():
        np.testing.assert_array_equal(backend.to_numpy(array), backend.to_numpy(model.params[name]))


def test_greedy_generation_equals_transformers(tmp_path):
    path = save_hf(tmp_path / "gpt2")
    model, tokenizer = load_pretrained(path)
    prompt = tokenizer.encode("The standard function")
    ours = list(generate_ids(model, prompt, 30, temperature=0))
    hf = transformers.GPT2LMHeadModel.from_pretrained(path).eval()
    with torch.no_grad():
        out = hf.generate(
            torch.tensor([prompt]), max_new_tokens=30, min_new_tokens=30, do_sample=False,
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long), pad_token_id=0,
        )  # fmt: skip
    assert ours == out[0, len(prompt) :].tolist()
    assert len(set(ours)) > 3  # not a degenerate repetition


def test_numforge_sample_prints_what_transformers_greedy_generate_gives(tmp_path, capsys):
    from numforge import cli

    path = save_hf(tmp_path / "gpt2", vocab_size=290)  # no padding: transformers may pick any id
    args = ["sample", "--checkpoint", str(path), "--prompt", "The", "--max-new-tokens", "20", "--temperature", "0"]
    assert cli.main(args) == 0
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    prompt = hf_tokenizer("The", return_tensors="pt")
    with torch.no_grad():
        out = (
            transformers.GPT2LMHeadModel.from_pretrained(path)
            .eval()
            .generate(**prompt, max_new_tokens=20, min_new_tokens=20, do_sample=False, pad_token_id=0)
        )
    assert capsys.readouterr().out == hf_tokenizer.decode(out[0]) + "\n"


def test_hf_to_numforge_to_hf_keeps_every_tensor(tmp_path):
    from safetensors.numpy import load_file

    for fields in ({}, {"tie_word_embeddings": False}):
        name = "untied" if fields else "tied"
        path = save_hf(tmp_path / name, **fields)
        model, tokenizer = load_pretrained(path)
        save_pretrained(model, tokenizer, tmp_path / f"{name}-again")
        before, after = (
            load_file(str(path / "model.safetensors")),
            load_file(str(tmp_path / f"{name}-again/model.safetensors")),
        )
        assert set(before) == set(after)
        for key, array in before.items():
            assert after[key].dtype == array.dtype and after[key].tobytes() == array.tobytes(), key


# every activation a GPT-2 MLP can hold, in each form transformers has a name for: "gelu tanh", "gelu none", "relu"
EXPORTED_ACTIVATIONS = {
    " ".join((name, *options.values())): {"activation": name, **activation_fields(options)}
    for name, activation in ACTIVATIONS.items()
    if activation.inputs == MLP_INPUTS
    for options in activation.hf_names.values()
}


@pytest.mark.parametrize("activation", EXPORTED_ACTIVATIONS.values(), ids=EXPORTED_ACTIVATIONS.keys())
def test_transformers_opens_a_numforge_export(tmp_path, activation):
    config = GPTConfig(
        vocab_size=300, max_seq_len=48, d_model=32, num_heads=4, num_layers=2, tie_weights=False, **activation
    )
    model, tokenizer = GPT(config, seed=5), tiny_tokenizer()
    save_pretrained(model, tokenizer, tmp_path / "export")
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "export").eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "export")
    for text in NASTY:
        assert hf_tokenizer(text)["input_ids"] == tokenizer.encode(text, allowed_special="all"), text
    ids = ids_of(tokenizer)
    with torch.no_grad():
        theirs = hf_model(torch.tensor(ids)).logits.numpy()
    np.testing.assert_allclose(backend.to_numpy(model.logits(backend.asarray(ids))), theirs, rtol=0, atol=1e-5)


# ---------------------------------------------------------------- tokenizers, id for id


def test_special_tokens_last_encode_as_hf_tokenizers(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from numforge.tokenizer.hf_json import export_tokenizer_json, load_tokenizer_json

    tok = tiny_tokenizer()  # <|endoftext|> last, as GPT-2
    export_tokenizer_json(tok, tmp_path / "tokenizer.json")
    theirs = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    ours = load_tokenizer_json(tmp_path / "tokenizer.json")
    for text in NASTY:
        ids = ours.encode(text, allowed_special="all")
        assert ids == theirs.encode(text).ids, text
        assert ours.decode(ids) == text


def test_special_tokens_first_encode_as_hf_tokenizers(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from numforge.tokenizer.hf_json import load_tokenizer_json

    trained = tokenizers.Tokenizer(tokenizers.models.BPE())
    trained.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    trained.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<s>", "<pad>", "</s>", "<|endoftext|>"], show_progress=False,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    trained.train_from_iterator([DOCS[:60_000]], trainer=trainer)
    trained.save(str(tmp_path / "tokenizer.json"))
    ours = load_tokenizer_json(tmp_path / "tokenizer.json")
    assert ours.special_tokens == {"<s>": 0, "<pad>": 1, "</s>": 2, "<|endoftext|>": 3}
    assert min(ours.byte_ids) == 4
    for text in NASTY + ["<s>a</s><pad>"]:
        assert ours.encode(text, allowed_special="all") == trained.encode(text).ids, text
