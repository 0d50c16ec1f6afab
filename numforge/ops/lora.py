"""LoRA: a trained low-rank update beside a frozen linear layer, ``update = (alpha / r) Drop(x) A B``.

Shapes: x (..., C_in), lora_a (C_in, r), lora_b (r, C_out) -> update (..., C_out). The adapted layer is
``y = x W + b + update`` with ``W`` and ``b`` frozen: their forward is ``ops.linear.linear_forward`` and
their backward ``ops.linear.linear_input_backward`` (``dx`` alone: no ``dW`` product is ever made).

A and B are stored input-major, as the linear layer's weight (``y = x W``); PEFT stores their
transposes, ``lora_A.weight (r, C_in) = A^T`` and ``lora_B.weight (C_out, r) = B^T``, and computes the
same ``scale * lora_B(lora_A(dropout(x)))``. ``scale`` is ``alpha / r`` (PEFT's ``lora_alpha / r``).
Dropout acts on the adapter's input only: the frozen path sees ``x`` itself.
"""

from __future__ import annotations

from typing import NamedTuple

from ..backend import get_xp
from ..checks import check_float, check_number, check_same_dtype
from .dropout import DropoutCache, dropout_backward, dropout_forward


class LoraCache(NamedTuple):
    dropped: object  # Drop(x) as (N, C_in) rows (x itself without dropout, by reference): dA = Drop(x)^T du
    scaled_u: object  # (N, r) s Drop(x) A, the rank-r code: dB = (s u)^T dupdate needs it
    lora_a: object  # (C_in, r): ddropped = du A^T
    lora_b: object  # (r, C_out): du = s dupdate B^T
    scale: float
    dropout: DropoutCache
    x_shape: tuple


def _check_adapter(x, lora_a, lora_b, scale) -> None:
    check_float(x, "x")
    check_float(lora_a, "lora_a", ndim=2)
    check_float(lora_b, "lora_b", ndim=2)
    if x.ndim < 1 or x.shape[-1] != lora_a.shape[0] or lora_a.shape[1] != lora_b.shape[0]:
        raise ValueError(
            f"x (..., C_in), lora_a (C_in, r) and lora_b (r, C_out) must chain, got x {tuple(x.shape)}, "
            f"lora_a {tuple(lora_a.shape)} and lora_b {tuple(lora_b.shape)}"
        )
    check_same_dtype(lora_a, "lora_a", x, "x")
    check_same_dtype(lora_b, "lora_b", x, "x")
    check_number(scale, "scale")


def lora_forward(x, lora_a, lora_b, *, scale: float = 1.0, dropout_p: float = 0.0, rng=None):
    """``update = scale Drop(x) A B``, the dropout (probability ``dropout_p``) drawn from ``rng``; none without one.

    Computed as ``(scale Drop(x) A) B``: the scale touches the ``(N, r)`` code, not the ``(N, C_out)`` output.
    Example: x = [[1, 2]], A = [[1], [1]], B = [[1, 0, 2]], scale 0.5 -> update = [[1.5, 0, 3]].
    """
    _check_adapter(x, lora_a, lora_b, scale)
    c_in = lora_a.shape[0]
    rows = x.reshape(-1, c_in)  # (..., C_in) -> (N, C_in)
    if rng is None:
        dropped, drop_cache = rows, DropoutCache(None, 1.0)
    else:
        dropped, drop_cache = dropout_forward(rows, dropout_p, rng)  # (N, C_in)
    scaled_u = get_xp(x).matmul(dropped, lora_a)  # (N, C_in) @ (C_in, r) -> (N, r)
    scaled_u *= scale
    update = scaled_u @ lora_b  # (N, r) @ (r, C_out) -> (N, C_out)
    cache = LoraCache(dropped, scaled_u, lora_a, lora_b, float(scale), drop_cache, tuple(x.shape))
    return update.reshape(*x.shape[:-1], lora_b.shape[1]), cache  # (N, C_out) -> (..., C_out)


def lora_backward(dupdate, cache: LoraCache):
    """``(dx, dlora_a, dlora_b)``, with ``u = Drop(x) A``::

        dB = s u^T dupdate                 (r, C_out)
        du = s dupdate B^T                 (N, r)
        dA = Drop(x)^T du                 (C_in, r)
        dx = Drop'(du A^T)                (N, C_in): the same mask and 1 / (1 - p) as the forward

    ``dx`` is the adapter's share only; the frozen layer adds ``dy W^T`` (``linear_input_backward``).
    """
    xp = get_xp(dupdate, cache.lora_a)
    rows_dy = dupdate.reshape(-1, cache.lora_b.shape[1])  # (..., C_out) -> (N, C_out)
    # forward: update = (s u) B
    dlora_b = xp.matmul(cache.scaled_u.T, rows_dy)  # (r, N) @ (N, C_out) -> (r, C_out)
    du = xp.matmul(rows_dy, cache.lora_b.T)  # (N, C_out) @ (C_out, r) -> (N, r)
    du *= cache.scale  # the s of s u
    # forward: u = Drop(x) A
    dlora_a = xp.matmul(cache.dropped.T, du)  # (C_in, N) @ (N, r) -> (C_in, r)
    ddropped = xp.matmul(du, cache.lora_a.T)  # (N, r) @ (r, C_in) -> (N, C_in)
    # forward: Drop(x) = x * keep / (1 - p)
    dx = ddropped if cache.dropout.keep is None else dropout_backward(ddropped, cache.dropout)
    return dx.reshape(cache.x_shape), dlora_a, dlora_b  # (N, C_in) -> (..., C_in)


# ---------------------------------------------------------------- the textbook formulas and the torch twin


def lora_textbook(x, lora_a, lora_b, scale: float, keep=None, dropout_p: float = 0.0):
    """``update = scale (x * keep / (1 - p)) A B``, written out: the dropout a given mask ``keep`` (None: none)."""
    dropped = x if keep is None else x * keep / (1.0 - dropout_p)
    return scale * (dropped @ lora_a @ lora_b)


def lora_textbook_backward(dupdate, x, lora_a, lora_b, scale: float, keep=None, dropout_p: float = 0.0):
    """``(dx, dA, dB)`` of ``lora_textbook``, each from its definition, one row's outer product at a time."""
    xp = get_xp(dupdate, x)
    mask = 1.0 if keep is None else keep / (1.0 - dropout_p)
    dropped = (x * mask).reshape(-1, x.shape[-1])  # (N, C_in)
    rows_dy = dupdate.reshape(-1, lora_b.shape[1])  # (N, C_out)
    dlora_a, dlora_b = xp.zeros_like(lora_a), xp.zeros_like(lora_b)
    for x_row, dy_row in zip(dropped, rows_dy):  # delta_n = s x_n A B: each row adds its outer products
        dlora_b += scale * xp.outer(x_row @ lora_a, dy_row)  # d/dB of  s (x_n A) B . dy_n
        dlora_a += scale * xp.outer(x_row, lora_b @ dy_row)  # d/dA of  s x_n A (B dy_n)
    dx = scale * (dupdate @ lora_b.T @ lora_a.T) * mask
    return dx, dlora_a, dlora_b


def lora_torch(x, lora_a, lora_b, scale: float, keep=None, dropout_p: float = 0.0):
    """The same ``update`` as PEFT computes it, ``scale * lora_B(lora_A(dropout(x)))`` with torch's linear layers
    of weights ``A^T (r, C_in)`` and ``B^T (C_out, r)``; tensors in, a tensor out, for autograd to differentiate."""
    import torch.nn.functional as F

    dropped = x if keep is None else x * keep / (1.0 - dropout_p)
    return F.linear(F.linear(dropped, lora_a.T), lora_b.T) * scale
