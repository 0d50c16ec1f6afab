"""GPT-2's tensors <-> numforge's parameters: names, shapes, dtypes, safetensors files.

GPT-2's names (``GPT2LMHeadModel`` prefixes all but ``lm_head`` with ``transformer.``)::

    wte.weight (V,C)  wpe.weight (T_max,C)                 token_embedding, position_embedding
    h.{i}.ln_1  h.{i}.attn.c_attn  h.{i}.attn.c_proj       layers.{i}.pre_attn_norm, attn.qkv_proj, attn.out_proj
    h.{i}.ln_2  h.{i}.mlp.c_fc  h.{i}.mlp.c_proj           layers.{i}.pre_mlp_norm, mlp.up_proj, mlp.down_proj
    ln_f  lm_head.weight (V,C)                             final_norm, lm_head.weight (untied only)

GPT-2's ``Conv1D`` stores a weight as ``(in, out)``, as ``y = x W + b`` here
does, so no tensor is transposed. The ``attn.bias`` / ``attn.masked_bias``
buffers of older files (the causal mask) are not parameters and are skipped.

A safetensors file is 8 bytes (little-endian header length), a JSON header
``{name: {"dtype", "shape", "data_offsets": [start, end]}}``, then the raw
data. The header is read first, so that names and shapes are checked before
any data is; F64, F32 and F16 data are read with the ``safetensors``
package's NumPy API, and BF16 (which NumPy lacks) as 16-bit words widened
into float32's upper half (bfloat16 is float32 with the low 16 bits cut).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..checks import MissingDependencyError

LAYER_NAMES = {  # numforge's name inside layers.{i}. -> GPT-2's inside h.{i}.
    "pre_attn_norm": "ln_1",
    "attn.qkv_proj": "attn.c_attn",
    "attn.out_proj": "attn.c_proj",
    "pre_mlp_norm": "ln_2",
    "mlp.up_proj": "mlp.c_fc",
    "mlp.down_proj": "mlp.c_proj",
}
TOP_NAMES = {
    "token_embedding": "wte.weight",
    "position_embedding": "wpe.weight",
    "final_norm.weight": "ln_f.weight",
    "final_norm.bias": "ln_f.bias",
    "lm_head.weight": "lm_head.weight",
}
PREFIX = "transformer."
BUFFERS = (".attn.bias", ".attn.masked_bias")  # the causal mask of older files, not a parameter
DTYPES = ("F64", "F32", "F16", "BF16")  # what is read; BF16 by hand, the others by safetensors
MAX_HEADER_BYTES = 100 * 2**20
INSTALL_HINT = 'pip install -e ".[hf]"  (or: pip install safetensors)'


def safetensors_numpy():
    """The ``safetensors.numpy`` module, or a ``MissingDependencyError`` that says how to install it."""
    try:
        import safetensors.numpy
    except ImportError:
        raise MissingDependencyError(f"safetensors files need the safetensors package: {INSTALL_HINT}") from None
    return safetensors.numpy


def hf_name(name: str) -> str:
    """numforge's parameter name -> GPT-2's (without the ``transformer.`` prefix): ``layers.3.attn.qkv_proj.bias``
    -> ``h.3.attn.c_attn.bias``."""
    if name in TOP_NAMES:
        return TOP_NAMES[name]
    _, i, rest = name.split(".", 2)
    short, kind = rest.rsplit(".", 1)
    return f"h.{i}.{LAYER_NAMES[short]}.{kind}"


def read_header(path: Path) -> dict:
    """name -> {"dtype", "shape", "data_offsets"} of a safetensors file (its metadata dropped)."""
    with open(path, "rb") as handle:
        size = int.from_bytes(handle.read(8), "little")
        if not 0 < size <= MAX_HEADER_BYTES:
            raise ValueError(f"{path}: not a safetensors file (header length {size})")
        try:
            header = json.loads(handle.read(size))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ValueError(f"{path}: not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: not a safetensors file (its header is not a JSON object)")
    header.pop("__metadata__", None)
    return header


def gather(files: list[Path], shapes: dict[str, tuple], tied: bool) -> dict[str, tuple[Path, str, dict]]:
    """numforge name -> (file, stored name, header entry) for every parameter in ``shapes``, from the files' headers.

    Names with or without the ``transformer.`` prefix; buffers and (when tied)
    ``lm_head.weight`` are skipped. A missing, unknown, repeated or misshapen
    tensor, or an unsupported dtype, is a ``ValueError`` naming it.
    """
    ours = {hf_name(name): name for name in shapes}
    found = {}
    for path in files:
        for stored, entry in read_header(path).items():
            bare = stored.removeprefix(PREFIX)
            if bare.endswith(BUFFERS) or (tied and bare == "lm_head.weight"):
                continue
            if bare not in ours:
                raise ValueError(f"{path}: tensor {stored!r} is not a parameter of this GPT-2 config")
            name = ours[bare]
            if name in found:
                raise ValueError(f"{path}: tensor {stored!r} appears twice (also in {found[name][0]})")
            if not isinstance(entry, dict) or entry.get("dtype") not in DTYPES:
                dtype = entry.get("dtype") if isinstance(entry, dict) else entry
                raise ValueError(f"{path}: tensor {stored!r} has dtype {dtype!r}; numforge reads {sorted(DTYPES)}")
            if tuple(entry.get("shape", ())) != tuple(shapes[name]):
                raise ValueError(
                    f"{path}: tensor {stored!r} has shape {tuple(entry.get('shape', ()))}, "
                    f"the config needs {tuple(shapes[name])}"
                )
            found[name] = (path, stored, entry)
    missing = [hf_name(name) for name in shapes if name not in found]
    if missing:
        raise ValueError(f"{files[0].parent}: missing tensors {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    return found


def read_tensors(found: dict[str, tuple[Path, str, dict]], dtype) -> dict[str, np.ndarray]:
    """The data of every tensor ``gather`` found, as NumPy arrays of ``dtype``."""
    safetensors_numpy()  # says how to install safetensors if it is missing
    from safetensors import safe_open

    arrays = {}
    for path in dict.fromkeys(path for path, _, _ in found.values()):
        with open(path, "rb") as handle:
            data_start = 8 + int.from_bytes(handle.read(8), "little")
        with safe_open(str(path), framework="numpy") as handle:
            for name, (where, stored, entry) in found.items():
                if where != path:
                    continue
                if entry["dtype"] == "BF16":
                    array = _read_bfloat16(path, data_start, entry)
                else:
                    array = handle.get_tensor(stored)
                arrays[name] = array.astype(dtype, copy=False)
    return arrays


def _read_bfloat16(path: Path, data_start: int, entry: dict) -> np.ndarray:
    """A BF16 tensor as float32: each 16-bit word becomes the upper half of a float32 (exact)."""
    start, end = entry["data_offsets"]
    count = int(np.prod(entry["shape"], dtype=np.int64))
    if end - start != 2 * count:
        raise ValueError(f"{path}: a BF16 tensor of shape {entry['shape']} must span {2 * count} bytes")
    words = np.fromfile(path, dtype="<u2", count=count, offset=data_start + start)  # (n,) uint16
    return (words.astype(np.uint32) << 16).view(np.float32).reshape(entry["shape"])


def write_tensors(path: Path, params: dict[str, np.ndarray], tied: bool) -> None:
    """Write ``params`` (numforge names) as GPT2LMHeadModel's ``model.safetensors`` at ``path``."""
    tensors = {
        (name if name == "lm_head.weight" else PREFIX + hf_name(name)): np.ascontiguousarray(array)
        for name, array in params.items()
    }
    safetensors_numpy().save_file(tensors, str(path), metadata={"format": "pt"})
