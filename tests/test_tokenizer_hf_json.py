"""Hugging Face's tokenizer.json: special tokens first or last, gaps, refusals; numforge's own file versions."""

import json

import pytest
from hf_dirs import DOCS

from numforge.tokenizer import BPETokenizer
from numforge.tokenizer.hf_json import load_tokenizer_json, tokenizer_json
from numforge.tokenizer.interop import byte_to_unicode


def hf_tokenizer_json(vocab: dict, merges: list, added: list) -> dict:
    return {
        "added_tokens": [
            {"id": i, "content": c, "special": True, "lstrip": False, "rstrip": False, "normalized": False}
            for c, i in added
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "vocab": vocab, "merges": merges},
    }


def bytes_from(first: int) -> dict:
    return {char: first + i for i, char in enumerate(byte_to_unicode().values())}  # GPT-2's byte order


def test_tokenizer_json_with_special_tokens_first(tmp_path):
    # the layout of Hugging Face's trainer: specials 0..2, the bytes 3..258, the merges from 259
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2} | bytes_from(3) | {"Ġt": 259, "he": 260, "Ġthe": 261}
    d = hf_tokenizer_json(vocab, ["Ġ t", ["h", "e"], "Ġt he"], [("<s>", 0), ("<pad>", 1), ("</s>", 2)])
    (tmp_path / "tokenizer.json").write_text(json.dumps(d), encoding="utf-8")
    tok = load_tokenizer_json(tmp_path / "tokenizer.json")
    # by hand: GPT-2's byte order puts "!" (33) first, so "t" (116) is 3 + 83, "n" 3 + 77
    assert tok.encode("<s>the then</s>", allowed_special="all") == [0, 86, 260, 261, 80, 2]
    assert tok.special_tokens == {"<s>": 0, "<pad>": 1, "</s>": 2} and tok.vocab_size == 262
    assert tok.decode([0, 261, 86, 260]) == "<s> thethe"
    again = json.loads(json.dumps(tokenizer_json(tok)))
    assert again["model"]["vocab"] == vocab and again["model"]["merges"] == ["Ġ t", "h e", "Ġt he"]
    assert BPETokenizer.from_dict(tok.to_dict()).to_dict()["version"] == 2


def test_tokenizer_json_with_special_tokens_last_and_a_gap(tmp_path):
    vocab = bytes_from(0) | {"Ġt": 256, "he": 257, "Ġthe": 258}
    d = hf_tokenizer_json(vocab, ["Ġ t", "h e", "Ġt he"], [("<|endoftext|>", 260)])  # 259 unused
    (tmp_path / "tokenizer.json").write_text(json.dumps(d), encoding="utf-8")
    tok = load_tokenizer_json(tmp_path / "tokenizer.json")
    assert tok.encode("the<|endoftext|>", allowed_special="all") == [83, 257, 260] and tok.vocab_size == 261
    assert 259 not in tok.token_ids() and len(tok.token_ids()) == 260


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda d: d.update(normalizer={"type": "NFC"}), "normalizer 'NFC' is not supported"),
        (lambda d: d["pre_tokenizer"].update(add_prefix_space=True), "add_prefix_space is true"),
        (lambda d: d["model"].update(ignore_merges=True), "model.ignore_merges is True"),
        (lambda d: d["model"].update(type="WordPiece"), "model.type is 'WordPiece'"),
        (lambda d: d["added_tokens"][0].update(lstrip=True), r"added_tokens\[0\] \('<\|endoftext\|>'\) has lstrip"),
        (lambda d: d["model"]["vocab"].update(odd=300), "neither a byte, a merge's result nor an added token"),
    ],
)
def test_tokenizer_json_that_would_encode_differently_is_refused(tmp_path, change, match):
    d = hf_tokenizer_json(bytes_from(0) | {"Ġt": 256}, ["Ġ t"], [("<|endoftext|>", 257)])
    change(d)
    (tmp_path / "tokenizer.json").write_text(json.dumps(d), encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        load_tokenizer_json(tmp_path / "tokenizer.json")


def test_a_version_1_file_written_before_still_loads():
    tok = BPETokenizer.train(DOCS[:3_000], 260)
    v1 = {
        "format": "numforge-bpe",
        "version": 1,
        "pattern": tok.pattern,
        "byte_ids": list(range(256)),
        "merges": [list(pair) for pair in tok.merges],
        "special_tokens": {"<|endoftext|>": 259},
        "tokens": tok.to_dict()["tokens"],
    }
    assert BPETokenizer.from_dict(v1).encode(DOCS[:500]) == tok.encode(DOCS[:500])
    assert tok.to_dict() == v1
