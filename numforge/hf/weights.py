"""Hugging Face tensors <-> numforge's parameters: where each parameter lies, safetensors files in and out.

Each architecture (``gpt2.py``, ``llama.py``) says where every numforge parameter lies in its
files: a ``Stored`` of one tensor or of several side by side. GPT-2 stores ``attn.c_attn`` as one
``(C, 3C)`` tensor, as numforge does; Llama stores ``q_proj``, ``k_proj``, ``v_proj`` apart, each
as ``nn.Linear``'s ``(out, in)``, so numforge's fused ``(C, (H + 2 H_kv) D)`` ``attn.qkv_proj.weight``
is their concatenation along ``out``, transposed::

    q_proj (H D, C), k_proj (H_kv D, C), v_proj (H_kv D, C)  --concatenate-->  ((H + 2 H_kv) D, C)
    --transpose-->  (C, (H + 2 H_kv) D)

Writing splits and transposes back, so both ways are exact (no arithmetic, only copies).

A safetensors file is 8 bytes (little-endian header length), a JSON header
``{name: {"dtype", "shape", "data_offsets": [start, end]}}``, then the raw
data. The header is read first, so that names and shapes are checked before
any data is; F64, F32 and F16 data are read with the ``safetensors``
package's NumPy API, and BF16 (which NumPy lacks) as 16-bit words widened
into float32's upper half (bfloat16 is float32 with the low 16 bits cut).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..atomic import file_mode
from ..checks import MissingDependencyError

LM_HEAD = "lm_head.weight"  # the one tensor stored without the architecture's prefix
DTYPES = ("F64", "F32", "F16", "BF16")  # what is read; BF16 by hand, the others by safetensors
MAX_HEADER_BYTES = 100 * 2**20
INSTALL_HINT = 'pip install -e ".[hf]"  (or: pip install safetensors)'


class Stored(NamedTuple):
    """Where one numforge parameter lies: the tensors (names without the prefix) whose concatenation along
    their first axis it is, their shapes, and whether that concatenation is transposed (``nn.Linear``'s
    ``(out, in)`` against numforge's ``(C_in, C_out)``)."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    transposed: bool = False


class Layout(NamedTuple):
    """An architecture's files: ``tensors`` (numforge name -> ``Stored``), the ``prefix`` of every
    tensor but ``lm_head.weight``, the suffixes of stored ``buffers`` that are not parameters, its ``name``."""

    name: str
    tensors: dict[str, Stored]
    prefix: str
    buffers: tuple[str, ...] = ()


def linear(names: tuple[str, ...], shape: tuple[int, ...], widths: tuple[int, ...] | None = None) -> Stored:
    """An ``nn.Linear`` weight ``(C_in, C_out)`` (or bias ``(C_out,)``) stored as ``names``, their output
    widths ``widths`` (default: one tensor of the whole width): ``(width, C_in)`` weights, ``(width,)`` biases."""
    widths = (shape[-1],) if widths is None else widths
    if len(shape) == 1:
        return Stored(names, tuple((w,) for w in widths))
    return Stored(names, tuple((w, shape[0]) for w in widths), transposed=True)


def safetensors_numpy():
    """The ``safetensors.numpy`` module, or a ``MissingDependencyError`` that says how to install it."""
    try:
        import safetensors.numpy
    except ImportError:
        raise MissingDependencyError(f"safetensors files need the safetensors package: {INSTALL_HINT}") from None
    return safetensors.numpy


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


def gather(files: list[Path], layout: Layout, tied: bool) -> dict[str, tuple[Path, str, dict]]:
    """Stored name (without the prefix) -> (file, name in the file, header entry) for every tensor the layout
    needs, from the files' headers alone.

    Names with or without the prefix; buffers and (when tied) ``lm_head.weight`` are skipped. A missing,
    unknown, repeated or misshapen tensor, or an unsupported dtype, is a ``ValueError`` naming it.
    """
    shapes = {name: shape for stored in layout.tensors.values() for name, shape in zip(stored.names, stored.shapes)}
    found = {}
    for path in files:
        for stored, entry in read_header(path).items():
            bare = stored.removeprefix(layout.prefix)
            if bare.endswith(layout.buffers) or (tied and bare == LM_HEAD):
                continue
            if bare not in shapes:
                raise ValueError(f"{path}: tensor {stored!r} is not a parameter of this {layout.name} config")
            if bare in found:
                raise ValueError(f"{path}: tensor {stored!r} appears twice (also in {found[bare][0]})")
            if not isinstance(entry, dict) or entry.get("dtype") not in DTYPES:
                dtype = entry.get("dtype") if isinstance(entry, dict) else entry
                raise ValueError(f"{path}: tensor {stored!r} has dtype {dtype!r}; numforge reads {sorted(DTYPES)}")
            if tuple(entry.get("shape", ())) != tuple(shapes[bare]):
                raise ValueError(
                    f"{path}: tensor {stored!r} has shape {tuple(entry.get('shape', ()))}, "
                    f"the config needs {tuple(shapes[bare])}"
                )
            found[bare] = (path, stored, entry)
    missing = [name for name in shapes if name not in found]
    if missing:
        raise ValueError(f"{files[0].parent}: missing tensors {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    return found


READ_TEMPORARIES = 4  # bytes per value of the tensor being read, beside 2 of numforge's dtype: BF16's uint32
# words (or a float32 file's values cast to float64), then its (out, in) -> (in, out) copy or q|k|v concatenation


def read_params(found: dict[str, tuple[Path, str, dict]], layout: Layout, dtype) -> dict[str, np.ndarray]:
    """numforge name -> C-ordered NumPy array of ``dtype``: the tensors ``gather`` found, read, cast and assembled.

    Each tensor read is dropped as soon as its parameter is assembled, so the peak is the parameters plus the
    largest one's temporaries (``READ_TEMPORARIES``), never two copies of the model.
    """
    tensors = _read_tensors(found, dtype)
    params = {}
    for name, stored in layout.tensors.items():
        parts = [tensors.pop(part) for part in stored.names]
        whole = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)  # ((H + 2 H_kv) D, C) for q|k|v
        params[name] = np.ascontiguousarray(whole.T) if stored.transposed else whole  # (out, in) -> (in, out)
        del parts, whole
    return params


def _read_tensors(found: dict[str, tuple[Path, str, dict]], dtype) -> dict[str, np.ndarray]:
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


def hf_tensors(params: dict[str, np.ndarray], layout: Layout) -> dict[str, np.ndarray]:
    """The tensors the architecture's files hold, by their full names, from numforge's ``params``:
    each parameter transposed back and split into its parts (contiguous copies)."""
    tensors = {}
    for name, array in params.items():
        stored = layout.tensors[name]
        whole = array.T if stored.transposed else array  # (in, out) -> (out, in)
        bounds = np.cumsum([0] + [shape[0] for shape in stored.shapes])
        for part, start, stop in zip(stored.names, bounds, bounds[1:]):
            full = part if part == LM_HEAD else layout.prefix + part
            tensors[full] = np.ascontiguousarray(whole[start:stop])
    return tensors


def write_tensors(path: Path, params: dict[str, np.ndarray], layout: Layout) -> None:
    """Write ``params`` (numforge names) as the architecture's ``model.safetensors`` at ``path``."""
    safetensors_numpy().save_file(hf_tensors(params, layout), str(path), metadata={"format": "pt"})
    os.chmod(path, file_mode())  # safetensors creates it 0o600; numforge's files follow the umask
