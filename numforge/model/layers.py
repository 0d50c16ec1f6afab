"""The pieces every branch calls with a layer's parameters by name: a norm, a linear layer, dropout.

``p`` is a layer's parameters by short name (``LayerParams``, or the whole
``params`` dict for the final norm); ``name`` the layer inside it, as
``names.py`` declares it (``PRE_ATTN_NORM``, ``QKV_PROJ``). An absent parameter (a bias under
``use_bias=False``, a norm without weight) reads as None and is passed as
None. Each backward returns ``(dx, grads)``, ``grads`` keyed ``name.weight``,
``name.bias`` for the parameters the layer has.

With LoRA (``lora.py``, ``p.lora`` set) every base parameter is frozen: a linear layer's backward is
``linear_input_backward`` (``dx = dy W^T``, no ``dW``), and its gradients are its adapters' ``dA, dB``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from ..ops.dropout import dropout_backward, dropout_forward
from ..ops.linear import linear_backward, linear_forward, linear_input_backward
from ..ops.lora import lora_backward, lora_forward
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


class AdaptedLinearCache(NamedTuple):
    base: object  # the frozen layer's LinearCache, without its input x (only a dW would read it)
    adapters: tuple  # (Adapter, LoraCache) per adapter of the layer


def linear_layer_forward(x, p, name: str, rng=None):
    """``y = x W + b`` with ``W = p[name.weight]`` and ``b = p[name.bias]`` (absent: no bias); with LoRA, each
    adapter of the layer adds ``(alpha / r) Drop(x) A B`` to its columns (the dropout drawn from ``rng``)."""
    y, cache = linear_forward(x, p[f"{name}.weight"], p.get(f"{name}.bias"))  # (N,C_in) -> (N,C_out)
    if getattr(p, "lora", None) is None:  # no LoRA (or a plain dict of parameters)
        return y, cache
    adapted = []
    for adapter in p.adapters_of(name):
        update, lora_cache = lora_forward(
            x, p[f"{adapter.name}.a"], p[f"{adapter.name}.b"], scale=p.lora.scale, dropout_p=p.lora.dropout, rng=rng
        )  # (N,C_in) -> (N,stop - start)
        y[:, adapter.start : adapter.stop] += update
        adapted.append((adapter, lora_cache))
    # dx = dy W^T needs W alone: x is not kept alive for the backward (an adapter keeps what it needs of it)
    return y, AdaptedLinearCache(cache._replace(x=None), tuple(adapted))


def linear_layer_backward(dy, cache, name: str):
    """``(dx, {name.weight: dW, name.bias: db})``: ``dx = dy W^T``, ``dW = x^T dy``, ``db`` the column sums; a
    frozen layer (LoRA) ``(dx, {adapter.a: dA, adapter.b: dB, ...})``, ``dx`` the sum of every path's."""
    if not isinstance(cache, AdaptedLinearCache):
        dx, dweight, dbias = linear_backward(dy, cache)
        return dx, {f"{name}.weight": dweight, **({} if dbias is None else {f"{name}.bias": dbias})}
    dx = linear_input_backward(dy, cache.base)  # forward: y = x W + b, W and b frozen: no dW, no db
    grads = {}
    for adapter, lora_cache in cache.adapters:
        # forward: y[:, start:stop] += update
        dx_path, grads[f"{adapter.name}.a"], grads[f"{adapter.name}.b"] = lora_backward(
            dy[:, adapter.start : adapter.stop], lora_cache
        )
        dx += dx_path  # x feeds the frozen layer and every adapter: the paths add
    return dx, grads


def dropout_if(x, config, rng):
    """``dropout(x)`` when ``rng`` is given and ``config.drop_prob > 0``, else ``x`` itself and no cache (an
    ``rng`` for LoRA's dropout alone leaves the model's dropouts off: their backward then copies nothing)."""
    if rng is None or config.drop_prob == 0:
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

    def __init__(self, params: dict, prefix: str, lora=None, adapters: dict | None = None, layout: tuple = ()):
        self._params, self._prefix = params, prefix
        self.lora, self._adapters, self._layout = lora, adapters or {}, layout  # LoRA: its config, values, Adapters
        self._adapter_names = {f"{adapter.name}.{ab}" for adapter in layout for ab in "ab"}

    def adapters_of(self, name: str) -> tuple:
        """The ``lora.Adapter``s on the linear part ``name`` (none without LoRA)."""
        return tuple(adapter for adapter in self._layout if adapter.part == name)

    def __getitem__(self, name: str):
        if name in self._adapter_names:
            return self._adapters[self._prefix + name]
        return self._params[self._prefix + name]

    def __iter__(self):
        return (name[len(self._prefix) :] for name in self._params if name.startswith(self._prefix))

    def __len__(self) -> int:
        return sum(1 for _ in self)
