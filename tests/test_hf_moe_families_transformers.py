"""numforge against transformers on tiny random Qwen3MoeForCausalLM and OlmoeForCausalLM directories (skipped without
torch, transformers and tokenizers).

Each directory is saved by transformers itself (``save_pretrained``: one ``mlp.experts.{e}.gate_proj|up_proj|
down_proj`` tensor per expert, as on the Hub) beside a tokenizer trained here, every parameter drawn at random.
Qwen3-MoE: QK-norm over each head, heads of 12 in a 32-wide model, the kept gates renormalised
(``norm_topk_prob``). OLMoE: QK-norm over the whole q and k projections (q_norm (32,), k_norm (16,) with two
key/value heads), the gates not renormalised (its default). The float64 reference is the Mixtral test's
``float64_router``: RMSNorm, the rotation and the routers' softmax in float64, eager experts.
"""

import dataclasses
import re
import shutil

import numpy as np
import pytest

from numforge import backend, cli
from numforge.generate import generate
from numforge.hf import load_pretrained, save_pretrained
from numforge.model import GPT, GPTConfig
from numforge.model.config import ARCHS

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
from hf_tokenizers import qwen2  # noqa: E402
from test_hf_llama_transformers import CONTEXT, SIZES, hf_greedy, hf_model, mistral_style, randomize, token_ids, worst  # noqa: E402
from test_hf_moe_transformers import eager, float64_router, hf_moe_grads_by_numforge_name  # noqa: E402

# model_type -> (config class, tokenizer builder, fields, architecture)
FAMILIES = {
    "qwen3_moe": (
        "Qwen3MoeConfig", qwen2,
        dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24, norm_topk_prob=True,
             router_aux_loss_coef=0.02, num_key_value_heads=2, head_dim=12),
        "Qwen3MoeForCausalLM",
    ),
    "olmoe": (
        "OlmoeConfig", mistral_style,
        dict(num_experts=4, num_experts_per_tok=2, router_aux_loss_coef=0.02, num_key_value_heads=2,
             pad_token_id=None),  # OlmoeConfig's default, 1, is here the BOS: nn.Embedding(padding_idx) freezes its row
        "OlmoeForCausalLM",
    ),
}  # fmt: skip
# what numforge reads from each: (d_ff, renormalised, QK-norm extent, q_norm and k_norm widths)
EXPECTED = {"qwen3_moe": (24, True, "head", (12,), (12,)), "olmoe": (48, False, "projection", (32,), (16,))}


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    """(model_type, directory, numforge's tokenizer): a random tiny model (GQA, 4 experts, top-2) saved by
    transformers."""
    from numforge.tokenizer import load_tokenizer

    config_class, build_tokenizer, fields, _ = FAMILIES[request.param]
    directory, _ = build_tokenizer(tmp_path_factory.mktemp(request.param) / "model")
    tokenizer = load_tokenizer(directory)
    config = getattr(transformers, config_class)(
        **SIZES, **fields, vocab_size=tokenizer.vocab_size, max_position_embeddings=CONTEXT,
        bos_token_id=tokenizer.bos_id, eos_token_id=next(iter(tokenizer.eos_ids)),
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    randomize(model)
    model.save_pretrained(directory)
    return request.param, directory, tokenizer


def test_the_config_maps_onto_numforge_experts_and_qk_norm(family):
    model_type, directory, _ = family
    model, _ = load_pretrained(directory, dtype="float64")
    c, (d_ff, renormalized, extent, q_norm, k_norm) = model.config, EXPECTED[model_type]
    assert (c.num_experts, c.experts_top_k, c.d_ff, c.experts_renormalize) == (4, 2, d_ff, renormalized)
    assert (c.router_aux_loss_coef, c.router_z_loss_coef, c.qk_norm, c.qk_norm_extent) == (0.02, 0.0, True, extent)
    assert model.params["layers.1.attn.q_norm.weight"].shape == q_norm
    assert model.params["layers.1.attn.k_norm.weight"].shape == k_norm


def test_logits_equal_transformers(family):
    model_type, directory, tokenizer = family
    ours64, _ = load_pretrained(directory, dtype="float64")
    ids = token_ids(tokenizer)
    with torch.no_grad():
        theirs64 = float64_router(eager(directory))(torch.tensor(ids)).logits.numpy()
        theirs32 = hf_model(directory)(torch.tensor(ids)).logits.numpy()
    assert worst(backend.to_numpy(ours64.logits(backend.asarray(ids))), theirs64) < 1e-12, model_type
    ours32 = backend.to_numpy(load_pretrained(directory)[0].logits(backend.asarray(ids)))
    assert worst(ours32, theirs32) < 1e-5, model_type  # float32 rounding, transformers unpatched
    # the experts and the switch matter: experts moved to the next index, or the gates renormalised the other way
    shuffled = {name: np.roll(backend.to_numpy(p), 1, axis=0) if ".experts." in name else p
                for name, p in ours64.params.items()}  # fmt: skip
    flipped = dataclasses.replace(ours64.config, experts_renormalize=not ours64.config.experts_renormalize)
    for config, params in ((ours64.config, shuffled), (flipped, ours64.params)):
        other = GPT(config, dtype="float64")
        other.load_params(params)
        assert worst(backend.to_numpy(other.logits(backend.asarray(ids))), theirs64) > 1e-3, model_type


def test_every_parameter_gradient_equals_torch_autograd(family):
    """The cross-entropy's gradients (the load-balancing loss off on numforge's side: transformers adds it only
    with output_router_logits) into every parameter, routers, experts and QK-norms included, in float64."""
    model_type, directory, tokenizer = family
    loaded, _ = load_pretrained(directory, dtype="float64")
    model = GPT(dataclasses.replace(loaded.config, router_aux_loss_coef=0.0), dtype="float64")
    model.load_params(loaded.params)
    ids = token_ids(tokenizer, 41)
    inputs, targets = ids[:, :-1], ids[:, 1:]
    loss, cache = model.forward(backend.asarray(inputs), backend.asarray(targets))
    ours = {k: backend.to_numpy(v) for k, v in model.backward(cache).items()}
    reference = float64_router(eager(directory))
    logits = reference(torch.tensor(inputs)).logits  # (1,T,V)
    theirs_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.tensor(targets)[0])
    theirs_loss.backward()
    assert abs(float(loss) - theirs_loss.item()) < 1e-12 * theirs_loss.item()
    theirs = hf_moe_grads_by_numforge_name(reference)
    assert theirs.keys() == ours.keys()  # every parameter
    errors = {key: worst(ours[key], theirs[key]) for key in theirs}
    assert max(errors.values()) < 1e-9, sorted(errors.items(), key=lambda item: -item[1])[:3]


def test_greedy_generation_equals_transformers_generate(family):
    model_type, directory, _ = family
    model, tokenizer = load_pretrained(directory)
    prompt_ids = transformers.AutoTokenizer.from_pretrained(directory)("The")["input_ids"]
    result = generate(model, tokenizer, "The", 30, temperature=0)
    assert result.prompt_ids == prompt_ids
    theirs = hf_greedy(directory, prompt_ids, 30)
    assert result.ids + ([result.end_id] if result.stopped_at_end_of_text else []) == theirs, model_type
    assert len(set(theirs)) > 3  # not a degenerate repetition


def test_numforge_convert_there_and_back_opens_in_transformers_with_equal_logits(family, tmp_path):
    from safetensors.torch import load_file

    model_type, directory, tokenizer = family
    assert cli.main(["convert", str(directory), str(tmp_path / "run")]) == 0
    assert cli.main(["convert", str(tmp_path / "run"), str(tmp_path / "hf")]) == 0
    before, after = (load_file(str(d / "model.safetensors")) for d in (directory, tmp_path / "hf"))
    assert set(before) == set(after)
    for key, tensor in before.items():
        assert torch.equal(after[key], tensor), key
    again = hf_model(tmp_path / "hf")
    assert type(again).__name__ == FAMILIES[model_type][3]
    assert (again.config.num_experts, again.config.norm_topk_prob) == (4, EXPECTED[model_type][1])
    ids = torch.tensor(token_ids(tokenizer))
    with torch.no_grad():
        assert torch.equal(again(ids).logits, hf_model(directory)(ids).logits)


def test_trace_and_train_init_from_read_the_directory(family, tmp_path, capsys):
    _, directory, _ = family
    assert cli.main(["trace", "--checkpoint", str(directory), "--prompt", "The cat", "--backward", "--lens"]) == 0
    out = capsys.readouterr().out
    assert "layer 1 q after qk_norm" in out and "logit lens" in out and "backward pass" in out
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on a mat while one dog ran to the old red barn and back. " * 40, encoding="utf-8")
    args = ["train", "--init-from", str(directory), "--out", str(tmp_path / "tuned"), "--max-steps", "2",
            "--data", str(corpus), "--cache-dir", str(tmp_path), "--seq-len", "16", "--batch-size", "2",
            "--no-progress", "--eval-every", "2", "--save-every", "2"]  # fmt: skip
    assert cli.main(args) == 0
    from numforge.checkpoint import load_checkpoint

    tuned, (original, _) = load_checkpoint(tmp_path / "tuned"), load_pretrained(directory)
    assert tuned.config == original.config.to_dict() and tuned.state["step"] == 2
    moved = [n for n, p in original.params.items() if not np.array_equal(tuned.params[n], backend.to_numpy(p))]
    assert len(moved) == len(original.params)  # every parameter, routers, experts and QK-norms included


EXPORTS = {  # numforge's options -> the family transformers opens it as
    "qwen3_moe (QK-norm over each head, head_dim 12, renormalised)": (
        {"qk_norm": True, "head_dim": 12, "num_kv_heads": 2}, "Qwen3MoeForCausalLM",
    ),
    "qwen3_moe (a window of 8 on every layer, not renormalised)": (
        {"qk_norm": True, "sliding_window": 8, "experts_renormalize": False}, "Qwen3MoeForCausalLM",
    ),
    "olmoe (QK-norm over the projection, not renormalised)": (
        {"qk_norm": True, "qk_norm_extent": "projection", "num_kv_heads": 2, "experts_renormalize": False},
        "OlmoeForCausalLM",
    ),
}  # fmt: skip


@pytest.mark.parametrize("options, architecture", EXPORTS.values(), ids=EXPORTS.keys())
def test_transformers_opens_a_numforge_export_with_the_same_logits(tmp_path, options, architecture):
    from hf_dirs import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    config = GPTConfig(**{**ARCHS["moe"], "vocab_size": 290, "max_seq_len": CONTEXT, "d_model": 32, "num_heads": 4,
                          "num_layers": 2, "d_ff": 24, "num_experts": 4, **options})  # fmt: skip
    model = GPT(config, seed=5, dtype="float64")
    for name, p in model.params.items():  # norm weights away from 1, routers away from uniform
        p += backend.asarray(np.random.default_rng(len(name)).normal(0.0, 0.3, p.shape))
    save_pretrained(model, tokenizer, tmp_path / "export")
    loaded = eager(tmp_path / "export")
    assert type(loaded).__name__ == architecture
    assert loaded.config.norm_topk_prob == config.experts_renormalize
    ids = token_ids(tokenizer)  # 40 positions: past the window of 8
    with torch.no_grad():
        theirs = float64_router(loaded)(torch.tensor(ids)).logits.numpy()
    assert worst(backend.to_numpy(model.logits(backend.asarray(ids))), theirs) < 1e-12


def test_a_missing_or_misshapen_expert_or_qk_norm_tensor_is_named(family, tmp_path):
    from safetensors.numpy import load_file, save_file

    model_type, directory, _ = family
    tensors = load_file(str(directory / "model.safetensors"))
    expert, q_norm = "model.layers.1.mlp.experts.3.down_proj.weight", "model.layers.0.self_attn.q_norm.weight"
    F, width = EXPECTED[model_type][0], EXPECTED[model_type][3][0]
    cases = {
        "drop": (expert, r"missing tensors \['layers.1.mlp.experts.3.down_proj.weight'\]"),
        "transpose": (expert, rf"tensor '{re.escape(expert)}' has shape \({F}, 32\), the config needs \(32, {F}\)"),
        "halve": (q_norm, rf"tensor '{re.escape(q_norm)}' has shape \({width // 2},\), the config needs \({width},\)"),
    }
    for change, (name, match) in cases.items():
        broken = tmp_path / change
        shutil.copytree(directory, broken)
        edited = {k: v for k, v in tensors.items() if k != name}
        if change != "drop":
            edited[name] = tensors[name].T.copy() if change == "transpose" else tensors[name][: width // 2].copy()
        save_file(edited, str(broken / "model.safetensors"), metadata={"format": "pt"})
        with pytest.raises(ValueError, match=match):
            load_pretrained(broken)
