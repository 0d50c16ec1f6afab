"""SentencePiece-style BPE from tokenizer.json (Llama 2 / TinyLlama / Mistral v0.1, LlamaTokenizerFast without
legacy, Gemma, Metaspace decoders): ids, prompts and decoded text equal Hugging Face `tokenizers`', id for id,
on tokenizers trained here in each family's pipeline and a multilingual text where byte fallback fires."""

import json
import random

import pytest
from hf_spm_tokenizers import FAMILIES, RARE, multilingual

from numforge.tokenizer import load_tokenizer
from numforge.tokenizer._merge import merge_short
from numforge.tokenizer.spm_bpe import SentencePieceBPE, _side_by_side, safe_cuts
from numforge.tokenizer.spm_pipeline import Metaspace, decode_tokens, normalize, pre_tokenize

tokenizers = pytest.importorskip("tokenizers")

TEXTS = ["", " ", "  ", "Hello", " Hello", "Hello  world\n", "<s>Hi</s> there", "a<s>", "<s>", "▁x ▁", "\n\n",
         "  lead", "trail  ", "\x00\x00 ꙮꙮ", RARE, "<bos>Gemma<eos>", "<unk>", "<0x41>", "a\tb\r\nc"]  # fmt: skip


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    theirs = FAMILIES[request.param]()
    directory = tmp_path_factory.mktemp(request.param)
    theirs.save(str(directory / "tokenizer.json"))
    return request.param, theirs, load_tokenizer(directory)


def test_ids_prompts_and_text_equal_tokenizers(family):
    name, theirs, ours = family
    assert isinstance(ours, SentencePieceBPE)
    for text in [*TEXTS, multilingual(4000, seed=7)]:
        ids = theirs.encode(text, add_special_tokens=False).ids
        assert ours.encode(text) == ids, (name, text[:60])
        assert ours.encode_prompt(text) == theirs.encode(text).ids, (name, text[:60])
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=False), (name, text[:60])


def plain_encode(tok: SentencePieceBPE, text: str) -> list[int]:
    """The oracle beside the fast path: each word of the pipeline whole (no cut, no cache), its characters' ids one
    by one, merged by the simple loop (``merge_short``, O(n^2))."""
    ids = []
    for word in pre_tokenize(normalize(text, tok.normalizer), tok.pre_tokenizer, True):
        ids += merge_short(tok.symbols_by_character(word), tok._merged, tok._made)
    return ids


def random_texts(tok: SentencePieceBPE, n: int, seed: int) -> list[str]:
    """Texts of the vocabulary's characters in random order (so most pairs stand side by side in no piece, and
    ``safe_cuts`` cuts often), spaces, newlines, "▁" and characters with no token."""
    rng = random.Random(seed)
    alphabet = sorted({c for piece in tok.vocab if not piece.startswith("<") for c in piece})
    alphabet += [" ", " ", "\n", "▁", *RARE.split(" ")]
    return ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 300))) for _ in range(n)]


def test_the_fast_path_equals_the_plain_merge_and_tokenizers(family):
    name, theirs, ours = family
    texts = [t for t in TEXTS if "<" not in t] + [multilingual(3000, seed=9), *random_texts(ours, 150, len(name))]
    for text in texts:
        ids = ours.encode_ordinary(text)
        assert ids == plain_encode(ours, text) == theirs.encode(text, add_special_tokens=False).ids, (name, text[:60])
    word = normalize(multilingual(300, seed=2), ours.normalizer)
    assert safe_cuts(word, ours._apart, ours._chars), name  # the cuts are taken


def test_safe_cuts_are_where_no_piece_holds_the_two_characters():
    vocab = {"a": 0, "b": 1, "c": 2, "ab": 3, "<0xF0>": 4}
    apart, chars = _side_by_side(vocab), frozenset("abc")
    assert safe_cuts("abcab", apart, chars) == [2, 3]  # "ab" | "c" | "ab"
    assert safe_cuts("ab🙂ca", apart, chars) == [4]  # never beside a character without a token
    assert safe_cuts("", apart, chars) == safe_cuts("ab", apart, chars) == []


def test_byte_fallback_fires_and_decodes_back(family):
    name, theirs, ours = family
    text = "𝔘𝔫 ꙮ 𓀀"  # no token for these characters: their UTF-8 bytes' <0xNN> tokens
    pieces = [ours.token_piece(i) for i in ours.encode(text)]
    assert "<0xF0>" in pieces and "<0xEA>" in pieces, pieces
    assert ours.decode(ours.encode(text)) == text
    assert ours.decode([ours.vocab["<0xF0>"], ours.vocab["<0x9F>"]]) == theirs.decode(
        [ours.vocab["<0xF0>"], ours.vocab["<0x9F>"]]) == "\ufffd\ufffd"  # fmt: skip


def test_decoding_is_lossless_but_for_the_space_mark_and_special_tokens(family):
    name, _, ours = family
    text = multilingual(3000, seed=3).replace("▁", "")
    assert ours.decode(ours.encode(text)) == text, name
    # "▁" stands for a space, so a text holding it comes back with a space (SentencePiece's normalisation)
    assert ours.decode(ours.encode("a▁b")) == "a b"
    if name == "llama2":  # Prepend gives the piece after a special token a "▁", which decodes as a space
        assert ours.decode(ours.encode("<s>Hi")) == "<s> Hi"


def test_the_metaspace_prepend_schemes_and_split():
    words = lambda scheme, split, text, at_start=True: pre_tokenize(text, Metaspace("▁", scheme, split), at_start)  # noqa: E731
    assert words("always", True, "a  b") == ["▁a", "▁", "▁b"]
    assert words("first", False, "a b", at_start=False) == ["a▁b"]
    assert words("first", False, "a b") == words("always", False, "a b", at_start=False) == ["▁a▁b"]
    assert words("never", True, " a") == ["▁a"] and words("always", True, "") == []
    assert decode_tokens(["▁▁a", "▁b"], (("metaspace", "▁", "always"),)) == "a b"  # the first token loses every ▁


def test_unk_without_byte_fallback_fuses_a_run(tmp_path):
    from hf_spm_tokenizers import trained
    from tokenizers import decoders, normalizers

    theirs = trained(normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]), None,
                     [decoders.Replace("▁", " "), decoders.Fuse()], byte_fallback=False, vocab_size=400)  # fmt: skip
    theirs.save(str(tmp_path / "tokenizer.json"))
    ours = load_tokenizer(tmp_path / "tokenizer.json")
    for text in ["𝔘𝔫𝔦 ok ꙮ𓀀x", RARE, multilingual(500, seed=1), *random_texts(ours, 100, seed=1)]:
        ids = theirs.encode(text).ids
        assert ours.encode_prompt(text) == ids and ours.decode(ids) == theirs.decode(ids, skip_special_tokens=False)
        assert ours.encode_ordinary(text) == plain_encode(ours, text), text[:60]
    assert ours.encode("𝔘𝔫𝔦").count(ours.unk_id) == 1  # fuse_unk: one <unk> for the run


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.update(pre_tokenizer={"type": "Whitespace"}), "pre_tokenizer 'Whitespace' is not supported"),
        (lambda d: d.update(normalizer={"type": "NFKC"}), r"normalizer step 1 \('NFKC'\) is not supported"),
        (lambda d: d.update(decoder={"type": "WordPiece"}), r"decoder step 1 \('WordPiece'\) is not supported"),
        (lambda d: d["model"].update(unk_token="<nope>"), "the unk_token '<nope>' is not in the vocabulary"),
        (lambda d: d["model"]["merges"].append(["▁", "zzz"]), "needs 'zzz', which it lacks"),
        (lambda d: d["added_tokens"][0].update(normalized=True), "matched in the normalized text"),
    ],
)
def test_what_cannot_be_read_is_named(tmp_path, family, edit, message):
    d = json.loads(family[1].to_str())
    edit(d)
    (tmp_path / "tokenizer.json").write_text(json.dumps(d), encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load_tokenizer(tmp_path / "tokenizer.json")


def test_streaming_decode_equals_decode(family):
    name, _, ours = family
    ids = ours.encode("Hi 🙂 𓀀 ꙮ  there\n東京 " + RARE)
    for step in (1, 2, 3):
        stream = ours.incremental_decoder()
        parts = [stream.decode(ids[i : i + step]) for i in range(0, len(ids), step)]
        assert "".join(parts) + stream.flush() == ours.decode(ids), (name, step)
    assert "\ufffd" not in "".join(parts)  # a character's bytes are given once, whole


def test_streaming_decode_equals_decode_on_byte_runs_that_are_not_utf8(family):
    """A run of byte tokens that is not UTF-8 decodes to one U+FFFD per byte, its valid bytes too: the stream
    holds the run until it ends, so what it gave is never taken back ("<0x6F>" alone would be "o")."""
    import random

    name, _, ours = family
    rng, byte_ids = random.Random(0), [ours.vocab[f"<0x{b:02X}>"] for b in range(256)]
    runs = [[ours.vocab["<0x6F>"], ours.vocab["<0x90>"], ours.vocab["<0x30>"]]]
    runs += [[rng.choice(byte_ids) if rng.random() < 0.6 else rng.choice(ours.token_ids()) for _ in range(8)]
             for _ in range(300)]  # fmt: skip
    for ids in runs:
        stream = ours.incremental_decoder()
        assert "".join(stream.decode([i]) for i in ids) + stream.flush() == ours.decode(ids), (name, ids)
    assert ours.decode(runs[0]) == "\ufffd" * 3, name


def test_transformers_follows_the_file_unless_it_rebuilds_a_llama_tokenizer(tmp_path):
    transformers = pytest.importorskip("transformers")
    FAMILIES["llama2"]().save(str(tmp_path / "tokenizer.json"))
    texts = ["Hello world", " Hello", "<s>Hi</s> there", "a  b\n c", multilingual(300, seed=4)]
    config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    for tokenizer_class, differ in [("PreTrainedTokenizerFast", []), ("LlamaTokenizer", [" Hello", "<s>Hi</s> there"])]:
        (tmp_path / "tokenizer_config.json").write_text(json.dumps(config | {"tokenizer_class": tokenizer_class}))
        theirs, ours = transformers.AutoTokenizer.from_pretrained(str(tmp_path)), load_tokenizer(tmp_path)
        # transformers 5 builds LlamaTokenizer anew (Metaspace, no Prepend): a leading space and the text after a
        # special token get other ids than the file's (and SentencePiece's) pipeline; numforge follows the file
        assert [t for t in texts if theirs(t)["input_ids"] != ours.encode_prompt(t)] == differ, tokenizer_class


def test_the_tokenizer_command_names_what_it_does_not_show(tmp_path, capsys):
    from numforge.cli import main

    FAMILIES["llama2"]().save(str(tmp_path / "tokenizer.json"))
    assert main(["tokenizer", "explain", "Hi", "--tokenizer", str(tmp_path)]) != 0
    assert "is SentencePiece-style; `numforge tokenizer` shows byte-level BPE only" in capsys.readouterr().err


def test_numforges_file_and_the_written_tokenizer_json_round_trip(family, tmp_path):
    """``save`` (numforge's file, version 4) reads back to the same tokenizer; the tokenizer.json it holds, which
    ``convert`` writes, gives `tokenizers` the same ids and text as the file it was read from."""
    from numforge.tokenizer import BPETokenizer, tokenizer_from_dict

    name, theirs, ours = family
    ours.save(tmp_path / "tok.json")
    again = load_tokenizer(tmp_path / "tok.json")
    assert isinstance(again, SentencePieceBPE) and again.to_dict() == ours.to_dict()
    assert tokenizer_from_dict(json.loads(json.dumps(ours.to_dict()))).to_dict() == ours.to_dict()
    written = tokenizers.Tokenizer.from_str(json.dumps(ours.to_dict()["tokenizer_json"]))
    for text in [*TEXTS, multilingual(2000, seed=11)]:
        ids = theirs.encode(text).ids
        assert again.encode_prompt(text) == written.encode(text).ids == ids, (name, text[:60])
        assert written.decode(ids, skip_special_tokens=False) == again.decode(ids), (name, text[:60])
    with pytest.raises(ValueError, match="SentencePiece-style tokenizer \\(version 4\\)"):
        BPETokenizer.load(tmp_path / "tok.json")


def test_token_bytes_are_the_text_a_token_stands_for(family):
    name, _, ours = family
    assert ours.token_bytes(ours.vocab["<0x0A>"]) == b"\n"
    assert ours.token_bytes(ours.bos_id) == ours.token_piece(ours.bos_id).encode()
    assert ours.token_bytes(ours.vocab["▁"]) == b" "
    for piece, i in ours.vocab.items():  # "▁the" -> b" the", "e▁t" -> b"e t"
        assert piece.startswith("<0x") or ours.token_bytes(i).decode("utf-8").split(" ") == piece.split("▁"), piece
    text = multilingual(500, seed=5).replace("▁", "")
    ids = ours.encode(text)
    joined = b"".join(ours.token_bytes(i) for i in ids).decode("utf-8")
    assert joined.removeprefix(" ") == ours.decode(ids).removeprefix(" "), name  # but the Strip of the first space
