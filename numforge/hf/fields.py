"""config.json's errors in the file's own words: the key a user edits (``hidden_size``), not numforge's (``d_model``).

Two steps. The counts an architecture computes with before it builds a ``GPTConfig`` (layers, context,
widths) are checked first, each by its key (``check_counts``). Every error ``GPTConfig`` raises after
that (``num_kv_heads (3) must divide num_heads (4)``) is retold with the architecture's table of
numforge option -> config.json key (``in_file_words``), so the rules stay in one place, ``GPTConfig``.
"""

from __future__ import annotations

import re

from ..checks import is_int


def check_counts(d: dict, source: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
    """``ValueError`` naming the first key of ``required`` that is not a positive integer in ``d``, or of
    ``optional`` that is neither one nor null: ``config.json: hidden_size must be a positive integer, got 0``."""
    for key in required + optional:
        value = d.get(key)
        if key in optional and value is None:
            continue
        if not is_int(value) or value < 1:
            either = " or null" if key in optional else ""
            raise ValueError(f"{source}: {key} must be a positive integer{either}, got {value!r}")


def in_file_words(error: Exception, names: dict[str, str]) -> str:
    """``error``'s message with each whole word that is a numforge option of ``names`` replaced by its
    config.json key: ``num_kv_heads (3) must divide num_heads (4)`` -> ``num_key_value_heads (3) must divide
    num_attention_heads (4)``."""
    words = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    return words.sub(lambda match: names[match.group()], str(error))
