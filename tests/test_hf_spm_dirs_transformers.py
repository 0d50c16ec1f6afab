"""numforge's commands on tiny random Llama 2-style, Gemma, Gemma 2 and Gemma 3 directories that carry their own
SentencePiece-style tokenizer.json (skipped without torch, transformers and tokenizers).

Each directory is what a user has on disk, only small: the model saved by transformers (``LlamaForCausalLM``,
``GemmaForCausalLM``, ``Gemma2ForCausalLM``, ``Gemma3ForCausalLM``, every parameter drawn at random) beside a
tokenizer trained here by `tokenizers` in the family's pipeline (``hf_spm_tokenizers``: Llama 2's Prepend + Replace
normalizer and Strip decoder, Gemma's Replace normalizer), with tokenizer_config.json naming
``PreTrainedTokenizerFast`` (so transformers' AutoTokenizer follows the file) and generation_config.json's BOS and
end ids. Checked: greedy ids and text equal transformers' ``generate`` and ``decode``; ``trace`` runs; ``train
--init-from`` trains two steps and its checkpoint samples; ``convert`` there and back opens in transformers with the
same logits and a tokenizer giving the same ids.
"""

import json
import math

import numpy as np
import pytest

from numforge import checkpoint, cli
from numforge.generate import generate
from numforge.hf import load_pretrained
from numforge.tokenizer.spm_bpe import SentencePieceBPE

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
from hf_spm_tokenizers import gemma, llama2, multilingual  # noqa: E402
from hf_tokenizers import save  # noqa: E402

PROMPT = "The quick brown"
TEXTS = [
    "",
    " leading space",
    "two  spaces\nand a line",
    "<s>Hi</s> there",
    "東京は 🙂 𝔘𝔫 ꙮ",
    multilingual(200, seed=9),
]
SIZES = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=64)  # fmt: skip
GEMMA2 = dict(head_dim=8, sliding_window=8, query_pre_attn_scalar=8, attn_logit_softcapping=5.0,
              final_logit_softcapping=5.0)  # fmt: skip
GEMMA3 = dict(head_dim=8, sliding_window=8, query_pre_attn_scalar=8,
              layer_types=["sliding_attention", "full_attention"], tie_word_embeddings=False)  # fmt: skip
CASES = {  # name -> (tokenizer builder, its BOS, EOS and unk, config class, the family's fields)
    "llama2": (llama2, "<s>", "</s>", "<unk>", "LlamaConfig", dict(rms_norm_eps=1e-5)),
    "gemma": (gemma, "<bos>", "<eos>", "<unk>", "GemmaConfig", dict(head_dim=8, num_key_value_heads=1)),
    "gemma2": (gemma, "<bos>", "<eos>", "<unk>", "Gemma2Config", GEMMA2),
    "gemma3": (gemma, "<bos>", "<eos>", "<unk>", "Gemma3TextConfig", GEMMA3),
}


def randomize(model, seed: int = 0) -> None:
    """Every parameter drawn anew (norm weights as each family centres them; the token table scaled by 1/sqrt(C)
    where the model multiplies it by sqrt(C), so greedy text does not repeat its input)."""
    generator = torch.Generator().manual_seed(seed)
    gemma_family = "gemma" in model.config.model_type
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator, dtype=torch.float64).to(p.dtype)
            if "norm" in name:
                p.copy_((0.0 if gemma_family else 1.0) + 0.2 * noise)
            else:
                scale = 0.3 / math.sqrt(model.config.hidden_size) if gemma_family and "embed" in name else 0.3
                p.copy_(scale * noise)


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    build, bos, eos, unk, config_class, fields = CASES[request.param]
    tok = build()
    ids = {"bos_token_id": tok.token_to_id(bos), "eos_token_id": tok.token_to_id(eos)}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos, "unk_token": unk}
    directory = save(tmp_path_factory.mktemp(request.param) / "model", tok, config, ids)
    hf_config = getattr(transformers, config_class)(**{**SIZES, **fields}, vocab_size=tok.get_vocab_size(), **ids)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf_config).eval()
    randomize(model)
    model.save_pretrained(directory)
    return request.param, directory


def hf_model(directory):
    return transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()


def hf_greedy(directory, prompt_ids: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = hf_model(directory).generate(
            torch.tensor([prompt_ids]), attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
            max_new_tokens=n, do_sample=False,
        )  # fmt: skip
    return out[0, len(prompt_ids) :].tolist()


def test_greedy_text_equals_transformers_generate_and_decode(case):
    name, directory = case
    model, tokenizer = load_pretrained(directory)
    assert isinstance(tokenizer, SentencePieceBPE)
    theirs_tok = transformers.AutoTokenizer.from_pretrained(directory)
    prompt_ids = theirs_tok(PROMPT)["input_ids"]
    assert tokenizer.encode_prompt(PROMPT) == prompt_ids and prompt_ids[0] == tokenizer.bos_id
    pieces = []
    result = generate(model, tokenizer, PROMPT, 24, temperature=0, on_text=pieces.append)
    theirs = hf_greedy(directory, prompt_ids, 24)
    assert result.ids + ([result.end_id] if result.stopped_at_end_of_text else []) == theirs, name
    assert len(set(theirs)) > 3  # not a degenerate repetition
    assert result.text == "".join(pieces) == theirs_tok.decode(result.ids), name  # streamed pieces too


def test_trace_and_train_init_from_then_sample_the_checkpoint(case, tmp_path, capsys):
    name, directory = case
    assert cli.main(["trace", "--checkpoint", str(directory), "--prompt", PROMPT, "--backward", "--lens"]) == 0
    out = capsys.readouterr().out
    assert "predictions at each position" in out and "logit lens" in out and "backward pass" in out, name
    assert "·quick" in out  # a piece's "▁" shown as the space it stands for (shown_token)
    assert cli.main(["attention", "--checkpoint", str(directory), "--prompt", PROMPT, "--layer", "1"]) == 0
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(multilingual(800, seed=1), encoding="utf-8")
    args = ["train", "--init-from", str(directory), "--out", str(tmp_path / "tuned"), "--max-steps", "2",
            "--data", str(corpus), "--cache-dir", str(tmp_path), "--seq-len", "16", "--batch-size", "2",
            "--no-progress", "--eval-every", "2", "--save-every", "2"]  # fmt: skip
    assert cli.main(args) == 0
    model, tokenizer = load_pretrained(directory)
    tuned = checkpoint.load_checkpoint(tmp_path / "tuned")
    assert tuned.state["step"] == 2 and tuned.config == model.config.to_dict()
    assert all(not np.array_equal(tuned.params[n], p) for n, p in model.params.items())  # every parameter trained
    tuned_model, tuned_tokenizer = checkpoint.load_model(tmp_path / "tuned")
    assert tuned_tokenizer.to_dict() == tokenizer.to_dict()  # the directory's tokenizer, its end ids too
    capsys.readouterr()
    assert cli.main(["sample", "--checkpoint", str(tmp_path / "tuned"), "--prompt", PROMPT, "--max-new-tokens", "8",
                     "--temperature", "0"]) == 0  # fmt: skip
    expected = generate(tuned_model, tuned_tokenizer, PROMPT, 8, temperature=0).text
    assert expected and expected in capsys.readouterr().out


def test_convert_there_and_back_gives_transformers_the_same_logits_and_tokenizer_ids(case, tmp_path):
    name, directory = case
    assert cli.main(["convert", str(directory), str(tmp_path / "run")]) == 0
    assert cli.main(["convert", str(tmp_path / "run"), str(tmp_path / "again")]) == 0
    config = json.loads((tmp_path / "again" / "config.json").read_text())
    assert config["architectures"] == json.loads((directory / "config.json").read_text())["architectures"]
    before, after = (transformers.AutoTokenizer.from_pretrained(d) for d in (directory, tmp_path / "again"))
    for text in TEXTS:
        assert after(text)["input_ids"] == before(text)["input_ids"], (name, text[:40])
        ids = before(text)["input_ids"]
        assert after.decode(ids) == before.decode(ids), (name, text[:40])
    ids = torch.tensor([before(TEXTS[-1])["input_ids"][:40]])
    with torch.no_grad():
        assert torch.equal(hf_model(tmp_path / "again")(ids).logits, hf_model(directory)(ids).logits)
    assert after.eos_token_id == before.eos_token_id and after.bos_token_id == before.bos_token_id


def test_the_step_by_step_tokenizer_view_names_what_it_does_not_show(case):
    from numforge.tokenizer.explain import explain

    _, directory = case
    with pytest.raises(ValueError, match="byte-level BPE only, not a SentencePieceBPE"):
        explain(load_pretrained(directory)[1], "Hi")
