"""GPT-2: its ``config.json`` <-> ``GPTConfig``, refusing what numforge cannot run exactly, and where its tensors lie.

The fields that shape the network, and numforge's names for them::

    vocab_size            vocab_size
    n_positions           max_seq_len
    n_embd, n_head        d_model, num_heads
    n_layer               num_layers
    n_inner               d_ff (null: 4 * n_embd)
    activation_function   activation, gelu_approximate: an activation of one input, by the names its
                          entry declares (``hf_names``): gelu_new, gelu_pytorch_tanh, gelu_fast -> GELU
                          (tanh form); gelu -> GELU (exact); relu -> ReLU; relu2 -> ReLU squared
    layer_norm_epsilon    norm_eps
    tie_word_embeddings   tie_weights (default true)

GPT-2 always has LayerNorm with weight and bias, biases in every layer, learned
positions, one key/value head per query head of width ``n_embd / n_head``, no
QK-norm and unscaled embeddings: a model with anything else is refused on
export, naming the field. Fields
that would change the arithmetic unless they have GPT-2's usual value
(``scale_attn_weights``, ``scale_attn_by_inverse_layer_idx``,
``add_cross_attention``, another ``model_type``, an activation numforge
lacks) are a ``ValueError`` naming the field and its value; every other
field (dropouts, token ids, ``task_specific_params``, ...) is ignored, since
inference and fine-tuning here do not depend on it.

GPT-2's tensor names (``GPT2LMHeadModel`` prefixes all but ``lm_head`` with ``transformer.``)::

    wte.weight (V,C)  wpe.weight (T_max,C)                 token_embedding, position_embedding
    h.{i}.ln_1  h.{i}.attn.c_attn  h.{i}.attn.c_proj       layers.{i}.pre_attn_norm, attn.qkv_proj, attn.out_proj
    h.{i}.ln_2  h.{i}.mlp.c_fc  h.{i}.mlp.c_proj           layers.{i}.pre_mlp_norm, mlp.up_proj, mlp.down_proj
    ln_f  lm_head.weight (V,C)                             final_norm, lm_head.weight (untied only)

GPT-2's ``Conv1D`` stores a weight as ``(in, out)``, as ``y = x W + b`` here
does, so no tensor is transposed. The ``attn.bias`` / ``attn.masked_bias``
buffers of older files (the causal mask) are not parameters and are skipped.
"""

from __future__ import annotations

from ..model import GPTConfig, parameter_shapes
from ..model.config import BIAS_SWITCHES
from ..model.names import (
    DOWN_PROJ,
    FINAL_NORM,
    LM_HEAD,
    OUT_PROJ,
    PRE_ATTN_NORM,
    PRE_MLP_NORM,
    QKV_PROJ,
    TOKEN_EMBEDDING,
    projection,
)
from .activations import activation_from_hf, activation_to_hf, hf_activation_names
from .weights import Layout, Stored

MLP_INPUTS = ("up",)  # GPT-2's MLP, c_proj(act(c_fc(x))), takes an activation of one input
# fields that must hold GPT-2's usual value (absent means that value)
MUST_BE = {"scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False, "add_cross_attention": False}
REQUIRED = ("vocab_size", "n_positions", "n_embd", "n_head", "n_layer")
LAYER_NAMES = {  # numforge's name inside layers.{i}. -> GPT-2's inside h.{i}.
    PRE_ATTN_NORM: "ln_1",
    QKV_PROJ: "attn.c_attn",
    OUT_PROJ: "attn.c_proj",
    PRE_MLP_NORM: "ln_2",
    projection("up"): "mlp.c_fc",
    DOWN_PROJ: "mlp.c_proj",
}
TOP_NAMES = {
    TOKEN_EMBEDDING: "wte.weight",
    "position_embedding": "wpe.weight",
    f"{FINAL_NORM}.weight": "ln_f.weight",
    f"{FINAL_NORM}.bias": "ln_f.bias",
    LM_HEAD: "lm_head.weight",
}
PREFIX = "transformer."
BUFFERS = (".attn.bias", ".attn.masked_bias")  # the causal mask of older files, not a parameter


def config_from_hf(d: dict, source: str) -> GPTConfig:
    """The ``GPTConfig`` of a Hugging Face GPT-2 config dict; ``source`` names it in errors."""
    for field, value in MUST_BE.items():
        if d.get(field, value) != value:
            raise ValueError(f"{source}: {field} is {d[field]!r}; numforge runs GPT-2 only with {value!r}")
    missing = [field for field in REQUIRED if field not in d]
    if missing:
        raise ValueError(f"{source}: missing fields {missing}")
    activation = d.get("activation_function", "gelu_new")
    activation_fields = activation_from_hf(activation, MLP_INPUTS)
    if activation_fields is None:
        supported = hf_activation_names(MLP_INPUTS)
        raise ValueError(f"{source}: activation_function is {activation!r}; numforge supports {supported}")
    try:
        return GPTConfig(
            vocab_size=d["vocab_size"],
            max_seq_len=d["n_positions"],
            d_model=d["n_embd"],
            num_heads=d["n_head"],
            num_layers=d["n_layer"],
            d_ff=4 * d["n_embd"] if d.get("n_inner") is None else d["n_inner"],
            **activation_fields,
            tie_weights=d.get("tie_word_embeddings", True),
            norm_eps=d.get("layer_norm_epsilon", 1e-5),
        )
    except (ValueError, TypeError) as error:
        raise ValueError(f"{source}: {error}") from None


def check_expressible(config: GPTConfig) -> None:
    """``ValueError`` naming the first option a GPT-2 checkpoint cannot express."""
    unsupported = {
        "activation": (config.activation, activation_to_hf(config, MLP_INPUTS) is not None),
        "norm": (config.norm, config.norm == "layernorm"),
        "norm_weight": (config.norm_weight, config.norm_weight),
        "position": (config.position, config.position == "learned"),
        "num_kv_heads": (config.num_kv_heads, config.num_kv_heads == config.num_heads),
        "head_dim": (config.head_dim, config.head_dim * config.num_heads == config.d_model),
        "qk_norm": (config.qk_norm, not config.qk_norm),
        "use_bias": (config.use_bias, config.use_bias),
        **{switch: (getattr(config, switch), config.has_bias(switch)) for switch in BIAS_SWITCHES},
        "scale_embeddings": (config.scale_embeddings, not config.scale_embeddings),
    }
    for option, (value, fine) in unsupported.items():
        if not fine:
            raise ValueError(f"GPT-2 cannot express {option}={value!r}")


def config_to_hf(config: GPTConfig, special_ids: dict) -> dict:
    """The Hugging Face config.json of a GPT-2-expressible ``config``; ``special_ids`` may name ``eos``/``bos``."""
    check_expressible(config)
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": config.vocab_size,
        "n_positions": config.max_seq_len,
        "n_embd": config.d_model,
        "n_head": config.num_heads,
        "n_layer": config.num_layers,
        "n_inner": config.d_ff,
        "activation_function": activation_to_hf(config, MLP_INPUTS),
        "layer_norm_epsilon": config.norm_eps,
        "tie_word_embeddings": config.tie_weights,
        # numforge's drop_prob falls on the embeddings and each branch's output, as embd_pdrop and resid_pdrop do,
        # and (config.attention_dropout) on the attention weights after the softmax, as attn_pdrop does; attn_pdrop
        # is written 0.0 all the same (dropout is for training only, and reading a config.json ignores it)
        "embd_pdrop": config.drop_prob,
        "resid_pdrop": config.drop_prob,
        "attn_pdrop": 0.0,
        "initializer_range": 0.02,
        **special_ids,
    }


def hf_name(name: str) -> str:
    """numforge's parameter name -> GPT-2's (without the ``transformer.`` prefix): ``layers.3.attn.qkv_proj.bias``
    -> ``h.3.attn.c_attn.bias``."""
    if name in TOP_NAMES:
        return TOP_NAMES[name]
    _, i, rest = name.split(".", 2)
    short, kind = rest.rsplit(".", 1)
    return f"h.{i}.{LAYER_NAMES[short]}.{kind}"


def layout(config: GPTConfig) -> Layout:
    """Every parameter of ``config`` as one GPT-2 tensor of the same shape."""
    tensors = {name: Stored((hf_name(name),), (shape,)) for name, shape in parameter_shapes(config).items()}
    return Layout("GPT-2", tensors, PREFIX, BUFFERS)
