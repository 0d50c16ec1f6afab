"""Tokenizers for a corpus: trained by streaming chunk counts, cached by corpus and size.

``train_tokenizer`` reads the source piece by piece and counts its chunks
(``bpe.count_chunks``) on worker processes, a task at a time; the parent adds
the counts up. Memory grows with the number of distinct chunks, not with the
corpus. The counts of the parts add up to the counts of the whole because the
pieces are cut only where no chunk crosses (``pretokenize.last_safe_cut``), so
the merges are those ``BPETokenizer.train`` learns from the whole text.
``max_bytes`` trains on the first bytes only.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from .. import interrupts
from ..atomic import remove_stale_temporaries
from ..checks import check_positive_int
from ..tokenizer import EOT, GPT2_SPLIT_PATTERN, BPETokenizer
from ..tokenizer.bpe import check_vocab_size, count_chunks
from ..tokenizer.pretokenize import last_safe_cut
from .parallel import default_workers, ordered_map
from .sources import ReadStats, as_source, first_bytes, read_pieces, source_hash, tasks

DEFAULT_VOCAB_SIZE = 2048  # the tokenizer trained when none is given


def default_cache_dir() -> Path:
    """``$NUMFORGE_CACHE``, else ``$XDG_CACHE_HOME/numforge``, else ``~/.cache/numforge``."""
    if os.environ.get("NUMFORGE_CACHE"):
        return Path(os.environ["NUMFORGE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "numforge"


def tokenizer_hash(tokenizer) -> str:
    """A SHA-256 hex digest of the tokenizer's JSON form."""
    text = json.dumps(tokenizer.to_dict(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ChunkCounter:
    """In a worker: a task of pieces -> the counts of its chunks."""

    def __init__(self, special_tokens: tuple[str, ...], pattern: str):
        self.special_tokens, self.pattern = special_tokens, pattern

    def __call__(self, task) -> Counter:
        return count_chunks((piece.text for piece in task), self.special_tokens, self.pattern)


def train_tokenizer(
    data,
    vocab_size: int,
    *,
    special_tokens=(EOT,),
    pattern: str = GPT2_SPLIT_PATTERN,
    max_bytes: int | None = None,
    workers: int | None = None,
    progress: bool = False,
    stats: ReadStats | None = None,
) -> BPETokenizer:
    """A BPE of ``vocab_size`` learned from the documents of ``data`` (the first ``max_bytes`` bytes if given)."""
    special_tokens = tuple(special_tokens)
    if max_bytes is not None:
        check_positive_int(max_bytes, "max_bytes")
    check_vocab_size(vocab_size, special_tokens)  # before reading a corpus, not after
    pieces = read_pieces(as_source(data), stats, lambda text: last_safe_cut(text, pattern))
    if max_bytes is not None:
        pieces = first_bytes(pieces, max_bytes)
    counts = Counter()
    worker_args = (special_tokens, pattern)
    with interrupts.deferred():  # Ctrl-C and SIGTERM stop it after a task or a merge (interrupts.check)
        for part in ordered_map(
            ChunkCounter, worker_args, tasks(pieces), default_workers() if workers is None else workers
        ):
            counts.update(part)
        return BPETokenizer.train_from_chunk_counts(counts, vocab_size, special_tokens, pattern, progress=progress)


def load_or_train_tokenizer(
    data,
    vocab_size: int,
    tokenizer_path=None,
    cache_dir=None,
    say: Callable[[str], None] = print,
    trust_pattern: bool = False,
) -> BPETokenizer:
    """The tokenizer in ``tokenizer_path``, or a BPE of ``vocab_size`` trained on ``data``'s documents.

    A trained tokenizer is cached under a hash of the documents and the
    vocabulary size, so the next run on the same text skips training; a
    damaged cached file is trained again and replaced. What killed runs left
    in the tokenizer cache is removed first. ``trust_pattern``:
    see ``BPETokenizer.from_dict``.
    """
    if tokenizer_path is not None:
        return BPETokenizer.load(tokenizer_path, trust_pattern=trust_pattern)
    source = as_source(data)
    key = hashlib.sha256(f"{source_hash(source)}:{vocab_size}:{EOT}".encode()).hexdigest()
    cached = Path(cache_dir or default_cache_dir()) / "tokenizers" / f"{key[:32]}.json"
    remove_stale_temporaries(cached.parent)  # what killed runs left while saving a tokenizer
    if cached.is_file():
        try:
            tokenizer = BPETokenizer.load(cached)
            if set(tokenizer.special_tokens) != {EOT}:
                raise ValueError(f"its special tokens are {sorted(tokenizer.special_tokens)}, not [{EOT!r}]")
            return tokenizer
        except ValueError as err:
            say(f"note: the cached tokenizer is damaged ({err}); training it again")
    say(f"training a BPE tokenizer with {vocab_size} tokens on {source.describe()}")
    tokenizer = train_tokenizer(source, vocab_size)
    tokenizer.save(cached)
    return tokenizer


def default_tokenizer(cache_dir=None, say: Callable[[str], None] = print) -> BPETokenizer:
    """The ``DEFAULT_VOCAB_SIZE`` tokenizer of the embedded corpus: trained once, then read from the cache."""
    return load_or_train_tokenizer(None, DEFAULT_VOCAB_SIZE, cache_dir=cache_dir, say=say)
