"""Atomic file writes: a reader sees the old file or the whole new one, never half a write.

A file or a directory is written under a hidden temporary name beside its
destination, ``.NAME.<8 hex digits>.tmp``, and renamed onto it when complete
(``os.replace``: atomic on POSIX and Windows). While it is written the
temporary is locked (``locks.mark``: a lock that dies with its process), so
``remove_stale_temporaries`` tells the debris of a killed writer (unlocked:
removed) from a temporary that another process is writing now (locked: left
alone). No reader takes a temporary for the file it would become: every name
numforge reads is a final name.

Temporaries are created as ``open`` and ``mkdir`` create files, with the
user's umask applied (0644 and 0755 under the usual umask 022), so the files
they become can be shared as any other file of the user's.

The standard library only: the tokenizer uses these without loading the model.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from . import locks

_TEMPORARY = re.compile(r"\.(?P<name>.+)\.[0-9a-f]{8}\.tmp")  # the names _temporary gives


def _temporary(path: Path, create: Callable[[Path], None]) -> tuple[Path, int | None]:
    """A new hidden temporary beside ``path``, made by ``create`` and locked: (its path, its lock)."""
    while True:
        temp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            create(temp)
        except FileExistsError:
            continue
        try:
            return temp, locks.mark(temp)
        except (FileNotFoundError, BlockingIOError):  # a cleaner took it for debris before its lock: another
            continue


def file_mode() -> int:
    """The mode ``open`` gives a new file: 0o666 minus the umask (0o644 under 022), for a file another library
    created with its own mode (safetensors: 0o600). The umask is read by setting it and back: no thread creates
    a file in between in numforge."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def _create_file(temp: Path) -> None:
    os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # 0o666 minus the umask, as open() does


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` (its folder is created if missing); on success
    rename it onto ``path``.

    On an exception the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp, lock = _temporary(path, _create_file)
    try:
        yield temp
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
        locks.unmark(lock)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write UTF-8 text to ``path`` atomically, with ``\\n`` line endings on every platform."""
    with atomic_path(path) as temp:
        with open(temp, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike, replace: bool = False) -> Iterator[Path]:
    """Yield a hidden temporary directory beside ``path``; on success rename it to ``path``.

    ``path`` appears whole or not at all: on an exception (Ctrl-C included) the
    temporary directory is removed, and a process killed outright leaves only a
    hidden ``.NAME.*.tmp`` that nothing reads (``remove_stale_temporaries``
    removes it later). Without ``replace``, an existing ``path`` is a
    ``ValueError`` before anything is written, and one that appears meanwhile a
    ``FileExistsError`` at the rename; with it, an existing ``path`` is removed
    (``remove_directory``) just before the rename.
    """
    path = Path(path)
    if path.exists() and not replace:
        raise ValueError(f"{path} already exists; choose a new directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    temp, lock = _temporary(path, lambda temp: temp.mkdir())
    try:
        yield temp
        if path.exists():
            if not replace:
                raise FileExistsError(f"{path} appeared while it was being written")
            remove_directory(path)
        os.rename(temp, path)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
        locks.unmark(lock)


def remove_directory(path: str | os.PathLike) -> None:
    """Remove a directory tree so that no reader ever sees it half removed.

    It is first renamed to a hidden temporary (unlocked: if this process is
    killed meanwhile, ``remove_stale_temporaries`` finishes the job), then deleted.
    """
    path = Path(path)
    trash = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def remove_stale_temporaries(directory: str | os.PathLike, name: str | None = None) -> list[Path]:
    """Remove the temporaries in ``directory`` that no live process holds (of ``name`` only, if given).

    They are what writers killed outright left behind (``.ckpt-00000040.*.tmp``
    of a checkpoint, ``.loss.csv.*.tmp``, ...). A temporary that a live process
    is writing is locked and left alone, and so is every temporary where locks
    cannot be told (a system without ``flock``). Returns the paths removed.
    """
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:  # no such directory yet: nothing to clean
        return removed
    for entry in entries:
        found = _TEMPORARY.fullmatch(entry.name)
        if found is None or (name is not None and found["name"] != name):
            continue
        path = Path(entry.path)
        try:
            lock = locks.mark(path)  # taken only if no live process holds it
        except OSError:  # held, or gone
            continue
        if lock is None:  # cannot tell here: leave it
            continue
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
        finally:
            locks.unmark(lock)
    return removed
