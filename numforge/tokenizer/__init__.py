"""Byte-level BPE: the split pattern (``pretokenize``), the textbook algorithms (``reference``),
the fast tokenizer with its own file format (``bpe``), other tokenizers' files (``interop``,
``hf_json``), and ``load_tokenizer`` for any of them (a Hugging Face model directory too)."""

from .bpe import EOT, BPETokenizer, IncrementalDecoder, Prompt
from .hf_dir import load_tokenizer
from .pretokenize import GPT2_SPLIT_PATTERN

__all__ = ["EOT", "BPETokenizer", "IncrementalDecoder", "Prompt", "GPT2_SPLIT_PATTERN", "load_tokenizer"]
