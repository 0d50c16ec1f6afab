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
import re
import stat
from pathlib import Path

KINDS = {dict: "a JSON object", list: "a JSON array"}  # what ``expect`` may ask for, in words


def decode_utf8(data: bytes, where: str) -> str:
    """``data`` as UTF-8 text; a ``ValueError`` naming ``where`` and the first bad byte otherwise."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{where}: not UTF-8 text ({error.reason} at byte {error.start})") from None


def read_bytes(path: str | os.PathLike, max_bytes: int | None = None) -> bytes:
    """The bytes of the file ``path``; a directory, or a file of more than ``max_bytes`` (None: any size), is a
    ``ValueError`` naming it, raised before the file is read."""
    try:
        with open(path, "rb") as handle:
            if max_bytes is None:
                return handle.read()
            info = os.fstat(handle.fileno())
            size = info.st_size  # a regular file's; 0 for a pipe, whose bound is what is read
            data = b"" if size > max_bytes else handle.read((size if stat.S_ISREG(info.st_mode) else max_bytes) + 1)
    except IsADirectoryError:
        raise ValueError(f"{path} is a directory; expected a file") from None
    if max(size, len(data)) > max_bytes:
        raise ValueError(
            f"{path}: {max(size, len(data)):,} bytes, more than the {max_bytes:,} numforge reads from such a file"
        )
    return data


def read_text(path: str | os.PathLike) -> str:
    """The UTF-8 text of ``path``, newlines universal (``"\\r\\n"`` reads ``"\\n"``, as ``open`` reads it); a
    ``ValueError`` naming the file and the byte otherwise."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    except IsADirectoryError:
        raise ValueError(f"{path} is a directory; expected a file") from None


def parse_json(data: bytes | str, where: str, expect: type | None = None, max_depth: int | None = None):
    """The JSON value of ``data`` (UTF-8 bytes or text), of type ``expect`` when given (``dict`` or ``list``),
    its arrays and objects nested at most ``max_depth`` deep when given (checked before parsing).

    Anything wrong is a ``ValueError`` that starts with ``where``: the line and
    column of bad JSON, the byte of bad UTF-8, the nesting, or the type found instead of ``expect``.
    """
    text = decode_utf8(data, where) if isinstance(data, bytes) else data
    if max_depth is not None and (depth := nesting_depth(text)) > max_depth:
        raise ValueError(f"{where}: arrays and objects nested {depth:,} deep; at most {max_depth} levels are read")
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


JSON_NESTING = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')  # a string (skipped whole), or a bracket


def nesting_depth(text: str) -> int:
    """How deep JSON ``text`` nests arrays and objects (brackets inside strings do not count), in one linear scan:
    ``nesting_depth('{"a": [1, "]["]}') == 2``."""
    depth = deepest = 0
    for match in JSON_NESTING.finditer(text):
        bracket = match.group()
        if bracket in ("[", "{"):
            depth += 1
            deepest = max(deepest, depth)
        elif bracket in ("]", "}"):
            depth -= 1
    return deepest


def read_json(path: str | os.PathLike, expect: type | None = None, max_bytes: int | None = None):
    """The JSON value in ``path`` (``parse_json``'s checks and messages, naming the file); ``max_bytes``: see
    ``read_bytes``."""
    return parse_json(read_bytes(path, max_bytes), str(path), expect)
