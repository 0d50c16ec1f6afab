"""Prepared tokens on disk: one flat ``.npy`` of ids, memory-mapped for training.

A prepared directory (``numforge prepare --out DIR``, or the cache of ``--data``)::

    DIR/
      tokens.npy       every document's ids, each followed by <|endoftext|>, in document order;
                       little-endian uint16 when the vocabulary fits, else uint32
      tokenizer.json   the tokenizer that made them
      index.json       what they are: {"format": "numforge-tokens", "version": 1, "num_tokens",
                       "dtype", "tokens_sha256" (of the ids' bytes), "val_fraction", "tokenizer_sha256",
                       "source", "documents", "bytes", "empty_documents", "replaced"}

The first ``round(num_tokens * (1 - val_fraction))`` ids train, the rest validate.
``index.json`` is written last and the directory is renamed into place whole, so
a directory with an index is complete. ``tokens.npy`` is written as it is encoded:
its header first says 0 ids and is rewritten at the end with the count (NumPy pads
the header so that the count may grow in place); ``open_prepared`` maps the file with
``np.load(mmap_mode="r")``, so opening 10 GB of tokens reads only the windows drawn.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import interrupts
from ..tokenizer import BPETokenizer, load_tokenizer
from .batches import split_tokens

TOKENS_FILE = "tokens.npy"
TOKENIZER_FILE = "tokenizer.json"
INDEX_FILE = "index.json"
FORMAT_NAME = "numforge-tokens"
FORMAT_VERSION = 1
CHECK_BLOCK = 1 << 24  # ids checked at a time when a map is opened


def token_dtype(vocab_size: int) -> np.dtype:
    """Little-endian uint16 when every id fits in 16 bits, else uint32."""
    return np.dtype("<u2") if vocab_size <= 2**16 else np.dtype("<u4")


class TokenWriter:
    """Appends id arrays to a ``.npy`` file whose length is known only at the end; hashes them as they go."""

    def __init__(self, path: Path, dtype: np.dtype):
        self.dtype = np.dtype(dtype)
        self.count = 0
        self.digest = hashlib.sha256()
        self._file = open(path, "wb")
        self._data_start = self._write_header()

    def write(self, ids: np.ndarray) -> None:
        data = np.ascontiguousarray(ids, dtype=self.dtype).tobytes()  # (n,)
        self._file.write(data)
        self.digest.update(data)
        self.count += len(ids)

    def finish(self) -> None:
        """Rewrite the header with the final count."""
        self._file.seek(0)
        if self._write_header() != self._data_start:  # NumPy pads the header for this; checked, not assumed
            raise RuntimeError("the .npy header changed size when its count was written")
        self._file.seek(0, 2)

    def __enter__(self) -> TokenWriter:
        return self

    def __exit__(self, *exc) -> None:
        self._file.close()

    def _write_header(self) -> int:
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": (self.count,)}
        np.lib.format.write_array_header_1_0(self._file, header)
        return self._file.tell()


def write_index(directory: Path, index: dict) -> None:
    (directory / INDEX_FILE).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class PreparedTokens:
    """A prepared directory opened: its index and its ids, memory-mapped (read-only)."""

    directory: Path
    index: dict
    tokens: np.ndarray  # (N,) a read-only memory map

    def split(self, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
        """(training ids, validation ids): views of the map, each at least one window of ``seq_len + 1``."""
        return split_tokens(self.tokens, seq_len, self.index["val_fraction"])

    def tokenizer(self) -> BPETokenizer:
        """The tokenizer that made these tokens (saved beside them)."""
        return load_tokenizer(self.directory / TOKENIZER_FILE)  # numforge's file, any version

    def record(self) -> dict:
        """What a checkpoint keeps to know these tokens again: the directory, the file, its count and hash."""
        return {
            "tokens_dir": str(self.directory.resolve()),
            "files": [TOKENS_FILE],
            "num_tokens": self.index["num_tokens"],
            "tokens_sha256": self.index["tokens_sha256"],
        }


INDEX_KEYS = ("format", "version", "num_tokens", "dtype", "tokens_sha256", "val_fraction", "tokenizer_sha256")


def open_prepared(directory, vocab_size: int | None = None, verify: bool = False) -> PreparedTokens:
    """The prepared tokens in ``directory``; a clear ``ValueError`` if missing, incomplete or inconsistent.

    With ``vocab_size``, every id is checked to be below it, and with ``verify``
    the ids' SHA-256 against the index: one pass over the map, a block at a time
    (a damaged file fails here, not deep in an embedding lookup).
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"no such directory: {directory}")
    index_path = directory / INDEX_FILE
    if not index_path.is_file():
        raise ValueError(f"{directory} holds no prepared tokens (no {INDEX_FILE}); make them with numforge prepare")
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise ValueError(f"{index_path}: not JSON: {err}") from None
    if not isinstance(index, dict) or any(key not in index for key in INDEX_KEYS):
        raise ValueError(f"{index_path}: expected an object with the keys {list(INDEX_KEYS)}")
    if index["format"] != FORMAT_NAME or index["version"] != FORMAT_VERSION:
        raise ValueError(f"{index_path}: not a {FORMAT_NAME} version {FORMAT_VERSION} index")
    try:
        tokens = np.load(directory / TOKENS_FILE, mmap_mode="r", allow_pickle=False)
        expected = ((index["num_tokens"],), np.dtype(index["dtype"]))
    except Exception as err:  # noqa: BLE001 -- any failure to parse these bytes is the files' fault
        raise ValueError(f"{directory / TOKENS_FILE} is unreadable ({err})") from err
    if (tokens.shape, tokens.dtype) != expected:
        raise ValueError(
            f"{directory / TOKENS_FILE} holds {tokens.shape} {tokens.dtype}, but {INDEX_FILE} says "
            f"{expected[0]} {expected[1]}"
        )
    digest = hashlib.sha256()
    for start in range(0, len(tokens), CHECK_BLOCK) if vocab_size is not None or verify else ():
        interrupts.check()  # a job's safe point: 10 GB of tokens take a while
        block = tokens[start : start + CHECK_BLOCK]  # (<= CHECK_BLOCK,) a view of the map
        if vocab_size is not None and int(block.max()) >= vocab_size:
            raise ValueError(
                f"{directory / TOKENS_FILE} holds id {int(block.max())}, past the vocabulary of {vocab_size}"
            )
        digest.update(block.tobytes() if verify else b"")
    if verify and digest.hexdigest() != index["tokens_sha256"]:
        raise ValueError(f"{directory / TOKENS_FILE} does not match the SHA-256 in {INDEX_FILE}")
    return PreparedTokens(directory, index, tokens)
