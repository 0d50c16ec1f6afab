"""numforge against transformers on tiny random Gemma, Gemma 2 and Gemma 3 (text) directories (skipped without
torch, transformers and tokenizers).

Each directory is saved by transformers itself (``GemmaForCausalLM``, ``Gemma2ForCausalLM``,
``Gemma3ForCausalLM``) beside a byte-level
tokenizer trained here (``hf_tokenizers.llama3``: Gemma's own is SentencePiece-style, read by the tokenizer side;
the model half is what these directories test). Every parameter is drawn at random, the norms' zero-centred
weights too (``N(0, 0.2)``: ``1 + w`` away from 1), and the soft caps are set near the scores' and logits' scales so
that ``c tanh(z / c)`` is far from the identity.

The float64 reference (``float64_reference``): transformers computes four steps in float32 whatever the model's
dtype, each replaced on the model's own modules by the same formula in float64 (as the Llama tests do): Gemma's
RMSNorm (``x.float()``, ``1.0 + self.weight.float()``), the rotary embedding (inv_freq and the angles), the
embedding's ``sqrt(hidden_size)`` (a ``torch.tensor(embed_scale)`` buffer: float32, then cast), and eager
attention's softmax (``dtype=torch.float32``). The float32 comparisons use transformers unpatched.
"""

import json
import math
import types

import numpy as np
import pytest

from numforge import backend
from numforge.generate import generate
from numforge.hf import load_pretrained, save_pretrained
from numforge.model import GPT, GPTConfig
from numforge.tokenizer import load_tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
from hf_tokenizers import llama3  # noqa: E402

SIZES = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
             head_dim=16, rms_norm_eps=1e-5, max_position_embeddings=64)  # fmt: skip
LOCAL_GLOBAL_LOCAL = ["sliding_attention", "full_attention", "sliding_attention"]
GEMMA3_ROPE = {"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 100000.0},
               "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}  # fmt: skip
TEXT = "The cat sat on the mat. 12345 東京は日本の首都です。 café"
WINDOWED = {"layer_types": LOCAL_GLOBAL_LOCAL, "sliding_window": 8}  # Gemma 2 and 3 only
CASES = {  # name -> (config class, fields)
    "gemma (multi-query 4/1, tied, no window)": ("GemmaConfig", dict(num_key_value_heads=1)),
    "gemma2 (soft caps 2 and 3, query_pre_attn_scalar 24, untied, local/global/local)": (
        "Gemma2Config",
        dict(attn_logit_softcapping=2.0, final_logit_softcapping=3.0, query_pre_attn_scalar=24,
             tie_word_embeddings=False),
    ),
    "gemma3 (QK-norm, local base 1e4, global 1e5 linear x2, tied, local/local/global)": (
        "Gemma3TextConfig",
        dict(query_pre_attn_scalar=16, rope_parameters=GEMMA3_ROPE,
             layer_types=["sliding_attention", "sliding_attention", "full_attention"]),
    ),
}  # fmt: skip


def randomize(model, seed: int = 0) -> None:
    """Every parameter drawn anew: norm weights (zero-centred: the norm scales by 1 + w) 0.2 N(0, 1), the token
    table 0.3 N(0, 1) / sqrt(C) (the model scales it by sqrt(C): otherwise a tied model's residual is its input
    token's row, and greedy decoding repeats it), the rest 0.3 N(0, 1)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator, dtype=torch.float64).to(p.dtype)
            scale = 0.3 / math.sqrt(model.config.hidden_size) if "embed_tokens" in name else 0.3
            p.copy_((0.2 if "norm" in name else scale) * noise)


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    """(name, directory): a tokenizer trained here and a random Gemma saved by transformers."""
    config_class, fields = CASES[request.param]
    directory, _ = llama3(tmp_path_factory.mktemp("case") / "model")
    tokenizer = load_tokenizer(directory)
    windowed = WINDOWED if config_class != "GemmaConfig" else {}
    config = getattr(transformers, config_class)(
        **{**windowed, **SIZES, **fields}, vocab_size=tokenizer.vocab_size,
        bos_token_id=tokenizer.bos_id, eos_token_id=list(tokenizer.eos_ids), pad_token_id=None,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    randomize(model)
    model.save_pretrained(directory)
    return request.param, directory


def hf_model(directory, dtype=torch.float32):
    return transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=dtype).eval()


@pytest.fixture
def float64_softmax(monkeypatch):
    """Eager attention's ``softmax(..., dtype=torch.float32)`` in float64 on float64 scores."""
    softmax = torch.nn.functional.softmax

    def patched(x, dim=None, dtype=None, **kwargs):
        return softmax(x, dim=dim, dtype=torch.float64 if x.dtype == torch.float64 else dtype, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "softmax", patched)


def inv_freq_float64(rope: dict, dim: int) -> torch.Tensor:
    inv_freq = 1.0 / rope["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    assert rope["rope_type"] in ("default", "linear")
    return inv_freq / rope["factor"] if rope["rope_type"] == "linear" else inv_freq


def float64_reference(model):
    """``model`` in float64 with its float32-only steps in float64 (module docstring; the softmax: the
    ``float64_softmax`` fixture)."""
    model = model.to(torch.float64)
    config = model.config

    def rms_norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)

    norms = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]
    per_layer = {"gemma": 2, "gemma2": 4, "gemma3_text": 6}[config.model_type]  # (the sandwich, Gemma 3's qk)
    assert len(norms) == per_layer * config.num_hidden_layers + 1
    for module in norms:
        module.forward = types.MethodType(rms_norm, module)
    rotary = model.model.rotary_emb
    per_type = isinstance(config.rope_parameters.get("full_attention"), dict)
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]  # Gemma: every layer global
    inv_freq = {kind: inv_freq_float64(config.rope_parameters[kind] if per_type else config.rope_parameters,
                                       config.head_dim) for kind in set(layer_types)}  # fmt: skip
    for kind, freq in inv_freq.items():  # the same formula as transformers' float32 one
        theirs = getattr(rotary, f"{kind}_inv_freq") if per_type else rotary.inv_freq
        torch.testing.assert_close(freq.float(), theirs.float(), rtol=1e-6, atol=0)

    def rotation(self, x, position_ids, layer_type=None):
        angles = position_ids[..., None].to(torch.float64) * inv_freq[layer_type or layer_types[-1]]
        angles = torch.cat((angles, angles), dim=-1)  # (B,T,D)
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)

    if not per_type:  # Gemma, Gemma 2: one table for every layer
        assert len({tuple(f.tolist()) for f in inv_freq.values()}) == 1
    rotary.forward = types.MethodType(rotation, rotary)
    with torch.no_grad():
        model.model.embed_tokens.embed_scale.fill_(math.sqrt(config.hidden_size))  # float32-rounded before
    return model


def token_ids(tokenizer, length: int = 40) -> np.ndarray:
    ids = tokenizer.encode_prompt(TEXT * 4)[:length]
    assert len(ids) == length
    return np.array([ids])


def worst(ours, theirs) -> float:
    """max |ours - theirs| / max |theirs|: the error relative to the array's scale."""
    return float(np.abs(ours - theirs).max() / np.abs(theirs).max())


def test_the_config_reads_every_gemma_option(case):
    name, directory = case
    config = load_pretrained(directory, dtype="float64")[0].config
    assert (config.norm, config.activation, config.scale_embeddings) == ("rmsnorm_offset", "geglu", True)
    if name.startswith("gemma "):  # Llama's two norms, no window, no caps, the scores scaled by head_dim^-1/2
        assert not config.post_norms and config.num_kv_heads == 1 and config.tie_weights
        assert (config.sliding_window, config.attn_softcap, config.logit_softcap, config.qk_norm) == (None,) * 3 + (
            False,
        )
        assert config.query_pre_attn_scalar is None and config.rope_theta == 10000.0
        return
    assert config.post_norms and config.sliding_window == 8 and config.head_dim == 16 and config.num_kv_heads == 2
    if "gemma2" in name:
        assert (config.attn_softcap, config.logit_softcap, config.query_pre_attn_scalar) == (2.0, 3.0, 24.0)
        assert config.window_layers == (0, 2) and config.rope_local_theta is None and not config.tie_weights
    else:
        assert config.qk_norm and config.window_layers == (0, 1) and config.rope_local_theta == 10000.0
        assert config.tie_weights
        assert config.rope_theta == 100000.0 and config.rope_scaling == {"rope_type": "linear", "factor": 2.0}


def test_logits_equal_transformers(case, float64_softmax):
    name, directory = case
    ours64, tokenizer = load_pretrained(directory, dtype="float64")
    ids = token_ids(tokenizer)
    with torch.no_grad():
        theirs64 = float64_reference(hf_model(directory))(torch.tensor(ids)).logits.numpy()
    assert worst(backend.to_numpy(ours64.logits(backend.asarray(ids))), theirs64) < 1e-12, name
    ours64.config.attention = "plain"  # the oracle kernel too
    assert worst(backend.to_numpy(ours64.logits(backend.asarray(ids))), theirs64) < 1e-12, name


def test_float32_logits_equal_transformers_unpatched(case):
    name, directory = case
    tokenizer = load_tokenizer(directory)
    ids = token_ids(tokenizer)
    with torch.no_grad():
        theirs32 = hf_model(directory)(torch.tensor(ids)).logits.numpy()
    ours = load_pretrained(directory)[0]
    ours32 = backend.to_numpy(ours.logits(backend.asarray(ids)))
    assert ours32.dtype == np.float32
    assert worst(ours32, theirs32) < 1e-5, name  # float32 rounding
    with torch.no_grad():  # the scaled embeddings bit for bit: sqrt(C) rounded to float32 first, then the product
        embedded = hf_model(directory).model.embed_tokens(torch.tensor(ids)).numpy()
    assert np.array_equal(backend.to_numpy(ours._embed(backend.asarray(ids), start=0)[0]), embedded)


def hf_grads_by_numforge_name(model) -> dict[str, np.ndarray]:
    """Each parameter's ``.grad`` under numforge's name, written out here (Gemma 2 and 3's four norms per layer;
    Gemma's two, as Llama's: its ``post_attention_layernorm`` is the norm before the MLP)."""
    g = {name: p.grad.numpy() for name, p in model.named_parameters()}
    grads = {"token_embedding": g["model.embed_tokens.weight"], "final_norm.weight": g["model.norm.weight"]}
    if "lm_head.weight" in g:
        grads["lm_head.weight"] = g["lm_head.weight"]
    norms = {"pre_attn_norm": "input_layernorm", "post_attn_norm": "post_attention_layernorm",
             "pre_mlp_norm": "pre_feedforward_layernorm", "post_mlp_norm": "post_feedforward_layernorm",
             "attn.q_norm": "self_attn.q_norm", "attn.k_norm": "self_attn.k_norm"}  # fmt: skip
    if model.config.model_type == "gemma":
        norms = {"pre_attn_norm": "input_layernorm", "pre_mlp_norm": "post_attention_layernorm"}
    for i in range(model.config.num_hidden_layers):
        hf, ours = f"model.layers.{i}.", f"layers.{i}."
        for mine, theirs in norms.items():
            if hf + theirs + ".weight" in g:
                grads[ours + mine + ".weight"] = g[hf + theirs + ".weight"]
        attn = hf + "self_attn."
        grads[ours + "attn.qkv_proj.weight"] = np.concatenate([g[attn + f"{x}_proj.weight"] for x in "qkv"]).T
        grads[ours + "attn.out_proj.weight"] = g[attn + "o_proj.weight"].T
        for proj in ("gate_proj", "up_proj", "down_proj"):
            grads[ours + f"mlp.{proj}.weight"] = g[hf + f"mlp.{proj}.weight"].T
    return grads


def test_every_parameter_gradient_equals_torch_autograd_on_transformers_model(case, float64_softmax):
    name, directory = case
    model, tokenizer = load_pretrained(directory, dtype="float64")
    ids = token_ids(tokenizer, 41)
    inputs, targets = ids[:, :-1], ids[:, 1:]
    loss, cache = model.forward(backend.asarray(inputs), backend.asarray(targets))
    ours = {k: backend.to_numpy(v) for k, v in model.backward(cache).items()}
    reference = float64_reference(hf_model(directory))
    logits = reference(torch.tensor(inputs)).logits  # (1,T,V), soft-capped by transformers
    theirs_loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), torch.tensor(targets).reshape(-1)
    )
    theirs_loss.backward()
    assert abs(float(loss) - theirs_loss.item()) < 1e-12 * theirs_loss.item()
    theirs = hf_grads_by_numforge_name(reference)
    assert theirs.keys() == ours.keys()  # every parameter
    errors = {key: worst(ours[key], theirs[key]) for key in ours}
    assert max(errors.values()) < 1e-9, (name, sorted(errors.items(), key=lambda item: -item[1])[:3])


def test_greedy_generation_equals_transformers_generate(case):
    name, directory = case
    model, tokenizer = load_pretrained(directory)
    prompt_ids = transformers.AutoTokenizer.from_pretrained(directory)("The")["input_ids"]
    assert tokenizer.encode_prompt("The") == prompt_ids
    result = generate(model, tokenizer, "The", 30, temperature=0)  # the KV cache: a ring buffer on local layers
    with torch.no_grad():
        out = hf_model(directory).generate(
            torch.tensor([prompt_ids]), attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
            max_new_tokens=30, do_sample=False,
        )  # fmt: skip
    theirs = out[0, len(prompt_ids) :].tolist()
    assert result.ids + ([result.end_id] if result.stopped_at_end_of_text else []) == theirs, name
    assert len(result.ids) > 8 + len(prompt_ids)  # past the window of 8
    assert len(set(theirs)) > 3  # not a degenerate repetition


def test_convert_to_numforge_and_back_keeps_every_tensor_and_the_logits(case, tmp_path, float64_softmax):
    from safetensors.torch import load_file

    from numforge import cli

    name, directory = case
    assert cli.main(["convert", str(directory), str(tmp_path / "run")]) == 0
    assert cli.main(["convert", str(tmp_path / "run"), str(tmp_path / "again")]) == 0
    before = load_file(str(directory / "model.safetensors"))
    after = load_file(str(tmp_path / "again" / "model.safetensors"))
    assert set(before) == set(after)
    for key, tensor in before.items():
        assert torch.equal(after[key], tensor), key
    original, again = (json.loads((d / "config.json").read_text()) for d in (directory, tmp_path / "again"))
    assert again["architectures"] == original["architectures"]
    keys = ["rope_parameters", "tie_word_embeddings", "head_dim", "num_key_value_heads"]
    if original["model_type"] == "gemma":
        keys += ["hidden_act"]
        assert not {"layer_types", "sliding_window", "query_pre_attn_scalar", "hidden_activation"} & set(again)
    else:
        keys += ["layer_types", "sliding_window", "query_pre_attn_scalar", "attn_logit_softcapping",
                 "final_logit_softcapping", "hidden_activation"]  # fmt: skip
    for key in keys:
        assert again[key] == original[key], key
    ids = torch.tensor(token_ids(load_tokenizer(directory)))
    with torch.no_grad():
        assert torch.equal(hf_model(tmp_path / "again")(ids).logits, hf_model(directory)(ids).logits)


EXPORTS = {  # numforge options -> the class transformers opens
    "gemma": ({"post_norms": False, "query_pre_attn_scalar": None, "sliding_window": None, "num_kv_heads": 1},
              "GemmaForCausalLM"),  # fmt: skip
    "gemma2": ({"attn_softcap": 2.0, "logit_softcap": 3.0, "window_layers": [0]}, "Gemma2ForCausalLM"),
    "gemma3": ({"qk_norm": True, "rope_theta": 1e5, "rope_local_theta": 1e4, "window_layers": [0, 2],
                "tie_weights": False}, "Gemma3ForCausalLM"),
}  # fmt: skip


@pytest.mark.parametrize("options, architecture", EXPORTS.values(), ids=EXPORTS.keys())
def test_transformers_opens_a_numforge_gemma_with_the_same_logits(tmp_path, options, architecture, float64_softmax):
    from hf_dirs import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    sandwich = {"post_norms": True, "query_pre_attn_scalar": 24, "sliding_window": 8, "num_kv_heads": 2}
    config = GPTConfig(
        vocab_size=290, max_seq_len=64, d_model=32, num_heads=4, head_dim=16, num_layers=3, d_ff=48,
        norm="rmsnorm_offset", position="rope", activation="geglu", use_bias=False, scale_embeddings=True,
        **{**sandwich, **options},
    )  # fmt: skip
    model = GPT(config, seed=5, dtype="float64")
    for name, p in model.params.items():  # norm weights away from 0 (the norm's 1 + w away from 1)
        p += backend.asarray(np.random.default_rng(len(name)).normal(0.0, 0.2, p.shape))
    save_pretrained(model, tokenizer, tmp_path / "export")
    loaded = hf_model(tmp_path / "export", torch.float64)
    assert type(loaded).__name__ == architecture
    ids = token_ids(tokenizer)
    with torch.no_grad():
        theirs = float64_reference(loaded)(torch.tensor(ids)).logits.numpy()
    assert worst(backend.to_numpy(model.logits(backend.asarray(ids))), theirs) < 1e-12


def test_what_numforge_cannot_run_is_refused_by_name(case, tmp_path):
    import shutil

    name, directory = case
    activation = "hidden_act" if name.startswith("gemma ") else "hidden_activation"
    refusals = [
        ("use_bidirectional_attention", True, "use_bidirectional_attention is true"),
        (activation, "relu", f"{activation} is 'relu'"),
    ]
    if not name.startswith("gemma "):
        refusals.append(("layer_types", ["full_attention"], "layer_types must name 3 layers"))
    for field, value, message in refusals:
        broken = tmp_path / field
        shutil.copytree(directory, broken)
        config = json.loads((broken / "config.json").read_text())
        (broken / "config.json").write_text(json.dumps({**config, field: value}))
        with pytest.raises(ValueError, match=message):
            load_pretrained(broken)


def test_trace_attention_params_and_train_init_from_read_a_gemma_directory(case, tmp_path, capsys):
    from numforge import checkpoint, cli

    name, directory = case
    assert cli.main(["trace", "--checkpoint", str(directory), "--prompt", "The cat", "--backward", "--lens"]) == 0
    out = capsys.readouterr().out
    assert "predictions at each position" in out and "logit lens" in out and "backward pass" in out, name
    assert cli.main(["attention", "--checkpoint", str(directory), "--prompt", "The cat sat", "--layer", "1"]) == 0
    model, tokenizer = load_pretrained(directory)
    assert cli.main(["params", "--checkpoint", str(directory)]) == 0
    assert f"total {model.num_params():,}" in " ".join(capsys.readouterr().out.split())
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT * 40, encoding="utf-8")
    args = ["train", "--init-from", str(directory), "--out", str(tmp_path / "tuned"), "--max-steps", "2",
            "--data", str(corpus), "--cache-dir", str(tmp_path), "--seq-len", "16", "--batch-size", "2",
            "--no-progress", "--eval-every", "2", "--save-every", "2"]  # fmt: skip
    assert cli.main(args) == 0
    tuned = checkpoint.load_checkpoint(tmp_path / "tuned")
    assert tuned.config == model.config.to_dict() and tuned.state["step"] == 2
    changed = [n for n, p in model.params.items() if not np.array_equal(tuned.params[n], backend.to_numpy(p))]
    assert len(changed) == len(model.params)  # every parameter moved, the post-norms' and the local layers' too
