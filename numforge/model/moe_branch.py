"""The MLP branch with experts: ``m = Drop(moe(pre_mlp_norm(x)))``, a mixture of SwiGLU experts (``ops/moe.py``).

On ``x (B,T,C)`` read as ``N = B*T`` rows, with the parameters of ``names.experts_mlp_layout``::

    h = pre_mlp_norm(x)                                                          (N,C)
    z = h @ mlp.router; p = softmax(z); c_1..c_k = the top_k experts of each row   (N,E), (N,k)
    m = sum_j g_j expert_{c_j}(h),  expert_e(h) = (silu(h W_gate_e) * (h W_up_e)) W_down_e      (N,C)
    m = Drop(m)

``W_gate_e`` is ``mlp.experts.gate_proj.weight[e]`` (likewise up and down); the gates ``g`` are the chosen
``p``, renormalised or not (``config.experts_renormalize``). The layer's auxiliary loss, the load-balancing
and z-losses times their coefficients, is ``cache.aux_loss``: the model adds it to its loss, and the backward
takes its upstream gradient ``daux``. ``cache.load`` is the rows each expert received.
"""

from __future__ import annotations

from typing import NamedTuple

from ..ops.moe import MoeCache, moe_backward, moe_forward
from .layers import dropout_if, dropout_if_backward, norm_backward, norm_forward
from .names import EXPERTS_DOWN_PROJ, EXPERTS_GATE_PROJ, EXPERTS_UP_PROJ, PRE_MLP_NORM, ROUTER

WEIGHTS = (ROUTER, EXPERTS_GATE_PROJ, EXPERTS_UP_PROJ, EXPERTS_DOWN_PROJ)  # moe_forward's arrays after h, in order


class MoeBranchCache(NamedTuple):
    norm: object
    moe: MoeCache
    dropout: object

    @property
    def aux_loss(self):
        """The layer's auxiliary loss (0-d): ``router_aux_loss_coef * balance + router_z_loss_coef * z-loss``."""
        return self.moe.aux_loss

    @property
    def load(self):
        """``(E,)`` int: the rows each expert received (each row goes to ``top_k`` of them)."""
        return self.moe.load


def moe_branch_forward(x, p, config, *, rng=None):
    """``Drop(moe(pre_mlp_norm(x)))`` on ``x (B,T,C)``: ``(m (B,T,C), MoeBranchCache)``."""
    B, T, C = x.shape
    h, norm_cache = norm_forward(x.reshape(B * T, C), p, PRE_MLP_NORM, config)  # (B,T,C) -> (N,C)
    weights = [p[f"{name}.weight"] for name in WEIGHTS]  # (C,E), (E,C,F), (E,C,F), (E,F,C)
    m, moe_cache = moe_forward(h, *weights, **config.experts_options())  # (N,C)
    m, drop_cache = dropout_if(m, config, rng)
    return m.reshape(B, T, C), MoeBranchCache(norm_cache, moe_cache, drop_cache)


class MoeBackward(NamedTuple):
    """What ``moe_branch_backward`` made, by reference: ``dx`` and ``grads`` go on into the block; ``dh`` on the
    way (the study tools show it)."""

    dx: object  # (B,T,C) into the residual
    grads: dict  # short name -> gradient: the router's, the experts' stacked three, the norm's
    dh: object  # (N,C) the norm's output, which feeds the router and the experts: the sum of their paths


def moe_branch_backward(dm, cache: MoeBranchCache, config, daux=0.0) -> MoeBackward:
    """``MoeBackward(dx, grads, dh)``; ``daux`` is the upstream gradient of ``cache.aux_loss`` (the model passes
    its loss's, since it adds the aux loss as it is; 0: the gradient of ``m`` alone)."""
    B, T, C = dm.shape
    dm = dropout_if_backward(dm.reshape(B * T, C), cache.dropout)  # (B,T,C) -> (N,C)
    # forward: m = moe(h); the choice of experts passes no gradient (ops/moe.py)
    dh, *dweights = moe_backward(dm, cache.moe, daux=daux)  # (N,C), then each weight's
    # forward: h = pre_mlp_norm(x)
    dx, norm_grads = norm_backward(dh, cache.norm, PRE_MLP_NORM, config)
    grads = {f"{name}.weight": g for name, g in zip(WEIGHTS, dweights)} | norm_grads
    return MoeBackward(dx.reshape(B, T, C), grads, dh)  # (N,C) -> (B,T,C)
