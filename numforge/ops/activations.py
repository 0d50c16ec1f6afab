"""Elementwise activations: ReLU, ReLU², GELU (tanh or exact erf), SwiGLU and GeGLU; their registry ``ACTIVATIONS``.

Every function keeps its input's shape and dtype: ``(..., F) -> (..., F)``. Each activation is written three
ways: the fast op pair (``*_forward``, ``*_backward``), the textbook formula and its gradient that
``model/reference.py`` uses (``*_textbook``, ``*_textbook_backward``: no in-place step, no saved smooth step),
and the PyTorch twin that the comparisons with autograd use (``*_torch``, on torch tensors; torch is imported
inside it, never here).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

from ..backend import get_xp, overflow_to_inf_allowed
from ..checks import check_float, check_same_dtype
from . import B, F, OpCheck, T, away_from_zero, normal
from ._erf import normal_cdf

GELU_APPROXIMATIONS = ("tanh", "none")
GELU_FORMS = {"tanh": {"approximate": "tanh"}, "exact": {"approximate": "none"}}  # GPT-2's tanh form, the erf one
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_GELU_CUBIC = 0.044715


# ---------------------------------------------------------------- ReLU


class ReluCache(NamedTuple):
    positive: object  # bool (..., F): where x > 0, the only thing the backward needs


def relu_forward(x):
    """y = max(x, 0). Example: relu([-1, 0, 2]) = [0, 0, 2]."""
    check_float(x, "x")
    positive = x > 0
    return x * positive, ReluCache(positive)  # float * bool keeps x's dtype


def relu_backward(dy, cache: ReluCache):
    """dx = dy * [x > 0]  (the derivative at exactly 0 is taken as 0)."""
    return dy * cache.positive  # forward: y = x * [x > 0]


def relu_textbook(x):
    return get_xp(x).maximum(x, 0.0)  # (..., F): max(x, 0)


def relu_textbook_backward(dy, x):
    return (dy * (x > 0),)  # (..., F): relu'(x) = [x > 0]


def relu_torch(x):
    return x.relu()


# ---------------------------------------------------------------- ReLU squared (nanochat's MLP)


class Relu2Cache(NamedTuple):
    relu_x: object  # (..., F): max(x, 0), the only thing the backward needs


def relu2_forward(x):
    """y = relu(x)^2 = max(x, 0)^2. Example: relu2([-1, 0, 3]) = [0, 0, 9]."""
    check_float(x, "x")
    relu_x = x * (x > 0)  # float * bool keeps x's dtype
    return relu_x * relu_x, Relu2Cache(relu_x)


def relu2_backward(dy, cache: Relu2Cache):
    """dx = dy * 2 relu(x)  (continuous at 0, where it is 0)."""
    dx = 2.0 * cache.relu_x  # forward: y = relu(x)^2, so dy/dx = 2 relu(x)
    dx *= dy
    return dx


def relu2_textbook(x):
    return get_xp(x).maximum(x, 0.0) ** 2  # (..., F): max(x, 0)^2


def relu2_textbook_backward(dy, x):
    return (dy * 2.0 * get_xp(x).maximum(x, 0.0),)  # (..., F): (relu(x)^2)' = 2 relu(x)


def relu2_torch(x):
    return x.relu().square()


# ---------------------------------------------------------------- GELU


class GeluCache(NamedTuple):
    x: object
    approximate: str
    smooth_step: object  # sigma(2u) for "tanh", Phi(x) for "none": saved so the backward recomputes neither


def gelu_forward(x, approximate: str = "tanh"):
    """GELU(x) = x * Phi(x), Phi the standard normal CDF.

    approximate="none":  Phi(x) = erfc(-x / sqrt 2) / 2                      (exact)
    approximate="tanh":  Phi(x) ~ (1 + tanh(u)) / 2 = sigma(2u),  u = sqrt(2/pi) (x + 0.044715 x^3)   (GPT-2)

    Both smooth steps are computed so that they keep full relative precision
    in the left tail (``1 + tanh(u)`` or ``1 + erf(.)`` would cancel there),
    down to the subnormal range (``_one_over_one_plus_exp``).
    Example: gelu(0) = 0, gelu(1) = 0.8413447 ("none") and 0.8411920 ("tanh").
    The cache keeps the smooth step: one extra array of x's size spares the
    backward the sigmoid or erfc (exact GELU's backward still needs exp for phi).
    """
    check_float(x, "x")
    if approximate == "tanh":
        minus_2u = x * x  # x^2
        minus_2u *= -2.0 * _SQRT_2_OVER_PI * _GELU_CUBIC
        minus_2u -= 2.0 * _SQRT_2_OVER_PI
        minus_2u *= x  # -2u = -2 sqrt(2/pi) (1 + 0.044715 x^2) x
        smooth_step = _one_over_one_plus_exp(minus_2u)  # s = 1 / (1 + exp(-2u)) = sigma(2u) = (1 + tanh(u)) / 2
    elif approximate == "none":
        smooth_step = normal_cdf(x)  # s = Phi(x)
    else:
        raise ValueError(f"approximate must be one of {GELU_APPROXIMATIONS}, got {approximate!r}")
    return x * smooth_step, GeluCache(x, approximate, smooth_step)  # y = x s


def gelu_backward(dy, cache: GeluCache):
    """dx = dy * GELU'(x).

    "none":  GELU'(x) = Phi(x) + x phi(x),   phi(x) = exp(-x^2/2) / sqrt(2 pi)
    "tanh":  GELU'(x) = s + x s (1 - s) 2 du/dx,   s = sigma(2u),  du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
    """
    xp = get_xp(dy, cache.x)
    x, s = cache.x, cache.smooth_step
    if cache.approximate == "tanh":
        # forward: y = x sigma(2u), and sigma' = sigma (1 - sigma), so dy/dx = s + x s (1 - s) 2 du/dx
        grad = x * x
        grad *= 2.0 * _SQRT_2_OVER_PI * 3.0 * _GELU_CUBIC
        grad += 2.0 * _SQRT_2_OVER_PI  # 2 du/dx = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2)
        grad *= x
        grad *= 1.0 - s
        grad += 1.0
        grad *= s
    else:
        # forward: y = x Phi(x), so dy/dx = Phi(x) + x phi(x)
        grad = x * x
        grad *= -0.5
        xp.exp(grad, out=grad)
        grad *= _INV_SQRT_2PI  # phi(x)
        grad *= x
        grad += s
    grad *= dy
    return grad


def gelu_textbook(x, approximate: str = "tanh"):
    """``x Phi(x)``, or GPT-2's ``x (1 + tanh(u)) / 2`` with ``u = sqrt(2/pi) (x + 0.044715 x^3)``."""
    if approximate == "none":
        return x * normal_cdf(x)  # (..., F)
    u = _SQRT_2_OVER_PI * (x + _GELU_CUBIC * x**3)  # (..., F)
    return 0.5 * x * (1.0 + get_xp(x).tanh(u))  # (..., F)


def gelu_textbook_backward(dy, x, approximate: str = "tanh"):
    """``(dx,)``: ``(x Phi(x))' = Phi(x) + x phi(x)``; the tanh form by the product and chain rules."""
    xp = get_xp(x)
    if approximate == "none":
        phi = xp.exp(-0.5 * x**2) * _INV_SQRT_2PI  # (..., F): the normal density
        return (dy * (normal_cdf(x) + x * phi),)  # (..., F)
    u = _SQRT_2_OVER_PI * (x + _GELU_CUBIC * x**3)  # (..., F)
    du = _SQRT_2_OVER_PI * (1.0 + 3.0 * _GELU_CUBIC * x**2)  # (..., F): du/dx
    tanh_u = xp.tanh(u)  # (..., F)
    return (dy * (0.5 * (1.0 + tanh_u) + 0.5 * x * (1.0 - tanh_u**2) * du),)  # (..., F)


def gelu_torch(x, approximate: str = "tanh"):
    import torch.nn.functional as functional

    return functional.gelu(x, approximate=approximate)


def _one_over_one_plus_exp(t):
    """``1 / (1 + exp(t)) = sigma(-t)``, computed in place in ``t``; accurate in both tails.

    For t >> 0 the result is ~exp(-t) with every digit kept (no ``1 - ...``
    cancels), down to 1 / (largest float): 2.9e-39 in float32 (t = 88.7),
    5.6e-309 in float64 (t = 709.8), both in the subnormal range where
    a number has few digits left anyway. Past that exp(t) overflows to inf
    and the result is 0: that overflow is intended and silent. (GELU and
    SiLU multiply it by x, so there a few values of order 1e-37 or 1e-306
    become 0.) For t << 0 it is 1 - exp(t), as rounded. (The shortcut (1 - tanh(t/2)) / 2 cancels to ~1e-16 absolute
    error for t >> 0, which no finite-difference check of a far-tail gradient
    survives.) Three passes and an exp: fewest passes matter, each NumPy call
    is one.
    """
    xp = get_xp(t)
    with overflow_to_inf_allowed():
        xp.exp(t, out=t)
    t += 1.0
    return xp.divide(1.0, t, out=t)


# ---------------------------------------------------------------- SwiGLU


class SwigluCache(NamedTuple):
    gate: object
    up: object
    sigmoid_gate: object  # sigma(gate), computed once in the forward


def swiglu_forward(gate, up):
    """y = silu(gate) * up,  silu(g) = g * sigma(g). gate, up: (..., F) -> y: (..., F).

    Example: swiglu(0, u) = 0; swiglu(g, 1) -> g as g -> +inf and -> 0 as g -> -inf.
    """
    check_float(gate, "gate")
    check_float(up, "up")
    if gate.shape != up.shape:
        raise ValueError(f"gate and up must have one shape, got {tuple(gate.shape)} and {tuple(up.shape)}")
    check_same_dtype(up, "up", gate, "gate")
    sigmoid_gate = _one_over_one_plus_exp(-gate)  # sigma(g) = 1 / (1 + exp(-g))
    y = gate * sigmoid_gate
    y *= up
    return y, SwigluCache(gate, up, sigmoid_gate)


def swiglu_backward(dy, cache: SwigluCache):
    """dgate = dy * up * sigma(g) (1 + g (1 - sigma(g))),   dup = dy * silu(g)."""
    gate, up, s = cache.gate, cache.up, cache.sigmoid_gate
    # forward: y = g sigma(g) up, so d(g sigma(g))/dg = sigma + g sigma (1 - sigma)
    dsilu = 1.0 - s
    dsilu *= gate
    dsilu += 1.0
    dsilu *= s
    dgate = dsilu
    dgate *= up
    dgate *= dy
    dup = gate * s  # silu(g)
    dup *= dy
    return dgate, dup


def swiglu_textbook(gate, up):
    return gate / (1.0 + get_xp(gate).exp(-gate)) * up  # (..., F): silu(g) up, silu(g) = g sigma(g)


def swiglu_textbook_backward(dy, gate, up):
    """``(dgate, dup)``: ``d(g sigma(g))/dg = sigma + g sigma (1 - sigma)``, ``d/dup = silu(g)``."""
    sigma = 1.0 / (1.0 + get_xp(gate).exp(-gate))  # (..., F)
    dgate = dy * up * sigma * (1.0 + gate * (1.0 - sigma))  # (..., F)
    return dgate, dy * gate * sigma  # (..., F), (..., F)


def swiglu_torch(gate, up):
    import torch.nn.functional as functional

    return functional.silu(gate) * up


# ---------------------------------------------------------------- GeGLU (Gemma's gated MLP)


class GegluCache(NamedTuple):
    up: object
    gelu: object  # the tanh GELU's own cache of the gate (its input and smooth step)


def geglu_forward(gate, up):
    """y = gelu_tanh(gate) * up (GELU's tanh form, ``gelu_forward``). gate, up: (..., F) -> y: (..., F).

    Gemma's MLP: transformers' ``gelu_pytorch_tanh`` of ``gate_proj(x)`` times ``up_proj(x)``.
    Example: geglu(0, u) = 0; geglu(g, 1) -> g as g -> +inf and -> 0 as g -> -inf.
    """
    check_float(gate, "gate")
    check_float(up, "up")
    if gate.shape != up.shape:
        raise ValueError(f"gate and up must have one shape, got {tuple(gate.shape)} and {tuple(up.shape)}")
    check_same_dtype(up, "up", gate, "gate")
    activated, gelu_cache = gelu_forward(gate, "tanh")  # (..., F)
    activated *= up
    return activated, GegluCache(up, gelu_cache)


def geglu_backward(dy, cache: GegluCache):
    """dgate = dy * up * gelu_tanh'(g),   dup = dy * gelu_tanh(g)."""
    # forward: y = gelu(g) up, so dgate = gelu'(g) (dy up) and dup = gelu(g) dy
    dgate = gelu_backward(dy * cache.up, cache.gelu)
    dup = cache.gelu.x * cache.gelu.smooth_step  # gelu(g) = g s
    dup *= dy
    return dgate, dup


def geglu_textbook(gate, up):
    return gelu_textbook(gate, "tanh") * up  # (..., F): gelu_tanh(g) u


def geglu_textbook_backward(dy, gate, up):
    """``(dgate, dup)``: ``dgate = dy u gelu'(g)``, ``dup = dy gelu(g)``."""
    (dgate,) = gelu_textbook_backward(dy * up, gate, "tanh")  # (..., F)
    return dgate, dy * gelu_textbook(gate, "tanh")  # (..., F), (..., F)


def geglu_torch(gate, up):
    import torch.nn.functional as functional

    return functional.gelu(gate, approximate="tanh") * up


# ---------------------------------------------------------------- the registry


class Activation(NamedTuple):
    """One feed-forward activation: everything the model, the textbook model, the torch twin and the gradient
    checks need of it.

    ``inputs`` names the pre-activations it takes, in its forward's order: ``("up",)`` or, gated,
    ``("gate", "up")``; the model feeds input ``name`` from the projection ``mlp.{name}_proj`` of the
    normalized ``h``. ``options`` names the keyword options every form of it takes (GELU's ``approximate``)::

        y, cache = forward(*inputs, **options)       dinputs = gradients(dy, cache)        the op pair
        y = textbook(*inputs, **options)             dinputs = textbook_backward(dy, *inputs, **options)
        y = torch(*inputs, **options)                on torch tensors, differentiated by autograd

    ``dinputs`` is a tuple aligned with ``inputs``, also for one input. ``checks``: the float64 gradient
    checks of the op pair that ``numforge gradcheck`` runs. ``forms`` names each form of its options
    (GELU's ``"exact"``: ``{"approximate": "none"}``): ``numforge params`` says it, and the whole-model
    gradient checks check each form but the config's default one (``model[gelu_exact]``). ``hf_names``:
    transformers' names for it (its ``ACT2FN`` keys), each with the options it means; exporting writes the
    first that fits. A gated activation's name is its gate's function's, as transformers' gated MLPs compute
    ``act(gate) * up``. Adding an activation is its functions in this file (or its own op file) and one
    entry here.
    """

    inputs: tuple[str, ...]
    equation: str  # its formula in the letters of its inputs (u, g), as the study tools show it
    forward: Callable
    backward: Callable  # the op's own: one gradient per input, a single array for one (the op contract)
    textbook: Callable
    textbook_backward: Callable
    torch: Callable
    checks: tuple[OpCheck, ...]
    title: str  # its name as the study tools write it in a stage's name ("GELU", "SwiGLU")
    options: tuple[str, ...] = ()
    forms: dict[str, dict] = {}  # form name -> its options
    hf_names: dict[str, dict] = {}  # a name transformers gives it -> the options it means

    def gradients(self, dy, cache) -> tuple:
        """The op's backward, as a tuple aligned with ``inputs``."""
        grads = self.backward(dy, cache)
        return grads if isinstance(grads, tuple) else (grads,)


def _gelu_check(approximate: str) -> OpCheck:
    inputs = lambda: {"x": normal(B, T, F, scale=2.0)}
    return OpCheck(f"gelu[{approximate}]", inputs, lambda: {"approximate": approximate})


ACTIVATIONS = {  # name -> Activation: the one list the config, the model, the checks and the benches read
    "gelu": Activation(
        ("up",), "u Phi(u)", gelu_forward, gelu_backward,
        textbook=gelu_textbook, textbook_backward=gelu_textbook_backward, torch=gelu_torch,
        checks=tuple(_gelu_check(approximate) for approximate in GELU_APPROXIMATIONS),
        title="GELU",
        options=("approximate",), forms=GELU_FORMS,
        hf_names={"gelu_new": GELU_FORMS["tanh"], "gelu_pytorch_tanh": GELU_FORMS["tanh"],
                  "gelu_fast": GELU_FORMS["tanh"], "gelu": GELU_FORMS["exact"]},  # gelu_fast: other constants
    ),
    "swiglu": Activation(
        ("gate", "up"), "silu(g) * u", swiglu_forward, swiglu_backward,
        textbook=swiglu_textbook, textbook_backward=swiglu_textbook_backward, torch=swiglu_torch,
        checks=(OpCheck("swiglu", lambda: {"gate": normal(B, T, F), "up": normal(B, T, F, seed=1)}),),
        title="SwiGLU",
        hf_names={"silu": {}},
    ),
    "geglu": Activation(
        ("gate", "up"), "gelu_tanh(g) * u", geglu_forward, geglu_backward,
        textbook=geglu_textbook, textbook_backward=geglu_textbook_backward, torch=geglu_torch,
        checks=(OpCheck("geglu", lambda: {"gate": normal(B, T, F, scale=2.0), "up": normal(B, T, F, seed=1)}),),
        title="GeGLU",
        hf_names={"gelu_pytorch_tanh": {}, "gelu_new": {}},  # Gemma's hidden_activation
    ),
    "relu": Activation(
        ("up",), "max(u, 0)", relu_forward, relu_backward,
        textbook=relu_textbook, textbook_backward=relu_textbook_backward, torch=relu_torch,
        checks=(OpCheck("relu", lambda: {"x": away_from_zero(B, T, F)}),),
        title="ReLU",
        hf_names={"relu": {}},
    ),
    "relu2": Activation(
        ("up",), "max(u, 0)^2", relu2_forward, relu2_backward,
        textbook=relu2_textbook, textbook_backward=relu2_textbook_backward, torch=relu2_torch,
        checks=(OpCheck("relu2", lambda: {"x": away_from_zero(B, T, F)}),),
        title="ReLU squared",
        hf_names={"relu2": {}},
    ),
}  # fmt: skip
