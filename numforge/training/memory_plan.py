"""The memory plan of a training run: bytes of weights, gradients, AdamW's moments and activations, before step 1.

For ``P`` parameters of which ``P_t`` are trained (all of them, unless adapters train beside frozen weights),
at ``b`` bytes a value (4: float32), a batch of ``B`` rows of ``T`` tokens and ``L`` blocks::

    weights     = b P
    gradients   = b P_t                      one gradient per trained value
    optimizer   = 2 b P_t                    AdamW's two moments, m and v
    activations = L A + head                 every block's cache kept for the backward
                = L b B T C + A + head       --recompute: each block's input, and one block's cache at a time
    working     = A / 2                      the gradients a block's backward makes on its way
    validation  = 8 eval_batches B (T + 1)   the fixed validation windows (int64)

``A`` is one block's cache, counted from the model's shapes (``block_activation_bytes``): per token, the two
norms' input and normalized rows, the projections' inputs, q and k at every step of their way (the split, the
QK-norm, the rotation), v, the attention's output and log-sum-exp, the MLP's activation inputs; dropout's
boolean masks; and the ``(B,H,T,T)`` attention weights where the kernel keeps them. ``head`` is what the model
keeps outside the blocks: the final norm's rows and the loss's. ``working`` is measured, not derived: the peak
of a step stands 0.15 to 0.55 of a block's cache above what is kept and the gradients (tracemalloc, on the
shapes of ``tests/test_memory_plan.py``, which checks the whole count against tracemalloc's peak of a real
forward and backward).

``numforge train`` prints the table of ``plan_table`` before its first step, a column per way of running
(``--recompute`` or not), and refuses with it when the chosen one exceeds the machine's memory.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

from .. import resources
from ..model import GPTConfig, parameter_shapes
from ..model.attention_branch import KEEP_PROBS_LIMIT, KERNELS
from ..model.lora import LoraConfig, adapter_parameter_count
from ..model.positions import POSITIONS
from ..ops.activations import ACTIVATIONS
from ..resources import format_bytes
from ..table import format_table

INT64_BYTES = 8


class MemoryPlan(NamedTuple):
    """The bytes one training step needs, by part (``activations`` counts what the chosen way keeps)."""

    weights: int
    gradients: int
    optimizer: int  # AdamW's two moments
    activations_per_block: int  # A: one block's cache
    activations: int  # every block's and the head's, as kept (with recompute: inputs + one block)
    working: int  # the backward's gradients on the way through a block
    validation: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations + self.working + self.validation


def memory_plan(
    config: GPTConfig,
    settings,
    *,
    recompute: bool = False,
    parameters: int | None = None,
    trainable: int | None = None,
    itemsize: int = 4,
) -> MemoryPlan:
    """The plan of training ``config`` with ``settings`` (a ``TrainSettings``: batch, context, micro-batches).

    ``parameters``: the values held (default the model's); ``trainable``: those with a gradient and AdamW's
    moments (default all of ``parameters``): adapters beside frozen weights pass their own count here.
    The activations are those of one micro-batch (``--grad-accum`` splits the batch; one process).
    """
    parameters = count_params(config) if parameters is None else parameters
    trainable = parameters if trainable is None else trainable
    B, T = settings.batch_size // settings.grad_accum, settings.seq_len
    block = block_activation_bytes(config, B, T, itemsize)
    head = itemsize * B * T * 6 * config.d_model  # final norm: x, x_hat; the loss: h, dh; the embedding sum; slack
    if recompute:
        activations = config.num_layers * itemsize * B * T * config.d_model + block + head
    else:
        activations = config.num_layers * block + head
    validation = INT64_BYTES * settings.eval_batches * settings.batch_size * (T + 1)
    return MemoryPlan(
        itemsize * parameters,
        itemsize * trainable,
        2 * itemsize * trainable,
        block,
        activations,
        block // 2,
        validation,
    )


def block_activation_bytes(config: GPTConfig, B: int, T: int, itemsize: int = 4) -> int:
    """One block's cache for the backward on ``B`` rows of ``T`` tokens, from the model's shapes (module docstring).

    Example: GPT-2's shape at C = 64, H = 4, F = 256, B = 4, T = 64 keeps ``(6 C + 5 H D + H + 3 F + H T) B T``
    values: 1,773,568 bytes in float32.
    """
    C, H, H_kv, D, F = config.d_model, config.num_heads, config.num_kv_heads, config.head_dim, config.d_ff
    qk_stages = 1 + config.qk_norm + (POSITIONS[config.position].rotation is not None)  # q, k as split, then per step
    attention = 3 * C + qk_stages * (H + H_kv) * D + H_kv * D + 2 * H * D + H  # x, x_hat, h; q, k; v; o, merged; lse
    activation = (len(ACTIVATIONS[config.activation].inputs) + 2) * F  # its inputs and cache, down_proj's input
    if config.num_experts:  # each token's k routed copies through an expert; the router's probabilities, choices
        k = config.experts_top_k
        mlp = 3 * C + config.num_experts + 5 * k + k * (activation + C)
    else:
        mlp = 3 * C + activation  # x, x_hat, h; the activation
    values = B * T * (attention + mlp)
    weights = B * H * T * T
    if KERNELS[config.attention].keeps_weights or weights <= KEEP_PROBS_LIMIT:
        values += weights  # (B,H,T,T) the attention weights (the tiled kernel: its causal tiles, counted whole)
    masks = 2 * B * T * C if config.drop_prob > 0 else 0  # the two branches' dropout masks, one byte each
    return itemsize * values + masks


def count_params(config: GPTConfig) -> int:
    """The number of parameters, counted without listing ``num_layers`` layers (a file may claim 10**20). Every
    layer has the same shapes whatever its window, so the 1- and 2-layer configs window every layer (the windowed
    layers' indices, and the local rotation that reads them, would not fit in 1 layer)."""
    uniform = {"window_layers": None, "rope_local_theta": None}
    one, two = (
        sum(math.prod(s) for s in parameter_shapes(dataclasses.replace(config, num_layers=n, **uniform)).values())
        for n in (1, 2)
    )
    return one + (config.num_layers - 1) * (two - one)


PLAN_ROWS = (  # (row label, the MemoryPlan field or property it shows)
    ("weights", "weights"),
    ("gradients", "gradients"),
    ("AdamW moments (m, v)", "optimizer"),
    ("activations, one block", "activations_per_block"),
    ("activations kept", "activations"),
    ("backward's working memory", "working"),
    ("validation windows", "validation"),
    ("total", "total"),
)


def plan_table(plans: dict[str, MemoryPlan], chosen: str) -> str:
    """The plans side by side, a column per way of running (``"plain"``, ``"--recompute"``), the chosen one
    marked, and the machine's memory under them."""
    if chosen not in plans:
        raise ValueError(f"chosen must be one of the plans {list(plans)}, got {chosen!r}")
    header = ("memory plan", *(f"{name} (this run)" if name == chosen else name for name in plans))
    rows = [(label, *(format_bytes(getattr(plan, field)) for plan in plans.values())) for label, field in PLAN_ROWS]
    limit, source = resources.memory_limit()
    return format_table(header, rows, align=("left", *("right",) * len(plans))) + (
        f"\nthis machine: {format_bytes(limit)} ({source})"
    )


def run_plans(config: GPTConfig, settings, lora: LoraConfig | None = None) -> dict[str, MemoryPlan]:
    """The plans ``numforge train`` shows: without and with recomputation, and with ``lora``'s adapters (the base
    frozen: gradients and AdamW's moments for the adapters alone; recomputed as the run asks)."""
    plans = {
        "plain": memory_plan(config, settings),
        "--recompute": memory_plan(config, settings, recompute=True),
    }
    if lora is not None:
        adapters = adapter_parameter_count(config, lora)
        held = count_params(config) + adapters
        recompute = settings.recompute
        plans["--lora"] = memory_plan(config, settings, recompute=recompute, parameters=held, trainable=adapters)
    return plans


def chosen_plan(settings, lora: LoraConfig | None = None) -> str:
    return "--lora" if lora is not None else "--recompute" if settings.recompute else "plain"


def check_plan_fits(config: GPTConfig, settings, what: str, lora: LoraConfig | None = None) -> str:
    """The plan's table, or a ``ValueError`` with it when the chosen plan's total exceeds the machine's memory."""
    plans, chosen = run_plans(config, settings, lora), chosen_plan(settings, lora)
    table = plan_table(plans, chosen)
    limit, source = resources.memory_limit()
    needed = plans[chosen].total
    if needed > limit:
        fits = [name for name, plan in plans.items() if plan.total <= limit]
        hint = f" ({' and '.join(fits)} would fit: see the table)" if fits else ""
        raise ValueError(
            f"{what} needs about {format_bytes(needed)} of memory, more than this machine's {format_bytes(limit)} "
            f"({source}){hint}:\n{table}"
        )
    return table
