"""Hugging Face's tokenizer.json made by hand: special tokens first or last, gaps, ignore_merges, a template's BOS,
a directory's end ids, refusals by name; numforge's own file versions. (Files trained by `tokenizers` in each
family's pipeline: test_tokenizer_hf_families.py.)"""

import json

import pytest
from hf_dirs import DOCS

from numforge.tokenizer import BPETokenizer
from numforge.tokenizer.hf_dir import load_hf_tokenizer, load_tokenizer
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


def write(tmp_path, d: dict, name: str = "tokenizer.json"):
    (tmp_path / name).write_text(json.dumps(d), encoding="utf-8")
    return tmp_path / name


def test_tokenizer_json_with_special_tokens_last_and_a_gap(tmp_path):
    vocab = bytes_from(0) | {"Ġt": 256, "he": 257, "Ġthe": 258, "<|endoftext|>": 260}  # 259 unused
    d = hf_tokenizer_json(vocab, ["Ġ t", "h e", "Ġt he"], [("<|endoftext|>", 260)])
    tok = load_tokenizer_json(write(tmp_path, d))
    assert tok.encode("the<|endoftext|>", allowed_special="all") == [83, 257, 260] and tok.vocab_size == 261
    assert 259 not in tok.token_ids() and len(tok.token_ids()) == 260


def test_an_added_token_keeps_the_id_tokenizers_gives_it_or_is_refused(tmp_path):
    # not in model.vocab, an added token gets the next id after the vocabulary (tokenizers ignores the file's id)
    vocab = bytes_from(0) | {"Ġt": 256, "he": 257, "Ġthe": 258}
    d = hf_tokenizer_json(vocab, ["Ġ t", "h e", "Ġt he"], [("<|endoftext|>", 259), ("<|end|>", 260)])
    assert load_tokenizer_json(write(tmp_path, d)).special_tokens == {"<|endoftext|>": 259, "<|end|>": 260}
    d["added_tokens"][1]["id"] = 262
    with pytest.raises(ValueError, match=r"added_tokens\[1\] \('<\|end\|>'\) has id 262, but Hugging Face's tokenizers "
                       r"gives it id 260 .*: the file is inconsistent"):  # fmt: skip
        load_tokenizer_json(write(tmp_path, d))


def test_ignore_merges_keeps_a_chunk_that_is_a_token_whole(tmp_path):
    # merges (h, e), (t, h), (th, e): by rank, "the" is [t][he], and no merge joins those two;
    # "the" is in the vocabulary (made by (th, e)), so with ignore_merges it is one token
    vocab = bytes_from(0) | {"he": 256, "th": 257, "the": 258}
    d = hf_tokenizer_json(vocab, ["h e", "t h", "th e"], [])
    t, e = vocab["t"], vocab["e"]
    plain = load_tokenizer_json(write(tmp_path, d))
    assert plain.encode("the") == [t, 256] and plain.encode("thee") == [t, 256, e]
    d["model"]["ignore_merges"] = True
    whole = load_tokenizer_json(write(tmp_path, d))
    assert whole.encode("the") == [258] and whole.encode("thee") == [t, 256, e]  # "thee" is no token: merges
    again = BPETokenizer.from_dict(json.loads(json.dumps(whole.to_dict())))
    assert again.to_dict()["version"] == 3 and again.ignore_merges and again.encode("the") == [258]


def test_the_bos_of_a_template_and_the_end_ids_of_a_directory(tmp_path):
    vocab = {"<|begin_of_text|>": 0, "<|end_of_text|>": 1, "<|eot_id|>": 2} | bytes_from(3)
    d = hf_tokenizer_json(vocab, [], [("<|begin_of_text|>", 0), ("<|end_of_text|>", 1), ("<|eot_id|>", 2)])
    bos, text = {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}
    ids = {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [0], "tokens": ["<|begin_of_text|>"]}}
    template = {"type": "TemplateProcessing", "single": [bos, text], "pair": [], "special_tokens": ids}
    d["post_processor"] = {"type": "Sequence", "processors": [{"type": "ByteLevel"}, template]}
    write(tmp_path, d)
    hi = [3 + 39, 3 + 72]  # "H" and "i" in GPT-2's byte order ("!" first)
    tok = load_tokenizer(tmp_path / "tokenizer.json")
    assert tok.encode_prompt("Hi") == [0, *hi] and tok.bos_id == 0 and tok.encode("Hi") == hi
    assert tok.eos_ids == ()  # a file alone says nothing of where generation stops
    write(tmp_path, {"eos_token_id": [1, 2]}, "generation_config.json")
    tok = load_tokenizer(tmp_path)
    assert tok.eos_ids == (1, 2) and tok.encode_prompt("<|eot_id|>Hi") == [0, 2, *hi]
    write(tmp_path, {"eos_token_id": 2}, "generation_config.json")
    assert load_hf_tokenizer(tmp_path).eos_ids == (2,)
    (tmp_path / "generation_config.json").unlink()
    write(tmp_path, {"model_type": "llama", "eos_token_id": 1}, "config.json")
    assert load_tokenizer(tmp_path).eos_ids == (1,)  # generate's fallback: the model's config
    again = BPETokenizer.from_dict(json.loads(json.dumps(load_tokenizer(tmp_path).to_dict())))
    assert again.encode_prompt("Hi") == [0, *hi] and again.eos_ids == (1,) and again.bos_id == 0
    write(tmp_path, {"add_bos_token": False, "bos_token": "<|begin_of_text|>"}, "tokenizer_config.json")
    with pytest.raises(
        ValueError, match=r"add_bos_token is False .* puts \[0\] before the text; transformers 5 follows"
    ):
        load_tokenizer(tmp_path)
    write(tmp_path, {"eos_token": "</s>"}, "tokenizer_config.json")
    with pytest.raises(ValueError, match=r"tokenizer_config.json names '</s>', which tokenizer.json lacks"):
        load_tokenizer(tmp_path)


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda d: d.update(normalizer={"type": "NFKC"}), "normalizer 'NFKC' is not supported; numforge reads NFC"),
        (lambda d: d.update(normalizer={"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]}),
         "normalizer 'Lowercase' is not supported"),
        (lambda d: d.update(pre_tokenizer={"type": "Whitespace"}), "pre_tokenizer 'Whitespace' does not end with a"),
        (lambda d: d.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [{"type": "Punctuation"},
         {"type": "ByteLevel"}]}), r"pre_tokenizer step 1 \('Punctuation'\) is not supported"),
        (lambda d: d.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"},
         {"type": "Digits"}, {"type": "ByteLevel"}]}), "a ByteLevel step must be the last"),
        (lambda d: d.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern":
         {"Regex": r"\w+|\W"}, "behavior": "Isolated"}, {"type": "ByteLevel"}]}), "is not one numforge knows"),
        (lambda d: d["pre_tokenizer"].update(add_prefix_space=True), "add_prefix_space is true"),
        (lambda d: d["model"].update(byte_fallback=True),
         "pre_tokenizer 'ByteLevel' is not supported; numforge reads Metaspace, or none, for SentencePiece-style"),
        (lambda d: d.update(pre_tokenizer={"type": "Metaspace", "replacement": "▁"}, decoder={"type": "ByteLevel"}),
         r"decoder step 1 \('ByteLevel'\) is not supported; numforge reads Replace, .* for SentencePiece-style"),
        (lambda d: d.update(normalizer={"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}]}),
         "pre_tokenizer 'ByteLevel' is not supported; numforge reads Metaspace"),
        (lambda d: d.update(decoder={"type": "WordPiece"}), "decoder 'WordPiece' is not supported"),
        (lambda d: d.update(post_processor={"type": "RobertaProcessing"}), "post_processor 'RobertaProcessing' is not"),
        (lambda d: d.update(truncation={"max_length": 512}), "truncation is set"),
        (lambda d: d["model"].update(type="WordPiece"), "model.type is 'WordPiece'"),
        (lambda d: d["model"].update(dropout=0.1), "model.dropout is 0.1"),
        (lambda d: d["added_tokens"][0].update(lstrip=True), r"added_tokens\[0\] \('<\|endoftext\|>'\) has lstrip"),
        (lambda d: (d.update(normalizer={"type": "NFC"}), d["added_tokens"][0].update(normalized=True)),
         r"'<\|endoftext\|>' is matched in the normalized text .* the normalizer is NFC"),
        (lambda d: d["model"]["vocab"].update(odd=300), "neither a byte, a merge's result nor an added token"),
    ],
)  # fmt: skip
def test_tokenizer_json_that_would_encode_differently_is_refused(tmp_path, change, match):
    d = hf_tokenizer_json(bytes_from(0) | {"Ġt": 256, "<|endoftext|>": 257}, ["Ġ t"], [("<|endoftext|>", 257)])
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
