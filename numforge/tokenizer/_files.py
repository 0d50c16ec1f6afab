"""Reading the tokenizer files: errors name the file and the line (or byte) where they are wrong."""

from __future__ import annotations

import json
from pathlib import Path


def read_text(path) -> str:
    """The UTF-8 text of ``path``; a ``ValueError`` naming the file and the byte otherwise."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    except IsADirectoryError:
        raise ValueError(f"{path} is a directory; expected a file") from None


def read_json(path):
    """The JSON value in ``path``; a ``ValueError`` naming the file, line and column otherwise."""
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: line {error.lineno} column {error.colno}: {error.msg}") from None
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply to read") from None
