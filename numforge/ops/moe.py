"""Mixture of experts: a router sends each row to ``top_k`` of ``E`` SwiGLU experts; the output is their gated sum.

Shapes: h (..., C) read as N rows, router weight (C, E), stacked expert weights w_gate (E, C, F),
w_up (E, C, F), w_down (E, F, C) -> y (..., C). The forward, row by row (``demos/derivations/moe.md``)::

    z = h W_r                          (N, E)  router logits (the linear convention y = x W)
    p = softmax(z)                     (N, E)
    c_1..c_k = the k largest p         (N, k)  ties: the lower expert index (a stable sort)
    g_j = p_{c_j}  or, renormalised,  g_j = p_{c_j} / sum_i p_{c_i}        (N, k)  the gates
    expert_e(x) = (silu(x W_gate_e) * (x W_up_e)) W_down_e
    y = sum_j g_j expert_{c_j}(h)      (N, C)

The tie rule is the lower index: torch.topk on the CPU (torch 2.13) follows no fixed rule on exact ties
(``topk(zeros(8), 3)`` gives experts 6, 5, 4), so the torch twin sorts stably, as numforge does.
Mixtral and Qwen3-MoE renormalise the gates, OLMoE does not (``renormalize``).

Dispatch: the N k (row, choice) pairs are sorted by expert (a stable argsort), so each expert's rows are one
contiguous run and each expert is one matrix product over them: a loop over the E experts, never over rows;
the expert activations take N k F memory, never N E F. An expert that receives no row is skipped.

Two auxiliary losses are options, both functions of the router only, added into ``cache.aux_loss``:
the Switch / Mixtral load-balancing loss ``E sum_e f_e P_e`` (f_e = load_e / (N k) the fraction of routed
assignments that went to e, P_e = mean_n p_{n,e}), times ``balance_coef``, and the router z-loss
``mean_n logsumexp(z_n)^2``, times ``z_coef``. (For one layer, transformers' ``load_balancing_loss_func`` is
k times the balance loss here: it divides the load by N, not N k.) ``cache.load`` is the number of rows each
expert received, for logging.

Backward: the gate-weighted sum gives ``dg_j = dy . o_j`` and ``do_j = g_j dy`` (o_j the chosen expert's
output); each expert backpropagates only its own rows (SwiGLU, then the two products), and the rows' input
gradients are unsorted and summed over the k choices (a row reached through k experts accumulates k terms).
The gates into the router: renormalised, ``dp_{c_j} = (dg_j - sum_i g_i dg_i) / S`` with ``S = sum_i p_{c_i}``,
else ``dp_{c_j} = dg_j``; zero for the experts not chosen. The load-balancing loss adds ``E f_e / N`` to every
``dp_{n,e}``; the softmax gives ``dz = p * (dp - sum_e p_e dp_e)``; the z-loss adds ``2 lse_n p_{n,e} / N``.
The choice itself (which experts, f_e) is piecewise constant in z: it carries no gradient.
"""

from __future__ import annotations

from typing import NamedTuple

from ..backend import get_xp
from ..checks import check_float, check_int_value, check_number, check_same_dtype
from .activations import swiglu_backward, swiglu_forward, swiglu_textbook, swiglu_textbook_backward
from .linear import LinearCache, linear_backward, linear_forward

EXPERT_ACTIVATIONS = ("swiglu",)  # the experts' activation (ops.activations.ACTIVATIONS): silu(x W_gate) * (x W_up)


class MoeCache(NamedTuple):
    """What the backward reads. Kept: the router's linear cache (h, W_r), the probabilities, the choice, the
    gates, the dispatch order, the experts' outputs o (to form dg) and their SwiGLU inputs and outputs (N k F
    each). Recomputed: each expert's input rows ``h[rows]``, a gather as cheap as keeping them."""

    router: LinearCache  # h (N, C) and W_r (C, E)
    probs: object  # (N, E) softmax of the router logits
    lse: object  # (N,) logsumexp of the router logits (the z-loss)
    chosen: object  # (N, k) int: the experts of each row, by decreasing p
    gates: object  # (N, k): p of the chosen, renormalised when asked
    renormalize: bool
    order: object  # (N k,) int: the (row, choice) pairs sorted by expert (a stable argsort of chosen.ravel())
    load: object  # (E,) int: the rows each expert received
    experts: tuple  # (w_gate, w_up, w_down): (E, C, F), (E, C, F), (E, F, C)
    swiglu: object  # SwigluCache over the N k sorted pairs: the gate and up pre-activations (N k, F)
    act: object  # (N k, F): silu(gate) * up, sorted (dW_down needs it)
    out: object  # (N k, C): each pair's expert output o, sorted (dg needs it)
    balance_coef: float
    z_coef: float
    balance_loss: object  # 0-d: E sum_e f_e P_e, before its coefficient
    z_loss: object  # 0-d: mean_n lse_n^2, before its coefficient
    shape: tuple  # h's shape (..., C)

    @property
    def aux_loss(self):
        """The auxiliary loss to add to the model's loss: ``balance_coef * balance_loss + z_coef * z_loss``."""
        return self.balance_coef * self.balance_loss + self.z_coef * self.z_loss


def moe_forward(
    h,
    w_router,
    w_gate,
    w_up,
    w_down,
    *,
    top_k: int = 2,
    renormalize: bool = True,
    balance_coef: float = 0.0,
    z_coef: float = 0.0,
):
    """y = sum over the top_k experts c_j of row n of g_{n,j} expert_{c_j}(h_n); returns ``(y, MoeCache)``.

    h (..., C) -> y (..., C). ``cache.aux_loss`` is the auxiliary loss (0 when both coefficients are 0),
    ``cache.load`` the rows per expert. Example: E = 2, top_k = 1, W_r = 0: both p are 1/2, expert 0 is chosen
    (the lower index), and y = expert_0(h) / 2, or expert_0(h) renormalised.
    """
    rows = _check(h, w_router, w_gate, w_up, w_down, top_k, balance_coef, z_coef)  # (..., C) -> (N, C)
    xp = get_xp(rows)
    n, num_experts = rows.shape[0], w_router.shape[1]
    z, router = linear_forward(rows, w_router)  # (N, C) @ (C, E) -> (N, E)
    probs, lse = _softmax(z)  # (N, E), (N,)
    chosen, gates = _route(probs, top_k, renormalize)  # (N, k), (N, k)
    order = xp.argsort(chosen.reshape(-1), kind="stable")  # (N k,): pairs grouped by expert, rows in order
    load = xp.bincount(chosen.reshape(-1), minlength=num_experts)  # (E,)
    out, swiglu, act = _experts_forward(rows[order // top_k], (w_gate, w_up, w_down), load)  # (N k, C)
    unsorted = xp.empty_like(out)
    unsorted[order] = out  # a permutation: no index repeats
    y = (unsorted.reshape(n, top_k, -1) * gates[:, :, None]).sum(axis=1)  # (N, k, C) -> (N, C)
    fraction = (load / max(n * top_k, 1)).astype(probs.dtype)  # (E,) f_e
    balance = num_experts * (fraction @ probs.mean(axis=0)) if n else xp.zeros((), probs.dtype)  # E sum f_e P_e
    z_loss = (lse * lse).mean() if n else xp.zeros((), probs.dtype)
    cache = MoeCache(router, probs, lse, chosen, gates, renormalize, order, load, (w_gate, w_up, w_down),
                     swiglu, act, out, balance_coef, z_coef, balance, z_loss, tuple(h.shape))  # fmt: skip
    return y.reshape(h.shape), cache


def moe_backward(dy, cache: MoeCache, daux: float = 1.0):
    """``(dh, dW_r, dW_gate, dW_up, dW_down)``; ``daux`` is the upstream gradient of ``cache.aux_loss`` (1 when
    it is added to the loss as it is).

    dg_j = dy . o_j, do_j = g_j dy; per expert, only its rows: da = do W_down^T, dW_down = act^T do, SwiGLU's
    backward, dW_gate = x^T dgate, dW_up = x^T dup, dx = dgate W_gate^T + dup W_up^T; dh sums each row's k dx.
    Router: dp from the gates (renormalised or not) and the balance loss, dz = p * (dp - sum p dp) + the z-loss
    term, then the linear's dh and dW_r. The choice passes no gradient.
    """
    xp = get_xp(dy, cache.probs)
    n, top_k = cache.chosen.shape
    dy = dy.reshape(n, -1)  # (..., C) -> (N, C)
    out = xp.empty_like(cache.out)
    out[cache.order] = cache.out  # sorted -> (row, choice) order
    dgates = (out.reshape(n, top_k, -1) * dy[:, None, :]).sum(axis=2)  # forward: y = sum_j g_j o_j; (N, k)
    dout = (cache.gates[:, :, None] * dy[:, None, :]).reshape(n * top_k, -1)[cache.order]  # (N k, C), sorted
    rows = cache.router.x[cache.order // top_k]  # (N k, C): each pair's input row, recomputed
    dx, dexperts = _experts_backward(dout, rows, cache)  # (N k, C) sorted, (dW_gate, dW_up, dW_down)
    dh = xp.empty_like(dx)
    dh[cache.order] = dx
    dh = dh.reshape(n, top_k, -1).sum(axis=1)  # a row reached through k experts: its k gradients add; (N, C)
    dz = _router_backward(dgates, cache, daux)  # (N, E)
    dh_router, dw_router, _ = linear_backward(dz, cache.router)  # forward: z = h W_r
    dh += dh_router  # h feeds the router and the experts: the paths add
    return (dh.reshape(cache.shape), dw_router, *dexperts)


def _check(h, w_router, w_gate, w_up, w_down, top_k, balance_coef, z_coef):
    """The rows of h (N, C), after every argument is checked (a ValueError or TypeError naming it)."""
    check_float(h, "h")
    check_float(w_router, "w_router", ndim=2)
    for name, w in (("w_gate", w_gate), ("w_up", w_up), ("w_down", w_down)):
        check_float(w, name, ndim=3)
    for name, w in (("w_router", w_router), ("w_gate", w_gate), ("w_up", w_up), ("w_down", w_down)):
        check_same_dtype(w, name, h, "h")
    c, num_experts = w_router.shape
    if h.ndim < 1 or h.shape[-1] != c:
        raise ValueError(f"h's last axis must match w_router's first (C = {c}), got h {tuple(h.shape)}")
    f = w_gate.shape[2]
    for name, w, want in (("w_gate", w_gate, (num_experts, c, f)), ("w_up", w_up, (num_experts, c, f)),
                          ("w_down", w_down, (num_experts, f, c))):  # fmt: skip
        if tuple(w.shape) != want:
            raise ValueError(f"{name} must have shape (E, ...) = {want} for E = {num_experts}, C = {c}, "
                             f"F = {f}, got {tuple(w.shape)}")  # fmt: skip
    check_int_value(top_k, "top_k", 1, num_experts)
    check_number(balance_coef, "balance_coef", 0.0)
    check_number(z_coef, "z_coef", 0.0)
    return h.reshape(-1, c)


def _softmax(z):
    """``(p, lse)``: the softmax of each row of z (N, E) and its logsumexp (N,), the row max subtracted."""
    xp = get_xp(z)
    zmax = z.max(axis=1, keepdims=True) if z.shape[0] else xp.zeros((0, 1), z.dtype)  # (N, 1)
    e = xp.exp(z - zmax)  # (N, E)
    total = e.sum(axis=1, keepdims=True)  # (N, 1)
    return e / total, (xp.log(total) + zmax)[:, 0]


def _route(probs, top_k: int, renormalize: bool):
    """``(chosen, gates)``: the top_k experts of each row by decreasing p (ties: the lower index) and their gates."""
    xp = get_xp(probs)
    chosen = xp.argsort(-probs, axis=1, kind="stable")[:, :top_k]  # (N, E) -> (N, k)
    gates = xp.take_along_axis(probs, chosen, axis=1)  # (N, k): p_{c_j}
    if renormalize:
        gates = gates / gates.sum(axis=1, keepdims=True)  # g_j = p_{c_j} / S
    return chosen, gates


def _segments(load):
    """``(expert, start, stop)`` for every expert that received a row: its run in the sorted pairs."""
    stops = get_xp(load).cumsum(load).tolist()
    starts = [0, *stops[:-1]]
    return [(e, start, stop) for e, (start, stop) in enumerate(zip(starts, stops)) if stop > start]


def _experts_forward(rows, experts, load):
    """Each expert's SwiGLU MLP on its run of the sorted rows (N k, C): ``(out (N k, C), SwigluCache, act)``."""
    w_gate, w_up, w_down = experts
    xp = get_xp(rows)
    gate = xp.empty((rows.shape[0], w_gate.shape[2]), dtype=rows.dtype)  # (N k, F)
    up = xp.empty_like(gate)
    for e, start, stop in _segments(load):
        gate[start:stop] = rows[start:stop] @ w_gate[e]  # (n_e, C) @ (C, F) -> (n_e, F)
        up[start:stop] = rows[start:stop] @ w_up[e]
    act, swiglu = swiglu_forward(gate, up)  # (N k, F)
    out = xp.empty_like(rows)  # (N k, C)
    for e, start, stop in _segments(load):
        out[start:stop] = act[start:stop] @ w_down[e]  # (n_e, F) @ (F, C) -> (n_e, C)
    return out, swiglu, act


def _experts_backward(dout, rows, cache: MoeCache):
    """``(dx (N k, C), (dW_gate, dW_up, dW_down))`` from the sorted dout (N k, C): each expert on its own rows; an
    expert that received none keeps zero gradients."""
    w_gate, w_up, w_down = cache.experts
    xp = get_xp(dout)
    dw_gate, dw_up, dw_down = xp.zeros_like(w_gate), xp.zeros_like(w_up), xp.zeros_like(w_down)
    dact = xp.empty_like(cache.act)  # (N k, F)
    segments = _segments(cache.load)
    for e, start, stop in segments:  # forward: out = act W_down_e
        dact[start:stop] = dout[start:stop] @ w_down[e].T  # (n_e, C) @ (C, F) -> (n_e, F)
        dw_down[e] = cache.act[start:stop].T @ dout[start:stop]  # (F, n_e) @ (n_e, C) -> (F, C)
    dgate, dup = swiglu_backward(dact, cache.swiglu)  # (N k, F) each
    dx = xp.empty_like(dout)  # (N k, C)
    for e, start, stop in segments:  # forward: gate = x W_gate_e, up = x W_up_e
        dw_gate[e] = rows[start:stop].T @ dgate[start:stop]  # (C, n_e) @ (n_e, F) -> (C, F)
        dw_up[e] = rows[start:stop].T @ dup[start:stop]
        dx[start:stop] = dgate[start:stop] @ w_gate[e].T + dup[start:stop] @ w_up[e].T  # x feeds both: paths add
    return dx, (dw_gate, dw_up, dw_down)


def _router_backward(dgates, cache: MoeCache, daux: float):
    """dz (N, E) from the gates' gradient (N, k) and the auxiliary losses' upstream gradient ``daux``."""
    xp = get_xp(dgates)
    p, gates, daux = cache.probs, cache.gates, float(daux)  # a Python float: float32 stays float32
    n, num_experts = p.shape
    dchosen = dgates
    if cache.renormalize:  # forward: g_j = p_{c_j} / S, so dp_{c_j} = (dg_j - sum_i g_i dg_i) / S
        total = xp.take_along_axis(p, cache.chosen, axis=1).sum(axis=1, keepdims=True)  # (N, 1) S
        dchosen = (dgates - (gates * dgates).sum(axis=1, keepdims=True)) / total
    dp = xp.zeros_like(p)  # the experts not chosen: no gate, no gradient
    dp[xp.arange(n)[:, None], cache.chosen] = dchosen  # distinct experts per row: nothing repeats
    if cache.balance_coef and n:  # forward: E sum_e f_e mean_n p_{n,e}, f_e held fixed (the choice)
        fraction = (cache.load / (n * cache.chosen.shape[1])).astype(p.dtype)  # (E,)
        dp += (daux * cache.balance_coef * num_experts / n) * fraction  # (E,) broadcast to every row
    dz = p * (dp - (p * dp).sum(axis=1, keepdims=True))  # the softmax's backward
    if cache.z_coef and n:  # forward: mean_n lse_n^2, d lse_n / dz_{n,e} = p_{n,e}
        dz += (daux * cache.z_coef * 2.0 / n) * cache.lse[:, None] * p
    return dz


def moe_textbook(
    h,
    w_router,
    w_gate,
    w_up,
    w_down,
    *,
    top_k: int = 2,
    renormalize: bool = True,
    balance_coef: float = 0.0,
    z_coef: float = 0.0,
):
    """``(y, aux_loss, load)`` the plain way: every expert on every row (N E F memory), the choice as a mask.

    Expert e is among row n's top_k when fewer than top_k experts are ahead of it: more probable, or as
    probable with a lower index. The oracle of ``moe_forward``; no sort, no dispatch.
    """
    t = _textbook_parts(h, w_router, w_gate, w_up, w_down, top_k, renormalize)
    y = get_xp(h).einsum("ne,enf,efc->nc", t["gates"], t["act"], w_down)  # sum_e g_{n,e} expert_e(h_n); (N, C)
    aux = balance_coef * t["balance"] + z_coef * (t["lse"] * t["lse"]).mean()  # E sum_e f_e P_e; mean lse^2
    return y.reshape(h.shape), aux, t["load"]


def moe_textbook_backward(
    dy,
    h,
    w_router,
    w_gate,
    w_up,
    w_down,
    *,
    top_k: int = 2,
    renormalize: bool = True,
    balance_coef: float = 0.0,
    z_coef: float = 0.0,
    daux: float = 1.0,
):
    """``(dh, dW_r, dW_gate, dW_up, dW_down)`` of ``sum(y dy) + daux aux_loss``, the plain way: every expert on every
    row, a row's gradient into an expert it did not choose multiplied by its zero gate. The oracle of
    ``moe_backward``; the forward's intermediates recomputed (``moe_textbook``'s)."""
    xp = get_xp(h)
    t = _textbook_parts(h, w_router, w_gate, w_up, w_down, top_k, renormalize)
    rows, p, mask, gates = t["rows"], t["p"], t["mask"], t["gates"]
    n, num_experts = p.shape
    dy = dy.reshape(n, -1)  # (..., C) -> (N, C)
    # forward: y = sum_e G_{n,e} out_{e,n}, out_e = act_e W_down_e
    out = xp.einsum("enf,efc->enc", t["act"], w_down)  # (E, N, C)
    dgates = xp.einsum("nc,enc->ne", dy, out)  # (N, E)
    dout = xp.einsum("ne,nc->enc", gates, dy)  # (E, N, C): zero where e was not chosen
    dw_down = xp.einsum("enf,enc->efc", t["act"], dout)  # (E, F, C)
    dact = xp.einsum("enc,efc->enf", dout, w_down)  # (E, N, F)
    # forward: act_e = swiglu(rows W_gate_e, rows W_up_e)
    dgate, dup = swiglu_textbook_backward(dact, t["gate"], t["up"])  # (E, N, F) each
    dw_gate = xp.einsum("nc,enf->ecf", rows, dgate)  # (E, C, F)
    dw_up = xp.einsum("nc,enf->ecf", rows, dup)
    dh = xp.einsum("enf,ecf->nc", dgate, w_gate) + xp.einsum("enf,ecf->nc", dup, w_up)  # (N, C)
    # forward: G = p mask, renormalised G = p mask / S with S = sum_e p_e mask_e
    if renormalize:
        dp = mask * (dgates - (gates * dgates).sum(axis=1, keepdims=True)) / (p * mask).sum(axis=1, keepdims=True)
    else:
        dp = mask * dgates  # (N, E)
    fraction = t["load"] / (n * top_k)  # (E,) f_e, the choice: held fixed
    dp = dp + daux * balance_coef * num_experts * fraction / n  # forward: balance = E sum_e f_e mean_n p_{n,e}
    dz = p * (dp - (p * dp).sum(axis=1, keepdims=True))  # forward: p = softmax(z)
    dz = dz + daux * z_coef * 2.0 / n * t["lse"][:, None] * p  # forward: z-loss = mean_n lse_n^2
    dh = dh + dz @ w_router.T  # forward: z = rows W_r; (N, E) @ (E, C) -> (N, C)
    return dh.reshape(h.shape), rows.T @ dz, dw_gate, dw_up, dw_down


def _textbook_parts(h, w_router, w_gate, w_up, w_down, top_k: int, renormalize: bool) -> dict:
    """The dense layer's intermediates by name: rows (N, C), p (N, E), lse (N,), mask (N, E) (the choice), gates
    (N, E) (zero off it), the experts' pre-activations gate, up and act (E, N, F), load (E,), balance ()."""
    xp = get_xp(h)
    rows = h.reshape(-1, h.shape[-1])  # (..., C) -> (N, C)
    n, num_experts = rows.shape[0], w_router.shape[1]
    z = rows @ w_router  # (N, E)
    zmax = z.max(axis=1, keepdims=True)  # (N, 1)
    p = xp.exp(z - zmax) / xp.exp(z - zmax).sum(axis=1, keepdims=True)  # (N, E)
    index = xp.arange(num_experts)
    ahead = (p[:, None, :] > p[:, :, None]) | ((p[:, None, :] == p[:, :, None]) & (index < index[:, None]))
    mask = ahead.sum(axis=2) < top_k  # (N, E, E): e' ahead of e -> (N, E): e chosen
    gates = p * mask  # (N, E): zero off the choice
    if renormalize:
        gates = gates / gates.sum(axis=1, keepdims=True)
    gate, up = xp.einsum("nc,ecf->enf", rows, w_gate), xp.einsum("nc,ecf->enf", rows, w_up)  # (E, N, F) each
    load = mask.sum(axis=0)  # (E,)
    balance = num_experts * (load / (n * top_k) * p.mean(axis=0)).sum()  # E sum_e f_e P_e
    lse = xp.log(xp.exp(z - zmax).sum(axis=1)) + zmax[:, 0]  # (N,)
    return dict(rows=rows, p=p, lse=lse, mask=mask, gates=gates, gate=gate, up=up, act=swiglu_textbook(gate, up),
                load=load, balance=balance)  # fmt: skip


def moe_torch(
    h,
    w_router,
    w_gate,
    w_up,
    w_down,
    *,
    top_k: int = 2,
    renormalize: bool = True,
    balance_coef: float = 0.0,
    z_coef: float = 0.0,
):
    """``(y, aux_loss, load)`` on torch tensors, for autograd: the same layer written with torch's own functions
    (the choice by a stable sort: see the tie rule) and dispatched as ``moe_forward`` dispatches, the ``N k``
    (row, choice) pairs sorted by expert, one product per expert over its run of rows, ``index_add`` back to
    the rows: the PyTorch eager MoE of ``numforge bench train --arch moe``."""
    import torch
    import torch.nn.functional as functional

    rows = h.reshape(-1, h.shape[-1])  # (..., C) -> (N, C)
    n, num_experts = rows.shape[0], w_router.shape[1]
    z = rows @ w_router  # (N, E)
    p = torch.softmax(z, dim=-1)
    chosen = torch.sort(p, dim=-1, descending=True, stable=True).indices[:, :top_k]  # (N, k)
    gates = p.gather(1, chosen)  # (N, k)
    if renormalize:
        gates = gates / gates.sum(dim=-1, keepdim=True)
    order = torch.argsort(chosen.reshape(-1), stable=True)  # (N k,): the pairs grouped by expert, rows in order
    load = torch.bincount(chosen.reshape(-1), minlength=num_experts)  # (E,)
    pair_rows = order // top_k  # (N k,): each sorted pair's row
    out = torch.cat(
        [
            (functional.silu(x @ w_gate[e]) * (x @ w_up[e])) @ w_down[e]  # (n_e, C): expert e over its rows
            for e, x in enumerate(rows[pair_rows].split(load.tolist()))
        ]
    )  # (N k, C), sorted
    y = torch.zeros_like(rows).index_add(0, pair_rows, gates.reshape(-1)[order, None] * out)  # (N, C)
    balance = num_experts * (load.to(p.dtype) / (n * top_k) * p.mean(dim=0)).sum()
    z_loss = torch.logsumexp(z, dim=-1).square().mean()
    return y.reshape(h.shape), balance_coef * balance + z_coef * z_loss, load
