"""Byte-level BPE: the split pattern (``pretokenize``), the textbook algorithms (``reference``),
the fast core (``bpe``), ``BPETokenizer``: the core with Hugging Face's pipeline around it
(``bpe_tokenizer``, ``pipeline``) and its own file format (``bpe_file``), other tokenizers' files
(``interop``, ``hf_json``), and ``load_tokenizer`` for any of them (a Hugging Face model directory too)."""

from .bpe import EOT, IncrementalDecoder
from .bpe_tokenizer import BPETokenizer
from .hf_dir import load_tokenizer, tokenizer_from_dict
from .pipeline import Prompt
from .pretokenize import GPT2_SPLIT_PATTERN

__all__ = [
    "EOT",
    "BPETokenizer",
    "IncrementalDecoder",
    "Prompt",
    "GPT2_SPLIT_PATTERN",
    "load_tokenizer",
    "tokenizer_from_dict",
]
