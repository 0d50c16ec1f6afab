"""Checkpoints: atomic, pickle-free save and load of everything a run needs to continue.

A run directory holds any number of complete checkpoints and one pointer::

    RUN/
      LATEST                  text file: the name of the newest complete checkpoint
      ckpt-00000040/
        params.npz            model parameters, keys = parameter names
        optimizer.npz         AdamW moments, keys "m/<name>" and "v/<name>"
        optimizer.json        AdamW step count and hyperparameters
        config.json           GPTConfig.to_dict()
        tokenizer.json        the tokenizer's to_dict() (BPETokenizer, or SentencePieceBPE: version 4)
        state.json            training state: step, batch generator state, settings
        checksums.json        the SHA-256 of each file above

Why a crash cannot lose the previous checkpoint: a new checkpoint is written
into a hidden temporary directory, renamed into place when complete, and only
then is ``LATEST`` replaced (``os.replace`` of one small file, atomic on POSIX
and Windows). Until that last step ``LATEST`` names the previous checkpoint,
which is untouched; older checkpoints are deleted only after the switch, and
renamed away first, so no directory named like a checkpoint is ever half
written or half removed. A process killed outright leaves at most a hidden
``.ckpt-*.tmp``, which nothing reads and the next run removes
(``atomic.remove_stale_temporaries``).

Why a reader of a run that is training now neither waits nor fails, however
slow it is: it opens every file of the checkpoint ``LATEST`` names, then reads
through those open files, which the trainer removing that checkpoint
meanwhile does not change (a file removed while open is still read whole).
If the checkpoint is removed before its files are all open, ``LATEST`` names a
newer one by then, and the reader opens that one (``load_checkpoint``).

Why loading cannot run code: arrays are read with ``numpy.load(...,
allow_pickle=False)`` and everything else is JSON.

Why a damaged checkpoint is never loaded as if it were whole: ``checksums.json``
records each file's SHA-256 when it is written, and loading compares them
first, so a truncated file, a flipped bit or a file swapped in from another
run is refused by name (a checkpoint written before checksums existed has no
``checksums.json`` and is read without that comparison). Why a crafted checkpoint (checksums that match) still
gives one clear error: every file is
read through one reader that turns any failure into a ``ValueError`` naming
the file and what is wrong with it; the arrays' ``.npy`` headers are read
first (without the data), checked against each other, against the zip
member's size and against the machine's memory before a byte of data is
loaded; and ``restore_model`` compares ``config.json`` with those shapes
before it builds a model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import re
import zipfile
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import numpy as np

from .atomic import atomic_directory, remove_directory, write_text_atomic
from .backend import asarray, resolve_dtype, to_numpy
from .checks import check_int_value, describe_error
from .files import parse_json
from .hf import load_pretrained, pretrained_config
from .model import GPT, POSITIONS, GPTConfig, parameter_shapes
from .model.lora import LoraConfig
from .resources import DISK_FULL, check_fits
from .tokenizer import BPETokenizer, tokenizer_from_dict

LATEST = "LATEST"
PREFIX = "ckpt-"
_NAME = re.compile(rf"{PREFIX}[0-9]{{8}}(-[0-9]+)?")  # the names save_checkpoint gives
FILES = ("params.npz", "optimizer.npz", "optimizer.json", "config.json", "tokenizer.json", "state.json")
CHECKSUMS = "checksums.json"  # {file name: SHA-256 hex digest} of every name in FILES


def _json_text(data) -> str:
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


class Checkpoint(NamedTuple):
    """One loaded checkpoint; arrays are NumPy (move them with ``backend.asarray``)."""

    path: Path
    params: dict[str, np.ndarray]
    optimizer_state: dict[str, Any]  # {"step", "hyper", "m": {name: arr}, "v": {name: arr}}
    config: dict[str, Any]
    tokenizer: dict[str, Any]
    state: dict[str, Any]


# ---------------------------------------------------------------- atomic files


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """Write ``data`` as indented JSON to ``path`` atomically."""
    write_text_atomic(path, _json_text(data))


class CheckpointFileError(ValueError):
    """A checkpoint file that cannot be read or does not hold what it must; the message names the file."""


def _reason(err: BaseException) -> str:
    if isinstance(err, UnicodeDecodeError):
        return f"not UTF-8 text ({err.reason} at byte {err.start})"
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return str(err) or type(err).__name__


# ---------------------------------------------------------------- save


def _save_arrays(path: Path, arrays: dict[str, Any]) -> None:
    with open(path, "wb") as f:
        np.savez(f, **{name: to_numpy(a) for name, a in arrays.items()})


def _write_checkpoint_files(directory: Path, params, optimizer_state, config, tokenizer, state) -> None:
    _save_arrays(directory / "params.npz", params)
    moments = {f"m/{k}": a for k, a in optimizer_state["m"].items()}
    moments.update({f"v/{k}": a for k, a in optimizer_state["v"].items()})
    _save_arrays(directory / "optimizer.npz", moments)
    rest = {k: v for k, v in optimizer_state.items() if k not in ("m", "v")}
    for name, data in (("optimizer", rest), ("config", config), ("tokenizer", tokenizer), ("state", state)):
        (directory / f"{name}.json").write_text(_json_text(data), encoding="utf-8")
    (directory / CHECKSUMS).write_text(_json_text({name: file_sha256(directory / name) for name in FILES}))


def file_sha256(path: Path) -> str:
    """The SHA-256 hex digest of a file, read in 1 MiB blocks."""
    with open(path, "rb") as f:
        return _sha256(f)


def _sha256(file: BinaryIO) -> str:
    digest = hashlib.sha256()
    file.seek(0)
    while block := file.read(1 << 20):
        digest.update(block)
    return digest.hexdigest()


def verify_checksums(directory: Path, files: dict[str, BinaryIO] | None = None) -> None:
    """``ValueError`` naming the first file whose SHA-256 is not the one ``checksums.json`` records.

    ``files``: the directory's files, open (``open_checkpoint_files``); they are opened here when not given.
    """
    if files is None:
        with contextlib.ExitStack() as stack:
            return verify_checksums(directory, open_checkpoint_files(directory, stack))
    if CHECKSUMS not in files:
        raise FileNotFoundError(f"{directory / CHECKSUMS} does not exist")
    recorded = _read_json(directory, files, CHECKSUMS)
    if set(recorded) != set(FILES) or not all(isinstance(v, str) for v in recorded.values()):
        raise CheckpointFileError(f"{directory / CHECKSUMS} must give a SHA-256 for each of {list(FILES)}")
    for name in FILES:
        if _sha256(files[name]) != recorded[name]:
            raise CheckpointFileError(
                f"{directory / name} is damaged or comes from another checkpoint: its SHA-256 is not the one "
                f"{CHECKSUMS} records"
            )


def save_checkpoint(
    run_dir: str | os.PathLike,
    *,
    step: int,
    params: dict[str, Any],
    optimizer_state: dict[str, Any],
    config: dict[str, Any],
    tokenizer: dict[str, Any],
    state: dict[str, Any],
    keep: int = 1,
) -> Path:
    """Write a checkpoint for ``step`` into ``run_dir`` atomically; return its directory.

    Arrays may be NumPy or CuPy (saved through ``to_numpy``). ``keep`` is how
    many complete checkpoints stay on disk (the newest ones).
    """
    check_int_value(step, "step", minimum=0)
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    final = run_dir / f"{PREFIX}{step:08d}"
    if final.exists() and _live(run_dir) == final:
        # The live checkpoint already holds this step; overwriting it in place
        # would not be atomic, so write beside it and swap the pointer.
        final = run_dir / f"{PREFIX}{step:08d}-{os.getpid()}"
    try:
        with atomic_directory(final, replace=True) as temp:  # replaces a complete leftover of an earlier crash
            _write_checkpoint_files(temp, params, optimizer_state, config, tokenizer, state)
        write_text_atomic(run_dir / LATEST, final.name + "\n")
    except OSError as err:
        if err.errno not in DISK_FULL:
            raise
        live = _live(run_dir)
        kept = f"step {checkpoint_step(live)} ({live})" if live is not None else "none (no checkpoint was written yet)"
        raise OSError(
            f"checkpoint step {step} could not be written to {run_dir} (disk full: {err.strerror}); "
            f"the last complete checkpoint is {kept}"
        ) from err
    _prune(run_dir, keep)
    return final


def checkpoint_step(directory: Path) -> int | None:
    """The step in a checkpoint directory's name: ``ckpt-00000040`` (or ``ckpt-00000040-<pid>``) -> 40; else None."""
    return int(directory.name[len(PREFIX) :][:8]) if _NAME.fullmatch(directory.name) else None


def _live(run_dir: Path) -> Path | None:
    """The checkpoint LATEST names, or None (also when LATEST is damaged: a save then replaces it)."""
    try:
        return latest_checkpoint_dir(run_dir)
    except CheckpointFileError:
        return None


def _prune(run_dir: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` checkpoints (never the one LATEST names)."""
    live = _live(run_dir)
    others = sorted(p for p in run_dir.glob(f"{PREFIX}*") if p.is_dir() and p != live)
    for old in others[: max(0, len(others) - (keep - 1))]:
        remove_directory(old)  # renamed away first: no directory named as a checkpoint is ever half removed


# ---------------------------------------------------------------- load


def latest_checkpoint_dir(path: str | os.PathLike) -> Path | None:
    """The checkpoint directory that ``path`` refers to, or None if it holds none.

    ``path`` is either a run directory (its ``LATEST`` file is followed) or a
    checkpoint directory itself.
    """
    path = Path(path)
    if (path / "params.npz").is_file():
        return path
    pointer = path / LATEST
    if not pointer.is_file():
        return None
    try:
        name = pointer.read_bytes()[:256].decode("ascii").strip()
    except (OSError, UnicodeDecodeError) as err:
        raise CheckpointFileError(f"cannot read {pointer}: {_reason(err)}") from err
    if not _NAME.fullmatch(name):
        raise CheckpointFileError(f"{pointer} must name a {PREFIX}NNNNNNNN directory, got {name!r}")
    if not (path / name).is_dir():
        raise CheckpointFileError(f"{pointer} names {name}, which is not a directory in {path}")
    return path / name


def array_headers(path: Path, file: BinaryIO) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """name -> (shape, dtype) of every array in the ``.npz`` archive ``path``, open as ``file``, from the
    ``.npy`` headers alone.

    No data is read, so a header claiming a terabyte costs nothing. Each
    header must be a float array whose data exactly fills its zip member.
    Any failure is a ``CheckpointFileError`` naming the file.
    """
    headers = {}
    try:
        file.seek(0)
        with zipfile.ZipFile(file) as archive:
            for info in archive.infolist():
                name = info.filename.removesuffix(".npy")
                with archive.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    if version not in ((1, 0), (2, 0)):
                        raise ValueError(f"array {name!r} has .npy format version {version}, expected 1.0 or 2.0")
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(member)
                    else:
                        shape, _, dtype = np.lib.format.read_array_header_2_0(member)
                    data_bytes = member.tell() + math.prod(shape) * dtype.itemsize
                if dtype.hasobject:
                    raise ValueError(f"array {name!r} holds Python objects (a pickle), which numforge never loads")
                if dtype.kind != "f":
                    raise ValueError(f"array {name!r} has dtype {dtype}, expected floating point")
                if data_bytes != info.file_size:
                    raise ValueError(
                        f"array {name!r} claims shape {shape} ({data_bytes:,} bytes with its header) "
                        f"but its zip member holds {info.file_size:,} bytes"
                    )
                headers[name] = (shape, dtype)
    except CheckpointFileError:
        raise
    except Exception as err:  # noqa: BLE001 -- any failure to parse these bytes is the file's fault
        raise CheckpointFileError(f"cannot read checkpoint arrays {path}: {_reason(err)}") from err
    return headers


def _load_arrays(path: Path, file: BinaryIO) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` archive ``path``, open as ``file``, whose headers were checked; never a pickle."""
    try:
        file.seek(0)
        with np.load(file, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except Exception as err:  # noqa: BLE001 -- any failure to parse these bytes is the file's fault
        raise CheckpointFileError(f"cannot read checkpoint arrays {path}: {_reason(err)}") from err


def load_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Load the checkpoint in ``path`` (a run directory or a checkpoint directory).

    Raises ``FileNotFoundError`` if there is none, and ``ValueError`` naming
    the file if a file is unreadable, the optimizer moments do not match the
    parameters, or the arrays would not fit in memory (checked from their
    headers, before loading them).

    A run that is training now is read without waiting for it, whole: the
    files of the checkpoint are read through descriptors opened first
    (``open_live_checkpoint``), so the trainer removing it meanwhile changes nothing read.
    """
    with contextlib.ExitStack() as stack:
        directory, files = open_live_checkpoint(path, stack)
        return _read_checkpoint(directory, files)


def open_live_checkpoint(path: str | os.PathLike, stack: contextlib.ExitStack) -> tuple[Path, dict[str, BinaryIO]]:
    """The checkpoint directory ``path`` refers to (``latest_checkpoint_dir``) and its files, open in ``stack``.

    A trainer may switch ``LATEST`` and remove the checkpoint it named at any
    moment, before its files are all open: then ``LATEST`` holds another name
    by then, and the one it names is opened. That is tried again for as long as
    ``LATEST`` moves (each try that fails so is a checkpoint the trainer
    completed meanwhile: progress, not a count of tries); an error is raised
    when ``LATEST`` holds what it held when the try began (a trainer saves no
    step twice, so a name ``LATEST`` held does not come back while it runs).
    """
    path = Path(path)
    while True:
        named = _pointer(path)
        try:
            directory = latest_checkpoint_dir(path)
            if directory is None:
                raise FileNotFoundError(
                    f"no checkpoint in {path}: expected {path / LATEST} or {path / 'params.npz'} "
                    f"(or, where a model is read, a Hugging Face model directory with config.json)"
                )
            with contextlib.ExitStack() as attempt:
                files = open_checkpoint_files(directory, attempt)
                stack.enter_context(attempt.pop_all())
                return directory, files
        except (OSError, ValueError):
            if _pointer(path) == named:
                raise


def _pointer(path: Path) -> bytes | None:
    """What ``path``'s ``LATEST`` holds now (None: no such file), to tell whether it moved."""
    try:
        return (path / LATEST).read_bytes()
    except OSError:
        return None


def open_checkpoint_files(directory: Path, stack: contextlib.ExitStack) -> dict[str, BinaryIO]:
    """name -> every file of a checkpoint directory (its ``checksums.json`` too, where it has one), open for
    reading in ``stack``; a ``ValueError`` naming those it lacks."""
    missing = [name for name in FILES if not (directory / name).is_file()]
    if missing:
        raise ValueError(f"checkpoint {directory} is incomplete: missing {', '.join(missing)}")
    # asked before FILES are opened: a directory removed by then fails to open them, not to open checksums.json
    names = (CHECKSUMS, *FILES) if (directory / CHECKSUMS).is_file() else FILES  # numforge 0.1.0 wrote none
    return {name: stack.enter_context(open(directory / name, "rb")) for name in names}


def _read_json(directory: Path, files: dict[str, BinaryIO], name: str) -> dict:
    """The JSON object in the open file ``name`` of ``directory`` (``files.parse_json``'s checks and messages)."""
    files[name].seek(0)
    return parse_json(files[name].read(), str(directory / name), expect=dict)


def _read_checkpoint(directory: Path, files: dict[str, BinaryIO]) -> Checkpoint:
    if CHECKSUMS in files:  # checkpoints of numforge 0.1.0 have none: their files are still checked
        verify_checksums(directory, files)
    jsons = {
        name: _read_json(directory, files, f"{name}.json") for name in ("optimizer", "config", "tokenizer", "state")
    }
    optimizer_state = jsons["optimizer"]
    _check_optimizer_json(optimizer_state, directory / "optimizer.json")
    param_headers = array_headers(directory / "params.npz", files["params.npz"])
    moment_headers = array_headers(directory / "optimizer.npz", files["optimizer.npz"])
    shapes = {name: shape for name, (shape, _) in param_headers.items()}
    for kind in ("m", "v"):
        moments = {k[2:]: shape for k, (shape, _) in moment_headers.items() if k.startswith(f"{kind}/")}
        _check_same_shapes(shapes, moments, f"optimizer.npz {kind!r}", directory)
    stored = sum(
        math.prod(shape) * dtype.itemsize for shape, dtype in [*param_headers.values(), *moment_headers.values()]
    )
    check_fits(stored, f"loading checkpoint {directory} (its arrays)")
    params = _load_arrays(directory / "params.npz", files["params.npz"])
    arrays = _load_arrays(directory / "optimizer.npz", files["optimizer.npz"])
    for kind in ("m", "v"):
        optimizer_state[kind] = {k[2:]: a for k, a in arrays.items() if k.startswith(f"{kind}/")}
    return Checkpoint(
        path=directory,
        params=params,
        optimizer_state=optimizer_state,
        config=jsons["config"],
        tokenizer=jsons["tokenizer"],
        state=jsons["state"],
    )


def _check_optimizer_json(data: dict, path: Path) -> None:
    check_int_value(data.get("step"), f"{path}: 'step'", minimum=0)
    if not isinstance(data.get("hyper"), dict):
        raise CheckpointFileError(f"{path}: 'hyper' must be an object of AdamW settings, got {data.get('hyper')!r}")
    extra = sorted(set(data) - {"step", "hyper"})
    if extra:
        raise CheckpointFileError(f"{path}: unknown keys {extra}; expected 'step' and 'hyper'")


def _check_same_shapes(params: dict, other: dict, what: str, directory: Path) -> None:
    if set(other) != set(params):
        extra, lacking = sorted(set(other) - set(params)), sorted(set(params) - set(other))
        raise CheckpointFileError(
            f"checkpoint {directory}: {what} names differ from the parameters (extra: {extra}, missing: {lacking})"
        )
    for name, shape in params.items():
        if other[name] != shape:
            raise CheckpointFileError(
                f"checkpoint {directory}: {what}[{name!r}] has shape {other[name]}, the parameter has {shape}"
            )


def checkpoint_config(checkpoint: Checkpoint) -> GPTConfig:
    """The checkpoint's ``config.json`` as a ``GPTConfig``; a bad field is a ``ValueError`` naming the file."""
    try:
        return GPTConfig.from_dict(checkpoint.config)
    except (ValueError, TypeError) as err:
        raise CheckpointFileError(f"{checkpoint.path / 'config.json'}: {err}") from err


def checkpoint_tokenizer(checkpoint: Checkpoint, trust_pattern: bool = False) -> BPETokenizer:
    """The checkpoint's ``tokenizer.json``, validated (its split pattern too: see ``BPETokenizer.from_dict``)."""
    return tokenizer_from_dict(
        checkpoint.tokenizer, source=str(checkpoint.path / "tokenizer.json"), trust_pattern=trust_pattern
    )


def check_tokenizer_fits(tokenizer: BPETokenizer, config: GPTConfig, directory: Path) -> None:
    """Every id the tokenizer makes, the model can read. The model's vocabulary may be larger (padded,
    as nanoGPT pads GPT-2's 50257 to 50304): ``generate`` never samples an id the tokenizer cannot decode."""
    if tokenizer.vocab_size > config.vocab_size:
        raise CheckpointFileError(
            f"checkpoint {directory}: tokenizer.json has {tokenizer.vocab_size} tokens but config.json's "
            f"vocab_size is {config.vocab_size}; the tokenizer could make ids past the model's embedding table"
        )


def restore_model(checkpoint: Checkpoint, dtype: str = "float32") -> GPT:
    """The GPT described by a loaded checkpoint, with its parameters on the selected backend.

    The config is compared with the arrays' shapes before a model is built
    (a config claiming a huge width over small arrays allocates nothing): a
    missing or extra name, or a shape, is a ``ValueError`` naming the files.
    """
    if isinstance(checkpoint.state, dict) and "lora" in checkpoint.state:  # adapters alone: the base read again
        return _restore_lora_model(checkpoint, dtype)
    config = checkpoint_config(checkpoint)
    layers = {name.split(".")[1] for name in checkpoint.params if name.startswith("layers.")}
    if config.num_layers != len(layers):  # before listing the config's shapes: num_layers may be 10**20
        raise CheckpointFileError(
            f"checkpoint {checkpoint.path}: its config.json and params.npz disagree: config.json has "
            f"num_layers {config.num_layers}, params.npz holds {len(layers)} layers"
        )
    expected = parameter_shapes(config)
    stored = {name: tuple(a.shape) for name, a in checkpoint.params.items()}
    if stored != expected:
        raise CheckpointFileError(
            f"checkpoint {checkpoint.path}: its config.json and params.npz disagree: {_difference(expected, stored)}"
        )
    tables = POSITIONS[config.position].table_shapes(config).values()
    table = 3 * 8 * sum(math.prod(shape) for shape in tables)  # the fixed position tables' float64 temporaries
    converted = resolve_dtype(dtype).itemsize * sum(math.prod(shape) for shape in expected.values())
    check_fits(  # the arrays are read already; the model takes them as they are, or converted to ``dtype``
        table + converted, f"building the model of {checkpoint.path / 'config.json'}"
    )
    try:
        return GPT(config, dtype=dtype, params={name: asarray(a, dtype=dtype) for name, a in checkpoint.params.items()})
    except ValueError as err:
        raise CheckpointFileError(
            f"checkpoint {checkpoint.path}: its config.json and params.npz disagree: {err}"
        ) from err


def checkpoint_lora(checkpoint: Checkpoint) -> LoraConfig | None:
    """The adapters ``state.json``'s ``lora`` records (None: not a LoRA run); a bad field is a
    ``CheckpointFileError`` naming the file."""
    recorded = checkpoint.state.get("lora") if isinstance(checkpoint.state, dict) else None
    if recorded is None:
        return None
    try:
        return LoraConfig.from_dict({name: recorded[name] for name in ("rank", "alpha", "dropout", "targets")})
    except (ValueError, KeyError, TypeError) as err:
        raise CheckpointFileError(f"{checkpoint.path / 'state.json'}: 'lora': {describe_error(err)}") from err


def chat_template_directory(path: str | os.PathLike) -> Path:
    """The directory holding the chat template of the model at ``path``: for a numforge run or checkpoint, the
    directory whose template rendered its ``--chat`` file (``state.json``'s ``data.chat_template_dir``), else
    the base model its LoRA adapters adapt (``lora.base``), else the run itself; a Hugging Face directory is
    its own. Only ``state.json`` is read."""
    if latest_checkpoint_dir(path) is None:
        return Path(path)
    with contextlib.ExitStack() as stack:
        directory, files = open_live_checkpoint(path, stack)
        state = _read_json(directory, files, "state.json")
    data, lora = state.get("data"), state.get("lora")
    recorded = (data.get("chat_template_dir") if isinstance(data, dict) else None) or (
        lora.get("base") if isinstance(lora, dict) else None
    )
    return Path(recorded) if isinstance(recorded, str) else Path(path)


def _restore_lora_model(checkpoint: Checkpoint, dtype: str) -> GPT:
    """A LoRA run's model: the frozen weights read again from ``state.json``'s ``lora.base`` (its config must be
    the checkpoint's), the adapters those of ``params.npz``."""
    recorded, state_file = checkpoint.state["lora"], checkpoint.path / "state.json"
    config = checkpoint_config(checkpoint)
    lora = checkpoint_lora(checkpoint)
    try:
        model, _ = load_model(recorded["base"], dtype)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CheckpointFileError(f"{state_file}: 'lora': {describe_error(err)}") from err
    base_config = dataclasses.replace(model.config, drop_prob=config.drop_prob, attention=config.attention)
    if base_config != config:
        raise CheckpointFileError(
            f"{state_file}: 'lora.base' {recorded['base']} is not the model this run adapts: its config.json "
            f"differs from {checkpoint.path / 'config.json'}"
        )
    model.config = config
    try:
        model.add_lora(lora, values=checkpoint.params)
    except ValueError as err:
        message = f"checkpoint {checkpoint.path}: params.npz does not hold this run's adapters: {err}"
        raise CheckpointFileError(message) from err
    return model


def _difference(expected: dict, stored: dict) -> str:
    """The first way two name -> shape maps differ, in words."""
    missing, extra = sorted(set(expected) - set(stored)), sorted(set(stored) - set(expected))
    if missing or extra:
        return f"params.npz lacks {missing} and has extra {extra}"
    name = next(n for n in expected if expected[n] != stored[n])
    return f"config.json makes {name!r} {expected[name]}, params.npz holds {stored[name]}"


def model_config(path: str | os.PathLike) -> GPTConfig:
    """The ``GPTConfig`` of what ``load_model`` reads at ``path``: a Hugging Face directory's config.json
    (no weight read) or a checkpoint's config.json."""
    if _pretrained(path):
        return pretrained_config(path)
    return checkpoint_config(load_checkpoint(path))


def _pretrained(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a Hugging Face model directory: a config.json, and no checkpoint of numforge's (its
    ``LATEST`` is not followed here: a trainer may be removing what it names; ``load_checkpoint`` follows it)."""
    path = Path(path)
    return (path / "config.json").is_file() and not any((path / name).is_file() for name in ("params.npz", LATEST))


def check_finite_params(checkpoint: Checkpoint) -> None:
    """``ValueError`` naming the first parameter that holds NaN or infinity (a model that cannot be run)."""
    for name, array in checkpoint.params.items():
        bad = int(array.size - np.count_nonzero(np.isfinite(array)))
        if bad:
            raise CheckpointFileError(
                f"{checkpoint.path / 'params.npz'}: parameter {name!r} holds {bad} NaN or infinite values; "
                "this model cannot be sampled or traced (was it saved from a run that diverged?)"
            )


def load_model(
    path: str | os.PathLike, dtype: str = "float32", trust_pattern: bool = False
) -> tuple[GPT, BPETokenizer]:
    """The model and tokenizer of a run directory, one of its ``ckpt-*`` directories, or a Hugging Face
    directory of GPT-2, Llama, Mistral, Qwen2 or Qwen3 (``hf.load_pretrained``), to sample, study or start a
    run from.

    The one loader the inference commands (``sample``, ``trace``) share. It
    refuses parameters holding NaN or infinity and a tokenizer whose
    vocabulary is not the model's, naming the files. ``trust_pattern``:
    see ``BPETokenizer.from_dict``.
    """
    if _pretrained(path):
        return load_pretrained(path, dtype, trust_pattern)  # not numforge's: a Hugging Face directory
    checkpoint = load_checkpoint(path)
    check_finite_params(checkpoint)
    model = restore_model(checkpoint, dtype)
    tokenizer = checkpoint_tokenizer(checkpoint, trust_pattern)
    check_tokenizer_fits(tokenizer, model.config, checkpoint.path)
    return model, tokenizer
