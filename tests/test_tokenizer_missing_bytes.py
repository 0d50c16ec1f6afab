"""Byte-level vocabularies without some byte tokens (StarCoder2's lacks 0xC0, 0xC1, 0xF1 and 0xF5..0xFF, bytes
no UTF-8 text has except 0xF1, the lead byte of U+40000..U+7FFFF): read id for id with `tokenizers`; a text
that needs a missing byte is refused by name (`tokenizers` drops the byte silently)."""

import json

import pytest

from numforge.tokenizer import BPETokenizer, load_tokenizer
from numforge.tokenizer.byte_chars import byte_to_unicode
from numforge.tokenizer.hf_json import export_tokenizer_json
from numforge.tokenizer.interop import export_tiktoken

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import decoders, models, pre_tokenizers  # noqa: E402

MISSING = (0xC0, 0xC1, 0xF1, *range(0xF5, 0x100))
TEXTS = ["def f(x):\n    return x + 12345", "東京は日本 café 👩\u200d👩\u200d👧 ÿ", "", "  a\tb\r\n"]
CORPUS = "".join(TEXTS) * 50 + "def main(): print('hello world') # 3.14159\n" * 40


@pytest.fixture(scope="module")
def starcoder2_like(tmp_path_factory):
    """SmolLM2's pipeline (Digits(individual) + ByteLevel), trained with an alphabet lacking the MISSING bytes."""
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(False)]
    )
    tok.decoder = decoders.ByteLevel()
    alphabet = [char for b, char in byte_to_unicode().items() if b not in MISSING]
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"], show_progress=False, initial_alphabet=alphabet
    )
    tok.train_from_iterator([CORPUS], trainer=trainer)
    path = tmp_path_factory.mktemp("starcoder2") / "tokenizer.json"
    tok.save(str(path))
    vocab = json.loads(path.read_text(encoding="utf-8"))["model"]["vocab"]
    assert [b for b in MISSING if byte_to_unicode()[b] in vocab] == []  # the file really lacks them
    return tok, load_tokenizer(path)


def test_ids_equal_tokenizers_and_decode_to_the_text(starcoder2_like):
    theirs, ours = starcoder2_like
    assert ours.missing_bytes == frozenset(MISSING)
    for text in [*TEXTS, CORPUS[:3000]]:
        ids = theirs.encode(text).ids
        assert ours.encode(text, allowed_special="all") == ids, text
        assert ours.decode(ids) == text


def test_a_text_needing_a_missing_byte_is_refused_by_name(starcoder2_like):
    theirs, ours = starcoder2_like
    text = "a\U00040000b"  # UTF-8 f1 80 80 80
    with pytest.raises(ValueError, match=r"needs the byte 0xF1 \(in '\\U00040000', U\+40000\), which this"):
        ours.encode(text)
    # tokenizers drops the byte without a word: its ids decode to another text
    dropped = theirs.decode(theirs.encode(text).ids)
    assert dropped != text and "\U00040000" not in dropped
    with pytest.raises(ValueError, match="needs the byte 0xF1"):
        ours.encode_ordinary("\U00050000")


def test_the_files_keep_the_missing_bytes(starcoder2_like, tmp_path):
    theirs, ours = starcoder2_like
    again = BPETokenizer.from_dict(json.loads(json.dumps(ours.to_dict())))
    export_tokenizer_json(ours, tmp_path / "tokenizer.json")
    written = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    for text in TEXTS:
        ids = theirs.encode(text).ids
        assert again.encode(text) == written.encode(text).ids == ids
    assert again.missing_bytes == ours.missing_bytes and again.vocab_size == ours.vocab_size
    with pytest.raises(ValueError, match="needs a token for every byte; this tokenizer has none for 14 .first: 0xC0"):
        export_tiktoken(ours, tmp_path / "ranks.tiktoken")
