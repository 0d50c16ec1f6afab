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
