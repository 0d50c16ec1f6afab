"""Tokenizers trained by Hugging Face's `tokenizers` in each family's pipeline, saved as a model directory's files.

Llama 3 (a Split by its pattern, ByteLevel without regex, ignore_merges, a BOS template), Qwen2 (NFC, a Split by
its pattern, ByteLevel; specials appended, added tokens that are not special), SmolLM2 (Digits, ByteLevel;
specials first), with the tokenizer_config.json and generation_config.json transformers reads. Shared by the
tokenizer tests and the model tests (``test_hf_llama_transformers.py``). Nothing is downloaded.
"""

import json
from pydoc_data.topics import topics

import pytest

from numforge.tokenizer.pretokenize import LLAMA3_SPLIT_PATTERN, QWEN2_SPLIT_PATTERN

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors  # noqa: E402

DOCS = "".join(topics[key] for key in sorted(topics))
CORPUS = DOCS[:60_000] + " 東京は日本の首都です。café cafe\u0301 각 12345 3.14 👩\u200d👩\u200d👧 I'LL\r\n" * 30


def trained(pre_tokenizer, normalizer=None, specials=(), ignore_merges=False, vocab_size=900):
    tok = tokenizers.Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer, tok.decoder = pre_tokenizer, decoders.ByteLevel()
    if normalizer is not None:
        tok.normalizer = normalizer
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(specials), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    tok.train_from_iterator([CORPUS], trainer=trainer)
    return tok


def split_then_byte_level(pattern):
    return pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(pattern), behavior="isolated"), pre_tokenizers.ByteLevel(False, use_regex=False)]
    )


def with_bos(tok, bos: str):
    template = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos}:1 $B:1", special_tokens=[(bos, tok.token_to_id(bos))]
    )
    tok.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False), template])
    return tok


def save(directory, tok, tokenizer_config: dict, generation_config: dict | None = None):
    """tokenizer.json, and the tokenizer_config.json (with its added_tokens_decoder) and generation_config.json
    written here as transformers would read them."""
    directory.mkdir()
    tok.save(str(directory / "tokenizer.json"))
    added = json.loads(tok.to_str())["added_tokens"]
    decoder = {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in added}
    files = {"tokenizer_config.json": tokenizer_config | {"added_tokens_decoder": decoder}}
    files |= {"generation_config.json": generation_config} if generation_config is not None else {}
    for name, data in files.items():
        (directory / name).write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return directory


def llama3(directory):
    tok = trained(split_then_byte_level(LLAMA3_SPLIT_PATTERN), ignore_merges=True)
    tok.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"])  # after the vocabulary
    with_bos(tok, "<|begin_of_text|>")
    ids = [tok.token_to_id(t) for t in ("<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>")]
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
              "eos_token": "<|end_of_text|>", "model_max_length": 131072}  # fmt: skip
    return save(directory, tok, config, {"bos_token_id": ids[0], "eos_token_id": ids[1:]}), tok


def qwen2(directory):
    tok = trained(split_then_byte_level(QWEN2_SPLIT_PATTERN), normalizer=normalizers.NFC())
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ("<think>", "</think>")])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    config = {"tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "eos_token": "<|im_end|>",
              "pad_token": "<|endoftext|>", "unk_token": None, "split_special_tokens": False}  # fmt: skip
    ends = [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")]
    return save(directory, tok, config, {"eos_token_id": ends}), tok


def smollm2(directory):
    digits = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(False)])
    tok = trained(digits, specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])  # ids 0, 1, 2
    tok.add_tokens(["ab<"])  # not special, matched in a second pass (normalized): "ab<|im_end|>" keeps <|im_end|>
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    # SmolLM2's own files name GPT2Tokenizer, which transformers 5 rebuilds with ByteLevel alone (no Digits):
    # its ids then differ from tokenizers' (and from what the model was trained on) on text like "a  1"
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
    return save(directory, tok, config, {"bos_token_id": 0, "eos_token_id": 0}), tok
