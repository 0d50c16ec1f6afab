"""Gemma, Gemma 2 and Gemma 3 (text): ``config.json`` <-> ``GPTConfig``, where the tensors lie.

``GemmaForCausalLM`` (``model_type`` gemma), ``Gemma2ForCausalLM`` (gemma2) and ``Gemma3ForCausalLM``
(gemma3_text, the text-only model). Gemma is a Llama with three changes, each a numforge option: every RMSNorm
scales by ``1 + weight`` (``norm="rmsnorm_offset"``), the embeddings are multiplied by ``sqrt(hidden_size)``
(``scale_embeddings``), and the MLP is GeGLU (``hidden_act: gelu_pytorch_tanh``; the legacy ``gelu`` of the
first releases means it too, as transformers reads it). Gemma 2 and 3 add two more: each branch has a norm
before and after it (``post_norms``), and the scores are scaled by ``query_pre_attn_scalar^-1/2``. Their
local (sliding-window) and
global layers alternate by ``layer_types`` (Gemma 2: every other layer local, the first; Gemma 3: five local
then one global, ``sliding_window_pattern``). Gemma 2 caps the attention scores and the final logits
(``attn_logit_softcapping``, ``final_logit_softcapping``: ``c tanh(z / c)``); Gemma 3 normalizes each head's
q and k before the rotation (``qk_norm``) and rotates its local layers with their own base
(``rope_parameters.sliding_attention.rope_theta``, or the older ``rope_local_base_freq``:
``rope_local_theta``). The fields::

    vocab_size, hidden_size, intermediate_size     vocab_size, d_model, d_ff
    num_hidden_layers, num_attention_heads         num_layers, num_heads
    num_key_value_heads, head_dim                  num_kv_heads, head_dim
    max_position_embeddings, rms_norm_eps          max_seq_len, norm_eps
    query_pre_attn_scalar (Gemma 2, 3)             query_pre_attn_scalar
    attn_logit_softcapping, final_logit_softcapping  attn_softcap, logit_softcap (null: none; Gemma 2, 3)
    sliding_window, layer_types (Gemma 2, 3)       sliding_window, window_layers (the "sliding_attention" ones)
    rope_parameters (Gemma 3: per layer type)      rope_theta, rope_scaling, rope_local_theta
    attention_bias, tie_word_embeddings            qkv_bias and out_bias, tie_weights

Refused by name: a ``hidden_activation`` numforge has no gated form of (``silu`` reads as SwiGLU, as the
class computes it), ``use_bidirectional_attention``, a local layer's rope type
other than ``default``, and what ``llama.rope_from_hf`` refuses.

Tensors (prefix ``model.`` but ``lm_head``), ``nn.Linear`` weights ``(out, in)`` transposed; Gemma 2 and 3's
``post_attention_layernorm`` is the norm after attention, not Llama's norm before the MLP (Gemma's, as in
Llama, is ``pre_mlp_norm``, and it has no ``pre_feedforward_layernorm`` or ``post_feedforward_layernorm``)::

    layers.{i}.input_layernorm                 layers.{i}.pre_attn_norm
    layers.{i}.self_attn.{q,k,v}_proj          layers.{i}.attn.qkv_proj (side by side)
    layers.{i}.self_attn.{q,k}_norm (Gemma 3)  layers.{i}.attn.{q,k}_norm
    layers.{i}.self_attn.o_proj                layers.{i}.attn.out_proj
    layers.{i}.post_attention_layernorm        layers.{i}.post_attn_norm
    layers.{i}.pre_feedforward_layernorm       layers.{i}.pre_mlp_norm
    layers.{i}.mlp.{gate,up,down}_proj         layers.{i}.mlp.{gate,up,down}_proj
    layers.{i}.post_feedforward_layernorm      layers.{i}.post_mlp_norm
    embed_tokens, norm, lm_head                token_embedding, final_norm, lm_head.weight (untied only)
"""

from __future__ import annotations

from typing import NamedTuple

from ..model import GPTConfig, parameter_shapes
from ..model.names import (
    DOWN_PROJ,
    FINAL_NORM,
    K_NORM,
    LM_HEAD,
    OUT_PROJ,
    POST_ATTN_NORM,
    POST_MLP_NORM,
    PRE_ATTN_NORM,
    PRE_MLP_NORM,
    Q_NORM,
    QKV_PROJ,
    TOKEN_EMBEDDING,
    projection,
)
from .activations import activation_from_hf, activation_to_hf, hf_activation_names
from .fields import check_counts, in_file_words
from .llama import COUNTS, MLP_INPUTS, REQUIRED, WINDOW_LAYER_TYPES, rope_from_hf
from .weights import Layout, Stored, linear

FAMILY_NAMES = "Gemma, Gemma 2 and Gemma 3"
FILE_NAMES = {
    "max_seq_len": "max_position_embeddings",
    "d_model": "hidden_size",
    "d_ff": "intermediate_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "norm_eps": "rms_norm_eps",
    "tie_weights": "tie_word_embeddings",
    "attn_softcap": "attn_logit_softcapping",
    "logit_softcap": "final_logit_softcapping",
    "rope_local_theta": "rope_local_base_freq",
}


class Family(NamedTuple):
    architecture: str
    local_every: int  # the default layer_types: layer i is global when (i + 1) % local_every == 0 (0: no local)
    sandwich: bool  # Gemma 2 and 3: post_norms, query_pre_attn_scalar, soft caps and local layers
    defaults: dict  # config.json field -> the class's value when the file lacks it


DEFAULTS = {
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "hidden_activation": "gelu_pytorch_tanh",
    "head_dim": 256,
    "query_pre_attn_scalar": 256,
    "sliding_window": 4096,
    "attention_bias": False,
    "num_key_value_heads": None,
}
FAMILIES = {
    "gemma": Family("GemmaForCausalLM", 0, False, {"max_position_embeddings": 8192}),
    "gemma2": Family(
        "Gemma2ForCausalLM", 2, True,
        {"max_position_embeddings": 8192, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0},
    ),
    "gemma3_text": Family(
        "Gemma3ForCausalLM", 6, True,
        {"max_position_embeddings": 131072, "attn_logit_softcapping": None, "final_logit_softcapping": None},
    ),
}  # fmt: skip


def config_from_hf(d: dict, source: str) -> GPTConfig:
    """The ``GPTConfig`` of a Gemma, Gemma 2 or Gemma 3 text config dict; ``source`` names it in errors."""
    model_type = d["model_type"]
    family = FAMILIES[model_type]
    d = {**DEFAULTS, **family.defaults, **d}
    missing = [field for field in REQUIRED if field not in d]
    if missing:
        raise ValueError(f"{source}: missing fields {missing}")
    check_counts(d, source, (*COUNTS, "sliding_window"), ("num_key_value_heads", "head_dim"))
    if d.get("use_bidirectional_attention"):
        raise ValueError(f"{source}: use_bidirectional_attention is true; numforge's decoder is causal (false)")
    field, name = _activation_name(d, family)
    activation = activation_from_hf(name, MLP_INPUTS)
    if activation is None:
        supported = ", ".join(map(repr, hf_activation_names(MLP_INPUTS)))
        raise ValueError(f"{source}: {field} is {name!r}; numforge runs {FAMILY_NAMES} with {supported}")
    local = local_layers(d, family, source) if family.sandwich else []
    theta, scaling, local_theta = gemma_rope_from_hf(d, source, bool(local))
    window = {"sliding_window": d["sliding_window"], "window_layers": local} if local else {}
    sandwich = {
        "post_norms": True,
        "query_pre_attn_scalar": d["query_pre_attn_scalar"],
        "attn_softcap": d["attn_logit_softcapping"],
        "logit_softcap": d["final_logit_softcapping"],
    } if family.sandwich else {}  # fmt: skip
    try:
        return GPTConfig(
            vocab_size=d["vocab_size"],
            max_seq_len=d["max_position_embeddings"],
            d_model=d["hidden_size"],
            num_heads=d["num_attention_heads"],
            num_layers=d["num_hidden_layers"],
            d_ff=d["intermediate_size"],
            **activation,
            norm="rmsnorm_offset",
            norm_eps=d["rms_norm_eps"],
            position="rope",
            rope_theta=theta,
            rope_scaling=scaling,
            rope_local_theta=local_theta,
            num_kv_heads=d["num_key_value_heads"],
            head_dim=d["head_dim"],
            qk_norm=model_type == "gemma3_text",
            use_bias=False,
            **({"qkv_bias": True, "out_bias": True} if d["attention_bias"] else {}),
            tie_weights=d["tie_word_embeddings"],
            scale_embeddings=True,
            **sandwich,
            **window,
        )
    except (ValueError, TypeError) as error:
        raise ValueError(f"{source}: {in_file_words(error, FILE_NAMES | {'qkv_bias': 'attention_bias'})}") from None


def _activation_name(d: dict, family: Family) -> tuple[str, str]:
    """``(field, name)`` of the MLP's activation: Gemma 2 and 3 read ``hidden_activation`` (else ``hidden_act``);
    Gemma reads ``hidden_act``, whose legacy ``gelu`` transformers runs as ``gelu_pytorch_tanh``."""
    if family.sandwich:
        return "hidden_activation", d.get("hidden_activation") or d.get("hidden_act")
    name = d.get("hidden_act", "gelu_pytorch_tanh")
    return "hidden_act", "gelu_pytorch_tanh" if name == "gelu" else name


def local_layers(d: dict, family: Family, source: str) -> list[int]:
    """The 0-based layers ``layer_types`` calls ``sliding_attention`` (by default transformers' pattern: every
    ``sliding_window_pattern``-th layer global, the others local)."""
    L = d["num_hidden_layers"]
    every = d.get("sliding_window_pattern", family.local_every)
    types = d.get("layer_types") or [WINDOW_LAYER_TYPES[(i + 1) % every == 0] for i in range(L)]
    if not isinstance(types, list) or len(types) != L or any(t not in WINDOW_LAYER_TYPES for t in types):
        raise ValueError(f"{source}: layer_types must name {L} layers, each one of {WINDOW_LAYER_TYPES}, got {types!r}")
    return [i for i, t in enumerate(types) if t == "sliding_attention"]


def gemma_rope_from_hf(d: dict, source: str, has_local: bool) -> tuple[float, dict | None, float | None]:
    """``(rope_theta, rope_scaling, rope_local_theta)``: Gemma (2)'s one ``rope_parameters``; Gemma 3's per layer
    type (``full_attention``, ``sliding_attention``), or its older ``rope_theta`` + ``rope_scaling`` (global) and
    ``rope_local_base_freq`` (local). The local tables are numforge's own only where they differ from the
    global ones (another base, or a scaled global rotation); a local rotation must be unscaled."""
    params = d.get("rope_parameters") or {}
    if d["model_type"] in ("gemma", "gemma2"):
        theta, scaling = rope_from_hf(d, source, d["max_position_embeddings"])
        return theta, scaling, None
    if isinstance(params, dict) and set(params) & set(WINDOW_LAYER_TYPES):
        full = {"rope_theta": 1e6, **(params.get("full_attention") or {})}
        local = {"rope_theta": 1e4, **(params.get("sliding_attention") or {})}
        theta, scaling = rope_from_hf({"rope_parameters": full}, source, d["max_position_embeddings"])
        local_theta, local_scaling = rope_from_hf({"rope_parameters": local}, source, d["max_position_embeddings"])
    else:  # the older fields
        older = {"rope_theta": 1e6, **d}
        theta, scaling = rope_from_hf(older, source, d["max_position_embeddings"])
        local_theta, local_scaling = d.get("rope_local_base_freq", 1e4), None
    if local_scaling is not None:
        raise ValueError(f"{source}: the sliding_attention layers' rope is scaled ({local_scaling!r}); numforge "
                         "rotates local layers with rope_type 'default'")  # fmt: skip
    differs = has_local and (local_theta != theta or scaling is not None)
    return theta, scaling, local_theta if differs else None


def gemma_of(config: GPTConfig) -> str:
    """``"gemma"``, ``"gemma2"`` or ``"gemma3_text"``, the family member that expresses ``config`` (Gemma: no
    ``post_norms``), or a ``ValueError`` naming the first option none can express."""
    needs = {
        "norm": (config.norm, "rmsnorm_offset"),
        "norm_weight": (config.norm_weight, True),
        "position": (config.position, "rope"),
        "scale_embeddings": (config.scale_embeddings, True),
        "mlp_bias": (config.has_bias("mlp_bias"), False),
        "num_experts": (config.num_experts, 0),
    }
    for option, (value, needed) in needs.items():
        if value != needed:
            raise ValueError(f"{FAMILY_NAMES} cannot express {option}={value!r} (they need {needed!r})")
    if activation_to_hf(config, MLP_INPUTS) is None:
        raise ValueError(f"{FAMILY_NAMES} cannot express activation={config.activation!r} (they need GeGLU)")
    if config.has_bias("qkv_bias") != config.has_bias("out_bias"):
        raise ValueError(f"{FAMILY_NAMES} cannot express qkv_bias != out_bias (attention_bias sets q, k, v and o)")
    if not config.post_norms:
        _check_gemma(config)
        return "gemma"
    if not config.qk_norm:
        if config.rope_local_theta is not None:
            raise ValueError(f"{FAMILY_NAMES} cannot express rope_local_theta without qk_norm (Gemma 2 has one base)")
        return "gemma2"
    if config.qk_norm_order != "before_rope":
        raise ValueError(f"{FAMILY_NAMES} cannot express qk_norm_order={config.qk_norm_order!r} (Gemma 3: before)")
    return "gemma3_text"


def _check_gemma(config: GPTConfig) -> None:
    """A ``ValueError`` naming the first Gemma 2 / 3 option that ``config`` without their ``post_norms`` sets."""
    sandwich_only = {
        "sliding_window": config.sliding_window,
        "attn_softcap": config.attn_softcap,
        "logit_softcap": config.logit_softcap,
        "rope_local_theta": config.rope_local_theta,
        "qk_norm": config.qk_norm or None,
        "query_pre_attn_scalar": None if config.query_pre_attn_scalar in (None, config.head_dim) else 0,
    }
    for option, value in sandwich_only.items():
        if value is not None:
            raise ValueError(f"Gemma cannot express {option}={getattr(config, option)!r} without post_norms "
                             "(Gemma 2 and 3 have it, with their sandwich of norms)")  # fmt: skip


def config_to_hf(config: GPTConfig, special_ids: dict) -> dict:
    """The config.json of ``config`` as Gemma, Gemma 2 or Gemma 3 (text) would save it in transformers 5."""
    model_type = gemma_of(config)
    if model_type == "gemma":
        return {**_common_fields(config, model_type, special_ids), "hidden_act": activation_to_hf(config, MLP_INPUTS)}
    local = [config.layer_window(i) is not None for i in range(config.num_layers)]
    rope = _rope_parameters(config)
    if model_type == "gemma3_text":
        local_theta = config.rope_theta if config.rope_local_theta is None else config.rope_local_theta
        if config.rope_local_theta is None and config.rope_scaling is not None and any(local):
            raise ValueError("Gemma 3 rotates its local layers unscaled: set rope_local_theta with rope_scaling")
        rope = {"full_attention": rope, "sliding_attention": {"rope_type": "default", "rope_theta": local_theta}}
    return {
        **_common_fields(config, model_type, special_ids),
        "hidden_activation": activation_to_hf(config, MLP_INPUTS),
        "rope_parameters": rope,
        "query_pre_attn_scalar": _int_if_whole(config.query_pre_attn_scalar or config.head_dim),  # an int in HF
        "attn_logit_softcapping": config.attn_softcap,
        "final_logit_softcapping": config.logit_softcap,
        "sliding_window": config.sliding_window or config.max_seq_len,  # unread when no layer is local
        "layer_types": [WINDOW_LAYER_TYPES[not w] for w in local],
    }


def _rope_parameters(config: GPTConfig) -> dict:
    """The one rotation's ``rope_parameters`` (Gemma 3: its global layers')."""
    return {**(config.rope_scaling or {"rope_type": "default"}), "rope_theta": config.rope_theta}


def _common_fields(config: GPTConfig, model_type: str, special_ids: dict) -> dict:
    """The config.json fields every Gemma writes alike; Gemma 2 and 3 replace ``rope_parameters``."""
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
        "tie_word_embeddings": config.tie_weights,
        "rope_parameters": _rope_parameters(config),
        "attention_bias": config.has_bias("qkv_bias"),
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        **special_ids,
    }


def _int_if_whole(value: float) -> int | float:
    """``24.0`` -> ``24`` (transformers' Gemma configs type ``query_pre_attn_scalar`` as an int); else as it is."""
    return int(value) if float(value).is_integer() else value


LAYER_NAMES = {  # numforge's name inside layers.{i}. -> Gemma's: one tensor or q|k|v
    PRE_ATTN_NORM: ("input_layernorm",),
    QKV_PROJ: ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    Q_NORM: ("self_attn.q_norm",),
    K_NORM: ("self_attn.k_norm",),
    OUT_PROJ: ("self_attn.o_proj",),
    POST_ATTN_NORM: ("post_attention_layernorm",),
    PRE_MLP_NORM: ("pre_feedforward_layernorm",),
    projection("gate"): ("mlp.gate_proj",),
    projection("up"): ("mlp.up_proj",),
    DOWN_PROJ: ("mlp.down_proj",),
    POST_MLP_NORM: ("post_feedforward_layernorm",),
}
TOP_NAMES = {TOKEN_EMBEDDING: "embed_tokens.weight", f"{FINAL_NORM}.weight": "norm.weight", LM_HEAD: "lm_head.weight"}


def layout(config: GPTConfig) -> Layout:
    """Where every parameter of ``config`` lies in Gemma's files (module docstring)."""
    H, H_kv, D = config.num_heads, config.num_kv_heads, config.head_dim
    names_of = LAYER_NAMES if config.post_norms else {**LAYER_NAMES, PRE_MLP_NORM: ("post_attention_layernorm",)}
    tensors = {}
    for name, shape in parameter_shapes(config).items():
        if name in TOP_NAMES:
            tensors[name] = Stored((TOP_NAMES[name],), (shape,))
            continue
        _, i, rest = name.split(".", 2)
        short, kind = rest.rsplit(".", 1)
        names = tuple(f"layers.{i}.{part}.{kind}" for part in names_of[short])
        if short.endswith("norm"):
            tensors[name] = Stored(names, (shape,))
        else:
            tensors[name] = linear(names, shape, (H * D, H_kv * D, H_kv * D) if short == QKV_PROJ else None)
    return Layout(FAMILY_NAMES, tensors, "model.", (".rotary_emb.inv_freq",))
