"""The kinds of MLP branch a layer can have, ``MLP_KINDS``: a dense MLP (``mlp_branch.py``) or a mixture of
experts (``moe_branch.py``), by ``config.mlp_kind`` (``"experts"`` when ``num_experts > 0``).

Each kind is ``forward(x, p, config, *, rng) -> (m, cache)``, ``cache.aux_loss`` the loss it adds to the
model's (None: nothing), and ``backward(dm, cache, config, daux) -> (dx, grads, ...)``, ``daux`` the upstream
gradient of that aux loss. Its parameters are ``names.MLP_LAYOUTS``'s of the same key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from .mlp_branch import MlpBackward, MlpBranchCache, mlp_branch_backward, mlp_branch_forward
from .moe_branch import moe_branch_backward, moe_branch_forward


class MlpKind(NamedTuple):
    forward: Callable
    backward: Callable


def _dense_backward(dm, cache: MlpBranchCache, config, daux=0.0) -> MlpBackward:
    """A dense MLP adds no auxiliary loss: ``daux`` reaches nothing."""
    return mlp_branch_backward(dm, cache, config)


MLP_KINDS = {  # config.mlp_kind -> MlpKind
    "dense": MlpKind(mlp_branch_forward, _dense_backward),
    "experts": MlpKind(moe_branch_forward, moe_branch_backward),
}
