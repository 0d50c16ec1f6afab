"""Byte-level BPE: the split pattern (``pretokenize``), the textbook algorithms (``reference``),
the fast tokenizer with its own file format (``bpe``), and other tokenizers' files (``interop``)."""

from .bpe import EOT, BPETokenizer, IncrementalDecoder
from .pretokenize import GPT2_SPLIT_PATTERN

__all__ = ["EOT", "BPETokenizer", "IncrementalDecoder", "GPT2_SPLIT_PATTERN"]
