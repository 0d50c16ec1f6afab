"""The Llama family (Llama, Mistral, Mixtral, Qwen2, Qwen3, Qwen3-MoE, OLMoE): ``config.json`` <-> ``GPTConfig``, and
where the tensors lie.

SmolLM2 and TinyLlama are ``llama``; Llama 3.2 is ``llama`` with ``rope_scaling`` ``llama3``. Every
model of the family has RMSNorm (a weight, no bias), rotary positions in Llama's ``rotate_half``
layout, a gated MLP (``hidden_act: silu`` is SwiGLU: ``hf/activations.py``) and unscaled embeddings.
The fields, the same in all of them::

    vocab_size, hidden_size, intermediate_size     vocab_size, d_model, d_ff
    num_hidden_layers, num_attention_heads         num_layers, num_heads
    num_key_value_heads, head_dim                  num_kv_heads, head_dim (grouped-query attention)
    max_position_embeddings, rms_norm_eps          max_seq_len, norm_eps
    rope_parameters (transformers 5), or           rope_theta, rope_scaling: default (None), linear, llama3
      rope_theta + rope_scaling (older files)
    tie_word_embeddings                            tie_weights

and what differs by ``model_type`` (``FAMILIES``): Llama's ``attention_bias`` (q, k, v, o) and
``mlp_bias``; Mistral's ``sliding_window`` on every layer (``GPTConfig.sliding_window``; null, or not
shorter than ``max_position_embeddings``, is none: no query reaches past it); Qwen2's q/k/v biases
(always; none on o_proj) and ``use_sliding_window`` with ``layer_types`` (or ``max_window_layers``), the
layers it windows (``window_layers``); Qwen3's ``attention_bias``, its ``q_norm``/``k_norm`` over each head before
the rotation (``qk_norm``, ``"before_rope"``), its ``head_dim`` (128 when absent); Mixtral's mixture of
experts (``experts_from_hf``) in place of the MLP, and Mistral's ``sliding_window``; Qwen3-MoE's: Qwen3's
attention (``use_sliding_window`` windows every layer) and experts; OLMoE's: q_norm and k_norm over the whole
projection (``qk_norm_extent="projection"``), ``attention_bias``, experts (``hf/experts.py``: each one's fields and
tensors). A field missing from a file takes the value the family's transformers class gives it.

Refused by name, from config.json alone (before any weight is read): another ``hidden_act``,
another rope type (``yarn``, ``dynamic``, ``longrope``, ...), a ``partial_rotary_factor`` below 1,
mixture-of-experts fields (``num_local_experts``, ``num_experts``) in a dense family, what ``hf/experts.py``
refuses (Mixtral's ``router_jitter_noise``, Qwen3-MoE's dense layers, OLMoE's ``clip_qkv``), an OLMoE
``head_dim`` other than ``hidden_size / num_attention_heads``.
Other fields (dropouts, token ids, ``initializer_range``, ``use_cache``, ...) do
not change what the model computes and are ignored, as the transformers classes ignore fields they
do not read.

Tensors (``*ForCausalLM`` prefixes all but ``lm_head`` with ``model.``), ``nn.Linear`` weights as
``(out, in)``, transposed to numforge's ``(in, out)``; q, k and v side by side in ``attn.qkv_proj``::

    embed_tokens.weight (V,C)                              token_embedding
    layers.{i}.input_layernorm.weight                      layers.{i}.pre_attn_norm.weight
    layers.{i}.self_attn.{q,k,v}_proj.weight|bias          layers.{i}.attn.qkv_proj.weight|bias
    layers.{i}.self_attn.o_proj.weight|bias                layers.{i}.attn.out_proj.weight|bias
    layers.{i}.self_attn.{q,k}_norm.weight (D,)            layers.{i}.attn.{q,k}_norm.weight
    layers.{i}.post_attention_layernorm.weight             layers.{i}.pre_mlp_norm.weight
    layers.{i}.mlp.{gate,up,down}_proj.weight|bias         layers.{i}.mlp.{gate,up,down}_proj.weight|bias
    layers.{i}.block_sparse_moe.gate.weight (E,C)          layers.{i}.mlp.router.weight (C,E)       (Mixtral)
    layers.{i}.block_sparse_moe.experts.{e}.w1|w3.weight   layers.{i}.mlp.experts.gate|up_proj.weight (E,C,F):
      (F,C) each, e = 0 .. E-1                               expert e's transposed, stacked
    layers.{i}.block_sparse_moe.experts.{e}.w2.weight (C,F)  layers.{i}.mlp.experts.down_proj.weight (E,F,C)
    layers.{i}.mlp.gate.weight, mlp.experts.{e}.{gate,up,down}_proj.weight     the same (Qwen3-MoE, OLMoE)
    layers.{i}.self_attn.{q,k}_norm.weight (H D,), (H_kv D,)                   the same, projection-wide (OLMoE)
    norm.weight, lm_head.weight (V,C)                      final_norm.weight, lm_head.weight (untied only)

Older files may hold each layer's ``rotary_emb.inv_freq`` buffer: not a parameter, skipped.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from ..checks import is_int
from ..model import GPTConfig, parameter_shapes
from ..model.names import (
    DOWN_PROJ,
    FINAL_NORM,
    K_NORM,
    LM_HEAD,
    OUT_PROJ,
    PRE_ATTN_NORM,
    PRE_MLP_NORM,
    Q_NORM,
    QKV_PROJ,
    ROUTER,
    TOKEN_EMBEDDING,
    projection,
)
from ..tokenizer import BPETokenizer
from ..tokenizer.pipeline import Pipeline
from ..tokenizer.pretokenize import QWEN2_SPLIT_PATTERN
from .activations import activation_from_hf, activation_to_hf, hf_activation_names
from .experts import (
    EXPERT_PROJECTIONS,
    MIXTRAL,
    OLMOE,
    QWEN3_MOE,
    Scheme,
    expert_tensor_names,
    experts_from_hf,
    experts_to_hf,
    file_names,
)
from .fields import check_counts, in_file_words
from .weights import Layout, Stored, linear, stacked_linear

REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
COUNTS = (*REQUIRED, "max_position_embeddings")  # positive integers (num_key_value_heads, head_dim: one, or null)
FILE_NAMES = {  # numforge's option -> the family's config.json key, for GPTConfig's errors (the biases: bias_fields)
    "max_seq_len": "max_position_embeddings",
    "d_model": "hidden_size",
    "d_ff": "intermediate_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "norm_eps": "rms_norm_eps",
    "tie_weights": "tie_word_embeddings",
}
ROPE_TYPES = ("default", "linear", "llama3")
MOE_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts")  # Mixtral's, Qwen-MoE's, DeepSeek's
MOE_MODEL_TYPES = ("qwen2_moe", "deepseek_v2", "deepseek_v3", "phimoe")  # experts numforge does not load: shared, ...
MLP_INPUTS = ("gate", "up")  # the family's MLP, down_proj(act(gate_proj(x)) * up_proj(x)), takes a gated activation


class Family(NamedTuple):
    """What one ``model_type``'s transformers class builds beyond the shared fields."""

    architecture: str  # the *ForCausalLM class
    bias_fields: dict[str, tuple[str, ...]]  # config.json field -> the GPTConfig bias switches it sets
    fixed_biases: dict[str, bool]  # GPTConfig bias switch -> what the class always has
    qk_norm: str | None  # q_norm, k_norm before the rotation, over each "head" or the whole "projection"; None
    window: str | None  # how sliding_window applies: WINDOW_MODES, or None (never read)
    defaults: dict  # config.json field -> the class's value when the file lacks it
    experts: Scheme | None = None  # a mixture of experts in place of the MLP (hf/experts.py)
    heads_fill_width: bool = False  # q_norm has hidden_size values: heads of hidden_size / num_attention_heads (OLMoE)


SHARED_DEFAULTS = {
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "num_key_value_heads": None,  # None: num_attention_heads
    "head_dim": None,  # None: hidden_size / num_attention_heads
}
FAMILIES = {
    "llama": Family(
        "LlamaForCausalLM",
        {"attention_bias": ("qkv_bias", "out_bias"), "mlp_bias": ("mlp_bias",)},
        {},
        qk_norm=None,
        window=None,
        defaults={"max_position_embeddings": 2048},
    ),
    "mistral": Family(
        "MistralForCausalLM",
        {},
        {"qkv_bias": False, "out_bias": False, "mlp_bias": False},
        qk_norm=None,
        window="always",
        defaults={"max_position_embeddings": 131072, "num_key_value_heads": 8, "sliding_window": 4096},
    ),
    "mixtral": Family(
        "MixtralForCausalLM",
        {},
        {"qkv_bias": False, "out_bias": False, "mlp_bias": False},
        qk_norm=None,
        window="always",
        defaults={
            "max_position_embeddings": 131072,
            "num_key_value_heads": 8,
            "sliding_window": None,
            "num_experts_per_tok": 2,
            "router_aux_loss_coef": 0.001,
            "router_jitter_noise": 0.0,
        },  # fmt: skip
        experts=MIXTRAL,
    ),
    "qwen2": Family(
        "Qwen2ForCausalLM",
        {},
        {"qkv_bias": True, "out_bias": False, "mlp_bias": False},
        qk_norm=None,
        window="use_sliding_window",
        defaults={"max_position_embeddings": 32768, "num_key_value_heads": 32, "sliding_window": 4096},
    ),
    "qwen3": Family(
        "Qwen3ForCausalLM",
        {"attention_bias": ("qkv_bias", "out_bias")},
        {"mlp_bias": False},
        qk_norm="head",
        window="use_sliding_window",
        defaults={"max_position_embeddings": 32768, "num_key_value_heads": 32, "head_dim": 128, "sliding_window": 4096},
    ),
    "qwen3_moe": Family(
        "Qwen3MoeForCausalLM",
        {"attention_bias": ("qkv_bias", "out_bias")},
        {"mlp_bias": False},
        qk_norm="head",
        window="use_sliding_window_everywhere",
        defaults={
            "max_position_embeddings": 32768,
            "num_key_value_heads": 4,
            "sliding_window": 4096,
            "intermediate_size": 6144,
            "moe_intermediate_size": 768,
            "num_experts_per_tok": 8,
            "norm_topk_prob": False,
            "router_aux_loss_coef": 0.001,
            "decoder_sparse_step": 1,
            "mlp_only_layers": None,
        },  # fmt: skip
        experts=QWEN3_MOE,
    ),
    "olmoe": Family(
        "OlmoeForCausalLM",
        {"attention_bias": ("qkv_bias", "out_bias")},
        {"mlp_bias": False},
        qk_norm="projection",
        window=None,
        defaults={
            "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-5,
            "num_experts_per_tok": 8,
            "norm_topk_prob": False,
            "router_aux_loss_coef": 0.01,
            "clip_qkv": None,
        },  # fmt: skip
        experts=OLMOE,
        heads_fill_width=True,
    ),
}
FAMILY_NAMES = "Llama, Mistral, Mixtral, Qwen2, Qwen3, Qwen3-MoE and OLMoE"


def config_from_hf(d: dict, source: str) -> GPTConfig:
    """The ``GPTConfig`` of a Llama-family config dict (``model_type`` a key of ``FAMILIES``); ``source``
    names it in errors."""
    family = FAMILIES[d["model_type"]]
    d = {**SHARED_DEFAULTS, **family.defaults, **d}
    missing = [field for field in REQUIRED if field not in d]
    if missing:
        raise ValueError(f"{source}: missing fields {missing}")
    check_counts(d, source, COUNTS, ("num_key_value_heads", "head_dim"))
    for field in () if family.experts else MOE_FIELDS:
        if d.get(field) not in (None, 0):
            raise ValueError(
                f"{source}: {field} is {d[field]!r}: a mixture of experts, which numforge does not run (dense "
                "models only)"
            )
    activation = activation_from_hf(d["hidden_act"], MLP_INPUTS)
    if activation is None:
        supported = ", ".join(map(repr, hf_activation_names(MLP_INPUTS)))
        raise ValueError(
            f"{source}: hidden_act is {d['hidden_act']!r}; numforge runs this family only with {supported}"
        )
    context = d["max_position_embeddings"]
    window = window_from_hf(d, family, source, context)
    experts = experts_from_hf(d, family.experts, source) if family.experts else {"d_ff": d["intermediate_size"]}
    theta, scaling = rope_from_hf(d, source, context)
    qk_norm = {"qk_norm": True, "qk_norm_extent": family.qk_norm} if family.qk_norm else {}
    try:
        return GPTConfig(
            vocab_size=d["vocab_size"],
            max_seq_len=context,
            d_model=d["hidden_size"],
            num_heads=d["num_attention_heads"],
            num_layers=d["num_hidden_layers"],
            **activation,
            norm="rmsnorm",
            norm_eps=d["rms_norm_eps"],
            position="rope",
            rope_theta=theta,
            rope_scaling=scaling,
            num_kv_heads=d["num_key_value_heads"],
            head_dim=head_dim_from_hf(d, family, source),
            **qk_norm,
            tie_weights=d["tie_word_embeddings"],
            **biases_from_hf(d, family),
            **window,
            **experts,
        )
    except (ValueError, TypeError) as error:
        bias_names = {switch: field for field, switches in family.bias_fields.items() for switch in switches}
        expert_names = file_names(family.experts) if family.experts else {}
        raise ValueError(f"{source}: {in_file_words(error, FILE_NAMES | bias_names | expert_names)}") from None


def biases_from_hf(d: dict, family: Family) -> dict:
    """The bias switches of ``GPTConfig`` for config dict ``d``: ``use_bias`` when every layer has biases, else no
    biases but the switches the family sets (numforge's own spelling)."""
    biases = dict(family.fixed_biases)
    for field, switches in family.bias_fields.items():
        biases.update(dict.fromkeys(switches, d.get(field, False)))
    if all(value is True for value in biases.values()):
        return {"use_bias": True}
    return {"use_bias": False, **{switch: None if value is False else value for switch, value in biases.items()}}


def head_dim_from_hf(d: dict, family: Family, source: str) -> int | None:
    """``head_dim`` of config dict ``d`` (None: ``hidden_size / num_attention_heads``). A family whose q_norm has
    ``hidden_size`` values (``Family.heads_fill_width``: OLMoE) cannot run heads of another width: refused."""
    head_dim, H, C = d["head_dim"], d["num_attention_heads"], d["hidden_size"]
    if family.heads_fill_width and (C % H or head_dim not in (None, C // H)):
        raise ValueError(
            f"{source}: head_dim is {head_dim!r} with hidden_size {C} and num_attention_heads {H}: "
            f"{family.architecture}'s q_norm has hidden_size values, so num_attention_heads must divide hidden_size "
            "and head_dim be their quotient"
        )
    return head_dim


WINDOW_LAYER_TYPES = ("sliding_attention", "full_attention")  # Qwen's layer_types, windowed or not
# How a family's sliding_window applies: to every layer ("always": Mistral, Mixtral), or only with use_sliding_window
# to the layers layer_types names (Qwen2, Qwen3) or to every layer (Qwen3-MoE)
WINDOW_MODES = ("always", "use_sliding_window", "use_sliding_window_everywhere")
GATED_WINDOWS = WINDOW_MODES[1:]


def window_from_hf(d: dict, family: Family, source: str, context: int) -> dict:
    """``{"sliding_window": W, "window_layers": ...}`` of a config dict, as ``GPTConfig`` takes them (``{}``: none).

    A layer with a window of ``W`` lets query ``i`` see keys ``i - W < j <= i`` (transformers'
    ``sliding_window_overlay``, numforge's ``window`` score modifier). Mistral's applies to every layer.
    Qwen's applies only with ``use_sliding_window``, to the layers ``layer_types`` calls ``sliding_attention``
    (by default those from ``max_window_layers`` on); Qwen3-MoE's only with ``use_sliding_window``, to every
    layer. A window not shorter than the context hides nothing: none."""
    window = d.get("sliding_window") if family.window else None
    layers = None  # every layer
    if family.window in GATED_WINDOWS and not d.get("use_sliding_window", False):
        return {}
    if family.window == "use_sliding_window":
        first = d.get("max_window_layers", 28)
        if not is_int(first):
            raise ValueError(f"{source}: max_window_layers must be an integer, got {first!r}")
        types = d.get("layer_types") or [WINDOW_LAYER_TYPES[i < first] for i in range(d["num_hidden_layers"])]
        if (
            not isinstance(types, list)
            or len(types) != d["num_hidden_layers"]
            or any(t not in WINDOW_LAYER_TYPES for t in types)
        ):
            raise ValueError(
                f"{source}: layer_types must name {d['num_hidden_layers']} layers, each one of {WINDOW_LAYER_TYPES}, "
                f"got {types!r}"
            )
        layers = [i for i, t in enumerate(types) if t == "sliding_attention"]
        layers = None if len(layers) == len(types) else layers
    if family.window:
        check_counts(d, source, (), ("sliding_window",))
    if window is None or window >= context or layers == []:
        return {}
    return {"sliding_window": window, "window_layers": layers}


def rope_from_hf(d: dict, source: str, context: int) -> tuple[float, dict | None]:
    """``(rope_theta, rope_scaling)`` as numforge's config takes them, read as transformers 5 reads them: the
    older ``rope_scaling`` when set, else ``rope_parameters``; ``rope_theta`` inside it, else beside it, else
    10,000; rope type ``default`` is no scaling; llama3's ``original_max_position_embeddings`` defaults to the
    context."""
    field = "rope_scaling" if d.get("rope_scaling") else "rope_parameters"
    params = d.get(field) or {}
    if not isinstance(params, dict) or any(isinstance(value, dict) for value in params.values()):
        raise ValueError(f"{source}: {field} must be one object of rope settings, got {params!r}")
    params = dict(params)
    theta = params.pop("rope_theta", d.get("rope_theta", 10000.0))
    partial = params.pop("partial_rotary_factor", d.get("partial_rotary_factor", 1.0))
    if partial != 1.0:
        raise ValueError(f"{source}: partial_rotary_factor is {partial!r}; numforge rotates every feature (1.0)")
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise ValueError(f"{source}: {field}'s rope_type is {kind!r}; numforge runs {', '.join(map(repr, ROPE_TYPES))}")
    if kind == "default":
        extra = sorted(set(params) - {"rope_type", "type"})
        if extra:
            raise ValueError(f"{source}: {field} of rope_type 'default' has fields {extra}, which it does not take")
        return theta, None
    if kind == "llama3":
        params["original_max_position_embeddings"] = d.get(
            "original_max_position_embeddings", params.get("original_max_position_embeddings", context)
        )
    return theta, params


def family_of(config: GPTConfig) -> str:
    """The ``model_type`` that expresses ``config`` exactly (a key of ``FAMILIES``), or a ``ValueError`` naming the
    first option none of the family can express."""
    fixed = {
        "norm": (config.norm, "rmsnorm"),
        "norm_weight": (config.norm_weight, True),
        "position": (config.position, "rope"),
        "scale_embeddings": (config.scale_embeddings, False),
    }
    for option, (value, needed) in fixed.items():
        if value != needed:
            raise ValueError(f"{FAMILY_NAMES} cannot express {option}={value!r} (they need {needed!r})")
    if activation_to_hf(config, MLP_INPUTS) is None:
        raise ValueError(
            f"{FAMILY_NAMES} cannot express activation={config.activation!r} (they need a gated activation "
            f"transformers names: {', '.join(map(repr, hf_activation_names(MLP_INPUTS)))})"
        )
    qkv, out, mlp = (config.has_bias(switch) for switch in ("qkv_bias", "out_bias", "mlp_bias"))
    if config.num_experts:
        return experts_family_of(config, qkv, out)
    if config.qk_norm:
        if config.qk_norm_extent != "head":
            raise ValueError(
                f"{FAMILY_NAMES} cannot express qk_norm_extent={config.qk_norm_extent!r} without experts (Qwen3 "
                "normalizes each head; OLMoE, which normalizes the whole projection, has experts)"
            )
        if config.qk_norm_order != "before_rope":
            raise ValueError(
                f"{FAMILY_NAMES} cannot express qk_norm_order={config.qk_norm_order!r} (Qwen3 normalizes q and k "
                "before the rotation)"
            )
        if qkv != out or mlp:
            raise ValueError(
                f"{FAMILY_NAMES} cannot express QK-norm with qkv_bias={qkv}, out_bias={out}, mlp_bias={mlp} (Qwen3's "
                "attention_bias sets q, k, v and o together; its MLP has no bias)"
            )
        return "qwen3"
    if qkv and not out and not mlp:
        return "qwen2"
    if qkv != out:
        raise ValueError(
            f"{FAMILY_NAMES} cannot express qkv_bias={qkv} with out_bias={out} (Llama's attention_bias sets q, k, v "
            "and o together; Qwen2 has q, k, v biases and no others)"
        )
    if config.sliding_window is None:
        return "llama"
    if config.window_layers is not None or qkv or mlp:
        raise ValueError(
            f"{FAMILY_NAMES} cannot express sliding_window={config.sliding_window} on layers "
            f"{config.window_layers} with qkv_bias={qkv}, mlp_bias={mlp} (Mistral windows every layer and has no "
            "biases; Qwen2 and Qwen3 window some layers)"
        )
    return "mistral"


def experts_family_of(config: GPTConfig, qkv_bias: bool, out_bias: bool) -> str:
    """The family of ``config``'s mixture of experts, by its QK-norm (none: Mixtral; over each head: Qwen3-MoE; over
    the whole projection: OLMoE), or a ``ValueError`` naming the first option that family cannot express: biases
    (Mixtral has none; the others' ``attention_bias`` sets q, k, v and o together), gates not renormalised
    (Mixtral), a window on some layers only (a window at all: OLMoE), QK-norm after the rotation, heads that do
    not fill ``d_model`` (OLMoE's q_norm has ``hidden_size`` values). A router z-loss is a training term (the
    logits do not depend on it) that none of them has: written without it, as dropout is."""
    extent = config.qk_norm_extent if config.qk_norm else None
    model_type = next(name for name, family in FAMILIES.items() if family.experts and family.qk_norm == extent)
    family = FAMILIES[model_type]
    needs = {
        "qkv_bias/out_bias": ((qkv_bias, out_bias), (qkv_bias, qkv_bias) if family.bias_fields else (False, False)),
        "qk_norm_order": (config.qk_norm_order, "before_rope"),
        "experts_renormalize": (
            config.experts_renormalize, config.experts_renormalize if family.experts.renormalize else True
        ),
        "window_layers": (config.window_layers, None),
        "sliding_window": (config.sliding_window, config.sliding_window if family.window else None),
    }  # fmt: skip
    for option, (value, needed) in needs.items():
        if value != needed:
            raise ValueError(
                f"{family.experts.name} cannot express {option}={value!r} with num_experts > 0 (it needs {needed!r})"
            )
    if family.heads_fill_width and config.num_heads * config.head_dim != config.d_model:
        raise ValueError(
            f"{family.experts.name} cannot express num_heads={config.num_heads} of head_dim={config.head_dim} with "
            f"d_model={config.d_model} (its q_norm has hidden_size values: the heads fill d_model)"
        )
    return model_type


# What transformers 5's Qwen2Tokenizer cuts text with: it rebuilds every qwen2 directory's tokenizer with NFC and
# Qwen2's split pattern (then ByteLevel, no BOS, no ignore_merges), whatever the directory's tokenizer.json says.
QWEN2_REBUILT = Pipeline(
    {"type": "NFC"},
    {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT_PATTERN}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
    ]},
)  # fmt: skip


def as_exported(config: GPTConfig, params: dict, tokenizer: BPETokenizer) -> tuple[GPTConfig, dict]:
    """The model to write: ``config`` and ``params`` themselves, except for Qwen2's shape (q/k/v biases only) with
    a tokenizer transformers would cut differently in a qwen2 directory (``QWEN2_REBUILT``: numforge's own
    tokenizers, with GPT-2's pattern): that one is written as the Llama it equals, attention biases on q, k, v
    and o, the o_proj bias zero, so that ``AutoTokenizer`` reads its tokenizer.json as it is."""
    try:
        qwen2 = family_of(config) == "qwen2"
    except ValueError:
        return config, params  # not the Llama family's: GPT-2's, or refused by config_to_hf
    rebuilt_alike = (
        tokenizer.pipeline is not None
        and tokenizer.pipeline.nfc == QWEN2_REBUILT.nfc
        and [step.name for step in tokenizer.pipeline.steps] == [step.name for step in QWEN2_REBUILT.steps]
    )
    prompt = tokenizer.prompt
    if not qwen2 or (
        rebuilt_alike and not tokenizer.ignore_merges and not (prompt and (prompt.prefix or prompt.suffix))
    ):
        return config, params
    zero = {
        f"layers.{i}.{OUT_PROJ}.bias": np.zeros(config.d_model, dtype=params[TOKEN_EMBEDDING].dtype)
        for i in range(config.num_layers)
    }
    config = dataclasses.replace(config, out_bias=True)
    return config, {name: {**params, **zero}[name] for name in parameter_shapes(config)}


def config_to_hf(config: GPTConfig, special_ids: dict) -> dict:
    """The config.json of ``config`` as the family member that expresses it (``family_of``) would save it in
    transformers 5; ``special_ids`` may name ``bos_token_id`` / ``eos_token_id``."""
    model_type = family_of(config)
    scaling = config.rope_scaling or {"rope_type": "default"}
    biases = {field: config.has_bias(switches[0]) for field, switches in FAMILIES[model_type].bias_fields.items()}
    window = window_to_hf(config, FAMILIES[model_type])
    return {
        "architectures": [FAMILIES[model_type].architecture],
        "model_type": model_type,
        "vocab_size": config.vocab_size,
        "hidden_size": config.d_model,
        "intermediate_size": config.d_ff,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_dim,
        "max_position_embeddings": config.max_seq_len,
        "rms_norm_eps": config.norm_eps,
        "hidden_act": activation_to_hf(config, MLP_INPUTS),
        "tie_word_embeddings": config.tie_weights,
        "rope_parameters": {**scaling, "rope_theta": config.rope_theta},
        **biases,
        **window,
        **(experts_to_hf(config, FAMILIES[model_type].experts) if FAMILIES[model_type].experts else {}),
        # Llama's one dropout, on the attention weights after the softmax, as numforge's drop_prob does with
        # config.attention_dropout (which also drops the embeddings and each branch's output, where Llama has
        # no dropout); written 0.0 all the same (dropout is for training only, and reading a config.json ignores it)
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        **special_ids,
    }


def window_to_hf(config: GPTConfig, family: Family) -> dict:
    """The window fields of ``config`` in ``family``'s config.json (``window_from_hf`` reads them back)."""
    if family.window is None:
        return {}
    if family.window == "always":
        return {"sliding_window": config.sliding_window}
    if config.sliding_window is None:
        return {"use_sliding_window": False, "sliding_window": None}
    if family.window == "use_sliding_window_everywhere":
        return {"use_sliding_window": True, "sliding_window": config.sliding_window}
    windowed = [config.layer_window(i) is not None for i in range(config.num_layers)]
    return {
        "use_sliding_window": True,
        "sliding_window": config.sliding_window,
        "max_window_layers": windowed.index(True),  # exact when the windowed layers are the last ones
        "layer_types": [WINDOW_LAYER_TYPES[not w] for w in windowed],  # what transformers 5 reads
    }


LAYER_NAMES = {  # numforge's name inside layers.{i}. -> the family's inside layers.{i}.: one tensor or q|k|v
    PRE_ATTN_NORM: ("input_layernorm",),
    QKV_PROJ: ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    OUT_PROJ: ("self_attn.o_proj",),
    Q_NORM: ("self_attn.q_norm",),
    K_NORM: ("self_attn.k_norm",),
    PRE_MLP_NORM: ("post_attention_layernorm",),
    projection("gate"): ("mlp.gate_proj",),
    projection("up"): ("mlp.up_proj",),
    DOWN_PROJ: ("mlp.down_proj",),
}
TOP_NAMES = {
    TOKEN_EMBEDDING: "embed_tokens.weight",
    f"{FINAL_NORM}.weight": "norm.weight",
    LM_HEAD: "lm_head.weight",
}


def layout(config: GPTConfig, model_type: str = "llama") -> Layout:
    """Where every parameter of ``config`` lies in the files of ``model_type`` (module docstring; the router and
    the experts as its ``Family.experts`` names them)."""
    H, H_kv, D = config.num_heads, config.num_kv_heads, config.head_dim
    scheme = FAMILIES[model_type].experts
    tensors = {}
    for name, shape in parameter_shapes(config).items():
        if name in TOP_NAMES:
            tensors[name] = Stored((TOP_NAMES[name],), (shape,))  # (V,C) both ways; norms (C,)
            continue
        _, i, rest = name.split(".", 2)
        short, kind = rest.rsplit(".", 1)
        if short in EXPERT_PROJECTIONS:
            names = expert_tensor_names(scheme, i, short, config.num_experts, kind)
            tensors[name] = stacked_linear(names, shape)  # (E, C_in, C_out)
            continue
        parts = (scheme.router,) if short == ROUTER else LAYER_NAMES[short]
        names = tuple(f"layers.{i}.{part}.{kind}" for part in parts)
        if short.endswith("norm"):
            tensors[name] = Stored(names, (shape,))
        else:
            widths = (H * D, H_kv * D, H_kv * D) if short == QKV_PROJ else None
            tensors[name] = linear(names, shape, widths)
    return Layout(FAMILY_NAMES, tensors, "model.", (".rotary_emb.inv_freq",))
