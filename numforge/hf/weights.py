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
data. The header is read first and checked against the file by safetensors'
own rules (``check_entries``: offsets inside the data, each span its shape's
bytes, the tensors side by side with no overlap or gap, ``__metadata__`` an
object of strings), so that a damaged file is a ``ValueError`` naming it and
the tensor, and names and shapes are checked before any data is read; F64,
F32 and F16 data are read with the ``safetensors`` package's NumPy API (its
``SafetensorError`` retold as a ``ValueError`` naming the file), and BF16
(which NumPy lacks) as 16-bit words widened into float32's upper half
(bfloat16 is float32 with the low 16 bits cut). A tensor that holds NaN or
infinity once cast is refused by name: no model can run on it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..atomic import file_mode
from ..checks import MissingDependencyError, is_int
from ..files import parse_json

LM_HEAD = "lm_head.weight"  # the one tensor stored without the architecture's prefix
DTYPES = ("F64", "F32", "F16", "BF16")  # what is read; BF16 by hand, the others by safetensors
MAX_HEADER_BYTES = 100 * 2**20
ITEMSIZES = {  # bytes per value of safetensors' whole-byte dtypes, by dtype
    dtype: size
    for size, dtypes in {
        1: "BOOL U8 I8 F8_E5M2 F8_E4M3",
        2: "I16 U16 F16 BF16",
        4: "I32 U32 F32",
        8: "I64 U64 F64",
    }.items()
    for dtype in dtypes.split()
}
FINITE_CHUNK = 2**20  # values checked for NaN and infinity at a time: the check's temporaries stay small
INSTALL_HINT = 'pip install -e ".[hf]"  (or: pip install safetensors)'


class Stored(NamedTuple):
    """Where one numforge parameter lies: the tensors (names without the prefix) whose concatenation along
    their first axis it is (or, ``stacked``, whose stack along a new first axis: one tensor per expert), their
    shapes, and whether that concatenation is transposed in its last two axes (``nn.Linear``'s ``(out, in)``
    against numforge's ``(C_in, C_out)``)."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    transposed: bool = False
    stacked: bool = False


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


def stacked_linear(names: tuple[str, ...], shape: tuple[int, int, int]) -> Stored:
    """Experts' weights ``(E, C_in, C_out)`` stored as ``E`` ``nn.Linear`` weights ``(C_out, C_in)``, one per name."""
    return Stored(names, ((shape[2], shape[1]),) * len(names), transposed=True, stacked=True)


def safetensors_numpy():
    """The ``safetensors.numpy`` module, or a ``MissingDependencyError`` that says how to install it."""
    try:
        import safetensors.numpy
    except ImportError:
        raise MissingDependencyError(f"safetensors files need the safetensors package: {INSTALL_HINT}") from None
    return safetensors.numpy


def read_header(path: Path) -> dict:
    """name -> {"dtype", "shape", "data_offsets"} of a safetensors file, every entry checked against the file
    (``check_entries``); its metadata (an object of strings) dropped."""
    with open(path, "rb") as handle:
        file_size = os.fstat(handle.fileno()).st_size
        size = int.from_bytes(handle.read(8), "little")
        if not 0 < size <= MAX_HEADER_BYTES:
            raise ValueError(f"{path}: not a safetensors file (header length {size})")
        if 8 + size > file_size:
            raise ValueError(f"{path}: truncated: its header says {size} bytes, but the file holds {file_size}")
        header = parse_json(handle.read(size), f"{path}: the safetensors header", expect=dict)
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(value, str) for value in metadata.values()):
        raise ValueError(f"{path}: __metadata__ must be an object of strings, got {metadata!r}"[:300])
    check_entries(path, header, file_size - 8 - size)
    return header


def check_entries(path: Path, header: dict, data_size: int) -> None:
    """Each entry sound (``_check_entry``) within the ``data_size`` bytes after the header; the tensors side by
    side from byte 0 to the end, with no overlap and no gap (safetensors' rules). A ``ValueError`` naming the file
    and the tensor otherwise."""
    spans = sorted(
        (*_check_entry(f"{path}: tensor {name!r}", entry, data_size), name) for name, entry in header.items()
    )
    reached, previous = 0, None
    for start, end, name in spans:
        if start < reached:
            raise ValueError(f"{path}: tensors {previous!r} and {name!r} overlap (bytes {start} to {reached})")
        if start > reached:
            raise ValueError(f"{path}: no tensor holds bytes {reached} to {start} of the data (before {name!r})")
        reached, previous = end, name
    if reached != data_size:
        raise ValueError(
            f"{path}: the tensors end at byte {reached} of the data, but {data_size} bytes follow the header"
        )


def _check_entry(where: str, entry, data_size: int) -> tuple[int, int]:
    """``(start, end)`` of one header entry: a dtype, a shape of counts, ``data_offsets`` ``[start, end]`` inside
    the data that span the shape's values (for the dtypes of ``ITEMSIZES``)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("dtype"), str):
        raise ValueError(f"{where} must be an object with a dtype, a shape and data_offsets, got {entry!r}"[:300])
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    if not isinstance(shape, list) or not all(is_int(n) and n >= 0 for n in shape):
        raise ValueError(f"{where}: shape must be a list of non-negative integers, got {shape!r}"[:300])
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(is_int(n) for n in offsets):
        raise ValueError(f"{where}: data_offsets must be [start, end], two integers, got {offsets!r}"[:300])
    start, end = offsets
    if not 0 <= start <= end:
        raise ValueError(f"{where}: data_offsets {offsets} must have 0 <= start <= end")
    if end > data_size:
        raise ValueError(
            f"{where}: data_offsets {offsets} run past the end of the file, {data_size} bytes after the header "
            "(is it truncated?)"
        )
    dtype = entry["dtype"]
    if dtype in ITEMSIZES and end - start != ITEMSIZES[dtype] * math.prod(shape):
        raise ValueError(
            f"{where}: shape {tuple(shape)} of {dtype} needs {ITEMSIZES[dtype] * math.prod(shape)} bytes, but its "
            f"data_offsets {offsets} span {end - start}"
        )
    return start, end


def holds(headers: dict[Path, dict], layout: Layout, bare: str) -> bool:
    """Whether the files' ``headers`` (``read_header``'s, by file) hold the tensor ``bare`` (with or without the
    prefix)."""
    return any(stored.removeprefix(layout.prefix) == bare for header in headers.values() for stored in header)


def gather(headers: dict[Path, dict], layout: Layout, tied: bool) -> dict[str, tuple[Path, str, dict]]:
    """Stored name (without the prefix) -> (file, name in the file, header entry) for every tensor the layout
    needs, from the files' headers alone (``read_header``'s, by file).

    Names with or without the prefix; buffers and (when tied) ``lm_head.weight`` are skipped. A missing,
    unknown, repeated or misshapen tensor, or an unsupported dtype, is a ``ValueError`` naming it.
    """
    shapes = {name: shape for stored in layout.tensors.values() for name, shape in zip(stored.names, stored.shapes)}
    found = {}
    for path, header in headers.items():
        for stored, entry in header.items():
            bare = stored.removeprefix(layout.prefix)
            if bare.endswith(layout.buffers) or (tied and bare == LM_HEAD):
                continue
            if bare not in shapes:
                raise ValueError(f"{path}: tensor {stored!r} is not a parameter of this {layout.name} config")
            if bare in found:
                raise ValueError(f"{path}: tensor {stored!r} appears twice (also in {found[bare][0]})")
            if entry["dtype"] not in DTYPES:
                raise ValueError(
                    f"{path}: tensor {stored!r} has dtype {entry['dtype']!r}; numforge reads {sorted(DTYPES)}"
                )
            if tuple(entry["shape"]) != tuple(shapes[bare]):
                raise ValueError(
                    f"{path}: tensor {stored!r} has shape {tuple(entry['shape'])}, "
                    f"the config needs {tuple(shapes[bare])}"
                )
            found[bare] = (path, stored, entry)
    missing = [name for name in shapes if name not in found]
    if missing:
        raise ValueError(
            f"{next(iter(headers)).parent}: missing tensors {missing[:5]}{' ...' if len(missing) > 5 else ''}"
        )
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
        if stored.stacked:
            whole = np.stack(parts)  # E x (out, in) -> (E, out, in)
        else:
            whole = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)  # ((H + 2 H_kv) D, C) for q|k|v
        # (..., out, in) -> (..., in, out)
        params[name] = np.ascontiguousarray(np.swapaxes(whole, -1, -2)) if stored.transposed else whole
        del parts, whole
    return params


def _read_tensors(found: dict[str, tuple[Path, str, dict]], dtype) -> dict[str, np.ndarray]:
    safetensors_numpy()  # says how to install safetensors if it is missing
    from safetensors import SafetensorError, safe_open

    arrays = {}
    for path in dict.fromkeys(path for path, _, _ in found.values()):
        with open(path, "rb") as handle:
            data_start = 8 + int.from_bytes(handle.read(8), "little")
        try:
            with safe_open(str(path), framework="numpy") as handle:
                for name, (where, stored, entry) in found.items():
                    if where != path:
                        continue
                    if entry["dtype"] == "BF16":
                        array = _read_bfloat16(path, data_start, stored, entry)
                    else:
                        array = handle.get_tensor(stored)
                    with np.errstate(over="ignore"):  # a value beyond dtype's range: named by check_finite
                        array = array.astype(dtype, copy=False)
                    arrays[name] = check_finite(array, f"{path}: tensor {stored!r}")
        except SafetensorError as error:  # a plain Exception: retold in the file's words
            raise ValueError(f"{path}: safetensors cannot read it: {error}") from None
    return arrays


def _read_bfloat16(path: Path, data_start: int, stored: str, entry: dict) -> np.ndarray:
    """A BF16 tensor as float32: each 16-bit word becomes the upper half of a float32 (exact). Its span is its
    shape's (``check_entries``)."""
    count = math.prod(entry["shape"])
    words = np.fromfile(path, dtype="<u2", count=count, offset=data_start + entry["data_offsets"][0])  # (n,) uint16
    if words.size != count:  # the file shrank since its header was read
        raise ValueError(f"{path}: tensor {stored!r} ends past the end of the file (is it truncated?)")
    return (words.astype(np.uint32) << 16).view(np.float32).reshape(entry["shape"])


def check_finite(array: np.ndarray, where: str) -> np.ndarray:
    """``array`` if every value is finite; a ``ValueError`` saying ``where`` and how many are NaN or infinite (no
    model can run on them; a value beyond float16's range is infinite once cast) otherwise."""
    flat = array.reshape(-1)  # (n,)
    bad = sum(
        chunk.size - int(np.count_nonzero(np.isfinite(chunk)))
        for chunk in (flat[i : i + FINITE_CHUNK] for i in range(0, flat.size, FINITE_CHUNK))
    )
    if bad:
        raise ValueError(f"{where} holds {bad} NaN or infinite values (as {array.dtype}); no model can run on them")
    return array


def hf_tensors(params: dict[str, np.ndarray], layout: Layout) -> dict[str, np.ndarray]:
    """The tensors the architecture's files hold, by their full names, from numforge's ``params``:
    each parameter transposed back and split into its parts (contiguous copies)."""
    tensors = {}
    for name, array in params.items():
        stored = layout.tensors[name]
        whole = np.swapaxes(array, -1, -2) if stored.transposed else array  # (..., in, out) -> (..., out, in)
        if stored.stacked:
            parts = list(whole)  # (E, out, in) -> E x (out, in)
        else:
            bounds = np.cumsum([0] + [shape[0] for shape in stored.shapes])
            parts = [whole[start:stop] for start, stop in zip(bounds, bounds[1:])]
        for part, tensor in zip(stored.names, parts):
            full = part if part == LM_HEAD else layout.prefix + part
            tensors[full] = np.ascontiguousarray(tensor)
    return tensors


def write_tensors(path: Path, params: dict[str, np.ndarray], layout: Layout) -> None:
    """Write ``params`` (numforge names) as the architecture's ``model.safetensors`` at ``path``."""
    safetensors_numpy().save_file(hf_tensors(params, layout), str(path), metadata={"format": "pt"})
    os.chmod(path, file_mode())  # safetensors creates it 0o600; numforge's files follow the umask
