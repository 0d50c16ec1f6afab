"""``load_pretrained`` and ``save_pretrained``: a Hugging Face model directory <-> ``(GPT, BPETokenizer)``.

Loading: config.json -> ``GPTConfig`` (``config.py``: GPT-2, Llama, Mistral, Qwen2, Qwen3); the
tokenizer files -> ``BPETokenizer`` (or ``SentencePieceBPE``) with the file's ids, BOS and end ids; the
safetensors headers are checked against the config (every name, shape, dtype) and the memory needed against
the machine's before any data is read; the data is cast to the requested dtype. The model's vocabulary may be
larger than the tokenizer's (nanoGPT pads 50257 to 50304); ``generate`` never samples the extra ids.

Saving writes everything into a temporary directory beside the target and
renames it into place at the end, so a failed export leaves nothing behind;
a model no architecture can express is refused before anything is written.
A GPT-2 directory gets GPT-2's tokenizer files (vocab.json + merges.txt too);
a Llama-family one tokenizer.json and a generation_config.json with the BOS and end ids.
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from pathlib import Path

import numpy as np

from ..atomic import atomic_directory
from ..backend import asarray, resolve_dtype, to_numpy
from ..files import read_json
from ..model import GPT, POSITIONS, GPTConfig, parameter_shapes
from ..resources import check_fits
from ..tokenizer import EOT, BPETokenizer
from ..tokenizer.hf_dir import CHAT_TEMPLATE_FILE
from ..tokenizer.hf_dir import load_tokenizer as load_tokenizer_path
from ..tokenizer.hf_json import export_tokenizer_json
from ..tokenizer.interop import export_gpt2
from ..tokenizer.spm_bpe import SentencePieceBPE
from .config import config_from_hf, config_to_hf
from .llama import as_exported
from .weights import LM_HEAD, READ_TEMPORARIES, gather, holds, read_header, read_params, write_tensors

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")


def load_pretrained(path, dtype="float32", trust_pattern: bool = False) -> tuple[GPT, BPETokenizer]:
    """The GPT and tokenizer of a Hugging Face model directory, parameters in ``dtype`` on the backend.

    A tokenizer.json that splits text by a regex numforge does not know is
    refused unless ``trust_pattern`` (see ``BPETokenizer.from_dict``).

    Raises ``ValueError`` naming the file and the field or tensor that is
    missing, misshapen, damaged, unsupported or not finite, and ``MissingDependencyError`` (an
    ``ImportError``) when safetensors is not installed.
    """
    path = Path(path)
    hf_config = _config_json(path)
    config, _ = config_from_hf(hf_config, str(path / "config.json"))
    files = weight_files(path)
    tokenizer = load_tokenizer(path, trust_pattern)
    if tokenizer.vocab_size > config.vocab_size:
        raise ValueError(
            f"{path}: the tokenizer has ids up to {tokenizer.vocab_size - 1}, but the model's vocab_size is "
            f"{config.vocab_size}"
        )
    config, arrays = _read_weights(path, hf_config, files, resolve_dtype(dtype))
    model = GPT(config, dtype=dtype, params={name: asarray(array) for name, array in arrays.items()})
    return model, tokenizer


def _read_weights(path: Path, hf_config: dict, files: list[Path], dtype) -> tuple[GPTConfig, dict]:
    """The config and the parameters (NumPy, ``dtype``) of the weight ``files``: the memory needed checked against
    the machine's, then every header, before any data is read.

    ``tie_word_embeddings`` with an ``lm_head.weight`` in the files is read as transformers 5 reads it: tied
    (the head dropped) when the head holds the embeddings' values, else untied, each tensor as the file has it,
    with a warning (``_tie_as_transformers``)."""
    source = str(path / "config.json")
    config, layout = config_from_hf(hf_config, source)
    _check_memory(config, dtype, path)  # from config.json alone
    headers = {file: read_header(file) for file in files}  # each checked against its file's bytes
    head_beside_tied = config.tie_weights and holds(headers, layout, LM_HEAD)
    if head_beside_tied:  # read both, compared below
        config, layout = config_from_hf({**hf_config, "tie_word_embeddings": False}, source)
        _check_memory(config, dtype, path)
    found = gather(headers, layout, config.tie_weights)  # every name and shape checked, no data read yet
    arrays = read_params(found, layout, dtype)
    return _tie_as_transformers(config, arrays, path) if head_beside_tied else (config, arrays)


def _check_memory(config: GPTConfig, dtype, path: Path) -> None:
    """``check_fits`` for reading ``config``'s parameters in ``dtype``: the parameters as read (the model takes
    them as they are), the largest one's temporaries, the position tables."""
    sizes = [math.prod(shape) for shape in parameter_shapes(config).values()]
    tables = sum(math.prod(shape) for shape in POSITIONS[config.position].table_shapes(config).values())
    check_fits(
        dtype.itemsize * sum(sizes) + (READ_TEMPORARIES + 2 * dtype.itemsize) * max(sizes) + 3 * 8 * tables,
        f"loading {path}",
    )


def _tie_as_transformers(config: GPTConfig, arrays: dict, path: Path) -> tuple[GPTConfig, dict]:
    """An untied ``config`` read from a file that says ``tie_word_embeddings``: tied if ``lm_head.weight`` equals
    the embeddings (transformers 5 ties them, ``torch.equal`` in the loaded dtype), else as it is."""
    if np.array_equal(arrays["token_embedding"], arrays[LM_HEAD]):
        del arrays[LM_HEAD]
        return dataclasses.replace(config, tie_weights=True), arrays
    warnings.warn(
        f"{path / 'config.json'}: tie_word_embeddings is true, but {LM_HEAD} holds other values than the embeddings: "
        "loaded untied, each as the files hold it, as transformers 5 loads it (set tie_word_embeddings to false to "
        "silence this)",
        stacklevel=4,
    )
    return config, arrays


def pretrained_config(path) -> GPTConfig:
    """The ``GPTConfig`` of a Hugging Face model directory, from its config.json alone (no weight is read)."""
    path = Path(path)
    return config_from_hf(_config_json(path), str(path / "config.json"))[0]


def _config_json(path: Path) -> dict:
    if not (path / "config.json").is_file():
        raise ValueError(f"{path}: no config.json; expected a Hugging Face model directory")
    return read_json(path / "config.json")


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


def save_pretrained(model: GPT, tokenizer: BPETokenizer, path, chat_template: str | None = None) -> None:
    """Write ``model`` and ``tokenizer`` as a Hugging Face directory at ``path``, which must not exist: GPT-2's
    if GPT-2 can express the model, else the Llama family's member that can (Llama, Qwen2 with q/k/v biases,
    Qwen3 with QK-norm: ``llama.family_of``; a Qwen2 whose tokenizer transformers would rebuild differently is
    written as the Llama it equals: ``llama.as_exported``).

    ``transformers.AutoModelForCausalLM.from_pretrained(path)`` and
    ``AutoTokenizer.from_pretrained(path)`` open it. A model none can express
    (LayerNorm with rotary positions, GELU with RMSNorm, QK-norm after the rotation,
    scaled embeddings, ...) is a ``ValueError`` naming the options, raised before anything is written.
    ``chat_template``: a chat model's Jinja template, written as ``chat_template.jinja`` (as transformers 5 does).
    """
    if not isinstance(model, GPT) or not isinstance(tokenizer, (BPETokenizer, SentencePieceBPE)):
        raise TypeError(
            "save_pretrained needs a GPT and a BPETokenizer or SentencePieceBPE, got "
            f"{type(model).__name__}, {type(tokenizer).__name__}"
        )
    config = model.config
    if tokenizer.vocab_size > config.vocab_size:
        raise ValueError(
            f"the tokenizer has ids up to {tokenizer.vocab_size - 1}, beyond the model's vocab_size {config.vocab_size}"
        )
    ids = _special_ids(tokenizer)
    params = {name: to_numpy(array) for name, array in model.params.items()}
    config, params = as_exported(config, params, tokenizer)
    hf_config, layout = config_to_hf(config, ids)
    hf_config["dtype"] = str(model.dtype)
    gpt2 = hf_config["model_type"] == "gpt2"
    files = _tokenizer_configs(tokenizer, config.max_seq_len, gpt2)
    if not gpt2:  # where generate starts and stops (transformers reads it; numforge too, as eos_ids)
        files["generation_config.json"] = ids
    with atomic_directory(path) as temp:
        (temp / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n", encoding="utf-8")
        write_tensors(temp / SINGLE_FILE, params, layout)
        if gpt2:
            export_gpt2(tokenizer, temp / "vocab.json", temp / "merges.txt")
        export_tokenizer_json(tokenizer, temp / "tokenizer.json")  # a SentencePieceBPE's as read (spm_file)
        for name, data in files.items():
            (temp / name).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        if chat_template is not None:
            (temp / CHAT_TEMPLATE_FILE).write_text(chat_template, encoding="utf-8")


def _special_ids(tokenizer: BPETokenizer) -> dict:
    """``bos_token_id`` and ``eos_token_id`` (one id, or a list): a Hugging Face tokenizer's BOS and end ids, or
    for numforge's own ``<|endoftext|>`` for both, as in GPT-2 (an empty prompt starts from it)."""
    start = tokenizer.bos_id if tokenizer.prompt is not None else tokenizer.special_tokens.get(EOT)
    ends = list(tokenizer.eos_ids)
    ids = {} if start is None else {"bos_token_id": start}
    return ids | ({"eos_token_id": ends[0] if len(ends) == 1 else ends} if ends else {})


def _tokenizer_configs(tokenizer: BPETokenizer, max_seq_len: int, gpt2: bool) -> dict[str, dict]:
    """tokenizer_config.json and special_tokens_map.json: the BOS and first end token by name (GPT-2:
    ``<|endoftext|>`` also the unk token); every special and added token in ``added_tokens_decoder``."""
    named = {**tokenizer.special_tokens, **tokenizer.added_tokens}
    names = {i: name for name, i in named.items()}
    ids = _special_ids(tokenizer)
    end = ids.get("eos_token_id")
    roles = {
        "bos_token": names.get(ids.get("bos_token_id")),
        "eos_token": names.get(end[0] if isinstance(end, list) else end),
    }
    # GPT-2: <|endoftext|> also unknown; else none, which Qwen2Tokenizer would otherwise make <|endoftext|> (a new
    # token where the tokenizer lacks it)
    roles |= {"unk_token": roles["eos_token"]} if gpt2 else {"unk_token": None, "pad_token": None}
    others = [name for name in tokenizer.special_tokens if name not in roles.values()]
    decoder = {
        str(i): {"content": name, "lstrip": False, "normalized": name in tokenizer.normalized_tokens, "rstrip": False}
        | {"single_word": False, "special": name in tokenizer.special_tokens}
        for name, i in sorted(named.items(), key=lambda item: item[1])
    }
    config = {
        "tokenizer_class": "GPT2Tokenizer" if gpt2 else "PreTrainedTokenizerFast",
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
