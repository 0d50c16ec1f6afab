"""A SentencePiece-style tokenizer written out: Hugging Face's tokenizer.json, and numforge's tokenizer file version 4.

``tokenizer_json(tok)`` is the inverse of ``hf_json.read_sentencepiece_json``: the steps of ``spm_pipeline`` as
`tokenizers` writes them (a Gemma-style ``Split(" ")`` after ``Replace(" ", "▁")`` finds nothing, so it is left
out), the BPE model with its byte fallback and unk, every special and added token, the prompt's BOS / EOS as a
TemplateProcessing. ``numforge convert`` writes it into a Hugging Face directory as it is.

numforge's own file (``bpe_file.py``, where versions 1 to 3 are) holds it whole, with what the directory's other
files added (tokenizer_config.json's special names are in it already; generation_config.json's end ids and
``split_special_tokens`` are not), so a checkpoint reads back the tokenizer a directory gave it::

    {"format": "numforge-bpe", "version": 4,
     "tokenizer_json": {...Hugging Face's tokenizer.json...},
     "prompt": {"prefix": [1], "suffix": [], "eos_ids": [2], "split_special_tokens": false}}   or null

Reading is ``hf_json.sentencepiece_from_dict`` (it needs the tokenizer.json reader).
"""

from __future__ import annotations

from .bpe_file import FORMAT_NAME
from .pipeline import PROMPT_IDS, template_processing

SENTENCEPIECE_VERSION = 4


def _sequence(parts: list, key: str) -> dict | None:
    return None if not parts else parts[0] if len(parts) == 1 else {"type": "Sequence", key: parts}


def _replace(pattern: str, content: str) -> dict:
    return {"type": "Replace", "pattern": {"String": pattern}, "content": content}


def _normalizer(steps: tuple) -> dict | None:
    parts = [{"type": "Prepend", "prepend": s[1]} if s[0] == "prepend" else _replace(*s[1:]) for s in steps]
    return _sequence(parts, "normalizers")


def _decoder_step(step: tuple) -> dict:
    kind = step[0]
    if kind == "replace":
        return _replace(*step[1:])
    if kind == "strip":
        return {"type": "Strip", "content": step[1], "start": step[2], "stop": step[3]}
    if kind == "metaspace":
        return {"type": "Metaspace", "replacement": step[1], "prepend_scheme": step[2], "split": True}
    return {"type": {"byte_fallback": "ByteFallback", "fuse": "Fuse"}[kind]}


def tokenizer_json(tok) -> dict:
    """Hugging Face's tokenizer.json for the ``SentencePieceBPE`` ``tok``."""
    named = {**tok.special_tokens, **tok.added_tokens}
    added = [
        {"id": i, "content": name, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False}
        | {"special": name in tok.special_tokens}
        for name, i in sorted(named.items(), key=lambda item: item[1])
    ]
    metaspace = tok.pre_tokenizer
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": _normalizer(tok.normalizer),
        "pre_tokenizer": None if metaspace is None else {"type": "Metaspace", **metaspace._asdict()},
        "post_processor": template_processing(tok.prompt, named),
        "decoder": _sequence([_decoder_step(step) for step in tok.decoder], "decoders"),
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": tok.unk_token,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": tok.fuse_unk,
            "byte_fallback": tok.byte_fallback,
            "ignore_merges": tok.ignore_merges,
            "vocab": dict(tok.vocab),
            "merges": [list(pair) for pair in tok.merges],
        },
    }


def to_dict(tok) -> dict:
    """numforge's tokenizer file, version 4, for ``tok``."""
    prompt = (
        None if tok.prompt is None else tok.prompt._replace(**{f: list(getattr(tok.prompt, f)) for f in PROMPT_IDS})
    )
    return {
        "format": FORMAT_NAME,
        "version": SENTENCEPIECE_VERSION,
        "tokenizer_json": tokenizer_json(tok),
        "prompt": None if prompt is None else prompt._asdict(),
    }
