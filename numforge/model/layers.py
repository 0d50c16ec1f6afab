"""The pieces every branch calls with a layer's parameters by name: a norm, a linear layer, dropout.

``p`` is a layer's parameters by short name (``LayerParams``, or the whole
``params`` dict for the final norm); ``name`` the layer inside it, as
``names.py`` declares it (``PRE_ATTN_NORM``, ``QKV_PROJ``). An absent parameter (a bias under
``use_bias=False``, a norm without weight) reads as None and is passed as
None. Each backward returns ``(dx, grads)``, ``grads`` keyed ``name.weight``,
``name.bias`` for the parameters the layer has.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..ops.dropout import dropout_backward, dropout_forward
from ..ops.linear import linear_backward, linear_forward
from ..ops.norms import NORMS


def norm_forward(x, p, name: str, config):
    """``config.norm`` over the last axis of ``x`` with the parameters ``p[name.weight]``, ``p[name.bias]``, ..."""
    norm = NORMS[config.norm]
    return norm.forward(x, *(p.get(f"{name}.{param}") for param in norm.parameters), eps=config.norm_eps)


def norm_backward(dy, cache, name: str, config):
    """``(dx, {name.weight: dweight, ...})``: the norm's backward, its parameter gradients by name."""
    norm = NORMS[config.norm]
    dx, *dparams = norm.backward(dy, cache)
    return dx, {f"{name}.{param}": g for param, g in zip(norm.parameters, dparams) if g is not None}


def linear_layer_forward(x, p, name: str):
    """``y = x W + b`` with ``W = p[name.weight]`` and ``b = p[name.bias]`` (absent: no bias)."""
    return linear_forward(x, p[f"{name}.weight"], p.get(f"{name}.bias"))


def linear_layer_backward(dy, cache, name: str):
    """``(dx, {name.weight: dW, name.bias: db})``: ``dx = dy W^T``, ``dW = x^T dy``, ``db`` the column sums."""
    dx, dweight, dbias = linear_backward(dy, cache)
    return dx, {f"{name}.weight": dweight, **({} if dbias is None else {f"{name}.bias": dbias})}


def dropout_if(x, config, rng):
    """``dropout(x)`` when ``rng`` is given (dropout active), else ``x`` itself and no cache."""
    if rng is None:
        return x, None
    return dropout_forward(x, config.drop_prob, rng)


def dropout_if_backward(dy, cache):
    return dy if cache is None else dropout_backward(dy, cache)


class LayerParams(Mapping):
    """Layer ``i``'s parameters by short name (``"attn.qkv_proj.weight"``), read through to ``params``.

    A view, not a copy: built once per model, it never goes stale when a
    caller rebinds ``model.params[name]``. An absent name (a bias under
    ``use_bias=False``) reads as ``None`` through ``.get``.
    """

    def __init__(self, params: dict, prefix: str):
        self._params, self._prefix = params, prefix

    def __getitem__(self, name: str):
        return self._params[self._prefix + name]

    def __iter__(self):
        return (name[len(self._prefix) :] for name in self._params if name.startswith(self._prefix))

    def __len__(self) -> int:
        return sum(1 for _ in self)
