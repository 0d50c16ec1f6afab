"""``load_pretrained`` and ``save_pretrained``: a Hugging Face GPT-2 directory <-> ``(GPT, BPETokenizer)``.

Loading: config.json -> ``GPTConfig``; the tokenizer files -> ``BPETokenizer``
with the file's ids; the safetensors headers are checked against the config
(every name, shape, dtype) before any data is read; the data is cast to the
requested dtype. The model's vocabulary may be larger than the tokenizer's
(nanoGPT pads 50257 to 50304); ``generate`` never samples the extra ids.

Saving writes everything into a temporary directory beside the target and
renames it into place at the end, so a failed export leaves nothing behind;
a model GPT-2 cannot express is refused before anything is written.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..atomic import atomic_directory
from ..backend import asarray, resolve_dtype, to_numpy
from ..model import GPT, parameter_shapes
from ..resources import check_fits
from ..tokenizer import EOT, BPETokenizer
from ..tokenizer._files import read_json
from ..tokenizer.hf_dir import load_tokenizer as load_tokenizer_path
from ..tokenizer.hf_json import export_tokenizer_json
from ..tokenizer.interop import export_gpt2
from .config import check_expressible, config_from_hf, config_to_hf
from .weights import gather, read_tensors, write_tensors

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")


def load_pretrained(path, dtype="float32", trust_pattern: bool = False) -> tuple[GPT, BPETokenizer]:
    """The GPT and tokenizer of a Hugging Face GPT-2 directory, parameters in ``dtype`` on the backend.

    A tokenizer.json that splits text by a regex numforge does not know is
    refused unless ``trust_pattern`` (see ``BPETokenizer.from_dict``).

    Raises ``ValueError`` naming the file and the field or tensor that is
    missing, misshapen or unsupported, and ``MissingDependencyError`` (an
    ``ImportError``) when safetensors is not installed.
    """
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ValueError(f"{path}: no config.json; expected a Hugging Face model directory")
    config = config_from_hf(read_json(path / "config.json"), str(path / "config.json"))
    files = weight_files(path)
    tokenizer = load_tokenizer(path, trust_pattern)
    if tokenizer.vocab_size > config.vocab_size:
        raise ValueError(
            f"{path}: the tokenizer has ids up to {tokenizer.vocab_size - 1}, but the model's vocab_size is "
            f"{config.vocab_size}"
        )
    shapes = parameter_shapes(config)
    found = gather(files, shapes, config.tie_weights)  # every name and shape checked, no data read yet
    # the arrays read, and the model's own (its float64 initial values are drawn first, then replaced)
    size = sum(math.prod(shape) for shape in shapes.values())
    check_fits((8 + 2 * resolve_dtype(dtype).itemsize) * size, f"loading {path}")
    arrays = read_tensors(found, resolve_dtype(dtype))
    model = GPT(config, seed=0, dtype=dtype)
    model.load_params({name: asarray(array) for name, array in arrays.items()})
    return model, tokenizer


def weight_files(path: Path) -> list[Path]:
    """The safetensors files of ``path``: the shards its index lists, or model.safetensors. Pickles are refused."""
    index = path / INDEX_FILE
    if index.is_file():
        listing = read_json(index)
        weight_map = listing.get("weight_map") if isinstance(listing, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            raise ValueError(f"{index}: expected a 'weight_map' object of tensor name -> file")
        names = list(dict.fromkeys(weight_map.values()))
        for name in names:
            if not isinstance(name, str) or Path(name).name != name or not (path / name).is_file():
                raise ValueError(f"{index}: shard {name!r} is not a file in {path}")
        return [path / name for name in names]
    if (path / SINGLE_FILE).is_file():
        return [path / SINGLE_FILE]
    pickles = sorted(p.name for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise ValueError(
            f"{path} holds its weights only as {', '.join(pickles)}: PyTorch pickle files, which numforge never "
            "opens (unpickling can run arbitrary code). Convert them to safetensors first, for example with "
            "transformers: AutoModelForCausalLM.from_pretrained(DIR).save_pretrained(OUT) writes OUT/model.safetensors"
        )
    raise ValueError(f"{path}: no {SINGLE_FILE} or {INDEX_FILE}")


def load_tokenizer(path: Path, trust_pattern: bool = False) -> BPETokenizer:
    """tokenizer.json when present (it names the special tokens), with what tokenizer_config.json and
    generation_config.json say (``bos_id``, ``eos_ids``, ``encode_prompt``), else vocab.json + merges.txt."""
    return load_tokenizer_path(path, trust_pattern)


def save_pretrained(model: GPT, tokenizer: BPETokenizer, path) -> None:
    """Write ``model`` and ``tokenizer`` as a Hugging Face GPT-2 directory at ``path``, which must not exist.

    ``transformers.AutoModelForCausalLM.from_pretrained(path)`` and
    ``AutoTokenizer.from_pretrained(path)`` open it. A model GPT-2 cannot
    express (SwiGLU, sinusoidal positions, no biases, scaled embeddings) is a
    ``ValueError`` naming the option, raised before anything is written.
    """
    if not isinstance(model, GPT) or not isinstance(tokenizer, BPETokenizer):
        raise TypeError(
            f"save_pretrained needs a GPT and a BPETokenizer, got {type(model).__name__}, {type(tokenizer).__name__}"
        )
    config = model.config
    check_expressible(config)
    if tokenizer.vocab_size > config.vocab_size:
        raise ValueError(
            f"the tokenizer has ids up to {tokenizer.vocab_size - 1}, beyond the model's vocab_size {config.vocab_size}"
        )
    end = tokenizer.special_tokens.get(EOT)
    ids = {} if end is None else {"bos_token_id": end, "eos_token_id": end}
    hf_config = config_to_hf(config, ids) | {"dtype": str(model.dtype)}
    params = {name: to_numpy(array) for name, array in model.params.items()}
    with atomic_directory(path) as temp:
        (temp / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n", encoding="utf-8")
        write_tensors(temp / SINGLE_FILE, params, config.tie_weights)
        export_gpt2(tokenizer, temp / "vocab.json", temp / "merges.txt")
        export_tokenizer_json(tokenizer, temp / "tokenizer.json")
        for name, data in _tokenizer_configs(tokenizer, config.max_seq_len).items():
            (temp / name).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _tokenizer_configs(tokenizer: BPETokenizer, max_seq_len: int) -> dict[str, dict]:
    """tokenizer_config.json and special_tokens_map.json: ``<|endoftext|>`` (if any) is bos, eos and unk, as in
    GPT-2; every special token is marked special."""
    end = EOT if EOT in tokenizer.special_tokens else None
    roles = {"bos_token": end, "eos_token": end, "unk_token": end}
    others = [name for name in tokenizer.special_tokens if name != EOT]
    decoder = {
        str(i): {"content": name, "lstrip": False, "normalized": False, "rstrip": False}
        | {"single_word": False, "special": True}
        for name, i in sorted(tokenizer.special_tokens.items(), key=lambda item: item[1])
    }
    config = {
        "tokenizer_class": "GPT2Tokenizer",
        "model_max_length": max_seq_len,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": others,
        **roles,
    }
    special_map = {k: v for k, v in roles.items() if v is not None} | (
        {"additional_special_tokens": others} if others else {}
    )
    return {"tokenizer_config.json": config, "special_tokens_map.json": special_map}
