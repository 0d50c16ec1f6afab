"""The Llama family's mixtures of experts (``Scheme``): Mixtral's, Qwen3-MoE's and OLMoE's fields and tensors.

All three route as numforge's ``ops/moe.py`` does: router logits ``h W_r^T`` (``gate.weight (E, C)``, no
bias), a softmax (transformers takes it in float32), ``torch.topk`` of the probabilities (a tie to the lower
index), the kept ones divided by their sum or not, SwiGLU experts without biases. What differs::

                      Mixtral                          Qwen3-MoE                       OLMoE
    experts E         num_local_experts                num_experts                     num_experts
                        (each reads the other name, num_experts or num_local_experts, as the same field)
    their width F     intermediate_size                moe_intermediate_size           intermediate_size
    renormalised      always                           norm_topk_prob                  norm_topk_prob
    router (E,C)      block_sparse_moe.gate            mlp.gate                        mlp.gate
    expert e          block_sparse_moe.experts.{e}.    mlp.experts.{e}.                mlp.experts.{e}.
      (F,C) (F,C) (C,F) w1 (gate), w3 (up), w2 (down)  gate_proj, up_proj, down_proj   gate_proj, up_proj, down_proj
    refused           router_jitter_noise not 0        decoder_sparse_step not 1,      clip_qkv set
                                                       mlp_only_layers not empty

The tensors are as the Hub's files hold them (transformers 5 stacks the experts as it loads, ``experts.gate_up_proj``,
and writes them apart again). Qwen3-MoE's ``decoder_sparse_step`` and ``mlp_only_layers`` make some layers dense
(with their own ``intermediate_size``): numforge's layers are all of one kind (``config.mlp_kind``), so a file
with dense layers among the sparse ones is refused by name. numforge's ``router_aux_loss_coef`` is the file's
(transformers adds that loss only with ``output_router_logits``; numforge's training loss always does); no z-loss.
"""

from __future__ import annotations

from typing import NamedTuple

from ..model import GPTConfig
from ..model.names import EXPERTS_DOWN_PROJ, EXPERTS_GATE_PROJ, EXPERTS_UP_PROJ
from .fields import check_counts

EXPERT_PROJECTIONS = (EXPERTS_GATE_PROJ, EXPERTS_UP_PROJ, EXPERTS_DOWN_PROJ)  # numforge's stacked weights
COUNT_FIELDS = ("num_local_experts", "num_experts")  # one number: each class reads the other name as an alias
SWIGLU_PROJECTIONS = {EXPERTS_GATE_PROJ: "gate_proj", EXPERTS_UP_PROJ: "up_proj", EXPERTS_DOWN_PROJ: "down_proj"}


class Scheme(NamedTuple):
    """One family's mixture of experts in its files (module docstring)."""

    name: str  # the family, in messages
    count: str  # config.json's number of experts (COUNT_FIELDS: either name is read)
    default_count: int  # the number of experts of a file that names none
    width: str  # config.json's width of each expert
    renormalize: str | None  # config.json's switch of the kept gates' renormalisation (None: always renormalised)
    router: str  # the router's module inside layers.{i}.
    experts: str  # the experts' list inside layers.{i}.: expert e is {experts}.{e}
    projections: dict[str, str]  # numforge's stacked weight -> the expert's linear layer
    runs: dict[str, tuple[tuple, str]]  # field -> (the values numforge runs, the first one written; why)


MIXTRAL = Scheme(
    "Mixtral", "num_local_experts", 8, "intermediate_size", None, "block_sparse_moe.gate", "block_sparse_moe.experts",
    {EXPERTS_GATE_PROJ: "w1", EXPERTS_UP_PROJ: "w3", EXPERTS_DOWN_PROJ: "w2"},
    {"router_jitter_noise": ((0.0, 0), "numforge's router has no noise (0.0)")},
)  # fmt: skip
QWEN3_MOE = Scheme(
    "Qwen3-MoE", "num_experts", 128, "moe_intermediate_size", "norm_topk_prob", "mlp.gate", "mlp.experts",
    SWIGLU_PROJECTIONS,
    {
        "decoder_sparse_step": ((1,), "it puts dense layers between the sparse ones; numforge's layers all have "
                                "experts (1)"),
        "mlp_only_layers": (([], None), "it makes those layers dense; numforge's layers all have experts ([])"),
    },
)  # fmt: skip
OLMOE = Scheme(
    "OLMoE", "num_experts", 64, "intermediate_size", "norm_topk_prob", "mlp.gate", "mlp.experts", SWIGLU_PROJECTIONS,
    {"clip_qkv": ((None,), "numforge does not clip q, k and v (null)")},
)  # fmt: skip


def file_names(scheme: Scheme) -> dict[str, str]:
    """numforge's expert options -> the family's config.json keys, for ``in_file_words``."""
    return {"num_experts": scheme.count, "experts_top_k": "num_experts_per_tok", "d_ff": scheme.width}


def experts_from_hf(d: dict, scheme: Scheme, source: str) -> dict:
    """The mixture of experts of config dict ``d`` (its family's defaults filled in) as ``GPTConfig`` takes it:
    ``scheme.count`` SwiGLU experts of width ``scheme.width``, each token routed to ``num_experts_per_tok`` of
    them, the kept gates renormalised as the family says, ``router_aux_loss_coef`` as the file says; a field of
    ``scheme.runs`` with another value is refused by name. The number of experts may be under either of
    ``COUNT_FIELDS`` (transformers 5 saves Qwen3-MoE's as ``num_local_experts``, the Hub's files say
    ``num_experts``): both given and different is refused."""
    counts = {field: d[field] for field in COUNT_FIELDS if d.get(field) is not None}
    if len(set(map(repr, counts.values()))) > 1:
        raise ValueError(f"{source}: {' and '.join(counts)} disagree ({counts}): a model has one number of experts")
    d = {**d, scheme.count: next(iter(counts.values()), scheme.default_count)}
    check_counts(d, source, (scheme.count, "num_experts_per_tok", scheme.width))
    for field, (values, why) in scheme.runs.items():
        if not any(d.get(field) == value and type(d.get(field)) is type(value) for value in values):
            raise ValueError(f"{source}: {field} is {d.get(field)!r}; {why}")
    coef = d["router_aux_loss_coef"]
    if isinstance(coef, bool) or not isinstance(coef, (int, float)) or not coef >= 0:
        raise ValueError(f"{source}: router_aux_loss_coef must be a number >= 0, got {coef!r}")
    renormalize = True if scheme.renormalize is None else d[scheme.renormalize]
    if not isinstance(renormalize, bool):
        raise ValueError(f"{source}: {scheme.renormalize} must be true or false, got {renormalize!r}")
    return {
        "d_ff": d[scheme.width],
        "num_experts": d[scheme.count],
        "experts_top_k": d["num_experts_per_tok"],
        "experts_renormalize": renormalize,
        "router_aux_loss_coef": float(coef),
    }


def experts_to_hf(config: GPTConfig, scheme: Scheme) -> dict:
    """The expert fields of ``config`` in ``scheme``'s config.json (``experts_from_hf`` reads them back)."""
    renormalize = {} if scheme.renormalize is None else {scheme.renormalize: config.experts_renormalize}
    return {
        scheme.count: config.num_experts,
        scheme.width: config.d_ff,
        "num_experts_per_tok": config.experts_top_k,
        "router_aux_loss_coef": config.router_aux_loss_coef,
        "output_router_logits": False,
        **renormalize,
        **{field: values[0] for field, (values, _) in scheme.runs.items()},
    }


def expert_tensor_names(scheme: Scheme, layer: str, short: str, count: int, kind: str) -> tuple[str, ...]:
    """The ``count`` tensors of numforge's stacked ``layers.{layer}.{short}.{kind}``, one per expert."""
    return tuple(f"layers.{layer}.{scheme.experts}.{e}.{scheme.projections[short]}.{kind}" for e in range(count))
