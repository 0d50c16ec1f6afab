"""numforge against transformers on a tiny random MixtralForCausalLM directory (skipped without torch, transformers
and tokenizers).

The directory is saved by transformers itself (``MixtralForCausalLM(config).save_pretrained``: one
``block_sparse_moe.experts.{e}.w1|w2|w3`` tensor per expert, as on the Hub) beside a tokenizer trained here, every
parameter drawn at random. The float64 reference is ``float64_reference`` of the Llama tests (RMSNorm and the
rotation in float64) with one step more: ``MixtralTopKRouter`` takes its softmax in float32
(``router_logits.float()``) whatever the model's dtype, so ``float64_router`` runs the same formula (softmax,
``torch.topk``, the kept gates divided by their sum) in float64 on the model's own router modules; and its
experts run ``experts_implementation="eager"`` (a loop over the experts: the default ``grouped_mm`` takes no
float64).
"""

import dataclasses
import re
import types

import numpy as np
import pytest

from numforge import backend
from numforge.generate import generate
from numforge.hf import load_pretrained, save_pretrained
from numforge.model import GPT, GPTConfig
from numforge.model.config import ARCHS

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
from test_hf_llama_transformers import (  # noqa: E402
    CONTEXT,
    SIZES,
    float64_reference,
    hf_grads_by_numforge_name,
    hf_greedy,
    hf_model,
    mistral_style,
    randomize,
    token_ids,
    worst,
)

EXPERTS = dict(num_local_experts=4, num_experts_per_tok=2, router_aux_loss_coef=0.02)


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory):
    """(directory, numforge's tokenizer): a random tiny Mixtral (GQA, 4 experts, top-2) saved by transformers."""
    from numforge.tokenizer import load_tokenizer

    directory, _ = mistral_style(tmp_path_factory.mktemp("mixtral") / "model")
    tokenizer = load_tokenizer(directory)
    config = transformers.MixtralConfig(
        **SIZES, **EXPERTS, num_key_value_heads=2, vocab_size=tokenizer.vocab_size, max_position_embeddings=CONTEXT,
        bos_token_id=tokenizer.bos_id, eos_token_id=next(iter(tokenizer.eos_ids)),
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    randomize(model)
    model.save_pretrained(directory)
    return directory, tokenizer


def eager(directory):
    """transformers' model of ``directory`` with eager experts (``grouped_mm`` refuses float64)."""
    return transformers.AutoModelForCausalLM.from_pretrained(directory, experts_implementation="eager").eval()


def float64_router(model):
    """``float64_reference(model)`` with every ``*TopKRouter`` (Mixtral's, Qwen3-MoE's, OLMoE's) computing its softmax
    in float64 (docstring); the kept gates renormalised where the router does (``norm_topk_prob``; Mixtral's
    always)."""
    model = float64_reference(model)

    def route(self, hidden_states):
        hidden_states = hidden_states.reshape(-1, self.hidden_dim)
        logits = torch.nn.functional.linear(hidden_states, self.weight)  # (N, E)
        kept, chosen = torch.topk(torch.softmax(logits, dim=-1), self.top_k, dim=-1)  # (N, k)
        if getattr(self, "norm_topk_prob", True):
            kept = kept / kept.sum(dim=-1, keepdim=True)
        return logits, kept, chosen

    routers = [m for m in model.modules() if type(m).__name__.endswith("TopKRouter")]
    assert len(routers) == model.config.num_hidden_layers
    for module in routers:
        module.forward = types.MethodType(route, module)
    return model


def test_the_config_maps_onto_numforge_experts(mixtral):
    directory, _ = mixtral
    model, _ = load_pretrained(directory, dtype="float64")
    c = model.config
    assert (c.num_experts, c.experts_top_k, c.experts_renormalize) == (4, 2, True)
    assert (c.router_aux_loss_coef, c.router_z_loss_coef, c.sliding_window) == (0.02, 0.0, None)


def test_logits_equal_transformers(mixtral):
    directory, tokenizer = mixtral
    ours64, _ = load_pretrained(directory, dtype="float64")
    ids = token_ids(tokenizer)
    with torch.no_grad():
        theirs64 = float64_router(eager(directory))(torch.tensor(ids)).logits.numpy()
        theirs32 = hf_model(directory)(torch.tensor(ids)).logits.numpy()
    assert worst(backend.to_numpy(ours64.logits(backend.asarray(ids))), theirs64) < 1e-12
    ours32 = backend.to_numpy(load_pretrained(directory)[0].logits(backend.asarray(ids)))
    assert worst(ours32, theirs32) < 1e-5  # float32 rounding, transformers unpatched
    # the experts matter: the same model with each expert's weights moved to the next expert differs
    shuffled = {name: np.roll(backend.to_numpy(p), 1, axis=0) if ".experts." in name else p
                for name, p in ours64.params.items()}  # fmt: skip
    other = GPT(ours64.config, dtype="float64")
    other.load_params(shuffled)
    assert worst(backend.to_numpy(other.logits(backend.asarray(ids))), theirs64) > 1e-3


def hf_moe_grads_by_numforge_name(model) -> dict[str, np.ndarray]:
    """Every parameter's ``.grad`` under numforge's name: the Llama test's mapping for the attention, the norms and
    the embeddings; the experts' and the router's written out here: transformers 5 holds
    the experts stacked (``experts.gate_up_proj`` (E, 2F, C), gate first; ``experts.down_proj`` (E, C, F)), the
    router as ``gate.weight`` (E, C); numforge's are (E, C, F), (E, F, C) and (C, E)."""
    g = {name: p.grad.numpy() for name, p in model.named_parameters()}
    grads = hf_grads_by_numforge_name(model)
    for i in range(model.config.num_hidden_layers):
        hf, ours = f"model.layers.{i}.mlp.", f"layers.{i}.mlp."
        gate_up = g[hf + "experts.gate_up_proj"].transpose(0, 2, 1)  # (E, C, 2F)
        F = gate_up.shape[2] // 2
        grads[ours + "experts.gate_proj.weight"] = gate_up[:, :, :F]
        grads[ours + "experts.up_proj.weight"] = gate_up[:, :, F:]
        grads[ours + "experts.down_proj.weight"] = g[hf + "experts.down_proj"].transpose(0, 2, 1)
        grads[ours + "router.weight"] = g[hf + "gate.weight"].T
    return grads


def test_every_parameter_gradient_equals_torch_autograd(mixtral):
    """The cross-entropy's gradients (the load-balancing loss off on numforge's side: transformers' model adds it
    only with output_router_logits) into every parameter, routers and experts included, against autograd in
    float64."""
    directory, tokenizer = mixtral
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


def test_greedy_generation_equals_transformers_generate(mixtral):
    directory, tokenizer = mixtral
    model, tokenizer = load_pretrained(directory)
    prompt_ids = transformers.AutoTokenizer.from_pretrained(directory)("The")["input_ids"]
    result = generate(model, tokenizer, "The", 30, temperature=0)
    assert result.prompt_ids == prompt_ids
    theirs = hf_greedy(directory, prompt_ids, 30)
    assert result.ids + ([result.end_id] if result.stopped_at_end_of_text else []) == theirs
    assert len(set(theirs)) > 3  # not a degenerate repetition


def test_numforge_convert_there_and_back_opens_in_transformers_with_equal_logits(mixtral, tmp_path):
    from safetensors.torch import load_file

    from numforge import cli

    directory, tokenizer = mixtral
    assert cli.main(["convert", str(directory), str(tmp_path / "run")]) == 0
    assert cli.main(["convert", str(tmp_path / "run"), str(tmp_path / "hf")]) == 0
    before, after = (load_file(str(d / "model.safetensors")) for d in (directory, tmp_path / "hf"))
    assert set(before) == set(after)
    for key, tensor in before.items():
        assert torch.equal(after[key], tensor), key
    again = hf_model(tmp_path / "hf")
    assert type(again).__name__ == "MixtralForCausalLM"
    assert (again.config.num_local_experts, again.config.router_aux_loss_coef) == (4, 0.02)
    ids = torch.tensor(token_ids(tokenizer))
    with torch.no_grad():
        assert torch.equal(again(ids).logits, hf_model(directory)(ids).logits)


def test_transformers_opens_a_numforge_moe_model_with_the_same_logits(tmp_path):
    from hf_dirs import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    config = GPTConfig(**{**ARCHS["moe"], "vocab_size": 290, "max_seq_len": CONTEXT, "d_model": 32, "num_heads": 4,
                          "num_layers": 2, "d_ff": 24, "num_experts": 4, "num_kv_heads": 2})  # fmt: skip
    model = GPT(config, seed=5, dtype="float64")
    for name, p in model.params.items():  # norm weights away from 1, routers away from uniform
        p += backend.asarray(np.random.default_rng(len(name)).normal(0.0, 0.3, p.shape))
    save_pretrained(model, tokenizer, tmp_path / "export")
    loaded = eager(tmp_path / "export")
    assert type(loaded).__name__ == "MixtralForCausalLM"
    assert (loaded.config.num_local_experts, loaded.config.num_experts_per_tok) == (4, 2)
    assert loaded.config.router_aux_loss_coef == config.router_aux_loss_coef  # the z-loss (0.001) is not written
    ids = token_ids(tokenizer)
    with torch.no_grad():
        theirs = float64_router(loaded)(torch.tensor(ids)).logits.numpy()
    assert worst(backend.to_numpy(model.logits(backend.asarray(ids))), theirs) < 1e-12


QWEN3_MOE, OLMOE = {"qk_norm": True}, {"qk_norm": True, "qk_norm_extent": "projection"}  # their QK-norms
REFUSED_EXPORTS = {  # the family a model's QK-norm picks (none: Mixtral), and the first option it cannot express
    "mixtral, not renormalised": ({"experts_renormalize": False}, "Mixtral cannot express experts_renormalize=False"),
    "mixtral, q/k/v biases": ({"qkv_bias": True}, r"Mixtral cannot express qkv_bias/out_bias=\(True, False\)"),
    "qwen3_moe, QK-norm after the rotation": (
        {**QWEN3_MOE, "qk_norm_order": "after_rope"}, "Qwen3-MoE cannot express qk_norm_order='after_rope'",
    ),
    "qwen3_moe, a window on layer 0": (
        {**QWEN3_MOE, "sliding_window": 8, "window_layers": [0]}, r"Qwen3-MoE cannot express window_layers=\(0,\)",
    ),
    "olmoe, a window": ({**OLMOE, "sliding_window": 8}, "OLMoE cannot express sliding_window=8"),
    "olmoe, heads narrower than d_model": (
        {**OLMOE, "head_dim": 6}, "OLMoE cannot express num_heads=4 of head_dim=6 with d_model=32",
    ),
}  # fmt: skip


@pytest.mark.parametrize("change, match", REFUSED_EXPORTS.values(), ids=REFUSED_EXPORTS.keys())
def test_what_the_experts_families_cannot_express_is_refused_by_name(tmp_path, change, match):
    from hf_dirs import tiny_tokenizer

    config = GPTConfig(**{**ARCHS["moe"], "vocab_size": 290, "max_seq_len": CONTEXT, "d_model": 32, "num_heads": 4,
                          "num_layers": 2, "d_ff": 24, "num_experts": 4, **change})  # fmt: skip
    with pytest.raises(ValueError, match=match):
        save_pretrained(GPT(config, seed=0), tiny_tokenizer(), tmp_path / "export")
    assert not (tmp_path / "export").exists()


def test_numforge_convert_of_an_arch_moe_run_opens_in_transformers(tmp_path):
    from helpers import tiny_run

    from numforge import cli
    from numforge.checkpoint import load_model

    run = tiny_run(tmp_path, "--arch", "moe")
    assert cli.main(["convert", str(run), str(tmp_path / "hf")]) == 0
    model, tokenizer = load_model(run, dtype="float64")
    ids = np.array([tokenizer.encode("the cat sat on the mat")])
    with torch.no_grad():
        theirs = float64_router(eager(tmp_path / "hf"))(torch.tensor(ids)).logits.numpy()
    assert worst(backend.to_numpy(model.logits(backend.asarray(ids))), theirs) < 1e-12


def test_a_missing_or_misshapen_expert_tensor_is_named(mixtral, tmp_path):
    import shutil

    from safetensors.numpy import load_file, save_file

    directory, _ = mixtral
    tensors = load_file(str(directory / "model.safetensors"))
    name = "model.layers.1.block_sparse_moe.experts.3.w2.weight"
    cases = {
        "drop": r"missing tensors \['layers.1.block_sparse_moe.experts.3.w2.weight'\]",
        "transpose": rf"tensor '{re.escape(name)}' has shape \(48, 32\), the config needs \(32, 48\)",
    }
    for change, match in cases.items():
        broken = tmp_path / change
        shutil.copytree(directory, broken)
        edited = {k: v for k, v in tensors.items() if k != name}
        if change == "transpose":
            edited[name] = tensors[name].T.copy()
        save_file(edited, str(broken / "model.safetensors"), metadata={"format": "pt"})
        with pytest.raises(ValueError, match=match):
            load_pretrained(broken)
