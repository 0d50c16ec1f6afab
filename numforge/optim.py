"""AdamW, global-norm gradient clipping and the warmup + cosine learning-rate schedule.

Update rule of AdamW (Loshchilov & Hutter), for each parameter ``p`` with
gradient ``g`` at step ``t = 1, 2, ...``::

    p  <- p - lr * weight_decay * p          decoupled decay, matrices only
    m  <- beta1 * m + (1 - beta1) * g        first moment
    v  <- beta2 * v + (1 - beta2) * g^2      second moment
    p  <- p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)

Weight decay applies to every parameter with two or more dimensions (the
projection matrices and the embeddings) and never to biases or LayerNorm
weights. The decay uses the parameter before this step's Adam update, as
PyTorch's ``AdamW`` does.

Everything is updated in place with preallocated buffers, so a step makes
no new arrays, and float32 parameters stay float32 (only Python floats
enter the array math).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .backend import get_xp
from .checks import check_float, check_int_value, is_real


class AdamW:
    """``opt = AdamW(model.params, lr=3e-4); opt.step(grads)`` updates the params in place.

    ``opt.lr`` may be changed between steps (the training loop sets it from
    the schedule).
    """

    def __init__(
        self, params: Mapping[str, object], lr: float, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0
    ):
        if not isinstance(params, Mapping) or not params:
            raise ValueError("params must be a non-empty dict of name -> array")
        for name, p in params.items():
            check_float(p, f"params[{name!r}]")
        self.params = params
        self.lr = lr
        self.betas = betas
        self.eps = eps
        self.weight_decay = weight_decay
        self._check_hyper()
        self.step_count = 0
        xp = get_xp(*params.values())
        self.m = {name: xp.zeros_like(p) for name, p in params.items()}
        self.v = {name: xp.zeros_like(p) for name, p in params.items()}
        self._scratch = {name: xp.empty_like(p) for name, p in params.items()}

    def _check_hyper(self) -> None:
        lr, betas, eps, wd = self.lr, self.betas, self.eps, self.weight_decay
        if not is_real(lr) or not lr >= 0:
            raise ValueError(f"lr must be a number >= 0, got {lr!r}")
        if (
            not isinstance(betas, (tuple, list))
            or len(betas) != 2
            or not all(is_real(b) and 0.0 <= b < 1.0 for b in betas)
        ):
            raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
        if not is_real(eps) or not eps > 0:
            raise ValueError(f"eps must be a number > 0, got {eps!r}")
        if not is_real(wd) or not wd >= 0:
            raise ValueError(f"weight_decay must be a number >= 0, got {wd!r}")

    def step(self, grads: Mapping[str, object]) -> None:
        """One AdamW update of every parameter, in place, using ``self.lr``."""
        self._check_hyper()
        if set(grads) != set(self.params):
            missing, extra = sorted(set(self.params) - set(grads)), sorted(set(grads) - set(self.params))
            raise ValueError(f"grads must have the params' names: missing {missing}, extra {extra}")
        for name, p in self.params.items():  # all checked before anything changes: no half-done step
            g = grads[name]
            if getattr(g, "shape", None) != p.shape or getattr(g, "dtype", None) != p.dtype:
                raise ValueError(
                    f"grads[{name!r}] is {getattr(g, 'dtype', type(g).__name__)}"
                    f"{tuple(getattr(g, 'shape', ()))}, but the parameter is {p.dtype}{tuple(p.shape)}"
                )
        self.step_count += 1
        lr, eps = float(self.lr), float(self.eps)
        beta1, beta2 = float(self.betas[0]), float(self.betas[1])
        correction1 = 1.0 - beta1**self.step_count
        correction2 = 1.0 - beta2**self.step_count
        step_size = lr / correction1
        decay = 1.0 - lr * float(self.weight_decay)
        for name, p in self.params.items():
            g, m, v, buf = grads[name], self.m[name], self.v[name], self._scratch[name]
            xp = get_xp(p, g)
            if p.ndim >= 2 and decay != 1.0:
                p *= decay  # p <- p - lr * wd * p
            m *= beta1  # m <- beta1 m + (1 - beta1) g
            xp.multiply(g, 1.0 - beta1, out=buf)
            m += buf
            v *= beta2  # v <- beta2 v + (1 - beta2) g^2
            xp.multiply(g, g, out=buf)
            buf *= 1.0 - beta2
            v += buf
            xp.sqrt(v, out=buf)  # sqrt(v / c2) + eps
            buf *= 1.0 / math.sqrt(correction2)
            buf += eps
            xp.divide(m, buf, out=buf)  # p <- p - (lr / c1) m / (...)
            buf *= step_size
            p -= buf

    def state_dict(self) -> dict:
        """``{"step", "hyper", "m", "v"}``: copies, JSON-able apart from the arrays."""
        return {
            "step": self.step_count,
            "hyper": {
                "lr": float(self.lr),
                "betas": [float(b) for b in self.betas],
                "eps": float(self.eps),
                "weight_decay": float(self.weight_decay),
            },
            "m": {name: a.copy() for name, a in self.m.items()},
            "v": {name: a.copy() for name, a in self.v.items()},
        }

    def load_state_dict(self, state: Mapping) -> None:
        """Restore a ``state_dict()``; names, shapes and dtypes must match the params."""
        if not isinstance(state, Mapping) or set(state) != {"step", "hyper", "m", "v"}:
            keys = sorted(state) if isinstance(state, Mapping) else type(state).__name__
            raise ValueError(f"an AdamW state must have keys ['hyper', 'm', 'step', 'v'], got {keys}")
        step = check_int_value(state["step"], "state['step']", minimum=0)
        hyper = state["hyper"]
        if not isinstance(hyper, Mapping) or set(hyper) != {"lr", "betas", "eps", "weight_decay"}:
            raise ValueError(f"state['hyper'] must have lr, betas, eps, weight_decay; got {hyper!r}")
        for moment in ("m", "v"):
            arrays = state[moment]
            if set(arrays) != set(self.params):
                raise ValueError(
                    f"state[{moment!r}] names differ from the params: "
                    f"missing {sorted(set(self.params) - set(arrays))}, "
                    f"extra {sorted(set(arrays) - set(self.params))}"
                )
            for name, a in arrays.items():
                p = self.params[name]
                if tuple(a.shape) != tuple(p.shape) or a.dtype != p.dtype:
                    raise ValueError(
                        f"state[{moment!r}][{name!r}] is {a.dtype}{tuple(a.shape)}, expected {p.dtype}{tuple(p.shape)}"
                    )
        previous = (self.lr, self.betas, self.eps, self.weight_decay)
        self.lr, self.betas, self.eps = hyper["lr"], tuple(hyper["betas"]), hyper["eps"]
        self.weight_decay = hyper["weight_decay"]
        try:
            self._check_hyper()
        except ValueError:
            self.lr, self.betas, self.eps, self.weight_decay = previous
            raise
        for name in self.params:
            xp = get_xp(self.m[name])
            self.m[name][...] = xp.asarray(state["m"][name])
            self.v[name][...] = xp.asarray(state["v"][name])
        self.step_count = step


def clip_grad_norm(grads: Mapping[str, object], max_norm: float) -> float:
    """Scale all gradients in place so their global L2 norm is at most ``max_norm``.

    ``norm = sqrt(sum over every gradient of sum(g^2))``; if it exceeds
    ``max_norm`` every gradient is multiplied by ``max_norm / norm``.
    Returns the norm before clipping, as a Python float.
    """
    if not is_real(max_norm) or not max_norm > 0:
        raise ValueError(f"max_norm must be a number > 0, got {max_norm!r}")
    squares = 0.0
    for g in grads.values():
        flat = g.reshape(-1)
        squares += float(get_xp(g).dot(flat, flat))
    norm = math.sqrt(squares)
    if norm > max_norm:
        scale = float(max_norm) / norm
        for g in grads.values():
            g *= scale
    return norm


def warmup_cosine_lr(step: int, *, max_lr: float, min_lr: float, warmup_steps: int, total_steps: int) -> float:
    """Linear warmup to ``max_lr``, then cosine decay to ``min_lr`` at ``total_steps``.

    ``step < warmup_steps``:  ``max_lr * (step + 1) / warmup_steps``
    otherwise, with ``r = (step - warmup_steps) / (total_steps - warmup_steps)``
    clipped to [0, 1]:        ``min_lr + (max_lr - min_lr) * (1 + cos(pi r)) / 2``

    Example (max 1, min 0, warmup 2, total 6): steps 0..6 -> 0.5, 1, 1, 0.854, 0.5, 0.146, 0.
    """
    for name, value in (("step", step), ("warmup_steps", warmup_steps), ("total_steps", total_steps)):
        check_int_value(value, name, minimum=0)
    if not warmup_steps <= total_steps:
        raise ValueError(f"warmup_steps ({warmup_steps}) must be <= total_steps ({total_steps})")
    if not (is_real(max_lr) and is_real(min_lr) and 0 <= min_lr <= max_lr):
        raise ValueError(f"need 0 <= min_lr <= max_lr, got min_lr={min_lr!r}, max_lr={max_lr!r}")
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if total_steps == warmup_steps:
        return float(min_lr)
    ratio = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * ratio))
