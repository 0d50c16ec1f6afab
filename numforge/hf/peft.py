"""A LoRA model's adapters as a PEFT adapter directory, which ``peft.PeftModel.from_pretrained`` loads.

The directory (``save_peft_adapter``)::

    adapter_config.json          peft_type LORA, r, lora_alpha, lora_dropout, target_modules (q_proj, v_proj, ...)
    adapter_model.safetensors    base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight (r, C_in),
                                 ...lora_B.weight (C_out, r): numforge's A and B transposed

Each adapter is named after the module its base weight is stored in (the architecture's ``Layout``):
numforge's q adapter, on q's columns of the fused q|k|v projection, is PEFT's adapter of ``q_proj``, whose
weight those columns are. Only the Llama family's directories have a module per q, k and v (GPT-2's
``c_attn`` fuses them, as numforge does): another family is refused before anything is written.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..atomic import atomic_directory, file_mode
from ..backend import to_numpy
from ..model import GPT
from ..model.lora import A, B, adapters
from .config import config_to_hf
from .weights import safetensors_numpy

ADAPTER_CONFIG, ADAPTER_WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."  # PeftModel's wrapper of the transformers model, whose own names follow
PEFT_MATRICES = {A: "lora_A", B: "lora_B"}
QKV_INDEX = {"q": 0, "k": 1, "v": 2}  # which tensor of the fused projection's three a target's columns are


def adapter_modules(model: GPT) -> dict[str, str]:
    """numforge's adapter name (``layers.0.attn.qkv_proj.lora_q``) -> the transformers module it adapts
    (``model.layers.0.self_attn.q_proj``)."""
    hf_config, layout = config_to_hf(model.config, {"bos_token_id": 0, "eos_token_id": 0})
    modules = {}
    for i in range(model.config.num_layers):
        for adapter in adapters(model.config, model.lora):
            stored = layout.tensors[f"layers.{i}.{adapter.part}.weight"]
            index = QKV_INDEX.get(adapter.target, 0)
            if len(stored.names) != (3 if adapter.target in QKV_INDEX else 1) or not stored.transposed:
                raise ValueError(
                    f"a PEFT adapter directory needs a module per adapted weight; {hf_config['model_type']} "
                    f"directories store {adapter.part} as {list(stored.names)} (write a merged directory instead)"
                )
            modules[f"layers.{i}.{adapter.name}"] = layout.prefix + stored.names[index].removesuffix(".weight")
    return modules


def peft_tensors(model: GPT) -> dict:
    """PEFT's tensors of ``model``'s adapters, by PEFT's names: ``lora_A.weight = A^T``, ``lora_B.weight = B^T``."""
    tensors = {}
    for name, module in adapter_modules(model).items():
        for ours, theirs in PEFT_MATRICES.items():
            value = to_numpy(model.adapters[f"{name}.{ours}"])
            tensors[f"{PEFT_PREFIX}{module}.{theirs}.weight"] = value.T.copy()  # (C_in, r) -> (r, C_in), ...
    return tensors


def peft_config(model: GPT, base: str | None) -> dict:
    """``adapter_config.json``: PEFT's ``LoraConfig`` of ``model.lora`` on the base model at ``base``."""
    modules = sorted({module.rsplit(".", 1)[-1] for module in adapter_modules(model).values()})
    lora = model.lora
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base,
        "r": lora.rank,
        "lora_alpha": lora.alpha,
        "lora_dropout": lora.dropout,
        "target_modules": modules,
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "init_lora_weights": True,
        "inference_mode": True,
        "modules_to_save": None,
    }


def save_peft_adapter(model: GPT, path, base: str | None = None) -> None:
    """Write ``model``'s adapters (``model.lora`` set) as a PEFT adapter directory at ``path`` (must not exist)."""
    if model.lora is None:
        raise ValueError("this model has no LoRA adapters: a PEFT adapter directory holds adapters alone")
    tensors, config = peft_tensors(model), peft_config(model, base)  # a refused family, before anything is written
    with atomic_directory(Path(path)) as temp:
        (temp / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        safetensors_numpy().save_file(tensors, str(temp / ADAPTER_WEIGHTS), metadata={"format": "pt"})
        (temp / ADAPTER_WEIGHTS).chmod(file_mode())
