"""The configs of ``numforge bench train``, their model and batch, and PyTorch's step on the same weights.

Shared by ``bench/train.py`` (one process, side by side with torch) and
``bench/train_ranks.py`` (data parallel over MPI).
"""

from __future__ import annotations

import numpy as np

from ..model import GPTConfig
from ..model.config import ARCHS

CONFIGS = {  # the two configs of issue 5; kv_heads: the Llama-style model's key/value heads (issue 22)
    "small": dict(num_layers=4, d_model=128, num_heads=4, kv_heads=2, seq_len=128, batch=16, vocab_size=4096),
    "medium": dict(num_layers=4, d_model=256, num_heads=8, kv_heads=2, seq_len=256, batch=8, vocab_size=8192),
}
# --arch NAME -> the fields of that family's model at a config's sizes: GPT-2's defaults; Llama's with
# grouped-query attention, which the Llama-style bench includes; moe: a small Mixtral, Llama's layer
# with 8 SwiGLU experts of width 128 in place of the MLP, top-2, renormalised, its auxiliary losses on (issue 32)
ARCH_FIELDS = {
    "gpt2": lambda spec: {},
    "llama": lambda spec: {**ARCHS["llama"], "num_kv_heads": spec["kv_heads"]},
    "moe": lambda spec: {**ARCHS["moe"], "num_kv_heads": spec["kv_heads"]},
}
LR, WEIGHT_DECAY = 3e-4, 0.1


def build(name: str, attention: str, arch: str = "gpt2"):
    """``(config, ids, targets)``: the config named ``name`` in the family ``arch`` (``gpt2``; ``llama``:
    RMSNorm, rotary positions, SwiGLU, no biases, untied, and grouped-query attention with the config's
    ``kv_heads``; ``moe``: llama's with a mixture of experts, ``ARCHS["moe"]``) and a seeded random ``(B,T)``
    batch."""
    spec = CONFIGS[name]
    config = GPTConfig(
        **ARCH_FIELDS[arch](spec),
        vocab_size=spec["vocab_size"],
        max_seq_len=spec["seq_len"],
        d_model=spec["d_model"],
        num_heads=spec["num_heads"],
        num_layers=spec["num_layers"],
        attention=attention,
    )
    rng = np.random.default_rng(0)
    shape = (spec["batch"], spec["seq_len"])
    ids = rng.integers(0, spec["vocab_size"], size=shape)
    targets = rng.integers(0, spec["vocab_size"], size=shape)
    return config, ids, targets


def describe(config: GPTConfig) -> str:
    """``"4 layers, d_model 128, 4 heads (2 key/value), rmsnorm, rope positions, swiglu, untied, no biases"``;
    with experts ``"..., swiglu experts: 8 of width 128, top-2, renormalised, ..."``."""
    mlp = config.activation
    if config.num_experts:
        how = "renormalised" if config.experts_renormalize else "not renormalised"
        mlp += f" experts: {config.num_experts} of width {config.d_ff}, top-{config.experts_top_k}, {how}"
    return (
        f"{config.num_layers} layers, d_model {config.d_model}, {config.num_heads} heads "
        f"({config.num_kv_heads} key/value), {config.norm}, {config.position} positions, {mlp}, "
        f"{'tied' if config.tie_weights else 'untied'}, {'biases' if config.use_bias else 'no biases'}, "
        f"T {config.max_seq_len}"
    )


def torch_step(torch, config, model, ids, targets):
    """One PyTorch eager step (forward, autograd backward, AdamW) on a copy of ``model``'s weights."""
    from .train_torch import torch_loss, torch_params, torch_tables

    params, tables = torch_params(model.params), torch_tables(model)
    decay = [t for t in params.values() if t.ndim >= 2]
    no_decay = [t for t in params.values() if t.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}], lr=LR
    )
    ids_t, targets_t = torch.from_numpy(ids), torch.from_numpy(targets)

    def torch_step():
        opt.zero_grad(set_to_none=True)
        torch_loss(params, config, ids_t, targets_t, tables).backward()
        opt.step()

    return torch_step
