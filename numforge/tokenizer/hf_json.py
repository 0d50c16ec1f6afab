"""Hugging Face's tokenizer.json, in and out, for byte-level BPE: GPT-2's, Llama 3's, Qwen2's, SmolLM2's.

The file is plain JSON (no ``tokenizers`` package needed). What numforge reads::

    {"added_tokens": [{"id": 128000, "content": "<|begin_of_text|>", "special": true, "normalized": false, ...}],
     "normalizer": null, or NFC (Qwen2)                                          pipeline.py
     "pre_tokenizer": ByteLevel (GPT-2); Sequence[Split(regex), ByteLevel] (Llama 3, Qwen2);
                      Sequence[Digits(individual), ByteLevel] (SmolLM2)         pipeline.py
     "post_processor": null, ByteLevel, TemplateProcessing (Llama 3: its BOS before the text), a Sequence of them,
     "decoder": null or ByteLevel,
     "model": {"type": "BPE", "ignore_merges": true (Llama 3), "vocab": {"!": 0, ...}, "merges": ["Ġ t", ...]}}

``model.vocab`` and ``model.merges`` are GPT-2's vocab.json and merges.txt (tokens in GPT-2's
byte characters, merges in rank order, as ``"left right"`` or ``["left", "right"]``), so both load
through ``interop.from_gpt2_strings``. A file converted from tiktoken (Llama 3's) lists every split
of a token as a merge: several merges make one token, which is why it sets ``ignore_merges``. A
GPT-2-style pipeline becomes a tokenizer with that split ``pattern``; any other, a ``pipeline``.

Added tokens get the ids `tokenizers` gives them, in file order: a token of ``model.vocab`` its id
there, any other the next id after the vocabulary (``len(vocab)``, or one more than the last added
token's if that is beyond); a file whose ids disagree is refused. Those with ``"special": true``
are numforge's special tokens, the others ``added_tokens`` (cut out of every text, even by
``encode_ordinary``). TemplateProcessing's tokens before and after the text are the tokenizer's
``prompt`` (``encode_prompt``, ``bos_id``).

A SentencePiece-style file (Llama 2, TinyLlama, Mistral, Gemma: byte fallback, Metaspace, Prepend /
Replace) is read into a ``spm_bpe.SentencePieceBPE`` (``read_sentencepiece_json``).

Anything that would encode differently is a ValueError naming the field: a normalizer other than
NFC, another pre-tokenizer, BPE dropout, added tokens that strip spaces or match whole words only, truncation, padding,
post-processors that add other tokens (Roberta's, Bert's).
"""

from __future__ import annotations

import json

from ..atomic import write_text_atomic
from ..files import read_json
from . import spm_file
from .bpe_tokenizer import BPETokenizer
from .interop import from_gpt2_strings, gpt2_vocabulary
from .pipeline import PROMPT_IDS, Pipeline, Prompt, sentencepiece_refusal, template_processing
from .pretokenize import GPT2_SPLIT_PATTERN, KNOWN_PATTERNS
from .spm_bpe import SentencePieceBPE
from .spm_pipeline import read_decoder, read_normalizer, read_pre_tokenizer

# BPE model fields that must have these values (absent is fine) for byte-level BPE as numforge encodes it
MODEL_MUST_BE = {
    "dropout": (None,),
    "continuing_subword_prefix": (None, ""),
    "end_of_word_suffix": (None, ""),
}
SENTENCEPIECE_DECODERS = ("Replace", "ByteFallback", "Fuse", "Strip", "Metaspace")
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
MAX_TOKENIZER_BYTES = 128 * 2**20  # a tokenizer file read at most (the largest published, Gemma 3's, is 33 MB);
# parsing one takes several times its size in memory, so a larger file is refused before it is read


def load_tokenizer_json(path, trust_pattern: bool = False) -> BPETokenizer | SentencePieceBPE:
    """A tokenizer from Hugging Face's tokenizer.json (byte-level or SentencePiece-style BPE), with the file's ids.

    A Split regex that is not one of ``pretokenize.KNOWN_PATTERNS`` is refused
    unless ``trust_pattern``: a pattern is code that runs on every text.
    """
    return tokenizer_from_json(read_tokenizer_json(path, trust_pattern))


def read_tokenizer_json(path, trust_pattern: bool = False, d: dict | None = None) -> dict:
    """The arguments of ``tokenizer_from_json`` for the file at ``path`` (its JSON ``d`` if already read), every
    field checked; their ``prompt`` holds the post-processor's tokens, which a directory's files add to (``hf_dir``)."""
    d = read_json(path, max_bytes=MAX_TOKENIZER_BYTES) if d is None else d
    if not isinstance(d, dict) or not isinstance(d.get("model"), dict):
        raise ValueError(f"{path}: expected a JSON object with a 'model' object (a Hugging Face tokenizer.json)")
    model = d["model"]
    if model.get("type", "BPE") != "BPE":
        raise ValueError(f"{path}: model.type is {model['type']!r}; numforge reads only 'BPE' models")
    for field, allowed in MODEL_MUST_BE.items():
        if model.get(field) not in allowed:
            raise ValueError(f"{path}: model.{field} is {model[field]!r}; numforge supports only {allowed[0]!r}")
    for field in ("truncation", "padding"):
        if d.get(field) is not None:
            raise ValueError(f"{path}: {field} is set ({d[field]!r}); numforge neither truncates nor pads"[:300])
    if sentencepiece_style(d):
        return read_sentencepiece_json(d, path)
    _check_decoder(d.get("decoder"), path)
    pattern, pipeline = _pre_tokenization(d.get("normalizer"), d.get("pre_tokenizer"), str(path), trust_pattern)
    vocab, merges, ignore_merges = model.get("vocab"), model.get("merges"), model.get("ignore_merges") or False
    if not isinstance(vocab, dict) or not all(type(i) is int for i in vocab.values()):
        raise ValueError(f"{path}: model.vocab must map token strings to int ids")
    if not isinstance(merges, list):
        raise ValueError(f"{path}: model.merges must be a list")
    if not isinstance(ignore_merges, bool):
        raise ValueError(f"{path}: model.ignore_merges must be true or false, got {ignore_merges!r}")
    specials, added, normalized = _added_tokens(d.get("added_tokens", []), vocab, path)
    named = {**specials, **added}
    if normalized and pipeline is not None and pipeline.nfc:
        raise ValueError(
            f"{path}: the added token {normalized[0]!r} is matched in the normalized text (normalized: true) and the "
            "normalizer is NFC; numforge matches added tokens in the text as written (normalized: false) only"
        )
    prefix, suffix = _template(d.get("post_processor"), {*vocab.values(), *named.values()}, path)
    return {
        "vocab": vocab,
        "merges": [_merge(m, f"{path}: model.merges[{i}]") for i, m in enumerate(merges)],
        "pattern": pattern,
        "vocab_name": f"{path} (model.vocab)",
        "special_tokens": specials,
        "pipeline": pipeline,
        "ignore_merges": ignore_merges,
        "added_tokens": added,
        # a second pass by Hugging Face changes nothing when every added token is in it
        "normalized_tokens": normalized if len(normalized) < len(named) else [],
        "vocab_specials": [name for name in named if name in vocab] if ignore_merges else [],
        "prompt": Prompt(prefix, suffix) if prefix or suffix else None,
    }


def tokenizer_from_json(arguments: dict) -> BPETokenizer | SentencePieceBPE:
    """The tokenizer ``read_tokenizer_json`` describes."""
    if arguments.get("kind") == "sentencepiece":
        return SentencePieceBPE(**{key: value for key, value in arguments.items() if key != "kind"})
    return from_gpt2_strings(**arguments)


def sentencepiece_style(d: dict) -> bool:
    """Whether tokenizer.json is SentencePiece-style: byte fallback, a Metaspace, or a Prepend / Replace step."""
    steps = [*_parts(d.get("normalizer"), "normalizers"), *_parts(d.get("pre_tokenizer"), "pretokenizers")]
    steps += _parts(d.get("decoder"), "decoders")
    kinds = {part.get("type") for part in steps if isinstance(part, dict)}
    return bool(d["model"].get("byte_fallback")) or bool(kinds & {"Metaspace", "Prepend", "Replace", "ByteFallback"})


def read_sentencepiece_json(d: dict, path) -> dict:
    """The arguments of ``SentencePieceBPE`` for a SentencePiece-style tokenizer.json (Llama 2, Mistral, Gemma)."""
    model, source = d["model"], str(path)
    vocab, merges = model.get("vocab"), model.get("merges")
    if not isinstance(vocab, dict) or not all(type(i) is int for i in vocab.values()):
        raise ValueError(f"{path}: model.vocab must map token strings to int ids")
    if not isinstance(merges, list):
        raise ValueError(f"{path}: model.merges must be a list")
    for field in ("byte_fallback", "fuse_unk", "ignore_merges"):
        if not isinstance(model.get(field, False), bool):
            raise ValueError(f"{path}: model.{field} must be true or false, got {model[field]!r}")
    specials, added, normalized = _added_tokens(d.get("added_tokens", []), vocab, path)
    if normalized:
        raise ValueError(
            f"{path}: the added token {normalized[0]!r} is matched in the normalized text (normalized: true); "
            "numforge matches added tokens of SentencePiece-style tokenizers in the text as written only"
        )
    normalizer = read_normalizer(d.get("normalizer"), source)
    prefix, suffix = _template(d.get("post_processor"), {*vocab.values(), *specials.values(), *added.values()}, path)
    return {
        "kind": "sentencepiece",
        "vocab": vocab,
        "merges": [_merge(m, f"{path}: model.merges[{i}]")[1:] for i, m in enumerate(merges)],
        "normalizer": normalizer,
        "pre_tokenizer": read_pre_tokenizer(d.get("pre_tokenizer"), normalizer, source),
        "decoder": read_decoder(d.get("decoder"), source),
        "byte_fallback": model.get("byte_fallback", False),
        "unk_token": model.get("unk_token"),
        "fuse_unk": model.get("fuse_unk", False),
        "ignore_merges": model.get("ignore_merges", False),
        "special_tokens": specials,
        "added_tokens": added,
        "prompt": Prompt(prefix, suffix) if prefix or suffix else None,
        "vocab_name": f"{path} (model.vocab)",
    }


def sentencepiece_from_dict(d: dict, source: str) -> SentencePieceBPE:
    """The ``SentencePieceBPE`` of numforge's tokenizer file version 4 (``spm_file.to_dict``)."""
    if set(d) != {"format", "version", "tokenizer_json", "prompt"}:
        raise ValueError(f"{source}: version 4 holds 'tokenizer_json' and 'prompt', got keys {sorted(d)}")
    prompt = d["prompt"]
    if prompt is not None and (
        not isinstance(prompt, dict) or set(prompt) != set(Prompt._fields)
        or not all(isinstance(prompt[f], list) and all(type(i) is int for i in prompt[f]) for f in PROMPT_IDS)
        or not isinstance(prompt["split_special_tokens"], bool)
    ):  # fmt: skip
        raise ValueError(f"{source}: 'prompt' must be null or an object of {list(Prompt._fields)}, got {prompt!r}")
    inner = d["tokenizer_json"]
    if not isinstance(inner, dict) or not isinstance(inner.get("model"), dict) or not sentencepiece_style(inner):
        raise ValueError(f"{source}: 'tokenizer_json' must be a SentencePiece-style tokenizer.json")
    arguments = read_sentencepiece_json(inner, f"{source} (tokenizer_json)")
    if prompt is not None:
        arguments["prompt"] = Prompt(**{**prompt, **{f: tuple(prompt[f]) for f in PROMPT_IDS}})
    return tokenizer_from_json(arguments)


def _kind(part) -> str:
    return repr(part.get("type")) if isinstance(part, dict) else repr(part)


def _parts(part, key: str) -> list:
    """The parts of a (flat) ``Sequence``, or the part alone; none for null."""
    if part is None:
        return []
    if isinstance(part, dict) and part.get("type") == "Sequence":
        return part.get(key) if isinstance(part.get(key), list) else [part]
    return [part]


def _merge(merge, where: str) -> tuple[str, str, str]:
    """``"left right"`` (older files) or ``["left", "right"]`` -> (where, left, right)."""
    parts = merge.split(" ") if isinstance(merge, str) else merge
    if not isinstance(parts, list) or len(parts) != 2 or not all(isinstance(p, str) and p for p in parts):
        raise ValueError(f"{where}: expected 'left right' or [left, right], got {merge!r}")
    return where, parts[0], parts[1]


def _check_decoder(decoder, path) -> None:
    """Decoding is the tokens' bytes: right for a ByteLevel decoder (or none), wrong for any other."""
    for part in _parts(decoder, "decoders"):
        if isinstance(part, dict) and part.get("type") in SENTENCEPIECE_DECODERS:
            raise sentencepiece_refusal(str(path), f"decoder {_kind(part)}")
        if not isinstance(part, dict) or part.get("type") != "ByteLevel":
            raise ValueError(f"{path}: decoder {_kind(part)} is not supported; numforge decodes as ByteLevel")


def _pre_tokenization(
    normalizer, pre_tokenizer, source: str, trust_pattern: bool
) -> tuple[str | None, Pipeline | None]:
    """(pattern, None) when one known split pattern does it all, as numforge's own tokenizers; else (None, pipeline)."""
    pipeline = Pipeline(normalizer, pre_tokenizer, source, trust_pattern)  # every part checked, refused by name
    steps = _parts(pre_tokenizer, "pretokenizers")
    if normalizer is None and len(steps) == 1 and steps[0].get("use_regex", True):
        return GPT2_SPLIT_PATTERN, None  # ByteLevel alone: GPT-2's
    split, byte_level = (steps + [None, None])[:2]
    if normalizer is None and len(steps) == 2 and not byte_level.get("use_regex", True):
        regex = (split.get("pattern") or {}).get("Regex") if split.get("type") == "Split" else None
        if regex in KNOWN_PATTERNS and split.get("behavior") == "Isolated" and not split.get("invert", False):
            return regex, None
    return None, pipeline


def _added_tokens(added, vocab: dict, path) -> tuple[dict[str, int], dict[str, int], list[str]]:
    """(special name -> id, added name -> id, the names Hugging Face matches after the others), with the ids
    `tokenizers` gives; a token that strips spaces, matches whole words only, or whose id disagrees is refused."""
    if not isinstance(added, list):
        raise ValueError(f"{path}: added_tokens must be a list")
    specials, others, normalized = {}, {}, []
    for i, token in enumerate(added):
        if not isinstance(token, dict) or not isinstance(token.get("content"), str) or type(token.get("id")) is not int:
            raise ValueError(f"{path}: added_tokens[{i}] must have a string 'content' and an int 'id'")
        content, where = token["content"], f"{path}: added_tokens[{i}] ({token['content']!r})"
        for flag in ("lstrip", "rstrip", "single_word"):
            if token.get(flag):
                raise ValueError(f"{where} has {flag} true; numforge supports only false")
        if content in specials or content in others or not content:
            raise ValueError(f"{where} is empty or listed twice")
        assigned = {**specials, **others}.values()
        expected = vocab.get(content, max(max(assigned, default=-1) + 1, len(vocab)))
        if token["id"] != expected:
            raise ValueError(
                f"{where} has id {token['id']}, but Hugging Face's tokenizers gives it id {expected} (its id in "
                f"model.vocab, or the next id after the vocabulary's {len(vocab)} entries): the file is inconsistent"
            )
        (specials if token.get("special", False) else others)[content] = expected
        if token.get("normalized", not token.get("special", False)):
            normalized.append(content)
    return specials, others, normalized


def _template(post_processor, ids: set[int], path) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The ids a TemplateProcessing puts before and after a single text (Llama 3's BOS), each one of the
    tokenizer's ``ids``; () and () for none."""
    templates = []
    for part in _parts(post_processor, "processors"):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "TemplateProcessing":
            templates.append(part)
        elif kind != "ByteLevel":  # ByteLevel post-processing moves offsets only
            raise ValueError(
                f"{path}: post_processor {_kind(part)} is not supported; numforge reads ByteLevel, TemplateProcessing"
            )
    if not templates:
        return (), ()
    if len(templates) > 1:
        raise ValueError(f"{path}: post_processor holds {len(templates)} TemplateProcessing steps; numforge reads one")
    single, tokens = templates[0].get("single"), templates[0].get("special_tokens")
    if not isinstance(single, list) or not isinstance(tokens, dict):
        raise ValueError(f"{path}: post_processor TemplateProcessing needs a 'single' list and 'special_tokens'")
    kinds = [next(iter(item), None) if isinstance(item, dict) and len(item) == 1 else None for item in single]
    if kinds.count("Sequence") != 1 or set(kinds) - {"Sequence", "SpecialToken"}:
        raise ValueError(f"{path}: post_processor TemplateProcessing 'single' must hold one Sequence, got {single!r}")
    at = kinds.index("Sequence")
    if single[at]["Sequence"].get("id") != "A":
        raise ValueError(f"{path}: post_processor TemplateProcessing's single text must be sequence 'A'")
    return _template_ids(single[:at], tokens, ids, path), _template_ids(single[at + 1 :], tokens, ids, path)


def _template_ids(items: list, tokens: dict, known: set[int], path) -> tuple[int, ...]:
    ids = []
    for item in items:
        name = item["SpecialToken"].get("id")
        entry = tokens.get(name)
        if not isinstance(entry, dict) or not isinstance(entry.get("ids"), list):
            raise ValueError(f"{path}: post_processor TemplateProcessing uses {name!r} but lists no ids for it")
        for i in entry["ids"]:
            if type(i) is not int or i not in known:
                raise ValueError(
                    f"{path}: post_processor TemplateProcessing gives {name!r} the id {i!r}, which is not a token of "
                    "model.vocab or added_tokens"
                )
        ids += entry["ids"]
    return tuple(ids)


def tokenizer_json(tok: BPETokenizer) -> dict:
    """Hugging Face's tokenizer.json for `tok` (the inverse of ``load_tokenizer_json``)."""
    vocab, merges = gpt2_vocabulary(tok)
    named = sorted({**tok.special_tokens, **tok.added_tokens}.items(), key=lambda item: item[1])
    if tok.ignore_merges:  # only the tokens the BPE vocabulary holds may be in model.vocab (``vocab_specials``)
        outside = {i for name, i in named if name not in tok.vocab_specials}
        vocab = {string: i for string, i in vocab.items() if i not in outside}
        appended = [(name, i) for name, i in named if name not in tok.vocab_specials]
        if [i for _, i in appended] != list(range(len(vocab), len(vocab) + len(appended))):
            raise ValueError(
                "a tokenizer.json with ignore_merges keeps its added tokens out of model.vocab, so they must have the "
                f"ids after the vocabulary's {len(vocab)}; these have {[i for _, i in appended][:5]}..."
            )
    added = [
        {"id": i, "content": name, "single_word": False, "lstrip": False, "rstrip": False}
        | {"normalized": name in tok.normalized_tokens, "special": name in tok.special_tokens}
        for name, i in named
    ]
    if tok.pipeline is not None:
        normalizer, pre_tokenizer = tok.pipeline.normalizer, tok.pipeline.pre_tokenizer
    elif tok.pattern == GPT2_SPLIT_PATTERN:
        normalizer, pre_tokenizer = None, BYTE_LEVEL
    else:
        split = {"type": "Split", "pattern": {"Regex": tok.pattern}, "behavior": "Isolated", "invert": False}
        normalizer = None
        pre_tokenizer = {"type": "Sequence", "pretokenizers": [split, {**BYTE_LEVEL, "use_regex": False}]}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": _post_processor(tok),
        "decoder": BYTE_LEVEL,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": tok.ignore_merges,
            "vocab": vocab,
            "merges": [f"{left} {right}" for left, right in merges],
        },
    }


def _post_processor(tok: BPETokenizer) -> dict:
    """ByteLevel, then a TemplateProcessing with the prompt's tokens around the text (and a second text) if any."""
    byte_level = {**BYTE_LEVEL, "trim_offsets": False}
    template = template_processing(tok.prompt, {**tok.special_tokens, **tok.added_tokens})
    return byte_level if template is None else {"type": "Sequence", "processors": [byte_level, template]}


def export_tokenizer_json(tok: BPETokenizer | SentencePieceBPE, path) -> None:
    """Write Hugging Face's tokenizer.json for `tok` (a ``SentencePieceBPE``'s: ``spm_file``), atomically."""
    d = spm_file.tokenizer_json(tok) if isinstance(tok, SentencePieceBPE) else tokenizer_json(tok)
    write_text_atomic(path, json.dumps(d, ensure_ascii=False, indent=1) + "\n")
