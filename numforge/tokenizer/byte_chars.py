"""GPT-2's byte alphabet: the printable character that stands for each byte in a vocabulary file.

GPT-2's files (and Hugging Face's tokenizer.json, whose ByteLevel step maps every byte this
way before BPE) write a token's bytes as printable characters: printable Latin-1 bytes stand
for themselves, the other 68 (controls, space, ...) become chr(256), chr(257), ... in byte
order, so " the" is written "Ġthe".
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def byte_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte.

    Examples: 0x21 "!" -> "!", 0x00 -> "Ā" (chr 256), 0x20 " " -> "Ġ" (chr 288).
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {b: chr(b) for b in printable}
    others = [b for b in range(256) if b not in mapping]
    mapping.update({b: chr(256 + n) for n, b in enumerate(others)})
    return mapping


@lru_cache(maxsize=1)
def spelled_in_bytes() -> dict[str, int]:
    """The inverse of ``byte_to_unicode``: GPT-2's 256 byte characters -> their bytes."""
    return {char: b for b, char in byte_to_unicode().items()}


def gpt2_string(data: bytes) -> str:
    """``data`` written in GPT-2's byte characters: b" the" -> "Ġthe"."""
    table = byte_to_unicode()
    return "".join(table[b] for b in data)


def gpt2_bytes(text: str, where: str) -> bytes:
    """The bytes a string of GPT-2's byte characters stands for; a ``ValueError`` naming ``where`` otherwise."""
    inverse = spelled_in_bytes()
    try:
        return bytes(inverse[char] for char in text)
    except KeyError as error:
        raise ValueError(f"{where}: {error.args[0]!r} is not one of GPT-2's 256 byte characters") from None
