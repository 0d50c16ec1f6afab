"""Atomic file writes: a reader sees the old file or the whole new one, never half a write.

The standard library only: the tokenizer uses these without loading the model.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` (its folder is created if missing); on success
    rename it onto ``path``.

    On an exception the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    temp = Path(temp_name)
    try:
        yield temp
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write UTF-8 text to ``path`` atomically, with ``\\n`` line endings on every platform."""
    with atomic_path(path) as temp:
        with open(temp, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a hidden temporary directory beside ``path``; on success rename it to ``path``, which must not exist.

    ``path`` appears whole or not at all: on an exception (Ctrl-C included) the
    temporary directory is removed, and a process killed outright leaves only a
    hidden ``.NAME.*.tmp`` that nothing reads. An existing ``path`` is a
    ``ValueError`` before anything is written; one that appears meanwhile, a
    ``FileExistsError`` at the rename.
    """
    path = Path(path)
    if path.exists():
        raise ValueError(f"{path} already exists; choose a new directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        yield temp
        if path.exists():
            raise FileExistsError(f"{path} appeared while it was being written")
        os.rename(temp, path)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
