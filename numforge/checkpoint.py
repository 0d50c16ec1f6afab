"""Checkpoints: atomic, pickle-free save and load of everything a run needs to continue.

A run directory holds any number of complete checkpoints and one pointer::

    RUN/
      LATEST                  text file: the name of the newest complete checkpoint
      ckpt-00000040/
        params.npz            model parameters, keys = parameter names
        optimizer.npz         AdamW moments, keys "m/<name>" and "v/<name>"
        optimizer.json        AdamW step count and hyperparameters
        config.json           GPTConfig.to_dict()
        tokenizer.json        BPETokenizer.to_dict()
        state.json            training state: step, batch generator state, settings

Why a crash cannot lose the previous checkpoint: a new checkpoint is written
into a hidden temporary directory, renamed into place when complete, and only
then is ``LATEST`` replaced (``os.replace`` of one small file, atomic on POSIX
and Windows). Until that last step ``LATEST`` names the previous checkpoint,
which is untouched; older checkpoints are deleted only after the switch.

Why loading cannot run code: arrays are read with ``numpy.load(...,
allow_pickle=False)`` and everything else is JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .atomic import write_text_atomic
from .backend import asarray, to_numpy
from .model import GPT, GPTConfig
from .tokenizer import BPETokenizer

LATEST = "LATEST"
PREFIX = "ckpt-"
FILES = ("params.npz", "optimizer.npz", "optimizer.json", "config.json", "tokenizer.json", "state.json")


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


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot read checkpoint file {path}: {err}") from err


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
    if not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    final = run_dir / f"{PREFIX}{step:08d}"
    if final.exists() and latest_checkpoint_dir(run_dir) == final:
        # The live checkpoint already holds this step; overwriting it in place
        # would not be atomic, so write beside it and swap the pointer.
        final = run_dir / f"{PREFIX}{step:08d}-{os.getpid()}"
    temp = Path(tempfile.mkdtemp(dir=run_dir, prefix=f".{final.name}.", suffix=".tmp"))
    try:
        _write_checkpoint_files(temp, params, optimizer_state, config, tokenizer, state)
        if final.exists():  # a complete but unreferenced leftover of an earlier crash
            shutil.rmtree(final)
        os.rename(temp, final)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    write_text_atomic(run_dir / LATEST, final.name + "\n")
    _prune(run_dir, keep)
    return final


def _prune(run_dir: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` checkpoints (never the one LATEST names)."""
    live = latest_checkpoint_dir(run_dir)
    others = sorted(p for p in run_dir.glob(f"{PREFIX}*") if p.is_dir() and p != live)
    for old in others[: max(0, len(others) - (keep - 1))]:
        shutil.rmtree(old, ignore_errors=True)


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
    name = pointer.read_text(encoding="utf-8").strip()
    if not name.startswith(PREFIX) or "/" in name or "\\" in name:
        raise ValueError(f"{pointer} must name a {PREFIX}* directory, got {name!r}")
    return path / name


def _load_arrays(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot read checkpoint arrays {path}: {err}") from err


def load_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Load the checkpoint in ``path`` (a run directory or a checkpoint directory).

    Raises ``FileNotFoundError`` if there is none, and ``ValueError`` if a file
    is unreadable or the optimizer moments do not match the parameters.
    """
    directory = latest_checkpoint_dir(path)
    if directory is None:
        raise FileNotFoundError(
            f"no checkpoint in {path}: expected {Path(path) / LATEST} or {Path(path) / 'params.npz'}"
        )
    missing = [name for name in FILES if not (directory / name).is_file()]
    if missing:
        raise ValueError(f"checkpoint {directory} is incomplete: missing {', '.join(missing)}")
    params = _load_arrays(directory / "params.npz")
    moments = _load_arrays(directory / "optimizer.npz")
    optimizer_state = read_json(directory / "optimizer.json")
    for kind in ("m", "v"):
        optimizer_state[kind] = {k[2:]: a for k, a in moments.items() if k.startswith(f"{kind}/")}
        _check_same_arrays(params, optimizer_state[kind], f"optimizer {kind!r}", directory)
    return Checkpoint(
        path=directory,
        params=params,
        optimizer_state=optimizer_state,
        config=read_json(directory / "config.json"),
        tokenizer=read_json(directory / "tokenizer.json"),
        state=read_json(directory / "state.json"),
    )


def _check_same_arrays(params: dict, other: dict, what: str, directory: Path) -> None:
    if set(other) != set(params):
        extra, lacking = sorted(set(other) - set(params)), sorted(set(params) - set(other))
        raise ValueError(
            f"checkpoint {directory}: {what} names differ from the parameters (extra: {extra}, missing: {lacking})"
        )
    for name, array in params.items():
        if other[name].shape != array.shape:
            raise ValueError(
                f"checkpoint {directory}: {what}[{name!r}] has shape {other[name].shape}, "
                f"the parameter has {array.shape}"
            )


def restore_model(checkpoint: Checkpoint, dtype: str = "float32") -> GPT:
    """The GPT described by a loaded checkpoint, with its parameters on the selected backend.

    A config that disagrees with the arrays (a missing or extra name, a
    shape) is a ``ValueError`` naming the checkpoint and the mismatch.
    """
    config = GPTConfig.from_dict(checkpoint.config)
    model = GPT(config, seed=0, dtype=dtype)
    try:
        model.load_params({name: asarray(a) for name, a in checkpoint.params.items()})
    except ValueError as err:
        raise ValueError(f"checkpoint {checkpoint.path}: its config.json and params.npz disagree: {err}") from err
    return model


def load_model(path: str | os.PathLike, dtype: str = "float32") -> tuple[GPT, BPETokenizer]:
    """The model and tokenizer of a run directory or one of its ``ckpt-*`` directories, to sample or study.

    The one loader the inference commands (``sample``, ``trace``) share.
    """
    checkpoint = load_checkpoint(path)
    return restore_model(checkpoint, dtype), BPETokenizer.from_dict(checkpoint.tokenizer, source=f"{path} tokenizer")
