"""Tokenizers trained here by Hugging Face's `tokenizers` in each family's pipeline, read by numforge as data.

Llama 3 (a Split by its pattern, ByteLevel without regex, ignore_merges, a BOS template; also built as Llama 3's
own file was, converted from tiktoken ranks, so several merges make one token), Qwen2 (NFC, a Split by its
pattern, ByteLevel; specials appended, added tokens that are not special), SmolLM2 (Digits, ByteLevel; specials
first), and a file with holes in its ids. Ids equal `tokenizers`' id for id on nasty strings, encode_prompt and
the end ids equal transformers' for the tokenizer_config.json and generation_config.json written here, and the
round trips (numforge's file, tokenizer.json written back) keep every id. Nothing is downloaded.
"""

import json
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numforge.cli import main
from numforge.tokenizer import BPETokenizer
from numforge.tokenizer.hf_dir import load_hf_tokenizer, load_tokenizer
from numforge.tokenizer.hf_json import export_tokenizer_json
from numforge.tokenizer.pretokenize import LLAMA3_SPLIT_PATTERN

tokenizers = pytest.importorskip("tokenizers")
from hf_tokenizers import CORPUS, DOCS, llama3, qwen2, save, smollm2, with_bos  # noqa: E402
from tokenizers import Regex, normalizers, pre_tokenizers  # noqa: E402

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
NASTY = [
    "",
    "Hello world's  2 cats 🙂 世界\r\n\tend",
    "caf\u00e9 cafe\u0301 \u1100\u1161\u11a8 \uac01 \u212b \u00c5 A\u030a",  # composed, decomposed, jamo, Å three ways
    "12345678901234567890 3.14159 1,000,000 2024-06-01",
    "٣٤٥ ۱۲۳ ½ Ⅻ ² ① 𝟘𝟙",  # other digits and numbers: \p{N}
    "東京は日本の首都です。 한국어 ไทย",
    "👩\u200d👩\u200d👧 👍🏽 🇯🇵 ❤\ufe0f",  # ZWJ sequence, skin tone, flag, variation selector
    "\r\n\r\n  \r\n\n\n x\r",
    "   " * 70 + "x" + "\t" * 30 + "\n" * 20,
    "\t\t  \n \u3000\u00a0\u2028 x",
    "I'LL 'S 'll 'Ve 'ſ 'K 'D don't",
    "<|begin_of_text|>hi<|eot_id|><|endoftext|>x<|im_start|>user\n<|im_end|>",
    "<|endoftext |> <|im_start <|im_end| <|begin_of_text|<|eot_id|>>",  # special-looking text, and one inside
    "<think>x</think> <think</think>",
    "xab<|im_end|>ab<y",  # an added token overlapping a special one: which pass finds which
    "\x00\x1b\u200b\ufeff\U0010fffd",
    DOCS[40_000:41_500],
]


def llama3_from_tiktoken(directory):
    """As Llama 3's own tokenizer.json was made: tiktoken ranks converted by transformers, every split of a token
    a merge (several merges make one token, some join a token made later), ignore_merges."""
    pytest.importorskip("tiktoken")
    convert = pytest.importorskip("transformers.convert_slow_tokenizer")
    ranks = BPETokenizer.train(CORPUS, 1200, special_tokens=(), pattern=LLAMA3_SPLIT_PATTERN)
    from numforge.tokenizer.interop import export_tiktoken

    export_tiktoken(ranks, directory.parent / "llama3.tiktoken")
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    converter = convert.TikTokenConverter(
        vocab_file=str(directory.parent / "llama3.tiktoken"), pattern=LLAMA3_SPLIT_PATTERN,
        extra_special_tokens=specials,
    )  # fmt: skip
    tok = with_bos(converter.converted(), "<|begin_of_text|>")
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
    return save(directory, tok, config, {"eos_token_id": tok.token_to_id("<|eot_id|>")}), tok


def with_holes(directory):
    """SmolLM2's file with its ids moved apart: specials first, one in a hole, appended ones in the hole, merges
    after it, and one in the vocabulary at the very end."""
    _, tok = smollm2(directory.parent / "holes-source")
    d = json.loads(tok.to_str())
    vocab = d["model"]["vocab"]
    cut, hole = len(vocab) - 40, 60  # ids from `cut` move up by `hole`
    vocab = {name: i + hole * (i >= cut) for name, i in vocab.items()} | {"<mid>": cut + 1}
    vocab["<last>"] = max(vocab.values()) + 1
    d["model"]["vocab"] = vocab
    added = [t for t in d["added_tokens"] if t["content"] in vocab]  # the specials, ids 0, 1, 2
    added += [{**d["added_tokens"][0], "content": c} for c in ("<mid>", "<last>")]
    added += [{**d["added_tokens"][0], "content": c} for c in ("<|a|>", "<|b|>")]  # appended: len(vocab), + 1
    ids = [vocab.get(t["content"]) for t in added[:-2]] + [len(vocab), len(vocab) + 1]
    d["added_tokens"] = [t | {"id": i} for t, i in zip(added, ids)]
    assert cut <= len(vocab) + 1 < cut + hole  # the appended ids fall in the hole
    text = json.dumps(d, ensure_ascii=False)
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>"}
    return save(directory, tokenizers.Tokenizer.from_str(text), config), tokenizers.Tokenizer.from_str(text)


FAMILIES = {"llama3": llama3, "llama3 from tiktoken": llama3_from_tiktoken, "qwen2": qwen2, "smollm2": smollm2,
            "holes": with_holes}  # fmt: skip


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    directory, theirs = FAMILIES[request.param](tmp_path_factory.mktemp("family") / request.param)
    return request.param, directory, theirs, load_tokenizer(directory)


def ours_and_theirs(tok, theirs, text: str, encode_special_tokens: bool = False):
    theirs.encode_special_tokens = encode_special_tokens
    try:
        return theirs.encode(text, add_special_tokens=False).ids, theirs.encode(text).ids
    finally:
        theirs.encode_special_tokens = False


def test_ids_equal_tokenizers_id_for_id(family):
    name, _, theirs, ours = family
    normalize = (lambda s: unicodedata.normalize("NFC", s)) if name == "qwen2" else (lambda s: s)
    for text in NASTY:
        ids, prompt_ids = ours_and_theirs(ours, theirs, text)
        assert ours.encode(text, allowed_special="all") == ids, (name, text)
        assert ours.encode_prompt(text) == prompt_ids, (name, text)
        assert ours.encode_ordinary(text) == ours_and_theirs(ours, theirs, text, encode_special_tokens=True)[0], text
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=False) == normalize(text), (name, text)


ALPHABET = list("aZé1٣ \t\n\r'sLl.-_") + ["\u0301", "\u1100", "\u1161", "世", "🙂", "\u200d", "\u00a0", "<|im_end|>"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(ALPHABET), max_size=40))
def test_random_text_ids_equal_tokenizers(family, pieces):
    _, _, theirs, ours = family
    text = "".join(pieces)
    assert ours.encode(text, allowed_special="all") == ours_and_theirs(ours, theirs, text)[0]


def test_the_family_shapes_are_what_numforge_reads(family):
    name, _, _, ours = family
    assert (ours.pipeline is None) == name.startswith("llama3")  # Llama 3: a known pattern alone, fast path
    assert ours.ignore_merges == name.startswith("llama3")
    if name == "llama3 from tiktoken":
        assert len(set(ours.merge_ids)) < len(ours.merge_ids)  # several merges make one token
    if name == "holes":
        assert len(ours.token_ids()) < ours.vocab_size and ours.special_tokens["<last>"] == ours.vocab_size - 1


def test_the_prompt_and_the_end_ids_equal_transformers(family):
    transformers = pytest.importorskip("transformers")
    name, directory, _, ours = family
    theirs = transformers.AutoTokenizer.from_pretrained(directory)
    for text in NASTY:
        assert ours.encode_prompt(text) == theirs(text)["input_ids"], (name, text)
    if (directory / "generation_config.json").exists():
        end = transformers.GenerationConfig.from_pretrained(directory).eos_token_id
        assert ours.eos_ids == tuple(end if isinstance(end, list) else [end])
    else:  # a tokenizer alone: its eos_token
        assert ours.eos_ids == (theirs.eos_token_id,)
    assert ours.bos_id == (theirs.bos_token_id if name.startswith("llama3") else None)


def test_split_special_tokens_encodes_them_as_text_as_transformers_does(tmp_path):
    transformers = pytest.importorskip("transformers")
    directory, _ = qwen2(tmp_path / "qwen2")
    config = json.loads((directory / "tokenizer_config.json").read_text()) | {"split_special_tokens": True}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    ours, theirs = load_hf_tokenizer(directory), transformers.AutoTokenizer.from_pretrained(directory)
    for text in NASTY:
        assert ours.encode_prompt(text) == theirs(text)["input_ids"], text


def test_round_trips_keep_every_id(family, tmp_path):
    name, _, _, ours = family
    again = BPETokenizer.from_dict(json.loads(json.dumps(ours.to_dict())))  # numforge's file (version 3)
    export_tokenizer_json(ours, tmp_path / "tokenizer.json")  # Hugging Face's, written back
    written = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    for text in NASTY:
        ids = ours.encode(text, allowed_special="all")
        assert again.encode(text, allowed_special="all") == ids and again.encode_prompt(text) == ours.encode_prompt(
            text
        )
        assert written.encode(text, add_special_tokens=False).ids == ids, (name, text)
        assert written.encode(text).ids == ours.encode_prompt(text), (name, text)
    assert again.eos_ids == ours.eos_ids and again.bos_id == ours.bos_id


def test_explain_shows_the_steps_and_ends_in_the_ids(family, capsys):
    name, directory, _, ours = family
    text = "Hello  world 12345, cafe\u0301 <|im_end|>"
    assert main(["tokenizer", "explain", text, "--tokenizer", str(directory)]) == 0
    out = capsys.readouterr().out
    assert f"ids: {ours.encode(text, allowed_special='all')}" in out
    assert ("ignore_merges: the chunk is itself a token" in out) == name.startswith("llama3")
    if name == "smollm2":
        assert "step 1, Digits (each digit alone): 'Hello  world ' '1' '2' '3' '4' '5'" in out
    if name == "qwen2":
        assert "step 1, NFC: 'Hello  world 12345, café '" in out
    assert main(["tokenizer", "show", text, "--tokenizer", str(directory), "--color", "never"]) == 0
    assert str(ours.encode_prompt(text)[0]) in capsys.readouterr().out.split("id  bytes", 1)[1].split()[0]


def test_the_character_classes_equal_tokenizers_on_every_assigned_code_point():
    # \p{L}, \p{N}, \s in numforge's `regex` and in tokenizers' Oniguruma: equal on every code point Python's
    # unicodedata assigns (newer ones, which `regex` knows and Oniguruma may not, are left out). NFC in Python and
    # in tokenizers' Rust differ only where a combining mark that Rust gives no class comes before another mark
    # (docs/huggingface.md, "Their tokenizers"): never on a letter, digit, space or symbol.
    from numforge.tokenizer.pipeline import Pipeline

    points = [c for c in range(1, 0x110000) if unicodedata.category(chr(c)) not in ("Cn", "Cs", "Co")]
    text = "".join(map(chr, points))
    for cls in (r"\p{L}", r"\p{N}", r"\s"):
        step = {"type": "Split", "pattern": {"Regex": cls}, "behavior": "Removed", "invert": True}
        pre = {"type": "Sequence", "pretokenizers": [step, {"type": "ByteLevel", "use_regex": False}]}
        theirs = pre_tokenizers.Split(Regex(cls), behavior="removed", invert=True).pre_tokenize_str(text)
        assert Pipeline(None, pre, trust_pattern=True)(text) == [piece for piece, _ in theirs], cls
    nfc, differ = normalizers.NFC(), set()
    for around in ("{}", "a{}", "{}\u0301", "{}\u0316", "{}\u05b0", "\u0301{}", "\u0316{}", "\u05b0{}"):
        probes = "\x00".join(around.format(chr(c)) for c in points)  # NUL is a starter: each probe alone
        ours, theirs = unicodedata.normalize("NFC", probes).split("\x00"), nfc.normalize_str(probes).split("\x00")
        differ |= {c for c, a, b in zip(points, ours, theirs, strict=True) if a != b}
    assert all(unicodedata.combining(chr(c)) for c in differ), sorted(map(hex, differ))[:10]
    assert not differ & {ord(c) for c in "".join(NASTY)}
