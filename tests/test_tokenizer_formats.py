"""Tokenizer files: numforge's JSON, GPT-2's encoder.json + vocab.bpe, tiktoken rank files."""

import json
import os
from pydoc_data.topics import topics

import pytest

from numforge.tokenizer import BPETokenizer
from numforge.tokenizer.interop import (
    byte_to_unicode,
    export_gpt2,
    export_tiktoken,
    load_gpt2,
    load_tiktoken,
)

DOCS = "".join(topics[key] for key in sorted(topics))
SAMPLE = "Hello world's  2 cats 🙂 世界\r\n\tend <|endoftext|>"
CL100K_LIKE = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]"""
    r"""|\s+(?!\S)|\s+"""
)


@pytest.fixture(scope="module")
def tok():
    return BPETokenizer.train(DOCS[:30_000], 400, special_tokens=("<|endoftext|>", "<|pad|>"))


def _same(a: BPETokenizer, b: BPETokenizer) -> bool:
    return (
        a.merges == b.merges
        and a.byte_ids == b.byte_ids
        and a.special_tokens == b.special_tokens
        and a.pattern == b.pattern
        and a.encode(SAMPLE, allowed_special="all") == b.encode(SAMPLE, allowed_special="all")
    )


def test_ordinary_token_bytes_follow_the_byte_ids_and_the_merges():
    tok = BPETokenizer([(97, 97), (256, 98)], special_tokens=("<|endoftext|>",))
    assert tok.ordinary_token_bytes() == [bytes([b]) for b in range(256)] + [b"aa", b"aab"]
    permuted = BPETokenizer([(0, 1)], byte_ids=[*range(1, 256), 0])  # byte b has id b + 1, byte 255 id 0
    assert permuted.ordinary_token_bytes()[:2] == [b"\xff", b"\x00"]
    assert permuted.ordinary_token_bytes()[256] == b"\xff\x00"


# ---------------------------------------------------------------- numforge's own file


def test_save_load_round_trip_is_atomic(tok, tmp_path):
    path = tmp_path / "tok.json"
    path.write_text("an older file")
    tok.save(path)
    assert os.listdir(tmp_path) == ["tok.json"]  # no temporary file left behind
    assert _same(BPETokenizer.load(path), tok)
    stored = json.loads(path.read_text(encoding="utf-8"))
    assert stored["format"] == "numforge-bpe" and stored["version"] == 1
    assert stored == tok.to_dict()


def test_dict_round_trip_through_json_keeps_a_custom_pattern():
    tok = BPETokenizer.train(DOCS[:5_000], 300, pattern=CL100K_LIKE)
    again = BPETokenizer.from_dict(json.loads(json.dumps(tok.to_dict())))
    assert again.pattern == CL100K_LIKE
    assert _same(again, tok)


def test_malformed_numforge_files(tok, tmp_path):
    path = tmp_path / "tok.json"
    text = json.dumps(tok.to_dict(), indent=1)
    path.write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match=r"tok.json: line \d+ column \d+"):
        BPETokenizer.load(path)

    def load_changed(change):
        d = tok.to_dict()
        change(d)
        path.write_text(json.dumps(d))
        return BPETokenizer.load(path)

    with pytest.raises(ValueError, match="tok.json: not a numforge tokenizer"):
        load_changed(lambda d: d.update(version=99))
    with pytest.raises(ValueError, match=r"tok.json: missing keys \['merges'\]"):
        load_changed(lambda d: d.pop("merges"))
    with pytest.raises(ValueError, match=r"tok.json: tokens\[300\] is b'xyz' but the merges make"):
        load_changed(lambda d: d["tokens"].__setitem__(300, "eHl6"))
    with pytest.raises(ValueError, match="tok.json: 'tokens' must list 398 base64 strings"):
        load_changed(lambda d: d["tokens"].pop())
    with pytest.raises(ValueError, match=r"tok.json: tokens\[3\] is not base64"):
        load_changed(lambda d: d["tokens"].__setitem__(3, "not base64!"))
    with pytest.raises(ValueError, match="tok.json: merge 5 is"):
        load_changed(lambda d: d["merges"].__setitem__(5, [9999, 1]))
    with pytest.raises(ValueError, match="consecutive after the merges"):
        load_changed(lambda d: d["special_tokens"].update({"<|pad|>": 5000}))


# ---------------------------------------------------------------- GPT-2 files


def _write_gpt2(tmp_path, merge_lines, encoder_extra):
    """encoder.json with GPT-2's own byte order (id 0 is "!", id 220 is "Ġ" = space) + vocab.bpe."""
    encoder = {char: i for i, char in enumerate(byte_to_unicode().values())}
    encoder.update(encoder_extra)
    (tmp_path / "encoder.json").write_text(json.dumps(encoder), encoding="utf-8")
    merges_text = "#version: 0.2\n" + "".join(line + "\n" for line in merge_lines)
    (tmp_path / "vocab.bpe").write_text(merges_text, encoding="utf-8")
    return tmp_path / "encoder.json", tmp_path / "vocab.bpe"


TINY_GPT2 = (["Ġ t", "h e", "Ġt he"], {"Ġt": 256, "he": 257, "Ġthe": 258, "<|endoftext|>": 259})


def test_byte_to_unicode_is_gpt2s_mapping():
    table = byte_to_unicode()
    assert sorted(table) == list(range(256)) and len(set(table.values())) == 256
    assert table[ord("!")] == "!" and table[0] == "Ā" and table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ"
    assert list(table.values())[0] == "!"  # GPT-2's id 0


def test_gpt2_import_keeps_the_files_ids(tmp_path):
    tok = load_gpt2(*_write_gpt2(tmp_path, *TINY_GPT2))
    # by hand: byte ids in GPT-2 order: "!" (33) is 0, so "t" (116) is 83, "h" 71, "e" 68,
    # "n" 77; space (32) is 220
    assert tok.byte_ids[ord("!")] == 0 and tok.byte_ids[ord(" ")] == 220
    assert tok.merges == [(220, 83), (71, 68), (256, 257)]
    assert tok.encode(" the") == [258]
    assert tok.encode("the then") == [83, 257, 258, 77]
    assert tok.encode("<|endoftext|>", allowed_special="all") == [259]
    assert tok.decode([83, 257, 258, 77]) == "the then"


def test_gpt2_import_keeps_any_ids_the_file_gives(tmp_path):
    # merges whose results are numbered out of merge order, and a special token after a gap
    tok = load_gpt2(*_write_gpt2(tmp_path, TINY_GPT2[0], {"Ġt": 258, "he": 256, "Ġthe": 257, "<|endoftext|>": 300}))
    assert tok.merge_ids == [258, 256, 257] and tok.merges == [(220, 83), (71, 68), (258, 256)]
    assert tok.encode("the then") == [83, 256, 257, 77]
    assert tok.encode("<|endoftext|>", allowed_special="all") == [300] and tok.vocab_size == 301
    assert tok.decode([83, 256, 257, 77, 300]) == "the then<|endoftext|>"
    with pytest.raises(ValueError, match=r"token id 299 is not in the vocabulary \(ids 0..300, 41 of them unused\)"):
        tok.decode([299])
    assert BPETokenizer.from_dict(json.loads(json.dumps(tok.to_dict()))).encode("the then") == [83, 256, 257, 77]


def test_gpt2_export_reproduces_the_files(tmp_path):
    encoder_path, bpe_path = _write_gpt2(tmp_path, *TINY_GPT2)
    tok = load_gpt2(encoder_path, bpe_path)
    out = tmp_path / "out"
    out.mkdir()
    export_gpt2(tok, out / "encoder.json", out / "vocab.bpe")
    assert json.loads((out / "encoder.json").read_text(encoding="utf-8")) == json.loads(
        encoder_path.read_text(encoding="utf-8")
    )
    assert (out / "vocab.bpe").read_text(encoding="utf-8") == bpe_path.read_text(encoding="utf-8")


def test_gpt2_round_trip_of_a_trained_tokenizer(tok, tmp_path):
    export_gpt2(tok, tmp_path / "encoder.json", tmp_path / "vocab.bpe")
    assert _same(load_gpt2(tmp_path / "encoder.json", tmp_path / "vocab.bpe"), tok)


def test_malformed_gpt2_files(tmp_path):
    merges, encoder = TINY_GPT2
    with pytest.raises(ValueError, match=r"vocab.bpe: line 3: expected two tokens separated by one space"):
        load_gpt2(*_write_gpt2(tmp_path, ["Ġ t", "h e x", "Ġt he"], encoder))
    with pytest.raises(ValueError, match=r"vocab.bpe: line 4: 'Ġthe' is not in .*encoder.json"):
        load_gpt2(*_write_gpt2(tmp_path, merges, {k: v for k, v in encoder.items() if k != "Ġthe"}))
    with pytest.raises(ValueError, match=r"encoder.json: merge 2 is \(256, 300\), but 300 is neither a byte's id nor"):
        load_gpt2(*_write_gpt2(tmp_path, ["Ġ t", "h e", "Ġt hx"], encoder | {"hx": 300, "Ġthx": 301}))
    with pytest.raises(ValueError, match=r"encoder.json: 'he' and 'Ġthe' have the same id 257"):
        load_gpt2(*_write_gpt2(tmp_path, merges, encoder | {"Ġthe": 257}))
    with pytest.raises(ValueError, match=r"vocab.bpe: line 2: '\u4e16' is not one of GPT-2's 256 byte characters"):
        load_gpt2(*_write_gpt2(tmp_path, ["x\u4e16 t"], {}))
    encoder_path, bpe_path = _write_gpt2(tmp_path, merges, encoder)
    encoder_path.write_text(encoder_path.read_text(encoding="utf-8")[:100], encoding="utf-8")
    with pytest.raises(ValueError, match=r"encoder.json: line 1 column \d+"):
        load_gpt2(encoder_path, bpe_path)


# ---------------------------------------------------------------- tiktoken rank files


def test_tiktoken_round_trip(tok, tmp_path):
    export_tiktoken(tok, tmp_path / "ranks.tiktoken")
    lines = (tmp_path / "ranks.tiktoken").read_text().splitlines()
    assert lines[0] == "AA== 0" and len(lines) == 256 + len(tok.merges)
    again = load_tiktoken(tmp_path / "ranks.tiktoken", special_tokens=("<|endoftext|>", "<|pad|>"))
    assert _same(again, tok)


def test_tiktoken_import_keeps_permuted_byte_ranks(tmp_path):
    gpt2 = load_gpt2(*_write_gpt2(tmp_path, *TINY_GPT2))
    export_tiktoken(gpt2, tmp_path / "ranks.tiktoken")
    again = load_tiktoken(tmp_path / "ranks.tiktoken", special_tokens=("<|endoftext|>",))
    assert _same(again, gpt2)
    assert again.encode("the then") == [83, 257, 258, 77]


def test_malformed_tiktoken_files(tmp_path):
    path = tmp_path / "ranks.tiktoken"
    singles = [f"{b64} {i}" for i, b64 in enumerate(_base64_bytes())]

    def load(lines):
        path.write_text("\n".join(lines) + "\n")
        return load_tiktoken(path)

    with pytest.raises(ValueError, match=r"ranks.tiktoken: line 2: expected 'base64-bytes rank'"):
        load([singles[0], "AQ==", *singles[2:]])
    with pytest.raises(ValueError, match=r"ranks.tiktoken: line 3: '\*\*\*' is not base64"):
        load([*singles[:2], "*** 2", *singles[3:]])
    with pytest.raises(ValueError, match=r"ranks must be 0..254 with none missing"):
        load(singles[1:])
    with pytest.raises(ValueError, match=r"line 2: rank 0 appears twice"):
        load([singles[0], singles[0], *singles[2:]])
    with pytest.raises(ValueError, match=r"rank 256, b'abc', is not the merge of two tokens"):
        load([*singles, "YWJj 256"])  # "abc" with no "ab" or "bc" below it


def _base64_bytes():
    import base64

    return [base64.b64encode(bytes([b])).decode() for b in range(256)]


# ---------------------------------------------------------------- ids as a file gives them


def test_any_layout_encodes_as_the_default_one_up_to_renaming_the_ids(tok):
    # specials first (0, 1), bytes reversed at 2..257, merges numbered backwards from the top
    n = len(tok.merges)
    byte_ids = [257 - b for b in range(256)]
    merge_ids = [258 + n - 1 - i for i in range(n)]
    rename = {b: byte_ids[b] for b in range(256)} | {256 + i: merge_ids[i] for i in range(n)}
    rename |= {tok.special_tokens["<|endoftext|>"]: 0, tok.special_tokens["<|pad|>"]: 1}
    merges = [(rename[p], rename[q]) for p, q in tok.merges]
    other = BPETokenizer(merges, {"<|endoftext|>": 0, "<|pad|>": 1}, byte_ids=byte_ids, merge_ids=merge_ids)
    text = DOCS[40_000:60_000] + SAMPLE
    ids = tok.encode(text, allowed_special="all")
    assert other.encode(text, allowed_special="all") == [rename[i] for i in ids]
    assert other.decode([rename[i] for i in ids]) == text
    assert other.vocab_size == tok.vocab_size and not other.default_layout() and tok.default_layout()
    again = BPETokenizer.from_dict(json.loads(json.dumps(other.to_dict())))
    assert again.to_dict()["version"] == 2 and again.encode(text, allowed_special="all") == [rename[i] for i in ids]


def test_inconsistent_ids_are_named():
    with pytest.raises(ValueError, match="merge 0 makes id 97, which a byte already has"):
        BPETokenizer([(97, 98)], merge_ids=[97])
    with pytest.raises(ValueError, match=r"merge 1 makes id 300 from b'ac', but another merge made it b'ab'"):
        BPETokenizer([(97, 98), (97, 99)], merge_ids=[300, 300])  # one token made by two merges: the same bytes
    with pytest.raises(ValueError, match="the special token '<s>' has id 256, which another token already has"):
        BPETokenizer([(97, 98)], {"<s>": 256})
    with pytest.raises(ValueError, match=r"merge 1 is \(301, 97\), but 301 is never made from bytes"):
        BPETokenizer([(97, 98), (301, 97)], merge_ids=[300, 301])  # merge 1 would use the token it makes
    with pytest.raises(ValueError, match="byte_ids must list 256 entries, distinct ints >= 0"):
        BPETokenizer([], byte_ids=[-1, *range(1, 256)])
