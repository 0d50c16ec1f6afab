"""Tokens prepared once: documents streamed in, encoded on every core, written to a flat file.

``prepare_tokens(data, tokenizer, out, workers=N)`` reads the source piece by piece
(``sources.read_pieces``), groups the pieces into tasks of about ``sources.TASK_BYTES``,
and encodes the tasks on ``N`` worker processes with ``encode_ordinary`` (text
that looks like a special token is plain text), each document followed by the
``<|endoftext|>`` id. Results are written in task order, so the file is the
same, byte for byte, for any number of workers. Memory holds a few tasks per
worker and each worker's chunk cache, whatever the size of the corpus. The
output directory is written under a temporary name and renamed when complete
(``atomic.atomic_directory``): Ctrl-C, SIGTERM or a crash leaves nothing that a
later run takes for prepared tokens, and what a killed run left beside it is
removed when the next one starts. The format is in ``tokens.py``.

The whole job is one ``interrupts.deferred`` block: Ctrl-C or SIGTERM is
recorded and the job stops at its next safe point (each task's result, and
once more just before the rename), raising ``interrupts.Interrupted``.

``encode_documents`` is the plain way, everything in memory: the oracle the
tests hold the prepared file to.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
from tqdm import tqdm

from .. import interrupts
from ..atomic import atomic_directory, remove_directory, remove_stale_temporaries
from ..checks import check_positive_int
from ..tokenizer import EOT, BPETokenizer, tokenizer_from_dict
from ..tokenizer.pretokenize import last_safe_cut
from .parallel import default_workers, ordered_map
from .sources import Piece, ReadStats, Source, as_source, read_pieces, source_files, source_hash, tasks
from .tokenizers import default_cache_dir, tokenizer_hash
from .tokens import (
    FORMAT_NAME,
    FORMAT_VERSION,
    INDEX_FILE,
    TOKENIZER_FILE,
    TOKENS_FILE,
    TokenWriter,
    open_prepared,
    token_dtype,
    write_index,
)

DEFAULT_VAL_FRACTION = 0.1
CACHE_FORMAT = 2  # bump when the cached layout changes (1: one .npy per corpus)


def encode_documents(documents: Iterable[str], tokenizer) -> np.ndarray:
    """All documents as one id array, each followed by ``<|endoftext|>`` if the tokenizer has it (in memory).

    Example: documents ["ab", "c"] with ids a=0 b=1 c=2 and EOT=3 -> [0, 1, 3, 2, 3].
    """
    end = tokenizer.special_tokens.get(EOT)
    ids: list[int] = []
    for document in documents:
        ids.extend(tokenizer.encode_ordinary(document))
        if end is not None:
            ids.append(end)
    return np.asarray(ids, dtype=token_dtype(tokenizer.vocab_size))  # (N,)


class Encoder:
    """In a worker: a task of pieces -> its ids, ``<|endoftext|>`` after each document's last piece."""

    def __init__(self, tokenizer_dict: dict, dtype: str):
        self.tokenizer = tokenizer_from_dict(tokenizer_dict)
        self.end = self.tokenizer.special_tokens.get(EOT)
        self.dtype = dtype

    def __call__(self, task: list[Piece]) -> np.ndarray:
        parts = [np.zeros(0, self.dtype)]
        for piece in task:  # piece by piece: a list of Python ints costs 8 bytes an id, the array 2 or 4
            ids = self.tokenizer.encode_ordinary(piece.text)
            if piece.ends_document and self.end is not None:
                ids.append(self.end)
            parts.append(np.array(ids, dtype=self.dtype))
        return np.concatenate(parts)  # (n,)


def prepare_tokens(
    data,
    tokenizer: BPETokenizer,
    out,
    *,
    workers: int | None = None,
    val_fraction: float = DEFAULT_VAL_FRACTION,
    progress: bool = False,
    say: Callable[[str], None] | None = None,
) -> dict:
    """Encode the documents of ``data`` (see ``sources.as_source``) into the prepared directory ``out``.

    Returns the index written. ``out`` must not exist yet. ``say`` receives the
    closing summary (documents, bytes, tokens, bytes per token, MB/s, time).
    """
    source = as_source(data)
    out = Path(out)
    if out.exists():
        raise ValueError(f"{out} already exists; choose another --out or remove it")
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    workers = default_workers() if workers is None else check_positive_int(workers, "workers")
    started = time.perf_counter()
    with interrupts.deferred():
        index = _prepare(source, tokenizer, out, workers, val_fraction, progress)
    if say is not None:
        say(summary(index, time.perf_counter() - started, workers, out))
    return index


def _prepare(source: Source, tokenizer, out: Path, workers: int, val_fraction: float, progress: bool) -> dict:
    """The body of ``prepare_tokens``: encode into a temporary directory, then rename it to ``out``."""
    remove_stale_temporaries(out.parent, out.name)  # what a killed prepare of this directory left
    dtype = token_dtype(tokenizer.vocab_size)
    stats = ReadStats()
    pieces = read_pieces(source, stats, lambda text: last_safe_cut(text, tokenizer.pattern))
    with atomic_directory(out) as temp, _bar(source, progress) as bar:
        with TokenWriter(temp / TOKENS_FILE, dtype) as writer:
            for ids in ordered_map(Encoder, (tokenizer.to_dict(), dtype.str), tasks(pieces), workers):
                writer.write(ids)
                bar.update(stats.bytes - bar.n)
                bar.set_postfix_str(f"{stats.documents:,} documents, {writer.count:,} tokens", refresh=False)
            writer.finish()
        tokenizer.save(temp / TOKENIZER_FILE)
        index = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "num_tokens": writer.count,
            "dtype": dtype.str,
            "tokens_sha256": writer.digest.hexdigest(),
            "val_fraction": val_fraction,
            "tokenizer_sha256": tokenizer_hash(tokenizer),
            "source": source.describe(),
            "documents": stats.documents,
            "bytes": stats.bytes,
            "empty_documents": stats.empty,
            "replaced": stats.replaced,
        }
        write_index(temp, index)  # last: a directory with an index is complete
        interrupts.check()  # a stop that came during the last writes: nothing is renamed into place
    return index


def summary(index: dict, seconds: float, workers: int, out: Path) -> str:
    megabytes = index["bytes"] / 1e6
    notes = [f"{index['empty_documents']:,} empty skipped"] if index["empty_documents"] else []
    if index["replaced"]:
        notes.append(f"{index['replaced']:,} bad UTF-8 sequences replaced by U+FFFD")
    return (
        f"prepared {index['documents']:,} documents{' (' + ', '.join(notes) + ')' if notes else ''}, "
        f"{megabytes:,.2f} MB -> {index['num_tokens']:,} tokens ({index['bytes'] / max(index['num_tokens'], 1):.2f} "
        f"bytes per token, {np.dtype(index['dtype']).name}) in {seconds:.1f} s "
        f"({megabytes / max(seconds, 1e-9):.2f} MB/s, {workers} worker{'s' if workers > 1 else ''}); wrote {out}"
    )


def _bar(source: Source, progress: bool) -> tqdm:
    """A progress bar in bytes; its total is known when every file is plain text."""
    total = None
    if progress and source.path is not None and source.documents is None:
        files = source_files(source)
        if all(path.suffix not in (".jsonl", ".parquet") for path in files):
            total = sum(path.stat().st_size for path in files)
    return tqdm(total=total, unit="B", unit_scale=True, desc="prepare", disable=not progress, dynamic_ncols=True)


def prepared_for(data, tokenizer: BPETokenizer, cache_dir=None, *, workers=None, progress=False, say=None) -> Path:
    """The cached prepared directory of ``data`` under ``tokenizer``, prepared first if missing.

    Its name is a hash of the documents and of the tokenizer, so a changed
    corpus or tokenizer is never served stale tokens. A cached directory that
    is damaged (unreadable, ids past the vocabulary, a SHA-256 or an index that
    does not match) is derived data: it is prepared again. What killed
    preparations left in the cache (of any corpus) is removed first.
    """
    source = as_source(data)
    key = f"{CACHE_FORMAT}:{source_hash(source)}:{tokenizer_hash(tokenizer)}"
    path = Path(cache_dir or default_cache_dir()) / "tokens" / hashlib.sha256(key.encode()).hexdigest()[:32]
    remove_stale_temporaries(path.parent)
    if path.exists():
        try:
            index = open_prepared(path, tokenizer.vocab_size, verify=True).index
            if (index["val_fraction"], index["tokenizer_sha256"]) != (DEFAULT_VAL_FRACTION, tokenizer_hash(tokenizer)):
                raise ValueError(f"{path / INDEX_FILE} does not describe these tokens")
            return path
        except (OSError, ValueError) as err:
            if say is not None:
                say(f"note: the cached tokens are damaged ({err}); preparing them again")
            remove_directory(path)
    try:
        prepare_tokens(source, tokenizer, path, workers=workers, progress=progress, say=say)
    except FileExistsError:  # another process prepared it meanwhile
        pass
    return path
