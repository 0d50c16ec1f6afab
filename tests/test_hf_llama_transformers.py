"""numforge against transformers on tiny random Llama, Mistral, Qwen2, Qwen3 and SmolLM2 directories (skipped without
torch, transformers and tokenizers).

Every directory is saved by ``transformers`` itself (``*ForCausalLM(config).save_pretrained``) beside a tokenizer
trained here by ``tokenizers`` in the family's pipeline (``hf_tokenizers.py``), so the files are what a user has
on disk, only small. The model's every parameter is drawn at random (norm weights around 1 too), so that a
mapping mistake between two norms or two projections cannot hide behind equal values.

Why the float64 reference is patched: transformers' RMSNorm computes in float32 whatever the model's dtype
(``hidden_states.to(torch.float32)``), and its rotary embedding computes inv_freq and the angles in float32
(``torch.arange(..., dtype=torch.float)``, ``.float()`` in the forward). A float64 transformers model is
therefore only float32-accurate, and a comparison to 1e-9 would measure transformers' float32 steps, not
numforge. ``float64_reference`` replaces those two forwards, on the model's own modules, with the same formulas
computed in float64 (checked against transformers' float32 inv_freq to float32 rounding); every other step is
transformers' own. The float32 comparisons use transformers unpatched.
"""

import json
import math
import shutil
import types

import numpy as np
import pytest

from numforge import backend
from numforge.generate import generate
from numforge.hf import load_pretrained, save_pretrained
from numforge.hf.llama import QWEN2_REBUILT
from numforge.model import GPT, GPTConfig
from numforge.model.config import ARCHS
from numforge.tokenizer import BPETokenizer, load_tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
from hf_tokenizers import llama3, pre_tokenizers, qwen2, save, smollm2, trained, with_bos  # noqa: E402

SIZES = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, rms_norm_eps=1e-5)
CONTEXT = 64
WINDOW = 8  # the windowed cases' sliding_window: shorter than the 40 tokens compared
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16, "rope_theta": 500000.0}  # fmt: skip
TEXT = "The cat sat on the mat. 12345 東京は日本の首都です。 café"
NASTY = ["Hello world's  2 cats 🙂 世界\r\n\tend", "caf\u00e9 cafe\u0301 12345678901 3.14", "<|endoftext|> x <s> y"]


def mistral_style(directory):
    """A byte-level tokenizer with Mistral's special tokens and BOS (Mistral's own tokenizer is sentencepiece-style,
    which numforge refuses: the model half is what a Mistral directory tests here)."""
    tok = with_bos(trained(pre_tokenizers.ByteLevel(False), specials=["<unk>", "<s>", "</s>"]), "<s>")
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
              "unk_token": "<unk>"}  # fmt: skip
    return save(directory, tok, config, {"bos_token_id": 1, "eos_token_id": 2}), tok


# name -> (config class, tokenizer builder, the family's fields, file dtype, max_shard_size)
CASES = {
    "llama3 (GQA, tied, llama3 rope)": (
        "LlamaConfig", llama3, dict(num_key_value_heads=2, tie_word_embeddings=True, rope_parameters=LLAMA3_ROPE),
        "float32", None,
    ),
    "smollm2 (MQA, untied, attention and mlp biases, linear rope)": (
        "LlamaConfig", smollm2,
        dict(num_key_value_heads=1, attention_bias=True, mlp_bias=True,
             rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}),
        "float32", None,
    ),
    "mistral (GQA, untied, window = context)": (
        "MistralConfig", mistral_style, dict(num_key_value_heads=2, sliding_window=CONTEXT), "float32", None,
    ),
    "mistral (a window of 8 on every layer, T = 40 > 8)": (
        "MistralConfig", mistral_style, dict(num_key_value_heads=2, sliding_window=WINDOW), "float32", None,
    ),
    "qwen2 (a window of 8 on layer 1, max_window_layers 1)": (
        "Qwen2Config", qwen2, dict(num_key_value_heads=2, use_sliding_window=True, sliding_window=WINDOW,
                                   max_window_layers=1), "float32", None,
    ),
    "qwen2 (q/k/v biases, tied, bfloat16 shards)": (
        "Qwen2Config", qwen2, dict(num_key_value_heads=2, tie_word_embeddings=True), "bfloat16", "40KB",
    ),
    "qwen3 (QK-norm, head_dim 12 of 32 / 4, untied, bfloat16)": (
        "Qwen3Config", qwen2, dict(num_key_value_heads=2, head_dim=12), "bfloat16", None,
    ),
}  # fmt: skip


def randomize(model, seed: int = 0) -> None:
    """Every parameter drawn anew: norm weights 1 + 0.2 N(0, 1), the rest 0.3 N(0, 1) (biases 0.1 N(0, 1))."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator, dtype=torch.float64).to(p.dtype)
            if "norm" in name:
                p.copy_(1 + 0.2 * noise)
            else:
                p.copy_((0.1 if name.endswith("bias") else 0.3) * noise)


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    """(name, directory, numforge's tokenizer): a tokenizer trained here and a random model saved by transformers."""
    config_class, build_tokenizer, fields, dtype, shard = CASES[request.param]
    directory, _ = build_tokenizer(tmp_path_factory.mktemp("case") / "model")
    tokenizer = load_tokenizer(directory)
    ends = list(tokenizer.eos_ids)
    config = getattr(transformers, config_class)(
        **SIZES, **fields, vocab_size=tokenizer.vocab_size, max_position_embeddings=CONTEXT,
        bos_token_id=tokenizer.bos_id, eos_token_id=ends[0] if len(ends) == 1 else ends,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    randomize(model)
    options = {} if shard is None else {"max_shard_size": shard}
    model.to(getattr(torch, dtype)).save_pretrained(directory, **options)
    return request.param, directory, tokenizer


def hf_model(directory, dtype=torch.float32):
    return transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=dtype).eval()


# ---------------------------------------------------------------- the float64 reference


def inv_freq_float64(config) -> torch.Tensor:
    """transformers' inverse frequencies (modeling_rope_utils: default, linear, llama3), in float64."""
    rope = config.rope_parameters
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    inv_freq = 1.0 / rope["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    if rope["rope_type"] == "linear":
        return inv_freq / rope["factor"]
    if rope["rope_type"] == "llama3":
        factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        old = rope["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old / low, inv_freq / factor, inv_freq)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / high) * ~(wavelen > old / low)
        return torch.where(medium, smoothed, scaled)
    assert rope["rope_type"] == "default"
    return inv_freq


def float64_reference(model):
    """``model`` in float64 with its RMSNorms and its rotary embedding computed in float64 (module docstring)."""
    model = model.to(torch.float64)

    def rms_norm(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    rotary = model.model.rotary_emb
    inv_freq = inv_freq_float64(model.config)
    torch.testing.assert_close(inv_freq.float(), rotary.inv_freq.float(), rtol=1e-6, atol=0)  # the same formula

    def rotation(self, x, position_ids):
        angles = position_ids[..., None].to(torch.float64) * inv_freq  # (B,T,D/2)
        angles = torch.cat((angles, angles), dim=-1)  # (B,T,D)
        return (angles.cos() * self.attention_scaling).to(x.dtype), (angles.sin() * self.attention_scaling).to(x.dtype)

    norms = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]
    qk_norms = any(name.endswith("self_attn.q_norm") for name, _ in model.named_modules())  # Qwen3, Qwen3-MoE, OLMoE
    assert len(norms) == (4 if qk_norms else 2) * model.config.num_hidden_layers + 1
    for module in norms:
        module.forward = types.MethodType(rms_norm, module)
    rotary.forward = types.MethodType(rotation, rotary)
    return model


def token_ids(tokenizer, length: int = 40) -> np.ndarray:
    ids = tokenizer.encode_prompt(TEXT * 4)[:length]
    assert len(ids) == length
    return np.array([ids])


def worst(ours, theirs) -> float:
    """max |ours - theirs| / max |theirs|: the error relative to the array's scale."""
    return float(np.abs(ours - theirs).max() / np.abs(theirs).max())


# ---------------------------------------------------------------- logits and gradients


def test_logits_equal_transformers(case):
    name, directory, _ = case
    ours64, tokenizer = load_pretrained(directory, dtype="float64")
    ids = token_ids(tokenizer)
    with torch.no_grad():
        theirs64 = float64_reference(hf_model(directory))(torch.tensor(ids)).logits.numpy()
        theirs32 = hf_model(directory)(torch.tensor(ids)).logits.numpy()
    assert worst(backend.to_numpy(ours64.logits(backend.asarray(ids))), theirs64) < 1e-12, name
    ours32 = backend.to_numpy(load_pretrained(directory)[0].logits(backend.asarray(ids)))
    assert ours32.dtype == np.float32
    assert worst(ours32, theirs32) < 1e-5, name  # float32 rounding (measured: 2e-6), transformers unpatched


WINDOWED = [name for name, (*_, fields, _, _) in CASES.items() if fields.get("sliding_window") == WINDOW]


@pytest.mark.parametrize("case", WINDOWED, indirect=True)
def test_transformers_eager_attention_applies_the_window_numforge_applies(case, monkeypatch):
    """With ``attn_implementation="eager"`` transformers adds the mask ``create_sliding_window_causal_mask``
    builds (key j seen by query i when i - W < j <= i) to its scores: equal logits to float64 rounding, and a
    numforge model without the window gives other ones (the window hides something at T = 40 > 8). Eager
    attention's softmax runs in float32 (``dtype=torch.float32``) whatever the model's dtype: on float64 scores
    it runs in float64 here, like the norms and the rotation of ``float64_reference``."""
    softmax = torch.nn.functional.softmax

    def float64_softmax(x, dim=None, dtype=None, **kwargs):
        return softmax(x, dim=dim, dtype=torch.float64 if x.dtype == torch.float64 else dtype, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "softmax", float64_softmax)
    name, directory, _ = case
    ours, tokenizer = load_pretrained(directory, dtype="float64")
    assert ours.config.sliding_window == WINDOW, name
    ids = token_ids(tokenizer)
    eager = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32,
                                                              attn_implementation="eager").eval()  # fmt: skip
    assert eager.config._attn_implementation == "eager"
    with torch.no_grad():
        theirs = float64_reference(eager)(torch.tensor(ids)).logits.numpy()
    assert worst(backend.to_numpy(ours.logits(backend.asarray(ids))), theirs) < 1e-12, name
    unwindowed = GPT(GPTConfig(**{**ours.config.to_dict(), "sliding_window": None, "window_layers": None}),
                     dtype="float64")  # fmt: skip
    unwindowed.load_params(ours.params)
    assert worst(backend.to_numpy(unwindowed.logits(backend.asarray(ids))), theirs) > 1e-3, name


def hf_grads_by_numforge_name(model) -> dict[str, np.ndarray]:
    """Each parameter's ``.grad`` under numforge's name, written out here: q|k|v side by side, ``nn.Linear``'s
    ``(out, in)`` transposed to ``(in, out)``; a tied table has one gradient (both uses summed by autograd)."""
    g = {name: p.grad.numpy() for name, p in model.named_parameters()}
    grads = {"token_embedding": g["model.embed_tokens.weight"], "final_norm.weight": g["model.norm.weight"]}
    if "lm_head.weight" in g:
        grads["lm_head.weight"] = g["lm_head.weight"]
    for i in range(model.config.num_hidden_layers):
        hf, ours = f"model.layers.{i}.", f"layers.{i}."
        attn = hf + "self_attn."
        grads[ours + "pre_attn_norm.weight"] = g[hf + "input_layernorm.weight"]
        grads[ours + "pre_mlp_norm.weight"] = g[hf + "post_attention_layernorm.weight"]
        grads[ours + "attn.qkv_proj.weight"] = np.concatenate([g[attn + f"{x}_proj.weight"] for x in "qkv"]).T
        grads[ours + "attn.out_proj.weight"] = g[attn + "o_proj.weight"].T
        if attn + "q_proj.bias" in g:
            grads[ours + "attn.qkv_proj.bias"] = np.concatenate([g[attn + f"{x}_proj.bias"] for x in "qkv"])
        if attn + "o_proj.bias" in g:
            grads[ours + "attn.out_proj.bias"] = g[attn + "o_proj.bias"]
        for norm in ("q_norm", "k_norm"):
            if attn + f"{norm}.weight" in g:
                grads[ours + f"attn.{norm}.weight"] = g[attn + f"{norm}.weight"]
        for proj in ("gate_proj", "up_proj", "down_proj"):
            if hf + f"mlp.{proj}.weight" not in g:  # a mixture of experts (test_hf_moe_transformers.py)
                continue
            grads[ours + f"mlp.{proj}.weight"] = g[hf + f"mlp.{proj}.weight"].T
            if hf + f"mlp.{proj}.bias" in g:
                grads[ours + f"mlp.{proj}.bias"] = g[hf + f"mlp.{proj}.bias"]
    return grads


def test_every_parameter_gradient_equals_torch_autograd_on_transformers_model(case):
    name, directory, _ = case
    model, tokenizer = load_pretrained(directory, dtype="float64")
    ids = token_ids(tokenizer, 41)
    inputs, targets = ids[:, :-1], ids[:, 1:]
    loss, cache = model.forward(backend.asarray(inputs), backend.asarray(targets))
    ours = {k: backend.to_numpy(v) for k, v in model.backward(cache).items()}
    reference = float64_reference(hf_model(directory))
    logits = reference(torch.tensor(inputs)).logits  # (1,T,V)
    theirs_loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), torch.tensor(targets).reshape(-1)
    )
    theirs_loss.backward()
    assert abs(float(loss) - theirs_loss.item()) < 1e-12 * theirs_loss.item()
    theirs = hf_grads_by_numforge_name(reference)
    assert theirs.keys() == ours.keys()  # every parameter
    errors = {key: worst(ours[key], theirs[key]) for key in ours}
    assert max(errors.values()) < 1e-9, (name, sorted(errors.items(), key=lambda item: -item[1])[:3])


# ---------------------------------------------------------------- generation


def hf_greedy(directory, prompt_ids, new_tokens: int) -> list[int]:
    with torch.no_grad():
        out = hf_model(directory).generate(
            torch.tensor([prompt_ids]), attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
            max_new_tokens=new_tokens, do_sample=False,
        )  # fmt: skip
    return out[0, len(prompt_ids) :].tolist()


def test_greedy_generation_equals_transformers_generate(case, tmp_path):
    name, directory, _ = case
    model, tokenizer = load_pretrained(directory)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    prompt_ids = hf_tokenizer("The")["input_ids"]
    assert tokenizer.encode_prompt("The") == prompt_ids
    assert (prompt_ids[0] == tokenizer.bos_id) == (tokenizer.bos_id is not None)  # Llama 3's and Mistral's BOS first
    result = generate(model, tokenizer, "The", 30, temperature=0)
    assert result.prompt_ids == prompt_ids
    theirs = hf_greedy(directory, prompt_ids, 30)
    assert result.ids + ([result.end_id] if result.stopped_at_end_of_text else []) == theirs, name
    assert len(set(theirs)) > 3  # not a degenerate repetition
    # an end id that greedy decoding reaches: both stop right after it (generation_config.json's list)
    stop = result.ids[len(result.ids) // 3]  # (Qwen2's case stops at its own end id after 3 tokens)
    stopped_dir = tmp_path / "stopped"
    shutil.copytree(directory, stopped_dir)
    generation = json.loads((stopped_dir / "generation_config.json").read_text())
    generation["eos_token_id"] = [*tokenizer.eos_ids, stop]
    (stopped_dir / "generation_config.json").write_text(json.dumps(generation))
    model, tokenizer = load_pretrained(stopped_dir)
    result = generate(model, tokenizer, "The", 30, temperature=0)
    assert result.stopped_at_end_of_text and result.end_id == stop
    assert result.ids + [stop] == hf_greedy(stopped_dir, prompt_ids, 30) == theirs[: theirs.index(stop) + 1]


def test_numforge_sample_prints_what_generate_gives(case, capsys):
    from numforge import cli

    _, directory, _ = case
    args = ["sample", "--checkpoint", str(directory), "--prompt", "The", "--max-new-tokens", "20", "--temperature", "0"]
    assert cli.main(args) == 0
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    new = hf_greedy(directory, hf_tokenizer("The")["input_ids"], 20)
    ends = transformers.GenerationConfig.from_pretrained(directory).eos_token_id
    new = [i for i in new if i not in (ends if isinstance(ends, list) else [ends])]  # generate keeps the end id
    assert capsys.readouterr().out == "The" + hf_tokenizer.decode(new) + "\n"


# ---------------------------------------------------------------- round trips and exports


def test_hf_to_numforge_to_hf_keeps_every_tensor_and_the_tokenizer(case, tmp_path):
    from safetensors.torch import load_file

    name, directory, tokenizer = case
    model, tokenizer = load_pretrained(directory)
    save_pretrained(model, tokenizer, tmp_path / "again")
    before = {}
    for shard in sorted(directory.glob("*.safetensors")):
        before |= load_file(str(shard))
    after = load_file(str(tmp_path / "again" / "model.safetensors"))
    assert set(before) == set(after)
    for key, tensor in before.items():  # a bfloat16 file comes back as float32, every value kept
        assert after[key].dtype == torch.float32 and torch.equal(after[key], tensor.float()), key
    original, again = (json.loads((d / "config.json").read_text()) for d in (directory, tmp_path / "again"))
    # a Mistral whose window covers the context computes what a Llama does: numforge writes it as one
    renamed = {"MistralForCausalLM": "LlamaForCausalLM"} if original.get("sliding_window") == CONTEXT else {}
    assert again["architectures"] == [renamed.get(name, name) for name in original["architectures"]]
    for key in ("hidden_size", "num_key_value_heads", "tie_word_embeddings", "rope_parameters"):
        assert again[key] == original[key], key
    if original.get("sliding_window") == WINDOW:  # the window and the layers it covers, as transformers reads them
        configs = [transformers.AutoConfig.from_pretrained(d) for d in (directory, tmp_path / "again")]
        assert configs[0].sliding_window == configs[1].sliding_window == WINDOW
        assert getattr(configs[0], "layer_types", None) == getattr(configs[1], "layer_types", None)
    assert again["head_dim"] == original.get("head_dim", original["hidden_size"] // original["num_attention_heads"])
    generation = [transformers.GenerationConfig.from_pretrained(d) for d in (directory, tmp_path / "again")]
    assert generation[0].eos_token_id == generation[1].eos_token_id
    theirs, ours = (transformers.AutoTokenizer.from_pretrained(d) for d in (directory, tmp_path / "again"))
    for text in [TEXT, *NASTY]:
        assert ours(text)["input_ids"] == theirs(text)["input_ids"], (name, text)
    ids = torch.tensor(token_ids(tokenizer))
    with torch.no_grad():
        assert torch.equal(hf_model(tmp_path / "again")(ids).logits, hf_model(directory)(ids).logits)


LLAMA3_SCALING = {k: v for k, v in LLAMA3_ROPE.items() if k != "rope_theta"}
EXPORTS = {
    "llama (untied, GQA)": ({"num_kv_heads": 2}, "LlamaForCausalLM"),
    "llama (tied, MQA, llama3 rope)": (
        {"tie_weights": True, "num_kv_heads": 1, "rope_theta": 5e5, "rope_scaling": LLAMA3_SCALING}, "LlamaForCausalLM",
    ),
    "llama (every bias, head_dim 12)": ({"use_bias": True, "head_dim": 12}, "LlamaForCausalLM"),
    "qwen2 (q/k/v biases, Qwen2's pipeline)": ({"qkv_bias": True, "num_kv_heads": 2}, "Qwen2ForCausalLM"),
    "q/k/v biases, GPT-2's pattern: a Llama, o_proj bias 0": ({"qkv_bias": True}, "LlamaForCausalLM"),
    "qwen3 (QK-norm, head_dim 12)": ({"qk_norm": True, "head_dim": 12, "num_kv_heads": 2}, "Qwen3ForCausalLM"),
}  # fmt: skip


@pytest.mark.parametrize("options, architecture", EXPORTS.values(), ids=EXPORTS.keys())
def test_transformers_opens_a_numforge_export_with_the_same_logits(tmp_path, options, architecture):
    from hf_dirs import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    if architecture == "Qwen2ForCausalLM":  # transformers rebuilds a qwen2 directory's tokenizer as Qwen2's
        tokenizer = BPETokenizer(tokenizer.merges, tokenizer.special_tokens, None, tokenizer.byte_ids,
                                 tokenizer.merge_ids, pipeline=QWEN2_REBUILT)  # fmt: skip
    config = GPTConfig(**{**ARCHS["llama"], "vocab_size": 290, "max_seq_len": CONTEXT, "d_model": 32,
                          "num_heads": 4, "num_layers": 2, "d_ff": 48, **options})  # fmt: skip
    model = GPT(config, seed=5, dtype="float64")
    for name, p in model.params.items():  # norm weights away from 1, so that swapped norms would show
        p += backend.asarray(np.random.default_rng(len(name)).normal(0.0, 0.1, p.shape))
    save_pretrained(model, tokenizer, tmp_path / "export")
    loaded = hf_model(tmp_path / "export", torch.float64)
    assert type(loaded).__name__ == architecture
    ids = token_ids(tokenizer)
    with torch.no_grad():
        theirs = float64_reference(loaded)(torch.tensor(ids)).logits.numpy()
    assert worst(backend.to_numpy(model.logits(backend.asarray(ids))), theirs) < 1e-12
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "export")
    for text in [TEXT, *NASTY]:
        assert hf_tokenizer(text)["input_ids"] == tokenizer.encode_prompt(text), text


def test_numforge_convert_of_an_arch_llama_run_opens_in_transformers(tmp_path):
    from helpers import tiny_run

    from numforge import cli
    from numforge.checkpoint import load_model

    run = tiny_run(tmp_path, "--arch", "llama", "--kv-heads", "1")
    assert cli.main(["convert", str(run), str(tmp_path / "hf")]) == 0
    model, tokenizer = load_model(run, dtype="float64")
    ids = np.array([tokenizer.encode("the cat sat on the mat")])
    with torch.no_grad():
        theirs = float64_reference(hf_model(tmp_path / "hf", torch.float64))(torch.tensor(ids)).logits.numpy()
    assert worst(backend.to_numpy(model.logits(backend.asarray(ids))), theirs) < 1e-12


def test_the_study_tools_read_a_prompt_as_transformers_does(case):
    from numforge.study.prompt import run_prompt

    name, directory, _ = case
    model, tokenizer = load_pretrained(directory, dtype="float64")
    prompt = run_prompt(model, tokenizer, "The cat sat")  # what trace, attention, inspect and the studio run
    ids = transformers.AutoTokenizer.from_pretrained(directory)("The cat sat")["input_ids"]
    assert list(prompt.ids) == ids, name  # Llama 3's and Mistral's BOS first
    with torch.no_grad():
        theirs = float64_reference(hf_model(directory))(torch.tensor([ids])).logits.numpy()
    assert worst(backend.to_numpy(model.logits(backend.asarray(np.array([ids])))), theirs) < 1e-12
