"""Whole-model gradient checks: every parameter of a tiny GPT, one case per option.

The objective is the model's own loss, so the analytic gradients are exactly
``model.backward`` and the numeric ones are central differences of
``model.forward`` (float64). The parameters are redrawn at O(1) scale (random
biases, norm weights away from 1) so that no gradient path is hidden behind
a zero bias or a tiny weight; one target is the ignore index.

With a learner's module (the exercise ``gpt``), the model is the learner's own
``GPT`` class (its ``backward`` written by the learner, the rest a copy of
numforge's), graded against finite differences of numforge's model and
against the textbook model, ``model/reference.py``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import fields

import numpy as np

from ..backend import asarray, default_rng
from ..model import GPT, POSITIONS, GPTConfig
from ..model.config import ARCHS, activation_fields
from ..model.names import LM_HEAD, TOKEN_EMBEDDING
from ..model.reference import reference_backward, reference_forward
from ..ops.activations import ACTIVATIONS
from ..ops.norms import NORMS
from .cases import option_cases
from .check import GradResult, check_gradients
from .diagnose import diagnosed
from .mistakes import tied_sides

TINY = dict(vocab_size=13, max_seq_len=8, d_model=8, num_heads=2, num_layers=2, d_ff=12)
BATCH, SEQ = 2, 7
MAX_COORDS = 12  # sampled coordinates per parameter tensor
DROPOUT_SEED = 5

DEFAULTS = {f.name: f.default for f in fields(GPTConfig)}
GQA = {"num_heads": 4, "num_kv_heads": 2}  # two query heads per key/value head (head width 8 / 4 = 2)
LLAMA = {**ARCHS["llama"], "num_kv_heads": 1}  # TINY's two query heads share one key/value head
MOE = {**LLAMA, "num_experts": 4, "experts_top_k": 2}  # 4 SwiGLU experts of width d_ff = 12, top-2, renormalised
AUX = {"router_aux_loss_coef": 0.5, "router_z_loss_coef": 0.25}  # large: their gradients are not lost in the loss's
QWEN3 = {**ARCHS["llama"], **GQA, "qk_norm": True, "qk_norm_order": "before_rope", "head_dim": 6}  # H D != C
# Gemma 2: RMSNorm (1 + w), GeGLU, sqrt(C)-scaled embeddings, the sandwich of norms, Q^-1/2 scores, both soft caps
# (near the scores' and logits' scales, so tanh is far from the identity), local then global layers
GEMMA2 = {
    **ARCHS["llama"], "norm": "rmsnorm_offset", "activation": "geglu", "tie_weights": True, "scale_embeddings": True,
    "post_norms": True, "query_pre_attn_scalar": 3.0, "attn_softcap": 0.8, "logit_softcap": 1.5, "num_kv_heads": 1,
    "sliding_window": 3, "window_layers": [0],
}  # fmt: skip
# Gemma 3: no soft caps, QK-norm (1 + w) before the rotation, the local layer's own RoPE base
GEMMA3 = {
    **GEMMA2, "attn_softcap": None, "logit_softcap": None, "qk_norm": True, "head_dim": 6, "rope_theta": 1000.0,
    "rope_local_theta": 10.0,
}  # fmt: skip


def _is_default(settings: dict) -> bool:
    return all(DEFAULTS[field] == value for field, value in settings.items())


OPTIONS = {  # every entry of each registry (norms, positions, activations) and its forms, then the other options
    **{name: {"activation": name} for name in ACTIVATIONS},
    **{name: {"norm": name} for name in NORMS if name != DEFAULTS["norm"]},
    **{
        f"{name}_without_weight": {"norm": name, "norm_weight": False}
        for name, n in NORMS.items()
        if "weight" in n.optional
    },
    **{f"{name}_qk_norm": {"norm": name, "qk_norm": True} for name in NORMS},
    **{f"{name}_positions": {"position": name} for name in POSITIONS if name != DEFAULTS["position"]},
    **{
        f"{name}_{form}": {"activation": name, **activation_fields(options)}
        for name, activation in ACTIVATIONS.items()
        for form, options in activation.forms.items()
        if not _is_default(activation_fields(options))
    },  # every form of an activation but the default one: gelu_exact
    **{
        f"{name}_{variant}": {"position": name, **settings}
        for name, scheme in POSITIONS.items()
        for variant, settings in scheme.variants.items()
    },  # rope_linear, rope_llama3
    "untied": {"tie_weights": False},
    "no_bias": {"use_bias": False},
    "qkv_bias_only": {"use_bias": False, "qkv_bias": True},  # Qwen2
    "mixed_biases": {"qkv_bias": False, "mlp_bias": False, "norm_bias": False},  # out_proj's bias only
    "head_dim": {"head_dim": 6, "num_heads": 3},  # H D = 18 != C = 8
    "gqa": GQA,
    "mqa": {"num_kv_heads": 1},
    "gqa_plain_attention": {**GQA, "attention": "plain"},
    "plain_attention": {"attention": "plain"},
    "sinusoidal_scaled": {"position": "sinusoidal", "scale_embeddings": True},
    "qk_norm_before_rope": {"position": "rope", "norm": "rmsnorm", "qk_norm": True, "qk_norm_order": "before_rope"},
    "qk_norm_after_rope": {"position": "rope", "norm": "rmsnorm", "qk_norm": True, "qk_norm_order": "after_rope"},
    "llama": LLAMA,
    "qwen2": {**LLAMA, "qkv_bias": True, "tie_weights": True},
    "qwen3": QWEN3,
    "qk_norm_projection": {**LLAMA, **GQA, "qk_norm": True, "qk_norm_extent": "projection"},  # (H D,), (H_kv D,)
    "nanochat": {
        **LLAMA,
        "norm_weight": False,
        "qk_norm": True,
        "qk_norm_order": "after_rope",
        "activation": "relu2",  # nanochat's MLP: relu(x)^2
    },
    "window": {**LLAMA, "sliding_window": 3},  # Mistral: every layer sees its 3 latest positions of SEQ = 7
    "window_alternating": {**LLAMA, "sliding_window": 3, "window_layers": [0]},  # Gemma 2: local, then global
    "window_plain_attention": {"sliding_window": 2, "attention": "plain", "position": "alibi"},
    "moe_top1": {**MOE, "experts_top_k": 1, "experts_renormalize": False},  # Switch: the one gate is p
    "moe_top2": MOE,  # Mixtral: the two kept gates renormalised
    "moe_top2_not_renormalized": {**MOE, "experts_renormalize": False},
    "olmoe": {**MOE, "experts_renormalize": False, "qk_norm": True, "qk_norm_extent": "projection"},
    "moe_top2_aux": {**MOE, **AUX},  # the load-balancing and z-losses added to the loss
    "moe_top1_renormalized_aux": {**MOE, **AUX, "experts_top_k": 1},  # the gate is 1: the router learns from aux only
    "moe_top3_not_renormalized_aux_dropout": {
        **MOE,
        **AUX,
        "experts_top_k": 3,
        "experts_renormalize": False,
        "drop_prob": 0.2,
    },  # fmt: skip
    "gemma2": GEMMA2,
    "gemma2_plain_attention": {**GEMMA2, "attention": "plain"},
    "gemma3": GEMMA3,
    "dropout_gemma2": {**GEMMA2, "drop_prob": 0.2},
    "dropout": {"drop_prob": 0.2},  # embeddings, branches and attention weights
    "dropout_plain_attention": {"drop_prob": 0.2, "attention": "plain"},
    "dropout_llama": {**LLAMA, "drop_prob": 0.2},
    "dropout_qwen3_plain_attention": {**QWEN3, "drop_prob": 0.2, "attention": "plain"},
}


def randomized_model(options: dict, seed: int = 0, model_class: type = GPT) -> GPT:
    """A float64 tiny GPT (of ``model_class``: a learner's copy of the class) whose every parameter is a random
    O(1)-scale array."""
    model = model_class(GPTConfig(**{**TINY, **options}), seed=seed, dtype="float64")
    rng = np.random.default_rng(seed + 100)
    values = {}
    for name, p in model.params.items():
        if name.endswith("norm.weight"):
            values[name] = 1.0 + 0.2 * rng.standard_normal(p.shape)
        elif p.ndim == 1:  # biases
            values[name] = 0.2 * rng.standard_normal(p.shape)
        else:  # ([E,] C_in, C_out) mixes C_in inputs: std 1/sqrt(C_in) keeps activations O(1)
            values[name] = rng.standard_normal(p.shape) / np.sqrt(p.shape[-2])
    model.load_params({name: asarray(v, dtype="float64") for name, v in values.items()})
    return model


def tiny_batch(vocab_size: int, seed: int = 0):
    """``(token_ids, targets)`` of shape (BATCH, SEQ); one target is the ignore index -1."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab_size, size=(BATCH, SEQ))
    targets = rng.integers(0, vocab_size, size=(BATCH, SEQ))
    targets[1, 2] = -1
    return asarray(ids), asarray(targets)


def check_model(option: str, learner=None) -> list[GradResult]:
    """Gradient-check every parameter of the tiny model with ``OPTIONS[option]`` (the learner's ``GPT``, if given)."""
    truth = randomized_model(OPTIONS[option])
    model = truth if learner is None else randomized_model(OPTIONS[option], model_class=learner.GPT)
    ids, targets = tiny_batch(model.config.vocab_size)

    def loss() -> float:
        return float(truth.forward(ids, targets, rng=default_rng(DROPOUT_SEED))[0])

    _, cache = model.forward(ids, targets, rng=default_rng(DROPOUT_SEED))
    grads = model.backward(cache)
    name = f"model[{option}]"
    if learner is None:
        return check_gradients(name, loss, truth.params, grads, max_coords=MAX_COORDS)
    if not isinstance(grads, dict) or set(grads) != set(truth.params):
        names = sorted(grads) if isinstance(grads, dict) else type(grads).__name__
        raise ValueError(f"GPT.backward must return a dict with the names of params {list(truth.params)}, got {names}")
    _, _, reference_cache = reference_forward(truth.params, truth.config, ids, targets, rng=default_rng(DROPOUT_SEED))
    reference = reference_backward(truth.params, truth.config, reference_cache)
    results = check_gradients(name, loss, truth.params, grads, max_coords=MAX_COORDS, reference=reference)
    found = (
        _tied_mistakes(truth, ids, targets) if truth.config.tie_weights and not all(r.passed for r in results) else ()
    )
    return [diagnosed(r, truth.params, found) for r in results]


def _tied_mistakes(truth: GPT, ids, targets) -> tuple:
    """The tied table's gradient with one of its uses left out: the same model untied, its output layer the
    table, gives each use's gradient apart (``token_embedding``: the lookup's; ``lm_head.weight``: the output's)."""
    config = dataclasses.replace(truth.config, tie_weights=False)
    params = {**truth.params, LM_HEAD: truth.params[TOKEN_EMBEDDING]}
    _, _, cache = reference_forward(params, config, ids, targets, rng=default_rng(DROPOUT_SEED))
    grads = reference_backward(params, config, cache)
    return tuple(m.bound() for m in tied_sides(grads[TOKEN_EMBEDDING], grads[LM_HEAD]))


def describe(function: str) -> str:
    model = randomized_model({})  # the default model: the case named after its activation
    shapes = ", ".join(f"{name} {'x'.join(map(str, p.shape))}" for name, p in model.params.items())
    return (
        "The gradient of the loss for every parameter: a dict with the names, shapes and dtype of self.params (in "
        "its order), from the ModelCache that forward returns. A table used twice (the tied token embedding) has "
        "one gradient: the sum of what each use sends back.\n\n"
        f"In the check 'model[{DEFAULTS['activation']}]': {shapes}."
    )


CASES = option_cases(
    "model",
    OPTIONS,
    check_model,
    defaults=DEFAULTS,
    module=GPT.__module__,
    learner=("GPT.backward",),
    forwards=("GPT.forward",),
    describe=describe,
)
