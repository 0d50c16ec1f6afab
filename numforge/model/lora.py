"""LoRA adapters on a model's linear layers: which layers, their parameters' names and shapes, their init.

``LoraConfig(rank, alpha, dropout, targets)`` is PEFT's ``LoraConfig(r, lora_alpha, lora_dropout,
target_modules)``; a target is named as PEFT's Llama-family modules, without ``_proj``::

    q, k, v    attn.qkv_proj, its q | k | v columns     (C, H D) | (C, H_kv D) | (C, H_kv D) of (C, (H + 2 H_kv) D)
    o          attn.out_proj                            (H D, C)
    gate, up   mlp.gate_proj, mlp.up_proj               (C, F)   (gate: a gated activation only, SwiGLU)
    down       mlp.down_proj                            (F, C)

numforge fuses q|k|v into one weight; PEFT's ``q_proj`` adapter changes only q's columns of it. So an
adapter is a linear part and a range of its output columns (``Adapter``): ``y[:, start:stop] += delta``.
The q adapter reads the same input ``h`` as the fused product and writes q's columns alone; k and v are
independent adapters of their own columns (each its own A, B and dropout mask, as in PEFT). This keeps
the fused projection one matrix product and every adapter exactly PEFT's.

Layer ``i``'s adapter on target ``t`` of part ``P`` has two parameters, input-major as every weight here
(``ops/lora.py``)::

    layers.{i}.{P}.lora_{t}.a     (C_in, r)      PEFT's lora_A.weight^T, kaiming-uniform (a = sqrt(5)): U(+-C_in^-1/2)
    layers.{i}.{P}.lora_{t}.b     (r, C_out)     PEFT's lora_B.weight^T, zeros: the adapted model starts as the base
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import NamedTuple

import numpy as np

from ..checks import check_number, check_positive_int
from .names import DOWN_PROJ, OUT_PROJ, QKV_PROJ, Linear, layer_layout, projection

A, B = "a", "b"  # the two parameters of an adapter, after its name


class Adapter(NamedTuple):
    """The adapter of ``target``: on the linear ``part``, its output columns ``[start, stop)``, widths
    ``c_in -> c_out = stop - start``."""

    target: str
    part: str
    start: int
    stop: int
    c_in: int

    @property
    def name(self) -> str:
        return f"{self.part}.lora_{self.target}"


def _qkv_columns(config, target: str) -> tuple[int, int]:
    """q's, k's or v's columns of the fused projection: ``[0, H D)``, ``[H D, (H + H_kv) D)``, the rest."""
    H, H_kv, D = config.num_heads, config.num_kv_heads, config.head_dim
    bounds = {"q": (0, H * D), "k": (H * D, (H + H_kv) * D), "v": ((H + H_kv) * D, (H + 2 * H_kv) * D)}
    return bounds[target]


TARGET_PARTS = {  # target -> the linear part it adapts
    "q": QKV_PROJ,
    "k": QKV_PROJ,
    "v": QKV_PROJ,
    "o": OUT_PROJ,
    "gate": projection("gate"),
    "up": projection("up"),
    "down": DOWN_PROJ,
}
TARGETS = tuple(TARGET_PARTS)  # the order adapters are listed in


@dataclass(frozen=True)
class LoraConfig:
    """``rank`` r, ``alpha`` (scale ``alpha / r``), ``dropout`` on each adapter's input, ``targets`` (``TARGETS``)."""

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple[str, ...] = ("q", "v")

    def __post_init__(self) -> None:
        check_positive_int(self.rank, "LoRA rank")
        check_number(self.alpha, "LoRA alpha", 0, low_open=True)
        check_number(self.dropout, "LoRA dropout", 0, 1, high_open=True)
        targets = tuple(self.targets)
        unknown = [t for t in targets if t not in TARGET_PARTS]
        if not targets or unknown or len(set(targets)) != len(targets):
            raise ValueError(f"LoRA targets must be distinct names among {list(TARGETS)}, got {list(targets)}")
        object.__setattr__(self, "targets", tuple(t for t in TARGETS if t in targets))
        object.__setattr__(self, "alpha", float(self.alpha))
        object.__setattr__(self, "dropout", float(self.dropout))

    @property
    def scale(self) -> float:
        """``alpha / r``: the update's size does not grow with the rank at a fixed alpha (derivations/lora.md)."""
        return self.alpha / self.rank

    def to_dict(self) -> dict:
        return {**asdict(self), "targets": list(self.targets)}

    @classmethod
    def from_dict(cls, d: dict) -> LoraConfig:
        if not isinstance(d, dict) or set(d) != {"rank", "alpha", "dropout", "targets"}:
            raise ValueError(f"a LoRA config must have the fields rank, alpha, dropout, targets, got {d!r}")
        return cls(d["rank"], d["alpha"], d["dropout"], tuple(d["targets"]))


def adapters(config, lora: LoraConfig) -> tuple[Adapter, ...]:
    """The adapters of one layer (every layer has the same), in ``TARGETS`` order; a ``ValueError`` for a target
    the model has not (``gate`` without a gated activation, any MLP target with experts)."""
    layout = layer_layout(config)
    found = []
    for target in lora.targets:
        part = TARGET_PARTS[target]
        if not isinstance(layout.get(part), Linear):
            linears = sorted(name for name, p in layout.items() if isinstance(p, Linear))
            raise ValueError(f"LoRA target {target!r}: this model has no linear layer {part} (it has {linears})")
        start, stop = _qkv_columns(config, target) if part == QKV_PROJ else (0, layout[part].c_out)
        found.append(Adapter(target, part, start, stop, layout[part].c_in))
    return tuple(found)


def adapter_shapes(config, lora: LoraConfig) -> dict[str, tuple[int, int]]:
    """Every adapter parameter's full name and shape, layer by layer, A before B."""
    shapes = {}
    for i in range(config.num_layers):
        for adapter in adapters(config, lora):
            prefix = f"layers.{i}.{adapter.name}"
            shapes[f"{prefix}.{A}"] = (adapter.c_in, lora.rank)
            shapes[f"{prefix}.{B}"] = (lora.rank, adapter.stop - adapter.start)
    return shapes


def adapter_parameter_count(config, lora: LoraConfig) -> int:
    """The trainable scalars under ``lora``: ``L sum over targets of r (C_in + C_out)``, without listing the layers."""
    per_layer = sum(lora.rank * (a.c_in + a.stop - a.start) for a in adapters(config, lora))
    return config.num_layers * per_layer


def adapter_bytes(config, lora: LoraConfig, itemsize: int = 4) -> dict[str, int]:
    """The memory a LoRA run trains with, by kind: the adapters, their gradients and AdamW's two moments
    (the frozen base's weights are counted by the caller, once, with no gradient or moment)."""
    size = adapter_parameter_count(config, lora) * itemsize
    return {"adapters": size, "gradients": size, "optimizer": 2 * size}


def init_adapters(config, lora: LoraConfig, seed: int) -> dict[str, np.ndarray]:
    """PEFT's default init, float64 NumPy: each A uniform in ``+-1/sqrt(C_in)`` (kaiming-uniform with
    ``a = sqrt(5)``: gain ``sqrt(2 / (1 + 5))``, bound ``gain sqrt(3 / C_in)``), each B zero."""
    rng = np.random.default_rng((seed, 2))  # its own stream: never the init's or the batches' (seed) or dropout's
    values = {}
    for name, shape in adapter_shapes(config, lora).items():
        if name.endswith(f".{A}"):
            bound = 1.0 / math.sqrt(shape[0])
            values[name] = rng.uniform(-bound, bound, size=shape)
        else:
            values[name] = np.zeros(shape)
    return values


def merged_params(params: dict, adapter_values: dict, config, lora: LoraConfig) -> dict:
    """The base ``params`` with every adapter folded in, new arrays: ``W[:, start:stop] += (alpha / r) A B``
    (``A B`` is ``(C_in, stop - start)``, the columns the adapter writes). The merged model computes, without
    dropout, what the adapted one does: ``x (W + s A B) = x W + s x A B``."""
    merged = dict(params)
    for i in range(config.num_layers):
        for adapter in adapters(config, lora):
            name, prefix = f"layers.{i}.{adapter.part}.weight", f"layers.{i}.{adapter.name}"
            weight = merged[name] if merged[name] is not params[name] else params[name].copy()
            update = adapter_values[f"{prefix}.{A}"] @ adapter_values[f"{prefix}.{B}"]  # (C_in,r) @ (r,cols)
            weight[:, adapter.start : adapter.stop] += lora.scale * update
            merged[name] = weight
    return merged
