"""Tiny Hugging Face GPT-2 directories for the tests, written with safetensors directly (no transformers).

The tensor names and shapes below are GPT-2's own, written out here by hand,
not taken from numforge's mapping, so that a test of the mapping compares
against something it did not produce.
"""

import json
from functools import lru_cache
from pydoc_data.topics import topics

import numpy as np

from numforge.tokenizer import BPETokenizer
from numforge.tokenizer.interop import export_gpt2

DOCS = "".join(topics[key] for key in sorted(topics))
TINY = {"vocab_size": 300, "n_positions": 32, "n_embd": 16, "n_head": 2, "n_layer": 2}


@lru_cache(maxsize=4)
def tiny_tokenizer(vocab_size: int = 290) -> BPETokenizer:
    """A byte-level BPE trained on Python's docs: bytes 0..255, merges, <|endoftext|> last."""
    return BPETokenizer.train(DOCS[:20_000], vocab_size)


def gpt2_shapes(fields: dict, tied: bool = True) -> dict[str, tuple]:
    """Every tensor of GPT2LMHeadModel's model.safetensors, by GPT-2's name, and its shape."""
    V, T, C = fields["vocab_size"], fields["n_positions"], fields["n_embd"]
    F = fields.get("n_inner") or 4 * C
    shapes = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (T, C)}
    for i in range(fields["n_layer"]):
        h = f"transformer.h.{i}."
        shapes |= {h + "ln_1.weight": (C,), h + "ln_1.bias": (C,)}
        shapes |= {h + "attn.c_attn.weight": (C, 3 * C), h + "attn.c_attn.bias": (3 * C,)}
        shapes |= {h + "attn.c_proj.weight": (C, C), h + "attn.c_proj.bias": (C,)}
        shapes |= {h + "ln_2.weight": (C,), h + "ln_2.bias": (C,)}
        shapes |= {h + "mlp.c_fc.weight": (C, F), h + "mlp.c_fc.bias": (F,)}
        shapes |= {h + "mlp.c_proj.weight": (F, C), h + "mlp.c_proj.bias": (C,)}
    shapes |= {"transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)}
    if not tied:
        shapes["lm_head.weight"] = (V, C)
    return shapes


def gpt2_tensors(fields: dict = TINY, tied: bool = True, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 tensors (std 0.3: activations well inside GELU's curve) for every GPT-2 name."""
    rng = np.random.default_rng(seed)
    return {
        name: rng.normal(0.0, 0.3, size=shape).astype(np.float32) for name, shape in gpt2_shapes(fields, tied).items()
    }


def write_gpt2_dir(path, fields: dict = TINY, tensors=None, tokenizer=None, tied: bool = True):
    """A directory with config.json, model.safetensors and vocab.json + merges.txt; returns (path, tensors)."""
    from safetensors.numpy import save_file

    tensors = gpt2_tensors(fields, tied) if tensors is None else tensors
    path.mkdir(parents=True)
    config = {"model_type": "gpt2", "tie_word_embeddings": tied, "resid_pdrop": 0.1, **fields}
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    export_gpt2(tokenizer or tiny_tokenizer(), path / "vocab.json", path / "merges.txt")
    return path, tensors


def write_raw_safetensors(path, tensors: dict[str, tuple[str, tuple, bytes]]) -> None:
    """A safetensors file by hand (name -> (dtype code, shape, raw little-endian bytes)): for BF16, which
    NumPy cannot hold."""
    header, offset = {}, 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as handle:
        handle.write(len(text).to_bytes(8, "little") + text + b"".join(t[2] for t in tensors.values()))


# ---------------------------------------------------------------- the Llama family, by hand

LLAMA_TINY = {
    "vocab_size": 300, "max_position_embeddings": 32, "hidden_size": 16, "intermediate_size": 40,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5,
}  # fmt: skip
# what each model_type adds over LLAMA_TINY: Qwen2's q/k/v biases, Qwen3's q/k norms and its own head width
FAMILY_FIELDS = {
    "llama": {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
    "mistral": {"sliding_window": None, "rope_theta": 1e6},  # an older file: rope_theta beside, no rope_parameters
    "qwen2": {"use_sliding_window": False, "sliding_window": 8},
    "qwen3": {"head_dim": 6},
}


def llama_shapes(fields: dict, tied: bool = True) -> dict[str, tuple]:
    """Every tensor of the family's *ForCausalLM model.safetensors, by its name (nn.Linear's (out, in)), and its
    shape; ``fields`` holds model_type: Qwen2 has q/k/v biases, Qwen3 q_norm and k_norm."""
    V, C, F = fields["vocab_size"], fields["hidden_size"], fields["intermediate_size"]
    H, H_kv = fields["num_attention_heads"], fields["num_key_value_heads"]
    D = fields.get("head_dim") or C // H
    shapes = {"model.embed_tokens.weight": (V, C)}
    for i in range(fields["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes |= {p + "input_layernorm.weight": (C,), p + "post_attention_layernorm.weight": (C,)}
        shapes |= {p + "self_attn.q_proj.weight": (H * D, C), p + "self_attn.k_proj.weight": (H_kv * D, C)}
        shapes |= {p + "self_attn.v_proj.weight": (H_kv * D, C), p + "self_attn.o_proj.weight": (C, H * D)}
        if fields["model_type"] == "qwen2":
            shapes |= {p + "self_attn.q_proj.bias": (H * D,), p + "self_attn.k_proj.bias": (H_kv * D,)}
            shapes |= {p + "self_attn.v_proj.bias": (H_kv * D,)}
        if fields["model_type"] == "qwen3":
            shapes |= {p + "self_attn.q_norm.weight": (D,), p + "self_attn.k_norm.weight": (D,)}
        shapes |= {
            p + "mlp.gate_proj.weight": (F, C),
            p + "mlp.up_proj.weight": (F, C),
            p + "mlp.down_proj.weight": (C, F),
        }
    shapes["model.norm.weight"] = (C,)
    if not tied:
        shapes["lm_head.weight"] = (V, C)
    return shapes


def llama_fields(model_type: str = "llama", **changes) -> dict:
    return {"model_type": model_type, **LLAMA_TINY, **FAMILY_FIELDS[model_type], **changes}


def write_llama_dir(path, fields: dict, tensors=None, tokenizer=None, tied: bool = True):
    """A Llama-family directory (config.json, model.safetensors, tokenizer.json of numforge's tiny tokenizer);
    random float32 tensors (std 0.3) unless given; returns (path, tensors)."""
    from safetensors.numpy import save_file

    from numforge.tokenizer.hf_json import export_tokenizer_json

    if tensors is None:
        rng = np.random.default_rng(0)
        tensors = {n: rng.normal(0.0, 0.3, size=s).astype(np.float32) for n, s in llama_shapes(fields, tied).items()}
    path.mkdir(parents=True)
    config = {"tie_word_embeddings": tied, "eos_token_id": 289, "hidden_act": "silu", **fields}
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    export_tokenizer_json(tokenizer or tiny_tokenizer(), path / "tokenizer.json")
    return path, tensors
