"""SentencePiece's tokenizer.model (a protobuf) read without the ``sentencepiece`` package, for BPE models.

The file is a ``ModelProto`` in protobuf's wire format: each field a key (field number << 3 | wire type), then a
varint (type 0), 8 bytes (1), a length and that many bytes (2: a string or a message) or 4 bytes (5). What is read::

    ModelProto      1: pieces (repeated SentencePiece)   2: trainer_spec   3: normalizer_spec
    SentencePiece   1: piece (string)   2: score (float)   3: type (1 normal, 2 unknown, 3 control,
                                                                   4 user defined, 5 unused, 6 byte)
    TrainerSpec     3: model_type (1 unigram, 2 bpe)   35: byte_fallback
    NormalizerSpec  1: name ("identity", "nmt_nfkc", ...)   3: add_dummy_prefix   4: remove_extra_whitespaces

SentencePiece's BPE merges the adjacent pair whose join is a piece of highest score, the leftmost among
equals; as merges in rank order (``spm_bpe``'s, the byte-level core's loop) that is every split (left, right)
of each normal piece into two pieces, the pieces by score, highest first (ties: the lower id first).
"""

from __future__ import annotations

import struct

from ..files import read_bytes
from .spm_bpe import SentencePieceBPE

CONVERT = (
    '; write its tokenizer.json once with transformers (pip install sentencepiece protobuf): python -c "from '
    "transformers import AutoTokenizer; AutoTokenizer.from_pretrained('DIR').save_pretrained('DIR')\""
)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
BPE_MODEL = 2


def protobuf_fields(data: bytes, where: str) -> dict[int, list]:
    """field number -> its values in order: ints (varint, 64-bit), bytes (length-delimited), 4-byte raw bytes."""
    fields, i = {}, 0
    while i < len(data):
        key, i = _varint(data, i, where)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i, where)
        elif wire == 2:
            size, i = _varint(data, i, where)
            value, i = data[i : i + size], i + size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value, i = data[i : i + width], i + width
        else:
            raise ValueError(f"{where}: wire type {wire} at byte {i} is not protobuf's 0, 1, 2 or 5")
        if i > len(data):
            raise ValueError(f"{where}: field {number} runs past the end of the data")
        fields.setdefault(number, []).append(value)
    return fields


def _varint(data: bytes, i: int, where: str) -> tuple[int, int]:
    value, shift = 0, 0
    while i < len(data) and shift < 64:
        byte = data[i]
        value, i, shift = value | (byte & 0x7F) << shift, i + 1, shift + 7
        if byte < 0x80:
            return value, i
    raise ValueError(f"{where}: a varint at byte {i} is cut off or longer than 10 bytes")


def read_pieces(path) -> tuple[list[tuple[str, float, int]], dict, dict]:
    """(pieces as (piece, score, type), the trainer spec's fields, the normalizer spec's fields)."""
    where = str(path)
    model = protobuf_fields(read_bytes(path), where)
    pieces = []
    for n, message in enumerate(model.get(1, [])):
        fields = protobuf_fields(message, f"{where}: piece {n}")
        piece = fields.get(1, [b""])[-1].decode("utf-8")
        score = struct.unpack("<f", fields[2][-1])[0] if 2 in fields else 0.0
        pieces.append((piece, score, fields.get(3, [NORMAL])[-1]))
    trainer = protobuf_fields(model[2][-1], f"{where}: trainer_spec") if 2 in model else {}
    normalizer = protobuf_fields(model[3][-1], f"{where}: normalizer_spec") if 3 in model else {}
    return pieces, trainer, normalizer


def load_sentencepiece_model(path) -> SentencePieceBPE:
    """The BPE tokenizer of a tokenizer.model; a unigram model, a normalization other than identity, or collapsed
    whitespace is refused by name."""
    pieces, trainer, normalizer = read_pieces(path)
    if trainer.get(3, [1])[-1] != BPE_MODEL:
        raise ValueError(
            f"{path}: model_type {trainer.get(3, [1])[-1]} is not BPE (2); numforge reads BPE models" + CONVERT
        )
    name = normalizer.get(1, [b"nmt_nfkc"])[-1].decode("utf-8")
    if name != "identity" or normalizer.get(4, [1])[-1]:
        raise ValueError(
            f"{path}: normalizer {name!r} with remove_extra_whitespaces {bool(normalizer.get(4, [1])[-1])}; "
            "numforge reads 'identity' without remove_extra_whitespaces (Llama's, Mistral's)" + CONVERT
        )
    if user := [piece for piece, _, kind in pieces if kind == USER_DEFINED]:
        raise ValueError(
            f"{path}: {len(user)} user-defined pieces (first {user[0]!r}), which sentencepiece matches in the "
            "normalized text; numforge does not" + CONVERT
        )
    vocab = {piece: i for i, (piece, _, _) in enumerate(pieces)}
    if len(vocab) != len(pieces):
        raise ValueError(f"{path}: a piece is listed twice")
    ranked = sorted((i for i, (_, _, kind) in enumerate(pieces) if kind == NORMAL), key=lambda i: (-pieces[i][1], i))
    merges = []
    for i in ranked:
        piece = pieces[i][0]
        merges += [(piece[:k], piece[k:]) for k in range(1, len(piece)) if piece[:k] in vocab and piece[k:] in vocab]
    unknown = [piece for piece, _, kind in pieces if kind == UNKNOWN]
    dummy = normalizer.get(3, [1])[-1]
    return SentencePieceBPE(
        vocab,
        merges,
        normalizer=(("prepend", "▁"),) * bool(dummy) + (("replace", " ", "▁"),),
        decoder=(("replace", "▁", " "), ("byte_fallback",), ("fuse",)) + (("strip", " ", 1, 0),) * bool(dummy),
        byte_fallback=bool(trainer.get(35, [0])[-1]),
        unk_token=unknown[0] if unknown else None,
        special_tokens={piece: i for i, (piece, _, kind) in enumerate(pieces) if kind == CONTROL},
        vocab_name=f"{path} (pieces)",
    )
