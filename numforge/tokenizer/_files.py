"""Reading the tokenizer files: errors name the file and the line (or byte) where they are wrong.

The readers are the house's own (``numforge.files``), named here for the tokenizer's modules."""

from __future__ import annotations

from ..files import read_json, read_text

__all__ = ["read_json", "read_text"]
