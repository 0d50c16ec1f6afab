"""Which experts each token of the prompt goes to, with its gates, layer by layer: read from the MoE layers' caches.

A mixture-of-experts layer (``ops/moe.py``) keeps, for its ``N = B T`` rows, what its forward chose:
``chosen (N, k)`` the experts of each row by decreasing router probability (ties: the lower index, as
``torch.topk``), ``gates (N, k)`` their weights in the output's sum (renormalised to sum to 1 or not, as the
config says) and ``probs (N, E)`` the router's softmax. ``layer_routes`` reads them from a prompt's cache
(one sequence: ``N = T``), never re-deriving them, so the view cannot disagree with the forward that ran. A
dense MLP's cache holds no router: its layer has no route, and a model of dense layers has none at all.

``routing_view`` is the studio's answer (``/api/routing``): per layer, per token, the ``k`` experts and their
gates, the router's probability of every expert, and the tokens each expert received (its load).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..backend import to_numpy
from ..ops.moe import MoeCache
from .prompt import shown_token, token_label

DIGITS = 4  # significant digits of the gates and probabilities sent


class Route(NamedTuple):
    """One MoE layer's choice for the prompt's ``T`` tokens, as its forward made it (NumPy)."""

    chosen: np.ndarray  # (T, k) int: each token's experts, by decreasing router probability
    gates: np.ndarray  # (T, k): their weights in the gated sum
    probs: np.ndarray  # (T, E): the router's softmax
    load: np.ndarray  # (E,) int: the tokens each expert received
    renormalized: bool  # the gates divided by their sum


def layer_routes(cache) -> list[Route | None]:
    """Per layer of a model cache (``ModelCache``, one sequence), its ``Route``; None for a dense MLP."""
    routes = []
    for block in cache.blocks:
        moe = getattr(block.mlp, "moe", None)
        if not isinstance(moe, MoeCache):
            routes.append(None)
            continue
        arrays = (to_numpy(a) for a in (moe.chosen, moe.gates, moe.probs, moe.load))
        routes.append(Route(*arrays, bool(moe.renormalize)))
    return routes


def _rounded(values) -> list:
    return [[float(f"{v:.{DIGITS}g}") for v in row] for row in values]


def routing_view(model, tokenizer, prompt) -> dict:
    """The prompt's tokens and, per MoE layer, each token's experts and gates (``layer_routes``); for a model
    without experts, ``experts = 0`` and a sentence that says so."""
    config, ids = model.config, list(prompt.ids)
    tokens = [{"id": int(i), "text": token_label(tokenizer, i), "shown": shown_token(tokenizer, i)} for i in ids]
    routes = layer_routes(prompt.cache)
    answer = {"tokens": tokens, "experts": 0, "top_k": 0, "layers": []}
    if all(route is None for route in routes):
        answer["note"] = (
            f"This model has no experts: each of its {config.num_layers} layers has one dense "
            f"{config.activation} MLP that every token goes through (a model with experts routes each token "
            "to a few of them: numforge train --arch moe)"
        )
        return answer
    for layer, route in enumerate(routes):
        if route is None:
            answer["layers"].append({"layer": layer, "dense": True})
            continue
        answer["experts"], answer["top_k"] = int(route.probs.shape[1]), int(route.chosen.shape[1])
        answer["layers"].append(
            {
                "layer": layer,
                "dense": False,
                "renormalized": route.renormalized,
                "chosen": route.chosen.astype(int).tolist(),
                "gates": _rounded(route.gates),
                "probs": _rounded(route.probs),
                "load": route.load.astype(int).tolist(),
            }
        )
    answer["source"] = "blocks[layer].mlp.moe: chosen, gates, probs (ops/moe.py's forward)"
    return answer
