"""Data: a corpus of documents -> one token array on disk -> random training windows.

The default corpus is the running Python's own documentation text,
``pydoc_data.topics.topics``: one document per topic, taken in sorted key
order (every CPython ships it; about 0.47 MB of English). ``--data PATH``
replaces it with a UTF-8 text file (one document) or a directory of ``.txt``
files (one document each, in sorted path order).

Tokens: every document is encoded with ``encode_ordinary`` (text that looks
like a special token is plain text) and followed by the ``<|endoftext|>`` id,
so the model learns where documents end and sampling can stop there. The
token array is cached as ``.npy`` (uint16 when the vocabulary fits, else
uint32) under a name made from a hash of the documents and the tokenizer, so
a changed corpus or tokenizer never reuses a stale cache.

Batches: the first 90% of tokens train, the last 10% validate. A batch is
``B`` windows of ``T + 1`` consecutive tokens at uniformly random starts,
drawn by a seeded NumPy generator whose state is part of the checkpoint;
inputs are ``window[:, :-1]``, targets ``window[:, 1:]``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .atomic import atomic_path, write_text_atomic
from .checks import check_positive_int
from .tokenizer import EOT, BPETokenizer

DEFAULT_VOCAB_SIZE = 2048  # the tokenizer trained when none is given
DEFAULT_CORPUS = "python-docs"  # how the default corpus is named in logs and checkpoints
CACHE_FORMAT = 1  # bump when the cached token layout changes


# ---------------------------------------------------------------- corpus


def default_documents() -> list[str]:
    """The embedded corpus: ``pydoc_data.topics.topics`` values in sorted key order."""
    from pydoc_data.topics import topics

    return [topics[key] for key in sorted(topics)]


def _read_utf8(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{path} is not UTF-8 text: byte {err.start} is {err.object[err.start : err.start + 1]!r}"
        ) from err


def read_documents(path: str | os.PathLike) -> list[str]:
    """The documents in a UTF-8 text file (one) or a directory of ``.txt`` files (sorted).

    Raises ``FileNotFoundError`` for a missing path and ``ValueError`` for an
    empty path (not "the current directory"), a file that is not UTF-8, an
    empty file, or a directory with no ``.txt`` text.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"the data path must be a str or a path, got {type(path).__name__}")
    if os.fspath(path) == "":
        raise ValueError("the data path is empty: name a text file or a directory of .txt files")
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.txt") if p.is_file())
        if not files:
            raise ValueError(f"directory {path} contains no .txt files")
    elif path.is_file():
        files = [path]
    else:
        raise FileNotFoundError(f"no such file or directory: {path}")
    documents = [_read_utf8(f) for f in files]
    documents = [d for d in documents if d.strip()]
    if not documents:
        raise ValueError(f"{path} contains no text (every file is empty or whitespace)")
    return documents


def load_documents(data: str | os.PathLike | None) -> list[str]:
    """``read_documents(data)``, or the embedded corpus when ``data`` is None."""
    return default_documents() if data is None else read_documents(data)


# ---------------------------------------------------------------- tokens


def documents_hash(documents: Sequence[str]) -> str:
    """A SHA-256 hex digest of the documents (their boundaries included)."""
    digest = hashlib.sha256()
    for document in documents:
        raw = document.encode("utf-8")
        digest.update(len(raw).to_bytes(8, "little"))
        digest.update(raw)
    return digest.hexdigest()


def tokenizer_hash(tokenizer) -> str:
    """A SHA-256 hex digest of the tokenizer's JSON form."""
    text = json.dumps(tokenizer.to_dict(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits in 16 bits, else uint32."""
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.uint32)


def encode_documents(documents: Sequence[str], tokenizer) -> np.ndarray:
    """All documents as one id array, each followed by ``<|endoftext|>`` if the tokenizer has it.

    Example: documents ["ab", "c"] with ids a=0 b=1 c=2 and EOT=3 -> [0, 1, 3, 2, 3].
    """
    end = tokenizer.special_tokens.get(EOT)
    ids: list[int] = []
    for document in documents:
        ids.extend(tokenizer.encode_ordinary(document))
        if end is not None:
            ids.append(end)
    return np.asarray(ids, dtype=token_dtype(tokenizer.vocab_size))  # (N,)


def default_cache_dir() -> Path:
    """``$NUMFORGE_CACHE``, else ``$XDG_CACHE_HOME/numforge``, else ``~/.cache/numforge``."""
    if os.environ.get("NUMFORGE_CACHE"):
        return Path(os.environ["NUMFORGE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "numforge"


def tokens_cache_path(documents: Sequence[str], tokenizer, cache_dir: str | os.PathLike) -> Path:
    """Where the token array of these documents under this tokenizer is cached."""
    key = hashlib.sha256(f"{CACHE_FORMAT}:{documents_hash(documents)}:{tokenizer_hash(tokenizer)}".encode()).hexdigest()
    return Path(cache_dir) / "tokens" / f"{key[:32]}.npy"


def load_tokens(documents: Sequence[str], tokenizer, cache_dir: str | os.PathLike | None = None) -> np.ndarray:
    """The documents' token ids, from the cache when present, else encoded and cached.

    The cache file is written atomically, so an interrupted run never leaves
    a truncated array behind, and a ``.sha256`` file beside it records the
    tokens' digest. A cache file that is damaged or does not fit the
    tokenizer (see ``read_cached_tokens``) is derived data: it is encoded
    again and replaced.
    """
    path = tokens_cache_path(documents, tokenizer, cache_dir or default_cache_dir())
    if path.is_file():
        try:
            return read_cached_tokens(path, tokenizer.vocab_size)
        except ValueError:
            pass  # rebuilt below
    tokens = encode_documents(documents, tokenizer)
    with atomic_path(path) as temp:
        with open(temp, "wb") as f:
            np.save(f, tokens, allow_pickle=False)
    write_text_atomic(path.with_suffix(".sha256"), hashlib.sha256(tokens.tobytes()).hexdigest() + "\n")
    return tokens


def read_cached_tokens(path: Path, vocab_size: int) -> np.ndarray:
    """The token array cached in ``path``; a ``ValueError`` naming the file unless it is a 1-D array of
    ``token_dtype(vocab_size)`` ids below ``vocab_size`` whose SHA-256 is the one in the ``.sha256`` file
    beside it (never a pickle; the header is checked against the file's size before any data is read,
    through a memory map)."""
    try:
        mapped = np.load(path, mmap_mode="r", allow_pickle=False)
        if not isinstance(mapped, np.ndarray) or mapped.ndim != 1 or mapped.dtype != token_dtype(vocab_size):
            raise ValueError(f"expected a 1-D {token_dtype(vocab_size)} array, got {getattr(mapped, 'dtype', '?')}")
        tokens = np.array(mapped)  # (N,) in memory, the file closed
    except Exception as err:  # noqa: BLE001 -- any failure to parse these bytes is the file's fault
        raise ValueError(f"token cache {path} is unreadable ({err}); it can be deleted") from err
    if tokens.size and int(tokens.max()) >= vocab_size:
        raise ValueError(f"token cache {path} holds id {int(tokens.max())}, past the vocabulary of {vocab_size}")
    digest = path.with_suffix(".sha256")
    if not digest.is_file() or digest.read_bytes().strip() != hashlib.sha256(tokens.tobytes()).hexdigest().encode():
        raise ValueError(f"token cache {path} does not match its digest {digest.name}; it can be deleted")
    return tokens


# ---------------------------------------------------------------- tokenizer


def load_or_train_tokenizer(
    documents,
    vocab_size: int,
    tokenizer_path=None,
    cache_dir=None,
    say: Callable[[str], None] = print,
    trust_pattern: bool = False,
) -> BPETokenizer:
    """The tokenizer in ``tokenizer_path``, or a BPE of ``vocab_size`` trained on the documents.

    A trained tokenizer is cached under a hash of the documents and the
    vocabulary size, so the next run on the same text skips training; a
    damaged cached file is trained again and replaced. ``trust_pattern``:
    see ``BPETokenizer.from_dict``.
    """
    if tokenizer_path is not None:
        return BPETokenizer.load(tokenizer_path, trust_pattern=trust_pattern)
    key = hashlib.sha256(f"{documents_hash(documents)}:{vocab_size}:{EOT}".encode()).hexdigest()
    cached = Path(cache_dir or default_cache_dir()) / "tokenizers" / f"{key[:32]}.json"
    if cached.is_file():
        try:
            tokenizer = BPETokenizer.load(cached)
            if set(tokenizer.special_tokens) != {EOT}:
                raise ValueError(f"its special tokens are {sorted(tokenizer.special_tokens)}, not [{EOT!r}]")
            return tokenizer
        except ValueError as err:
            say(f"note: the cached tokenizer is damaged ({err}); training it again")
    say(f"training a BPE tokenizer with {vocab_size} tokens on {sum(map(len, documents)):,} characters")
    tokenizer = BPETokenizer.train(documents, vocab_size, special_tokens=(EOT,))
    tokenizer.save(cached)
    return tokenizer


def default_tokenizer(cache_dir=None, say: Callable[[str], None] = print) -> BPETokenizer:
    """The ``DEFAULT_VOCAB_SIZE`` tokenizer of the embedded corpus: trained once, then read from the cache."""
    return load_or_train_tokenizer(default_documents(), DEFAULT_VOCAB_SIZE, cache_dir=cache_dir, say=say)


# ---------------------------------------------------------------- windows


def split_tokens(tokens: np.ndarray, seq_len: int, val_fraction: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """The first ``1 - val_fraction`` of ``tokens`` for training, the rest for validation.

    Each part must hold at least one window of ``seq_len + 1`` tokens.
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    split = int(round(len(tokens) * (1.0 - val_fraction)))
    train, val = tokens[:split], tokens[split:]  # (N,) -> (N_train,), (N_val,)
    for name, part in (("training", train), ("validation", val)):
        if len(part) < seq_len + 1:
            raise ValueError(
                f"the corpus is too short: {len(tokens)} tokens give {len(part)} {name} tokens, "
                f"fewer than seq_len + 1 = {seq_len + 1}; use more text or a shorter --seq-len"
            )
    return train, val


# ---------------------------------------------------------------- batches


def windows(tokens: np.ndarray, starts: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """``(inputs, targets)``, int64 ``(n, T)``: the ``T + 1`` tokens from each start, targets shifted by one."""
    window = tokens[starts[:, None] + np.arange(seq_len + 1)].astype(np.int64)  # (n,1) + (T+1,) -> (n,T+1)
    return window[:, :-1], window[:, 1:]  # (n,T+1) -> (n,T), (n,T)


class BatchSampler:
    """Random ``(B, T)`` input/target windows from a token array, reproducible and resumable.

    ``state_dict()`` is JSON-serializable; ``load_state_dict`` continues the
    exact sequence of batches.
    """

    def __init__(self, tokens: np.ndarray, batch_size: int, seq_len: int, seed: int):
        check_positive_int(batch_size, "batch_size")
        check_positive_int(seq_len, "seq_len")
        if tokens.ndim != 1 or len(tokens) < seq_len + 1:
            raise ValueError(
                f"tokens must be a 1-D array of at least seq_len + 1 = {seq_len + 1} ids, got shape {tokens.shape}"
            )
        self.tokens = tokens
        self.batch_size = batch_size
        self.seq_len = seq_len
        self.rng = np.random.default_rng(seed)
        self.batches_drawn = 0

    def next_batch(self) -> tuple[np.ndarray, np.ndarray]:
        """``(inputs, targets)``, both int64 ``(B, T)``; targets are inputs shifted by one."""
        last_start = len(self.tokens) - (self.seq_len + 1)
        starts = self.rng.integers(0, last_start + 1, size=self.batch_size)  # (B,)
        self.batches_drawn += 1
        return windows(self.tokens, starts, self.seq_len)

    def state_dict(self) -> dict[str, Any]:
        return {"bit_generator": self.rng.bit_generator.state, "batches_drawn": self.batches_drawn}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["bit_generator"]
        self.batches_drawn = int(state["batches_drawn"])
