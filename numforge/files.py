"""Reading text and JSON with one error style: a ``ValueError`` naming the file and where in it it is wrong.

Every JSON file numforge reads (checkpoints, tokenizers, Hugging Face
directories) and the studio's request bodies go through ``parse_json``:

    >>> parse_json(b'{"a": 1,}', "config.json")
    Traceback (most recent call last):
    ValueError: config.json: line 1 column 9: Expecting property name enclosed in double quotes

A file that cannot be opened stays an ``OSError`` (it names the file already).
The standard library only: the tokenizer reads its files without loading the model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

KINDS = {dict: "a JSON object", list: "a JSON array"}  # what ``expect`` may ask for, in words


def decode_utf8(data: bytes, where: str) -> str:
    """``data`` as UTF-8 text; a ``ValueError`` naming ``where`` and the first bad byte otherwise."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{where}: not UTF-8 text ({error.reason} at byte {error.start})") from None


def read_bytes(path: str | os.PathLike) -> bytes:
    """The bytes of the file ``path``; a directory is a ``ValueError`` naming it."""
    try:
        return Path(path).read_bytes()
    except IsADirectoryError:
        raise ValueError(f"{path} is a directory; expected a file") from None


def read_text(path: str | os.PathLike) -> str:
    """The UTF-8 text of ``path``, newlines universal (``"\\r\\n"`` reads ``"\\n"``, as ``open`` reads it); a
    ``ValueError`` naming the file and the byte otherwise."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    except IsADirectoryError:
        raise ValueError(f"{path} is a directory; expected a file") from None


def parse_json(data: bytes | str, where: str, expect: type | None = None):
    """The JSON value of ``data`` (UTF-8 bytes or text), of type ``expect`` when given (``dict`` or ``list``).

    Anything wrong is a ``ValueError`` that starts with ``where``: the line and
    column of bad JSON, the byte of bad UTF-8, or the type found instead of ``expect``.
    """
    text = decode_utf8(data, where) if isinstance(data, bytes) else data
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{where}: line {error.lineno} column {error.colno}: {error.msg}") from None
    except RecursionError:
        raise ValueError(f"{where}: JSON nested too deeply to read") from None
    except ValueError as error:  # what the parser refuses past the grammar: an integer of more than 4300 digits
        raise ValueError(f"{where}: {error}") from None
    if expect is not None and not isinstance(value, expect):
        raise ValueError(f"{where} must hold {KINDS[expect]}, got {type(value).__name__}")
    return value


def read_json(path: str | os.PathLike, expect: type | None = None):
    """The JSON value in ``path`` (``parse_json``'s checks and messages, naming the file)."""
    return parse_json(read_bytes(path), str(path), expect)
