"""Data: documents streamed in, tokens prepared once, memory-mapped windows out.

- ``sources``: read a corpus (text, a directory, JSON lines, Parquet) one piece at a time;
- ``tokenizers``: train a BPE on a corpus by streaming chunk counts; the cached default tokenizer;
- ``parallel``: an ordered map over worker processes with few tasks in flight;
- ``prepare``: encode on every core into a prepared directory, atomically; the in-memory oracle;
- ``tokens``: the prepared directory's format, written as it is encoded and memory-mapped to train;
- ``batches``: the train/validation split and seeded, resumable random windows.
"""

from .batches import BatchSampler, split_tokens, windows
from .prepare import encode_documents, prepare_tokens, prepared_for
from .sources import DEFAULT_CORPUS, Source, as_source, load_documents, read_pieces
from .tokenizers import (
    DEFAULT_VOCAB_SIZE,
    default_cache_dir,
    default_tokenizer,
    load_or_train_tokenizer,
    train_tokenizer,
)
from .tokens import PreparedTokens, open_prepared, token_dtype

__all__ = [
    "BatchSampler",
    "DEFAULT_CORPUS",
    "DEFAULT_VOCAB_SIZE",
    "PreparedTokens",
    "Source",
    "as_source",
    "default_cache_dir",
    "default_tokenizer",
    "encode_documents",
    "load_documents",
    "load_or_train_tokenizer",
    "open_prepared",
    "prepare_tokens",
    "prepared_for",
    "read_pieces",
    "split_tokens",
    "token_dtype",
    "train_tokenizer",
    "windows",
]
