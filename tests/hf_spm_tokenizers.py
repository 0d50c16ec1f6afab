"""SentencePiece-style tokenizers trained by Hugging Face's `tokenizers` in each family's pipeline, as
transformers' ``convert_slow_tokenizer`` writes them (LlamaConverter, GemmaConverter): BPE over characters with
byte fallback over ``<0x00>``..``<0xFF>`` (tokens of model.vocab, not added tokens), ``<unk>``, and BOS from a
TemplateProcessing. A multilingual text is generated here; ``limit_alphabet`` leaves rare characters out of the
vocabulary, so byte fallback fires. Nothing is downloaded."""

import json
import random

import pytest

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors  # noqa: E402

SCRIPTS = [
    "the quick brown fox jumps over the lazy dog while 42 ducks swim",
    "Съешь же ещё этих мягких французских булок да выпей чаю",
    "東京は日本の首都です 今日は良い天気ですね 漢字とひらがな",
    "ελληνικά γράμματα και λέξεις για δοκιμή",
    "العربية لغة جميلة ومكتوبة من اليمين",
    "हिन्दी भाषा देवनागरी लिपि में लिखी जाती है",
    "한국어 문장을 여기에 씁니다",
    "emoji 🙂 👩\u200d👩\u200d👧 🚀 ✨ café cafe\u0301 naïve",
    "code: def f(x):\n\treturn x**2  # tab\tand  two  spaces\n",
]
RARE = "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ꙮ 𓀀 ࿕ \U0001fae0 ⁂ ▁ \x00 \U00040000"  # not in the vocabulary: byte fallback (or unk)


def multilingual(n_words: int, seed: int = 0) -> str:
    """``n_words`` words drawn from SCRIPTS' sentences, with spaces, newlines and, now and then, a rare character."""
    rng = random.Random(seed)
    words = [w for line in SCRIPTS for w in line.split(" ")]
    out = []
    for _ in range(n_words):
        out.append(rng.choice(words) if rng.random() > 0.02 else rng.choice(RARE.split(" ")))
        out.append(rng.choice([" ", " ", " ", " ", "  ", "\n", ""]))
    return "".join(out)


CORPUS = multilingual(6_000)
SPECIALS = ["<unk>", "<s>", "</s>"]
BYTES = [f"<0x{b:02X}>" for b in range(256)]
LLAMA_DECODER = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]


def trained(normalizer, pre_tokenizer, decoder, specials=SPECIALS, bos="<s>", vocab_size=700, byte_fallback=True,
            words=True):  # fmt: skip
    """A tokenizer in this pipeline; the byte tokens sit in model.vocab after the specials, as Llama's. ``words``:
    trained on words cut before each "▁" (as SentencePiece trains: no token has a "▁" after another character),
    else on the pipeline's own words (the whole text, so tokens span spaces: "e▁t")."""
    tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=byte_fallback))
    tok.normalizer, tok.pre_tokenizer = normalizer, pre_tokenizer
    if words:
        tok.normalizer, tok.pre_tokenizer = None, pre_tokenizers.Metaspace("▁", "always", split=True)
    tok.decoder = decoders.Sequence(decoder)
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials + BYTES, show_progress=False, limit_alphabet=150
    )
    tok.train_from_iterator([CORPUS], trainer=trainer)
    tok.normalizer, tok.pre_tokenizer = normalizer, pre_tokenizer
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos}:1 $B:1", special_tokens=[(bos, tok.token_to_id(bos))]
    )
    d = json.loads(tok.to_str())
    d["added_tokens"] = [t for t in d["added_tokens"] if t["content"] not in BYTES]  # bytes: model.vocab only
    return tokenizers.Tokenizer.from_str(json.dumps(d))


def llama2(words=True):
    """Llama 2 / TinyLlama / Mistral v0.1 (legacy): Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer, Strip."""
    normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    return trained(normalizer, None, [*LLAMA_DECODER, decoders.Strip(" ", 1, 0)], words=words)


def llama_metaspace(prepend_scheme="first", split=False):
    """LlamaTokenizerFast with legacy false: no normalizer, Metaspace; its Strip follows add_prefix_space."""
    strip = [decoders.Strip(" ", 1, 0)] if prepend_scheme != "never" else []
    metaspace = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=prepend_scheme, split=split)
    return trained(None, metaspace, [*LLAMA_DECODER, *strip])


def gemma():
    """Gemma: Replace(" ", "▁"), a Split on " " (that finds nothing), no Strip; <pad> <eos> <bos> <unk> first."""
    split = pre_tokenizers.Split(" ", "merged_with_previous")
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    return trained(normalizers.Replace(" ", "▁"), split, LLAMA_DECODER, specials=specials, bos="<bos>")


def metaspace_decoder():
    """Older Mistral-family files: Metaspace pre-tokenizer and decoder (prepend always, split true)."""
    metaspace = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok = trained(None, metaspace, [decoders.ByteFallback()])
    tok.decoder = decoders.Sequence([decoders.Metaspace("▁", "always", True), decoders.ByteFallback(), decoders.Fuse()])
    return tok


FAMILIES = {
    "llama2": llama2,
    "llama_first": llama_metaspace,
    "llama_always_split": lambda: llama_metaspace("always", True),
    "llama_never": lambda: llama_metaspace("never", False),
    "llama2_spanning_tokens": lambda: llama2(words=False),
    "gemma": gemma,
    "metaspace_decoder": metaspace_decoder,
}
