"""What the machine allows, checked before the work starts: memory for a job, writable output paths.

A run that cannot fit in memory, or cannot write where it was told to, should
fail in its first second with a message, not after an hour of training with a
``MemoryError`` or ``PermissionError`` traceback.

Example: ``check_fits(3 * 2**40, "training")`` on a 16 GiB machine raises
``ValueError("training needs about 3.0 TiB of memory, more than this machine's
16.0 GiB (physical memory)")``.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

DISK_FULL = (errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC))  # "no room left" errors


def memory_limit() -> tuple[int, str]:
    """(bytes, where the limit comes from): the address-space limit (``ulimit -v``) if set, else physical memory."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft not in (resource.RLIM_INFINITY, -1) and soft > 0:
            return soft, "the address-space limit (ulimit -v)"
    except (ImportError, OSError, ValueError):  # no `resource` module on Windows
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "physical memory"
    except (AttributeError, OSError, ValueError):
        return 2**62, "unknown (no limit checked)"


def format_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"``; ``3 * 2**40`` -> ``"3.0 TiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def check_fits(needed_bytes: int, what: str) -> None:
    """``ValueError`` naming ``what``, the estimate and the limit when ``needed_bytes`` exceeds the machine's memory."""
    limit, source = memory_limit()
    if needed_bytes > limit:
        raise ValueError(
            f"{what} needs about {format_bytes(needed_bytes)} of memory, more than this machine's "
            f"{format_bytes(limit)} ({source})"
        )


def check_output_dir(path: str | os.PathLike, what: str) -> Path:
    """``path`` if a directory can be used or created there; else a ``ValueError`` naming ``what``.

    Refused: an existing non-directory, a path under a regular file, and a
    directory (or the nearest existing parent) that this user cannot write.
    Nothing is created.
    """
    path = Path(path)
    if str(path) == "":
        raise ValueError(f"{what} is an empty path")
    if path.exists() and not path.is_dir():
        raise ValueError(f"{what} {path} exists and is not a directory")
    _check_writable_parent(path if path.is_dir() else path.parent, what, path)
    return path


def check_output_file(path: str | os.PathLike, what: str) -> Path:
    """``path`` if a file can be written there (replacing a regular file); else a ``ValueError`` naming ``what``."""
    path = Path(path)
    if str(path) == "":
        raise ValueError(f"{what} is an empty path")
    if path.is_dir():
        raise ValueError(f"{what} {path} is a directory; give a file name")
    if path.exists() and not path.is_file():
        raise ValueError(f"{what} {path} exists and is not a regular file")
    _check_writable_parent(path.parent, what, path)
    return path


def check_input_file(path: str | os.PathLike, what: str) -> Path:
    """``path`` if it is a readable regular file; else a ``ValueError`` (``FileNotFoundError`` when missing)."""
    path = Path(path)
    if str(path) == "":
        raise ValueError(f"{what} is an empty path")
    if path.is_dir():
        raise ValueError(f"{what} {path} is a directory; expected a file")
    if not path.exists():
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
    return path


def _check_writable_parent(directory: Path, what: str, path: Path) -> None:
    """The nearest existing ancestor of ``directory`` is a directory this user can write into."""
    existing = directory.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"cannot create {what} {path}: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"cannot write {what} {path}: no permission to write in {existing}")
