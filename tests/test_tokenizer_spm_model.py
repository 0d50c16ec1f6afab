"""SentencePiece's tokenizer.model read by numforge's own protobuf reader: ids equal ``sentencepiece``'s encode on
BPE models trained here (byte fallback on and off), and what is refused is named."""

import struct

import pytest
from hf_spm_tokenizers import multilingual

from numforge.tokenizer import load_tokenizer
from numforge.tokenizer.spm_model import protobuf_fields, read_pieces

spm = pytest.importorskip("sentencepiece")

TEXTS = [
    "Hello world",
    " Hello",
    "a  b",
    "𝔘𝔫𝔦 ꙮ𓀀x",
    "<s>x",
    "",
    "   ",
    "東京 🙂",
    *multilingual(1500, seed=3).split("\n"),
]


def train(directory, **options):
    directory.mkdir()
    options = {"model_type": "bpe", "normalization_rule_name": "identity", "remove_extra_whitespaces": False,
               "vocab_size": 600} | options  # fmt: skip
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(multilingual(4000).splitlines()), model_prefix=str(directory / "tokenizer"),
        minloglevel=2, **options,
    )  # fmt: skip
    (directory / "tokenizer.vocab").unlink()
    return spm.SentencePieceProcessor(model_file=str(directory / "tokenizer.model"))


@pytest.mark.parametrize("byte_fallback", [True, False])
def test_ids_equal_sentencepiece(tmp_path, byte_fallback):
    theirs = train(tmp_path / "model", byte_fallback=byte_fallback)
    ours = load_tokenizer(tmp_path / "model")  # a directory with only tokenizer.model
    assert [ours.token_piece(i) for i in range(theirs.get_piece_size())] == [
        theirs.id_to_piece(i) for i in range(theirs.get_piece_size())
    ]
    fallback = 0
    for text in TEXTS:
        ids = theirs.encode(text)
        assert ours.encode_ordinary(text) == ids, text
        fallback += sum(ours.token_piece(i).startswith("<0x") for i in ids)
        if theirs.unk_id() not in ids:  # sentencepiece writes <unk> as " ⁇ ", tokenizers as "<unk>"
            assert ours.decode(ids) == theirs.decode(ids), text
    assert (fallback > 0) == byte_fallback


def test_the_protobuf_reader_reads_pieces_scores_and_types(tmp_path):
    theirs = train(tmp_path / "model", byte_fallback=True)
    pieces, trainer, normalizer = read_pieces(tmp_path / "model" / "tokenizer.model")
    for i in (0, 1, 5, 300, len(pieces) - 1):
        assert pieces[i][0] == theirs.id_to_piece(i) and pieces[i][1] == pytest.approx(theirs.get_score(i), abs=0)
        kind = 2 if theirs.is_unknown(i) else 3 if theirs.is_control(i) else 6 if theirs.is_byte(i) else 1
        assert pieces[i][2] == kind, i
    assert trainer[3] == [2] and trainer[35] == [1] and normalizer[1] == [b"identity"]
    # the wire format by hand: field 1 varint 150, field 2 the string "hi", field 3 the float 0.5
    data = b"\x08\x96\x01" + b"\x12\x02hi" + b"\x1d" + struct.pack("<f", 0.5)
    assert protobuf_fields(data, "x") == {1: [150], 2: [b"hi"], 3: [struct.pack("<f", 0.5)]}
    with pytest.raises(ValueError, match="x: field 2 runs past the end"):
        protobuf_fields(b"\x12\x05hi", "x")
    with pytest.raises(ValueError, match="x: a varint at byte 1 is cut off"):
        protobuf_fields(b"\x08", "x")


def test_other_models_are_refused_with_the_conversion(tmp_path):
    train(tmp_path / "unigram", model_type="unigram", vocab_size=300)
    with pytest.raises(ValueError, match=r"model_type 1 is not BPE \(2\).*AutoTokenizer.from_pretrained\('DIR'\)"):
        load_tokenizer(tmp_path / "unigram")
    train(tmp_path / "nfkc", normalization_rule_name="nmt_nfkc")
    with pytest.raises(ValueError, match="normalizer 'nmt_nfkc' with remove_extra_whitespaces False; numforge reads"):
        load_tokenizer(tmp_path / "nfkc")
    train(tmp_path / "user", user_defined_symbols=["<start_of_turn>"])
    with pytest.raises(ValueError, match="1 user-defined pieces .first '<start_of_turn>'., which sentencepiece"):
        load_tokenizer(tmp_path / "user")
