"""numforge's own tokenizer file and its versions: ``BPETokenizer.save`` / ``load`` (``to_dict`` is the content).

Version 1, what ``train`` makes (numforge's own layout: ``BPE.default_layout``)::

    {"format": "numforge-bpe", "version": 1,
     "pattern": "<split regex>",
     "byte_ids": [id of byte 0, ..., id of byte 255],
     "merges": [[p, q], ...],                     merge i makes id 256 + i
     "special_tokens": {"<|endoftext|>": 8191},
     "tokens": ["<base64 of token 0's bytes>", ...]}   every non-special id, in order

Version 2, written only for a layout other than numforge's own, adds
``"merge_ids": [id made by merge 0, ...]``, lets the special ids be anything
free, and keys ``tokens`` by id: ``{"5": "<base64>", ...}``. Version 3, written
only for a tokenizer read from a Hugging Face tokenizer.json that asks for more
(``HF_FIELDS``: a pipeline, ignore_merges, added tokens, a prompt), is version 2
with those fields; its ``pattern`` is null when a pipeline cuts the text.
Version 1 and 2 files load as they always did. Version 4 is a SentencePiece-style tokenizer
(``SentencePieceBPE``: its tokenizer.json and prompt, ``spm_file.py``), which ``load_tokenizer`` reads.

The merges are the model; ``tokens`` stores every token's bytes losslessly for
other readers and is checked against the merges on load. Other tokenizers'
files (GPT-2, tiktoken, Hugging Face) are read and written by ``interop.py`` and ``hf_json.py``.
"""

from __future__ import annotations

import base64
import binascii
import json

from ..atomic import write_text_atomic
from ..checks import is_int
from ..files import read_json
from .pipeline import PROMPT_IDS, Pipeline, Prompt
from .pretokenize import check_pattern_allowed

FORMAT_NAME = "numforge-bpe"
FORMAT_VERSIONS = (1, 2, 3, 4)  # 4: SentencePiece-style, spm_file.py
KEYS = ("pattern", "byte_ids", "merges", "special_tokens", "tokens")  # every version's; version 2 adds "merge_ids"
HF_FIELDS = {  # version 3's fields, each off: what ``BPETokenizer.hf_fields`` gives for numforge's own tokenizers
    "pipeline": None,
    "ignore_merges": False,
    "added_tokens": {},
    "normalized_tokens": [],
    "vocab_specials": [],
    "prompt": None,
}


def to_dict(tok) -> dict:
    """The file's content for the ``BPETokenizer`` `tok`: version 1 for numforge's own layout, version 2 with
    ``merge_ids`` and tokens keyed by id for any other, version 3: version 2 and ``hf_fields`` when any is on."""
    d = {
        "format": FORMAT_NAME,
        "version": 1,
        "pattern": tok.pattern,
        "byte_ids": list(tok.byte_ids),
        "merges": [list(pair) for pair in tok.merges],
        "special_tokens": dict(tok.special_tokens),
        "tokens": [_base64(data) for data in tok.ordinary_token_bytes()],
    }
    hf_fields = tok.hf_fields()
    if not tok.default_layout() or hf_fields != HF_FIELDS:
        d["version"] = 2 if hf_fields == HF_FIELDS else 3
        d["merge_ids"] = list(tok.merge_ids)
        d["tokens"] = {str(token): _base64(data) for token, data in tok.ordinary_tokens().items()}
    if d["version"] == 3:
        d.update(hf_fields)
    return d


def from_dict(cls, d: dict, source: str, trust_pattern: bool):
    """The tokenizer of class `cls` (``BPETokenizer``) that the file's content `d` describes, every key checked;
    ``source`` names the file in error messages, ``trust_pattern``: see ``BPETokenizer.from_dict``."""
    if not isinstance(d, dict):
        raise ValueError(f"{source}: expected a JSON object, got {type(d).__name__}")
    version = d.get("version")
    if d.get("format") != FORMAT_NAME or version not in FORMAT_VERSIONS:
        raise ValueError(
            f"{source}: not a numforge tokenizer (format {d.get('format')!r} version {version!r}; "
            f"expected {FORMAT_NAME!r} version {' or '.join(map(str, FORMAT_VERSIONS))})"
        )
    if version == 4:
        raise ValueError(
            f"{source}: a SentencePiece-style tokenizer (version 4), not a byte-level BPETokenizer; read it with "
            "numforge.tokenizer.load_tokenizer (or tokenizer_from_dict)"
        )
    keys = KEYS + (("merge_ids",) if version > 1 else ()) + (tuple(HF_FIELDS) if version == 3 else ())
    if missing := [key for key in keys if key not in d]:
        raise ValueError(f"{source}: missing keys {missing}")
    specials = d["special_tokens"]
    if not isinstance(specials, dict) or not all(is_int(i) for i in specials.values()):
        raise ValueError(f"{source}: 'special_tokens' must map strings to int ids, got {specials!r}")
    if d["pattern"] is not None or version < 3:
        check_pattern_allowed(d["pattern"], source, trust_pattern)
    try:
        if version == 1:  # the special tokens are numbered after the merges, in id order
            names = sorted(specials, key=lambda name: specials[name])
            tok = cls(d["merges"], special_tokens=names, pattern=d["pattern"], byte_ids=d["byte_ids"])
        else:
            hf = _hf_arguments(d, source, trust_pattern) if version == 3 else {}
            tok = cls(d["merges"], specials, d["pattern"], d["byte_ids"], d["merge_ids"], **hf)
    except (ValueError, TypeError) as error:
        raise ValueError(f"{source}: {error}") from None
    if tok.special_tokens != specials:
        raise ValueError(
            f"{source}: special token ids {specials} must be consecutive after the merges, from {256 + len(tok.merges)}"
        )
    _check_stored_tokens(d["tokens"], tok, source)
    return tok


def save(tok, path) -> None:
    """Write `tok`'s file atomically (temporary name, then rename)."""
    write_text_atomic(path, json.dumps(to_dict(tok), ensure_ascii=False, indent=1) + "\n")


def load(cls, path, trust_pattern: bool):
    """The tokenizer of class `cls` in the file at `path`."""
    return from_dict(cls, read_json(path), source=str(path), trust_pattern=trust_pattern)


def _hf_arguments(d: dict, source: str, trust_pattern: bool) -> dict:
    """The keyword arguments of ``BPETokenizer`` from a version 3 file's ``HF_FIELDS``."""
    pipeline, prompt, added = d["pipeline"], d["prompt"], d["added_tokens"]
    if pipeline is not None and (not isinstance(pipeline, dict) or set(pipeline) != {"normalizer", "pre_tokenizer"}):
        raise ValueError(
            f"'pipeline' must be null or an object with 'normalizer' and 'pre_tokenizer', got {pipeline!r}"
        )
    if prompt is not None and (not isinstance(prompt, dict) or set(prompt) != set(Prompt._fields)):
        raise ValueError(f"'prompt' must be null or an object with {list(Prompt._fields)}, got {prompt!r}")
    if prompt is not None and (not all(isinstance(prompt[f], list) for f in PROMPT_IDS) or
                               not isinstance(prompt["split_special_tokens"], bool)):  # fmt: skip
        raise ValueError(f"'prompt' must hold lists of ids and a bool, got {prompt!r}")
    if not isinstance(added, dict) or not isinstance(d["ignore_merges"], bool):
        raise ValueError("'added_tokens' must be an object and 'ignore_merges' a bool")
    for key in ("normalized_tokens", "vocab_specials"):
        if not isinstance(d[key], list):
            raise ValueError(f"{key!r} must be a list of token strings, got {d[key]!r}")
    return {
        "pipeline": None if pipeline is None else Pipeline(**pipeline, source=source, trust_pattern=trust_pattern),
        "ignore_merges": d["ignore_merges"],
        "added_tokens": added,
        "normalized_tokens": d["normalized_tokens"],
        "vocab_specials": d["vocab_specials"],
        "prompt": None if prompt is None else Prompt(**prompt),
    }


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _check_stored_tokens(tokens, tok, source: str) -> None:
    """The file's ``tokens`` must be the bytes the merges make: a list by id (version 1) or a dict
    keyed by id (version 2), of base64 strings."""
    made = tok.ordinary_tokens()
    if isinstance(tokens, dict):
        if set(tokens) != {str(token) for token in made}:
            raise ValueError(f"{source}: 'tokens' must map the {len(made)} ordinary ids to base64 strings")
        pairs = [(str(token), tokens[str(token)], data) for token, data in made.items()]
    else:
        if not isinstance(tokens, list) or len(tokens) != len(made):
            raise ValueError(f"{source}: 'tokens' must list {len(made)} base64 strings")
        pairs = list(zip(map(str, range(len(made))), tokens, made.values()))
    for key, encoded, data in pairs:
        try:
            stored = base64.b64decode(encoded, validate=True)
        except (binascii.Error, TypeError):
            raise ValueError(f"{source}: tokens[{key}] is not base64: {encoded!r}") from None
        if stored != data:
            raise ValueError(f"{source}: tokens[{key}] is {stored!r} but the merges make {data!r}")
