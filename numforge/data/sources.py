"""Documents streamed in: a corpus is read one piece at a time, never held whole.

A source is one of:

- ``None``: the embedded corpus, ``pydoc_data.topics.topics`` (one document per
  topic, in sorted key order; every CPython ships it, about 0.47 MB of English);
- a list of strings: documents already in memory (tests, notebooks);
- a ``.txt`` (or any text) file: one document;
- a ``.jsonl`` file: one document per line, the string in ``text_field``;
- a ``.parquet`` file (FineWeb's and nanochat's shards): one document per row,
  the string column ``text_field``, read with ``pyarrow``'s batch reader;
- a directory: every file under it matching ``glob`` (default ``**/*.txt``), in
  sorted path order, each read by its suffix as above.

A document is yielded as one or more ``Piece``s; the last one has ``ends_document``
set. A long text file is cut into pieces of about ``PIECE_BYTES`` at points where
the tokenizer's split pattern never joins two chunks (``pretokenize.last_safe_cut``),
so encoding the pieces one by one gives the ids of the whole document. Documents that
are empty or only whitespace are skipped (and counted). Text that is not UTF-8 is a
``ValueError`` naming the file and the byte offset; with ``errors="replace"`` each bad
sequence becomes U+FFFD and is counted.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

PIECE_BYTES = 1 << 16  # long texts are read and cut into pieces of about this size (encoding one costs ~25x)
TASK_BYTES = 1 << 20  # text per task handed to a worker process
DEFAULT_GLOB = "**/*.txt"
DEFAULT_TEXT_FIELD = "text"
ERRORS = ("strict", "replace")
DEFAULT_CORPUS = "python-docs"  # how the embedded corpus is named in logs and checkpoints


@dataclass(frozen=True)
class Source:
    """Where documents come from, and how to read them (see the module docstring)."""

    path: Path | None = None  # None: the embedded corpus, unless ``documents`` are given
    glob: str = DEFAULT_GLOB
    text_field: str = DEFAULT_TEXT_FIELD
    errors: str = "strict"
    documents: tuple[str, ...] | None = None  # documents in memory

    def __post_init__(self) -> None:
        if self.errors not in ERRORS:
            raise ValueError(f"errors must be one of {ERRORS}, got {self.errors!r}")

    def describe(self) -> str:
        """The name of the source in logs: a resolved path, or what it is."""
        if self.documents is not None:
            return f"{len(self.documents)} documents in memory"
        return DEFAULT_CORPUS if self.path is None else str(self.path.resolve())


def as_source(data, **options) -> Source:
    """``data`` as a Source: a Source as it is, None (the embedded corpus), a path, or a list of documents."""
    if isinstance(data, Source):
        return data
    if data is None:
        return Source(**options)
    if isinstance(data, (str, os.PathLike)):
        if os.fspath(data) == "":
            raise ValueError("the data path is empty: name a text file or a directory")
        return Source(path=Path(data), **options)
    if isinstance(data, Sequence):
        if not all(isinstance(document, str) for document in data):
            raise TypeError("documents must be a list of str")
        return Source(documents=tuple(data), **options)
    raise TypeError(f"data must be a path, a list of str or None, got {type(data).__name__}")


@dataclass(frozen=True)
class Piece:
    text: str
    ends_document: bool  # the last piece of its document: <|endoftext|> follows it


@dataclass
class ReadStats:
    """What reading a source has met so far (filled in as the pieces are read)."""

    documents: int = 0
    bytes: int = 0  # UTF-8 bytes of the documents read
    empty: int = 0  # documents skipped: empty or only whitespace
    replaced: int = 0  # bad UTF-8 sequences replaced by U+FFFD (errors="replace")


def read_pieces(source: Source, stats: ReadStats | None = None, cut: Callable[[str], int] | None = None):
    """The source's documents as ``Piece``s, in order; ``cut(text)`` says where a long text may be cut (0: nowhere).

    ``stats`` is filled in as reading goes. Raises ``FileNotFoundError`` for a
    missing path and ``ValueError`` for text that is not UTF-8, a directory with
    no matching file, or a source with no text at all.
    """
    stats = ReadStats() if stats is None else stats
    cut = cut or (lambda text: 0)
    for blocks in _documents(source, stats):
        yield from _pieces(blocks, cut, stats)
    if stats.documents == 0:
        raise ValueError(f"{source.describe()} contains no text (every document is empty or whitespace)")


def load_documents(data, **options) -> list[str]:
    """Every document of ``data`` (see ``as_source``) whole, in memory: for small corpora (demos, tests)."""
    return [piece.text for piece in read_pieces(as_source(data, **options))]  # no cut: one piece per document


def source_hash(source: Source) -> str:
    """A SHA-256 hex digest of the source's documents, their boundaries included (read in one pass)."""
    digest = hashlib.sha256()
    length = 0
    for piece in read_pieces(source):
        raw = piece.text.encode("utf-8", "surrogatepass")
        digest.update(raw)
        length += len(raw)
        if piece.ends_document:  # 0xff never occurs in UTF-8: the marker cannot be text
            digest.update(b"\xff" + length.to_bytes(8, "little"))
            length = 0
    return digest.hexdigest()


def first_bytes(pieces, limit: int) -> Iterator[Piece]:
    """The pieces up to ``limit`` UTF-8 bytes in all; the last one cut there (at a character boundary)."""
    left = limit
    for piece in pieces:
        raw = piece.text.encode("utf-8", "surrogatepass")
        if len(raw) >= left:
            yield Piece(raw[:left].decode("utf-8", "ignore"), True)
            return
        left -= len(raw)
        yield piece


def tasks(pieces: Iterable[Piece], size: int | None = None) -> Iterator[list[Piece]]:
    """Consecutive pieces grouped into lists of about ``size`` characters (default ``TASK_BYTES``)."""
    size = TASK_BYTES if size is None else size
    task, length = [], 0
    for piece in pieces:
        task.append(piece)
        length += len(piece.text)
        if length >= size:
            yield task
            task, length = [], 0
    if task:
        yield task


def _pieces(blocks, cut: Callable[[str], int], stats: ReadStats) -> Iterator[Piece]:
    """One document's text, arriving in ``blocks``, as pieces of about PIECE_BYTES cut where ``cut`` allows.

    A piece is cut at the last safe point of its first PIECE_BYTES characters, or
    of all the text at hand when those hold none (a text with no safe point at all
    stays whole).
    """
    text, start = "", 0  # text[start:] is not yielded yet
    started = False  # a piece of this document was yielded (then it is not only whitespace)
    for block in blocks:
        text, start = text[start:] + block, 0
        while len(text) - start >= PIECE_BYTES and (at := cut(text[start : start + PIECE_BYTES]) or cut(text[start:])):
            yield Piece(text[start : start + at], False)
            start, started = start + at, True
    rest = text[start:]
    if started or rest.strip():
        stats.documents += 1
        yield Piece(rest, True)
    else:
        stats.empty += 1


def _documents(source: Source, stats: ReadStats) -> Iterator[Iterator[str]]:
    """Each document of the source as an iterator of its text blocks; bytes and bad UTF-8 counted."""
    if source.documents is not None or source.path is None:
        texts = source.documents if source.documents is not None else _embedded_documents()
        for text in texts:
            stats.bytes += len(text.encode("utf-8", "surrogatepass"))
            yield iter((text,))
        return
    for path in source_files(source):
        if path.suffix == ".jsonl":
            yield from (iter((text,)) for text in _jsonl_texts(path, source, stats))
        elif path.suffix == ".parquet":
            yield from (iter((text,)) for text in _parquet_texts(path, source, stats))
        else:
            yield _text_blocks(path, source.errors, stats)


def _embedded_documents() -> list[str]:
    from pydoc_data.topics import topics

    return [topics[key] for key in sorted(topics)]


def source_files(source: Source) -> list[Path]:
    """The files of a path source, in the order they are read."""
    path = source.path
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"no such file or directory: {path}")
    files = sorted(p for p in path.glob(source.glob) if p.is_file())
    if not files:
        raise ValueError(f"directory {path} has no files matching --glob {source.glob!r}")
    return files


def _text_blocks(path: Path, errors: str, stats: ReadStats) -> Iterator[str]:
    """The text of a file in blocks of about PIECE_BYTES; a multi-byte character is never split."""
    carry, offset = b"", 0
    with open(path, "rb") as handle:
        while True:
            data = handle.read(PIECE_BYTES)
            raw = carry + data
            end = _whole_characters(raw) if data else len(raw)
            yield _decode(raw[:end], errors, path, offset, stats)
            stats.bytes += end
            carry, offset = raw[end:], offset + end
            if not data:
                return


def _whole_characters(raw: bytes) -> int:
    """A length <= len(raw) that does not end inside a UTF-8 sequence: before the last byte that starts one."""
    for back in range(1, min(4, len(raw)) + 1):
        if raw[-back] & 0xC0 != 0x80:  # an ASCII byte or a lead byte: a sequence starts here
            return len(raw) - back
    return len(raw)  # no sequence starts in the last 4 bytes: not UTF-8 anyway, let the decoder say so


def _decode(raw: bytes, errors: str, path: Path, offset: int, stats: ReadStats) -> str:
    """``raw`` as UTF-8; bad bytes are a ValueError naming the file and byte, or U+FFFD (counted)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        if errors == "strict":
            raise ValueError(
                f"{path} is not UTF-8 text: byte {offset + err.start} is {raw[err.start : err.start + 1]!r} "
                f"(pass --errors replace to replace bad bytes with U+FFFD)"
            ) from None
    text = raw.decode("utf-8", errors="replace")
    stats.replaced += text.count("\ufffd") - raw.count("\ufffd".encode())  # U+FFFD already in the text is not counted
    return text


def _jsonl_texts(path: Path, source: Source, stats: ReadStats) -> Iterator[str]:
    field = source.text_field
    offset = 0
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            line = _decode(raw, source.errors, path, offset, stats)
            offset += len(raw)
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}: line {number} is not JSON: {err.msg}") from None
            if not isinstance(record, dict) or field not in record:
                raise ValueError(f"{path}: line {number} has no field {field!r} (choose one with --text-field)")
            yield _field_text(record[field], path, f"line {number}", field, stats)


def _parquet_texts(path: Path, source: Source, stats: ReadStats) -> Iterator[str]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(
            f'reading {path} needs pyarrow, which is not installed; install with: pip install -e ".[parquet]"'
        ) from None
    shard = pq.ParquetFile(path)
    field = source.text_field
    if field not in shard.schema_arrow.names:
        raise ValueError(
            f"{path} has no column {field!r} (it has {shard.schema_arrow.names}; choose one with --text-field)"
        )
    row = 0
    for batch in shard.iter_batches(batch_size=1024, columns=[field]):
        for value in batch.column(0).to_pylist():
            row += 1
            yield _field_text(value, path, f"row {row}", field, stats)


def _field_text(value, path: Path, where: str, field: str, stats: ReadStats) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{path}: {where}: field {field!r} is a {type(value).__name__}, expected a string")
    stats.bytes += len(value.encode("utf-8", "surrogatepass"))
    return value
