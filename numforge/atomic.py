"""Atomic file writes: a reader sees the old file or the whole new one, never half a write.

The standard library only: the tokenizer uses these without loading the model.
"""

from __future__ import annotations

import contextlib
import os
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
