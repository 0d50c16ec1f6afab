"""The fast BPE trainer and encoder against the textbook ones, and BPETokenizer's contract."""

import inspect
import json.decoder
import warnings
from pydoc_data.topics import topics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numforge.tokenizer import BPETokenizer, bpe, reference
from numforge.tokenizer._merge import merge_long, merge_short
from numforge.tokenizer.byte_chars import byte_to_unicode
from numforge.tokenizer.explain import explain
from numforge.tokenizer.pipeline import Pipeline

DOCS = "".join(topics[key] for key in sorted(topics))  # Python's own documentation text
CODE = inspect.getsource(json.decoder)  # a real source file: indentation runs, quotes, underscores

# pieces that stress the byte level: emoji (4 bytes, ZWJ sequence), CJK, a combining
# accent, whitespace runs, \r\n, control characters, a zero-width space, a ligature
PIECES = [
    " ",
    "   ",
    "\r\n",
    "\n\n",
    "\t",
    "🙂",
    "👩\u200d👩\u200d👧",
    "世界",
    "e\u0301",
    "\x00",
    "\x1b",
    "\u200b",
    "ﬁ",
    "'s",
    "'ll",
    "123",
    " the",
    "<|endoftext|>",
]
texts = st.lists(
    st.one_of(st.sampled_from(PIECES), st.text(st.characters(codec="utf-8"), max_size=6)), max_size=12
).map("".join)


@pytest.fixture(scope="module")
def tok():
    """384 tokens (127 merges) learned from 100 KB of documentation text."""
    return BPETokenizer.train(DOCS[:100_000], 384)


def _train_quietly(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return BPETokenizer.train(*args, **kwargs)


def _reference_merges_quietly(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return reference.train_merges(*args, **kwargs)


# ---------------------------------------------------------------- fast trainer == reference trainer


def test_wikipedia_example():
    tok = BPETokenizer.train("aaabdaaabac", 256 + 3, special_tokens=())
    assert tok.merges == [(97, 97), (97, 98), (256, 257)]
    assert tok.encode("aaabdaaabac") == [258, 100, 258, 97, 99]


def test_ties_take_the_smallest_pair():
    # chunks "ab", " cd", " ab", " cd": (97, 98), (32, 99), (99, 100) all occur twice;
    # the smallest, (32, 99), wins; then (97, 98) and (256, 100) tie, and (97, 98) wins
    tok = BPETokenizer.train("ab cd ab cd", 256 + 2, special_tokens=())
    assert tok.merges == [(32, 99), (97, 98)]
    assert tok.merges == reference.train_merges("ab cd ab cd", 2)


@given(st.lists(st.text("ab \né'", max_size=12), max_size=6).filter(any), st.integers(1, 25))
def test_fast_trainer_equals_reference_on_random_corpora(corpus, num_merges):
    # a small alphabet makes equal counts (ties) common; "é" is two bytes, "'" starts contractions
    fast = _train_quietly(corpus, 256 + num_merges, special_tokens=())
    assert fast.merges == _reference_merges_quietly(corpus, num_merges)


@pytest.mark.parametrize("text", [DOCS[:8_000], CODE[:8_000]], ids=["prose", "code"])
def test_fast_trainer_equals_reference_on_real_text(text):
    fast = BPETokenizer.train(text, 256 + 100, special_tokens=())
    assert fast.merges == reference.train_merges(text, 100)


def test_training_on_several_texts_never_merges_across_them():
    texts = ["hello wor", "ld hello", "<|endoftext|>hel"]
    fast = _train_quietly(texts, 256 + 20 + 1)
    assert fast.merges == _reference_merges_quietly(texts, 20, special_tokens=("<|endoftext|>",))


def test_special_strings_in_the_corpus_take_no_part_in_merges():
    tok = _train_quietly("x<|endoftext|>" * 50, 300)
    assert tok.merges == []  # only the chunk "x" remains: no pair at all


def test_vocab_size_counts_bytes_merges_and_specials():
    tok = BPETokenizer.train(DOCS[:5_000], 300, special_tokens=("<|endoftext|>", "<|pad|>"))
    assert len(tok.merges) == 300 - 256 - 2
    assert tok.special_tokens == {"<|endoftext|>": 298, "<|pad|>": 299}
    assert tok.vocab_size == 300


def test_training_stops_early_with_a_warning():
    with pytest.warns(UserWarning, match="no pair occurs twice after 1 merges"):
        tok = BPETokenizer.train("abab", 300)
    assert tok.merges == [(97, 98)]
    assert tok.vocab_size == 256 + 1 + 1
    assert tok.special_tokens == {"<|endoftext|>": 257}


def test_training_rejects_bad_arguments():
    with pytest.raises(ValueError, match="vocab_size=256 is too small.*at least 257"):
        BPETokenizer.train("abc", 256)
    with pytest.raises(TypeError, match="vocab_size must be an int"):
        BPETokenizer.train("abc", 300.0)
    with pytest.raises(TypeError, match="training texts must be str, got bytes"):
        BPETokenizer.train([b"abc"], 300)
    with pytest.raises(TypeError, match="special_tokens must be a sequence of strings"):
        BPETokenizer.train("abc", 300, special_tokens="<|endoftext|>")
    with pytest.raises(ValueError, match="special tokens repeat"):
        BPETokenizer.train("abc", 300, special_tokens=("<|a|>", "<|a|>"))


def test_progress_bar_does_not_change_the_result(capsys):
    assert BPETokenizer.train(DOCS[:3_000], 290, progress=True).merges == BPETokenizer.train(DOCS[:3_000], 290).merges
    assert "BPE merges" in capsys.readouterr().err


# ---------------------------------------------------------------- fast encoder == reference encoder


@given(texts)
def test_fast_encoder_equals_reference(tok, text):
    assert tok.encode_ordinary(text) == reference.encode(text, tok.merges)


def test_fast_encoder_equals_reference_on_real_text(tok):
    text = DOCS[300_000:306_000] + CODE[:3_000]
    assert tok.encode_ordinary(text) == reference.encode(text, tok.merges)


@given(st.text("abc", min_size=1, max_size=300), st.text("abc", min_size=2, max_size=200))
def test_long_chunks_merge_in_rank_order(training_text, text):
    # one chunk of up to 300 letters, many ranks: exercises the rank buckets of merge_chunk
    tok = _train_quietly(training_text, 256 + 40, special_tokens=())
    assert tok.encode_ordinary(text) == reference.encode(text, tok.merges)


def test_a_long_run_of_one_character_encodes_like_the_reference():
    tok = BPETokenizer.train("a" * 64 + " " + "b" * 40, 256 + 8, special_tokens=())
    text = "a" * 99_999  # odd at every level: leftmost-first decides where the leftover "a" goes
    ids = tok.encode(text)
    assert ids == reference.encode(text, tok.merges)
    assert tok.decode(ids) == text


def test_cache_stays_bounded_and_does_not_change_results(tok, monkeypatch):
    monkeypatch.setattr(bpe, "CACHE_ENTRIES", 4)
    fresh = BPETokenizer(tok.merges, pattern=tok.pattern)
    text = DOCS[:2_000]
    assert fresh.encode_ordinary(text) == tok.encode_ordinary(text)
    assert len(fresh._cache) <= 4


def test_lone_surrogate_is_a_value_error(tok):
    with pytest.raises(ValueError, match="lone surrogate"):
        tok.encode("a\ud800b")
    with pytest.raises(TypeError, match="text must be a str, got bytes"):
        tok.encode(b"abc")


# ---------------------------------------------------------------- special tokens


def test_special_tokens_allowed_and_disallowed(tok):
    text = "end<|endoftext|>start"
    eot = tok.special_tokens["<|endoftext|>"]
    ids = tok.encode(text, allowed_special="all")
    assert ids == tok.encode_ordinary("end") + [eot] + tok.encode_ordinary("start")
    assert tok.encode(text, allowed_special={"<|endoftext|>"}) == ids
    assert tok.decode(ids) == text
    with pytest.raises(ValueError, match=r"special token '<\|endoftext\|>' at index 3.*allowed_special"):
        tok.encode(text)
    plain = tok.encode(text, disallowed_special=())
    assert plain == tok.encode_ordinary(text) and eot not in plain
    with pytest.raises(ValueError, match="not special tokens of this tokenizer"):
        tok.encode(text, allowed_special={"<|pad|>"})
    with pytest.raises(TypeError, match="allowed_special must be 'all' or a set"):
        tok.encode(text, allowed_special="<|endoftext|>")


def test_only_the_allowed_special_is_special():
    tok = BPETokenizer.train(DOCS[:3_000], 300, special_tokens=("<|endoftext|>", "<|pad|>"))
    ids = tok.encode("a<|pad|>b<|endoftext|>", allowed_special={"<|pad|>"}, disallowed_special=())
    assert tok.special_tokens["<|pad|>"] in ids
    assert tok.special_tokens["<|endoftext|>"] not in ids
    with pytest.raises(ValueError, match="endoftext"):
        tok.encode("a<|pad|>b<|endoftext|>", allowed_special={"<|pad|>"})


# ---------------------------------------------------------------- decoding


@given(texts)
def test_round_trip(tok, text):
    ids = tok.encode(text, disallowed_special=())
    assert tok.decode(ids) == text
    assert tok.decode_bytes(ids) == text.encode("utf-8")


def test_token_bytes_match_the_recursive_expansion(tok):
    for token in range(tok.vocab_size - 1):
        assert tok.token_bytes(token) == reference.token_bytes(token, tok.merges)
    assert tok.token_bytes(tok.vocab_size - 1) == b"<|endoftext|>"


def test_decode_accepts_numpy_ids_and_rejects_unknown_ones(tok):
    ids = tok.encode("hello world")
    assert tok.decode(np.array(ids, dtype=np.int64)) == "hello world"
    for bad in (-1, tok.vocab_size):
        with pytest.raises(ValueError, match=f"token id {bad} is not in the vocabulary"):
            tok.decode([1, bad])
    with pytest.raises(TypeError, match="token ids must be integers, got 1.5"):
        tok.decode([1, 1.5])


def test_invalid_utf8_is_replaced_or_raised(tok):
    half_emoji = list("🙂".encode()[:2])  # byte tokens 0xF0 0x9F, an incomplete sequence
    assert tok.decode(half_emoji) == "\ufffd"
    with pytest.raises(UnicodeDecodeError):
        tok.decode(half_emoji, errors="strict")


def test_incremental_decoder_holds_back_incomplete_characters(tok):
    dec = tok.incremental_decoder()
    emoji = list("🙂".encode())  # four byte tokens
    assert [dec.decode([t]) for t in emoji] == ["", "", "", "🙂"]
    assert dec.decode(tok.encode("ok")) == "ok"
    assert dec.decode(emoji[:2]) == ""
    assert dec.flush() == "\ufffd"  # an incomplete character at the end
    assert dec.decode(tok.encode("again")) == "again"  # flush starts over


@given(texts, st.lists(st.integers(0, 40), max_size=6))
def test_incremental_decoding_in_any_pieces_equals_decoding_all(tok, text, cuts):
    ids = tok.encode(text, disallowed_special=())
    dec = tok.incremental_decoder()
    bounds = [0, *sorted(min(c, len(ids)) for c in cuts), len(ids)]
    streamed = "".join(dec.decode(ids[a:b]) for a, b in zip(bounds, bounds[1:])) + dec.flush()
    assert streamed == text


# ---------------------------------------------------------------- construction


def test_constructor_rejects_inconsistent_merges():
    with pytest.raises(ValueError, match=r"merge 0 is \(256, 97\), but 256 is never made from bytes"):
        BPETokenizer([(256, 97)])
    with pytest.raises(ValueError, match=r"merge 1 repeats the pair \(97, 97\)"):
        BPETokenizer([(97, 97), (97, 97)])
    with pytest.raises(ValueError, match="merge 0 must be a pair of ints"):
        BPETokenizer([(97, "a")])
    with pytest.raises(ValueError, match="permutation of 0..255"):
        BPETokenizer([], byte_ids=[0] * 256)
    with pytest.raises(ValueError, match="not a valid regular expression"):
        BPETokenizer([], pattern="(")


@given(st.data())
def test_short_and_long_chunk_paths_equal_the_reference(data):
    # any merge list over the bytes 0..3: each merge joins two ids that exist before it
    merges = []
    for _ in range(data.draw(st.integers(0, 8))):
        existing = st.sampled_from([0, 1, 2, 3, *range(256, 256 + len(merges))])
        pair = (data.draw(existing), data.draw(existing))
        if pair not in merges:
            merges.append(pair)
    ids = data.draw(st.lists(st.integers(0, 3), max_size=100))
    merged = {pair: 256 + i for i, pair in enumerate(merges)}
    expected = ids
    for i, pair in enumerate(merges):
        expected = reference.replace_pair(expected, pair, 256 + i)
    assert merge_short(ids, merged) == expected
    assert merge_long(ids, merged) == expected


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"merges": [5]}, "merge 0 must be a pair of ints, got 5"),
        ({"merges": [], "byte_ids": [float(i) for i in range(256)]}, "byte_ids must list 256 entries"),
    ],
)
def test_malformed_constructor_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BPETokenizer(**kwargs)


def test_a_non_integer_special_id_in_a_dict_is_named():
    d = BPETokenizer.train("aaabdaaabac" * 3, 260).to_dict()
    d["special_tokens"] = {"<|endoftext|>": "x"}
    with pytest.raises(ValueError, match="must map strings to int ids"):
        BPETokenizer.from_dict(d)


NO_CUTS = Pipeline(None, {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False})  # one chunk


def test_a_merge_of_lower_rank_made_by_a_later_one_goes_first():
    # merge 0 joins "ba" + "b" (-> 257), merge 1 makes "ba" (-> 256): "babab" = b a b a b; rank 1 at 0 gives
    # [ba][b][a][b], which holds a pair of rank 0: it goes before rank 1 at 2, so [bab][a][b], and no pair is left
    tok = BPETokenizer([(256, 98), (98, 97)], pattern=None, merge_ids=[257, 256], pipeline=NO_CUTS)
    assert tok.encode_ordinary("babab") == [257, 97, 98] == [i for c in explain(tok, "babab") for i in c.ids]
    long = list(b"babab" * 30)  # past SHORT_CHUNK: the linked-list path
    assert merge_long(long, tok._merged, tok._made) == merge_short(long, tok._merged, tok._made)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_merges_out_of_order_and_several_per_token_follow_hugging_faces_rule(data):
    # Llama 3's merges (converted from tiktoken) list every split of a token, by the token's rank: one token is
    # made by several merges, and a merge may join a token that a later merge makes. The rule is still "the lowest
    # rank first, leftmost among equals": the short and long paths, explain's textbook steps and tokenizers agree.
    tokens = [b"a", b"b"]  # two letters: pairs of lower rank appear mid-way often (1 draw in 15)
    merges = []
    for _ in range(data.draw(st.integers(0, 10))):
        left, right = data.draw(st.sampled_from(tokens)), data.draw(st.sampled_from(tokens))
        if (left, right) not in merges:
            merges.append((left, right))
            tokens += [left + right] if left + right not in tokens else []
    merges = data.draw(st.permutations(merges))  # any order: made by a later merge is allowed
    ids = {token: (token[0] if len(token) == 1 else 255 + tokens.index(token)) for token in tokens}
    pairs, made = [(ids[p], ids[q]) for p, q in merges], [ids[p + q] for p, q in merges]
    tok = BPETokenizer(pairs, pattern=None, merge_ids=made, pipeline=NO_CUTS)
    text = data.draw(st.text(st.sampled_from("ab"), max_size=150))
    chunk = list(text.encode())
    assert merge_short(chunk, tok._merged, tok._made) == merge_long(chunk, tok._merged, tok._made)
    ours = tok.encode_ordinary(text)
    assert [i for c in explain(tok, text) for i in c.ids] == ours
    try:
        import tokenizers
    except ImportError:
        return  # the reference is optional; the three above are checked anyway
    byte_char = byte_to_unicode()
    spell = lambda token: "".join(byte_char[b] for b in token)  # noqa: E731
    vocab = {byte_char[b]: b for b in range(256)} | {spell(t): ids[t] for t in tokens}
    theirs = tokenizers.Tokenizer(tokenizers.models.BPE(vocab, [(spell(p), spell(q)) for p, q in merges]))
    theirs.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    assert theirs.encode(text).ids == ours
