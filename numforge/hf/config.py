"""The architectures numforge reads and writes, by ``model_type``: config.json <-> ``GPTConfig`` and each one's tensors.

::

    gpt2                              GPT-2                       gpt2.py
    llama, mistral, qwen2, qwen3      Llama, Mistral, Qwen2, Qwen3  llama.py (SmolLM2, TinyLlama: llama)
    mixtral, qwen3_moe, olmoe         Mixtral, Qwen3-MoE, OLMoE     llama.py, experts.py (mixtures of experts)
    gemma, gemma2, gemma3_text        Gemma, Gemma 2, Gemma 3 (text)  gemma.py

Reading dispatches on ``model_type``; any other (``bert``, a mixture of experts like ``qwen2_moe``)
and a quantized model (``quantization_config``) are a ``ValueError`` naming the field. Writing
tries GPT-2, then the Llama family (``llama.family_of``), then Gemma (``gemma.gemma_of``): a model none can
express is a ``ValueError`` naming, for each, the first option it cannot express.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

from ..model import GPTConfig
from . import gemma, gpt2, llama
from .weights import Layout


class Architecture(NamedTuple):
    config_from_hf: Callable[[dict, str], GPTConfig]  # (config.json's dict, its name for errors) -> GPTConfig
    layout: Callable[[GPTConfig], Layout]  # where each parameter lies in the files


ARCHITECTURES = {
    "gpt2": Architecture(gpt2.config_from_hf, gpt2.layout),
    **{
        model_type: Architecture(llama.config_from_hf, functools.partial(llama.layout, model_type=model_type))
        for model_type in llama.FAMILIES
    },
    **{model_type: Architecture(gemma.config_from_hf, gemma.layout) for model_type in gemma.FAMILIES},
}
EXPORTERS = (
    gpt2.config_to_hf,
    llama.config_to_hf,
    gemma.config_to_hf,
)  # (GPTConfig, special ids) -> config.json, the first that can


def config_from_hf(d: dict, source: str) -> tuple[GPTConfig, Layout]:
    """The ``GPTConfig`` of a Hugging Face config.json dict and where its tensors lie; ``source`` names it."""
    if not isinstance(d, dict):
        raise ValueError(f"{source}: expected a JSON object, got {type(d).__name__}")
    model_type = d.get("model_type")
    if model_type in llama.MOE_MODEL_TYPES:
        raise ValueError(
            f"{source}: model_type is {model_type!r}, a mixture of experts; numforge loads "
            f"{', '.join(map(repr, ARCHITECTURES))}"
        )
    if model_type not in ARCHITECTURES:
        raise ValueError(
            f"{source}: model_type is {model_type!r}; numforge loads {', '.join(map(repr, ARCHITECTURES))}"
        )
    if d.get("quantization_config") is not None:
        method = d["quantization_config"].get("quant_method") if isinstance(d["quantization_config"], dict) else None
        raise ValueError(
            f"{source}: quantization_config is set (quant_method {method!r}): the weights are quantized; numforge "
            "reads float32, float16 and bfloat16 weights"
        )
    architecture = ARCHITECTURES[model_type]
    config = architecture.config_from_hf(d, source)
    return config, architecture.layout(config)


def config_to_hf(config: GPTConfig, special_ids: dict) -> tuple[dict, Layout]:
    """config.json for ``config`` (GPT-2 if it can express it, else the Llama family) and where its tensors go."""
    refusals = []
    for exporter in EXPORTERS:
        try:
            hf_config = exporter(config, special_ids)
        except ValueError as error:
            refusals.append(str(error))
            continue
        return hf_config, ARCHITECTURES[hf_config["model_type"]].layout(config)
    raise ValueError(f"this model cannot be saved for transformers: {'; '.join(refusals)}")
