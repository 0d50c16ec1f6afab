"""File locks that die with their process: one trainer per run directory, and temporaries marked as being written.

A lock here is ``flock`` on an open file: the kernel holds it for as long as
the file stays open and drops it when the process ends, however it ends (a
kill -9 included). So a lock never outlives its holder, and nothing has to be
cleaned up after a crash before the next process can take it.

- ``mark(path)``: lock an existing file or directory (a temporary being
  written); it fails at once if a live process holds it.
- ``DirectoryLock(directory, what)``: a lock file ``.lock`` in a directory that
  records its holder (process id, host, start time); a second taker is refused
  at once with ``InUse``: "run DIR is in use by process N (started ...)", or
  with ``wait=True`` waits until the holder is done (a signal ends the wait).

Worker processes forked while a lock is held would share it (a fork copies
the open files), and keep it after their parent is killed: each forked child
closes this module's locked files first thing (``os.register_at_fork``). On a
system without ``flock`` (Windows) nothing is locked: ``mark`` returns None,
which the callers read as "cannot tell: leave it".
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

LOCK_FILE = ".lock"
_marked: set[int] = set()  # descriptors of this process's locks, closed in forked children


def _close_inherited() -> None:
    for fd in _marked:
        try:
            os.close(fd)
        except OSError:
            pass
    _marked.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_inherited)


def _try_lock(fd: int, wait: bool = False) -> bool | None:
    """Take the exclusive lock of ``fd`` (without waiting, unless ``wait``): True taken, False held by another,
    None cannot lock here."""
    if fcntl is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as err:  # a file system without locks (ENOLCK), a directory on NFS (EBADF), ...
        if err.errno in (errno.EAGAIN, errno.EACCES):
            return False
        return None


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (not removed or replaced meanwhile)."""
    try:
        here, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def mark(path: str | os.PathLike) -> int | None:
    """Lock the file or directory ``path`` for this process; the descriptor to pass to ``unmark``.

    None where nothing can be locked (no ``flock``, a file system without
    locks). ``BlockingIOError`` if a live process holds it; ``FileNotFoundError``
    if it is gone, or was removed or replaced before its lock was taken.
    """
    if fcntl is None:
        return None
    path = Path(path)
    fd = os.open(path, os.O_RDONLY)
    taken = _try_lock(fd)
    if taken and _same_file(fd, path):
        _marked.add(fd)
        return fd
    os.close(fd)
    if taken is None:
        return None
    if taken is False:
        raise BlockingIOError(errno.EWOULDBLOCK, "locked by another process", str(path))
    raise FileNotFoundError(errno.ENOENT, "removed while it was being locked", str(path))


def unmark(fd: int | None) -> None:
    """Release a lock taken by ``mark``."""
    if fd is not None:
        _marked.discard(fd)
        os.close(fd)


class InUse(ValueError):
    """Another live process holds the directory's lock; the message names it."""


class DirectoryLock:
    """``directory/.lock``, held by this process while it works in ``directory`` (created if missing).

    The file records the holder: ``{"pid", "host", "started"}``. ``release``
    removes the file (and the directories this lock created, if they are
    still empty). A holder killed outright leaves the file, unlocked: the next
    taker takes it over. A taker that finds the lock held raises ``InUse`` at
    once, or with ``wait`` waits for it.
    """

    def __init__(self, directory: str | os.PathLike, what: str = "directory", wait: bool = False):
        self.directory, self.path = Path(directory), Path(directory) / LOCK_FILE
        self.created, self.fd = [], None  # the directories created here, deepest first
        for _ in range(10):  # a holder that ends removes the file (and the directories it made): lock what is there now
            self.created += [p for p in (self.directory, *self.directory.parents) if not p.exists()]
            self.directory.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            except FileNotFoundError:  # its directory was removed meanwhile
                continue
            taken = _try_lock(fd, wait)
            if taken is False:
                holder = _read_holder(self.path)
                os.close(fd)
                self._remove_created_directory()
                raise InUse(f"{what} {self.directory} is in use by {holder}")
            if taken is None or _same_file(fd, self.path):
                self.fd = fd
                break
            os.close(fd)
        else:
            raise InUse(f"{what} {self.directory} is in use: its lock file keeps being replaced")
        _marked.add(self.fd)
        record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        os.ftruncate(self.fd, 0)
        os.lseek(self.fd, 0, os.SEEK_SET)
        os.write(self.fd, (json.dumps(record) + "\n").encode())

    def release(self) -> None:
        if self.fd is None:
            return
        if _same_file(self.fd, self.path):
            with contextlib.suppress(OSError):  # still locked: a taker that opened this file finds it gone
                self.path.unlink()
        _marked.discard(self.fd)
        os.close(self.fd)
        self.fd = None
        self._remove_created_directory()

    def _remove_created_directory(self) -> None:
        """Remove the directories this lock created, if still empty: a failed start leaves none behind."""
        for directory in self.created:
            try:
                directory.rmdir()
            except OSError:  # not empty: it is in use
                break

    def __enter__(self) -> DirectoryLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _read_holder(path: Path) -> str:
    """'process N (started ...)' from a held lock file; 'another process' if it is not written yet."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        where = "" if record["host"] == socket.gethostname() else f" on {record['host']}"
        return f"process {record['pid']}{where} (started {record['started']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (it is starting now)"
