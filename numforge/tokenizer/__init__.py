"""Byte-level BPE: the textbook algorithms (``reference``), the fast tokenizer (``bpe``), file formats."""

from .bpe import BPETokenizer, IncrementalDecoder
from .pretokenize import GPT2_SPLIT_PATTERN

__all__ = ["BPETokenizer", "IncrementalDecoder", "GPT2_SPLIT_PATTERN"]
