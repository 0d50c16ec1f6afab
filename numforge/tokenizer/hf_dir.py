"""A tokenizer from any path, and a Hugging Face directory's: what a prompt becomes and where generation stops.

``load_tokenizer(path)`` takes numforge's own file, a Hugging Face tokenizer.json, or a directory
holding a tokenizer.json of either kind (a numforge checkpoint, a model directory as transformers
saves it). A model directory's other files say how the tokenizer is used::

    tokenizer.json           the tokenizer, its post-processor's BOS (hf_json.py)
    tokenizer_config.json    transformers' settings: bos_token, eos_token, add_bos_token, add_eos_token,
                             split_special_tokens, added_tokens_decoder, ...
    generation_config.json   eos_token_id: the id, or the list of ids, that generate stops at
    config.json              the model's eos_token_id, which generate uses when generation_config.json is absent

``tokenizer(prompt)["input_ids"]`` in transformers 5 is the tokenizer.json post-processor's tokens
around the text, its special tokens cut out as themselves (as text with ``split_special_tokens``):
with a tokenizer.json present, transformers drops tokenizer_config.json's ``add_bos_token`` and
``add_eos_token``, which older versions followed; a directory where they disagree with the
post-processor is refused rather than guessed at. The tokens tokenizer_config.json names (bos_token,
eos_token, additional_special_tokens, added_tokens_decoder, ...) must be tokenizer.json's, with its
ids: transformers would add any other as a new token. A name given to a token that tokenizer.json
does not mark special makes it special, as transformers does.

``generate`` stops at generation_config.json's ``eos_token_id``, else config.json's; a directory
with neither (a tokenizer alone) stops at tokenizer_config.json's eos_token (``<|endoftext|>``
if it names none, as numforge's own tokenizers). They become the
tokenizer's ``prompt`` (``encode_prompt``, ``bos_id``, ``eos_ids``).
"""

from __future__ import annotations

from pathlib import Path

from ..checks import is_int
from ..files import read_json
from .bpe import EOT
from .bpe_file import FORMAT_NAME
from .bpe_tokenizer import BPETokenizer
from .hf_json import MAX_TOKENIZER_BYTES, read_tokenizer_json, sentencepiece_from_dict, tokenizer_from_json
from .interop import load_gpt2
from .pipeline import Prompt
from .spm_file import SENTENCEPIECE_VERSION
from .spm_model import load_sentencepiece_model

CHAT_TEMPLATE_FILE = "chat_template.jinja"  # where transformers 5 saves a chat template
NAMED = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")
LISTS = ("additional_special_tokens", "extra_special_tokens")


def load_tokenizer(path, trust_pattern: bool = False) -> BPETokenizer:
    """The tokenizer at ``path``: a file (numforge's or Hugging Face's tokenizer.json, told apart by content), or
    a directory holding a tokenizer.json (or GPT-2's vocab.json + merges.txt, or SentencePiece's tokenizer.model),
    with its directory's files."""
    path = Path(path)
    if path.is_dir():
        if (path / "tokenizer.json").is_file():
            return _load_file(path / "tokenizer.json", trust_pattern, directory=path)
        if (path / "vocab.json").is_file() and (path / "merges.txt").is_file():
            return load_gpt2(path / "vocab.json", path / "merges.txt")
        if (path / "tokenizer.model").is_file():
            return load_sentencepiece_model(path / "tokenizer.model")
        raise ValueError(f"{path}: no tokenizer.json, nor vocab.json + merges.txt")
    return _load_file(path, trust_pattern, directory=None)


def load_hf_tokenizer(directory, trust_pattern: bool = False) -> BPETokenizer:
    """The tokenizer of a Hugging Face model directory: its tokenizer.json, with what tokenizer_config.json,
    generation_config.json and config.json say (``bos_id``, ``eos_ids``, ``encode_prompt``)."""
    directory = Path(directory)
    if not (directory / "tokenizer.json").is_file():
        raise ValueError(f"{directory}: no tokenizer.json")
    return _load_file(directory / "tokenizer.json", trust_pattern, directory=directory)


def tokenizer_from_dict(d: dict, source: str = "tokenizer dict", trust_pattern: bool = False):
    """The tokenizer of numforge's own file content ``d`` (``to_dict``): a ``BPETokenizer`` (versions 1 to 3), or
    a ``SentencePieceBPE`` (version 4); ``trust_pattern``: see ``BPETokenizer.from_dict``."""
    if isinstance(d, dict) and d.get("format") == FORMAT_NAME and d.get("version") == SENTENCEPIECE_VERSION:
        return sentencepiece_from_dict(d, source)
    return BPETokenizer.from_dict(d, source=source, trust_pattern=trust_pattern)


def _load_file(path: Path, trust_pattern: bool, directory: Path | None) -> BPETokenizer:
    d = read_json(path, max_bytes=MAX_TOKENIZER_BYTES)
    if isinstance(d, dict) and d.get("format") == FORMAT_NAME:
        return tokenizer_from_dict(d, source=str(path), trust_pattern=trust_pattern)
    arguments = read_tokenizer_json(path, trust_pattern, d)
    if directory is not None:
        _apply_directory(arguments, directory)
    return tokenizer_from_json(arguments)


def _json_object(path: Path) -> dict | None:
    """The JSON object in ``path``, None if there is no such file."""
    if not path.is_file():
        return None
    d = read_json(path)
    if not isinstance(d, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return d


def _apply_directory(arguments: dict, directory: Path) -> None:
    """Check tokenizer_config.json against tokenizer.json and set the ``prompt`` the directory's files describe."""
    config = _json_object(directory / "tokenizer_config.json") or {}
    where = directory / "tokenizer_config.json"
    named = {**arguments["special_tokens"], **arguments["added_tokens"]}
    for name in _named_tokens(config, where):
        if name not in named:
            raise ValueError(f"{where} names {name!r}, which tokenizer.json lacks; transformers would add it anew")
        if name in arguments["added_tokens"]:  # transformers makes a named token special
            arguments["special_tokens"][name] = arguments["added_tokens"].pop(name)
    _check_added_tokens_decoder(config.get("added_tokens_decoder", {}), named, where)
    if config.get("add_prefix_space"):
        raise ValueError(f"{where}: add_prefix_space is true; numforge supports only false")
    split = config.get("split_special_tokens", False)
    if not isinstance(split, bool):
        raise ValueError(f"{where}: split_special_tokens must be true or false, got {split!r}")
    prompt = arguments["prompt"] or Prompt()
    for flag, role, ids in (
        ("add_bos_token", "bos_token", prompt.prefix),
        ("add_eos_token", "eos_token", prompt.suffix),
    ):
        if flag in config:
            token = _content(config.get(role), where, role)
            expected = (named[token],) if config[flag] is True and token in named else ()
            if tuple(ids) != expected:
                raise ValueError(
                    f"{where}: {flag} is {config[flag]!r} ({role} {token!r}), but tokenizer.json's post_processor "
                    f"puts {list(ids)} {'before' if flag == 'add_bos_token' else 'after'} the text; transformers 5 "
                    "follows tokenizer.json, older versions tokenizer_config.json: numforge will not guess"
                )
    eos_ids = _eos_ids(directory, config, named, where)
    if unknown := [i for i in eos_ids if i not in named.values() and i not in arguments["vocab"].values()]:
        raise ValueError(f"{directory}: the end id {unknown[0]} (eos_token_id) is not a token of tokenizer.json")
    prompt = prompt._replace(eos_ids=eos_ids, split_special_tokens=split)
    plain = Prompt(eos_ids=(arguments["special_tokens"][EOT],) if EOT in arguments["special_tokens"] else ())
    arguments["prompt"] = None if prompt == plain else prompt  # GPT-2's: what numforge's own tokenizers do


def _content(value, where, key: str) -> str | None:
    """A token as tokenizer_config.json writes it: a string, ``{"content": ...}``, or null."""
    if isinstance(value, dict):
        value = value.get("content")
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{where}: {key} must be a token string, {{'content': ...}} or null, got {value!r}")
    return value


def _named_tokens(config: dict, where) -> list[str]:
    names = [_content(config.get(key), where, key) for key in NAMED]
    for key in LISTS:
        listed = config.get(key) or []
        listed = list(listed.values()) if isinstance(listed, dict) else listed
        if not isinstance(listed, list):
            raise ValueError(f"{where}: {key} must be a list of tokens, got {listed!r}")
        names += [_content(item, where, key) for item in listed]
    return [name for name in names if name is not None]


def _check_added_tokens_decoder(decoder, named: dict[str, int], where) -> None:
    """Each ``"id": {"content": ...}`` of tokenizer_config.json must be a token tokenizer.json has, at that id."""
    if not isinstance(decoder, dict):
        raise ValueError(f"{where}: added_tokens_decoder must be an object of id -> token")
    for key, token in decoder.items():
        content = _content(token, where, f"added_tokens_decoder[{key!r}]")
        if not key.isdigit() or named.get(content) != int(key):
            raise ValueError(
                f"{where}: added_tokens_decoder gives {content!r} id {key}, but tokenizer.json gives it "
                f"{named.get(content, 'no id')}"
            )


def _eos_ids(directory: Path, config: dict, named: dict[str, int], where) -> tuple[int, ...]:
    """generation_config.json's eos_token_id, else config.json's, else tokenizer_config.json's eos_token's id
    (``<|endoftext|>``'s when it names none), else none."""
    for name in ("generation_config.json", "config.json"):
        found = _json_object(directory / name)
        if found is not None:
            ids = found.get("eos_token_id")
            ids = [] if ids is None else [ids] if is_int(ids) else ids
            if not isinstance(ids, list) or not all(map(is_int, ids)):
                raise ValueError(f"{directory / name}: eos_token_id must be an id, a list of ids or null, got {ids!r}")
            return tuple(ids)
    token = _content(config.get("eos_token", EOT), where, "eos_token")
    return (named[token],) if token in named else ()
