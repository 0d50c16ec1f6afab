"""GPT: a decoder-only transformer, its forward pass and its backward pass, by hand.

The network (pre-norm blocks, GPT-2 style), on token ids ``(B,T)``, with the
parameters by name::

    x = token_embedding[ids] * (sqrt(C) if scale_embeddings) + position_embedding[:T]   (B,T,C)
    x = Drop(x)
    for each layer i:  x = x + Drop(attn(pre_attn_norm(x)))          layers.{i}.*, blocks.py
                       x = x + Drop(mlp(pre_mlp_norm(x)))
    h = final_norm(x)
    logits = h @ unembedding^T      unembedding = token_embedding (tied) or lm_head.weight    (B,T,V)
    loss = mean cross-entropy(logits, targets) over targets != -1                          unembedding.py

``forward`` and ``backward`` below are mirror images: ``backward`` walks the
same lines bottom-up, each gradient step reversing the forward line it names.
``forward`` (training and evaluation) and ``logits`` (inference, with or
without a KV cache) walk the layers through one loop, ``_blocks``. With tied
weights the token table gets one gradient, the visible sum of its input-side
(scatter-add) and output-side (``dlogits^T h``) parts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from ..backend import array_module, get_xp, resolve_dtype
from ..checks import check_bool, check_int, check_positive_int
from ..ops.embedding import embedding_backward, embedding_forward
from ..ops.layernorm import layer_norm_backward, layer_norm_forward
from .blocks import BlockCache, block_backward, block_forward, dropout_if, dropout_if_backward, present_grads
from .config import GPTConfig
from .kv_cache import KVCache
from .positions import sinusoidal_positions
from .unembedding import unembedding_loss_backward, unembedding_loss_forward

INIT_STD = 0.02
IGNORE_INDEX = -1


def parameter_shapes(config: GPTConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter's name and shape, in a fixed order (the names the README's map lists)."""
    V, C, F = config.vocab_size, config.d_model, config.d_ff
    shapes = {"token_embedding": (V, C)}
    if config.position == "learned":
        shapes["position_embedding"] = (config.max_seq_len, C)
    linears = {"attn.qkv_proj": (C, 3 * C), "attn.out_proj": (C, C), "mlp.up_proj": (C, F)}
    if config.gated:
        linears["mlp.gate_proj"] = (C, F)
    linears["mlp.down_proj"] = (F, C)
    for i in range(config.num_layers):
        shapes.update(_norm_shapes(f"layers.{i}.pre_attn_norm", C, config.use_bias))
        for name, shape in linears.items():
            if name == "mlp.up_proj":
                shapes.update(_norm_shapes(f"layers.{i}.pre_mlp_norm", C, config.use_bias))
            shapes[f"layers.{i}.{name}.weight"] = shape
            if config.use_bias:
                shapes[f"layers.{i}.{name}.bias"] = (shape[1],)
    shapes.update(_norm_shapes("final_norm", C, config.use_bias))
    if not config.tie_weights:
        shapes["lm_head.weight"] = (V, C)
    return shapes


def _norm_shapes(prefix: str, C: int, use_bias: bool) -> dict[str, tuple[int]]:
    return {f"{prefix}.weight": (C,), **({f"{prefix}.bias": (C,)} if use_bias else {})}


def init_value(name: str, shape: tuple[int, ...], config: GPTConfig, rng: np.random.Generator):
    """GPT-2 init: normal(0, 0.02) matrices, residual outputs scaled by ``1/sqrt(2 L)``,
    zero biases, unit norm weights."""
    if name.endswith("norm.weight"):
        return np.ones(shape)
    if name.endswith(".bias"):
        return np.zeros(shape)
    std = INIT_STD
    if name.endswith(("attn.out_proj.weight", "mlp.down_proj.weight")):
        std /= math.sqrt(2 * config.num_layers)
    return rng.normal(0.0, std, size=shape)


class ModelCache(NamedTuple):
    """What ``backward`` needs: the op caches of every stage, in forward order."""

    ids_shape: tuple
    embedding: object
    embedding_dropout: object
    blocks: list[BlockCache]  # per layer: BlockCache(attention, mlp)
    final_norm: object
    loss: object


class GPT:
    """``GPT(config, seed=0, dtype="float32")``: parameters and the hand-written passes."""

    def __init__(self, config: GPTConfig, seed: int = 0, dtype="float32"):
        if not isinstance(config, GPTConfig):
            raise TypeError(f"config must be a GPTConfig, got {type(config).__name__}")
        self.config = config
        self.dtype = resolve_dtype(dtype)
        xp = array_module()
        rng = np.random.default_rng(seed)  # NumPy on every backend: same seed, same model
        self.params = {
            name: xp.asarray(init_value(name, shape, config, rng), dtype=self.dtype)
            for name, shape in parameter_shapes(config).items()
        }
        self.sinusoidal_table = None
        if config.position == "sinusoidal":
            table = sinusoidal_positions(config.max_seq_len, config.d_model, self.dtype)
            self.sinusoidal_table = xp.asarray(table)  # (T_max, C), fixed, not a parameter
        self.layers = [LayerParams(self.params, f"layers.{i}.") for i in range(config.num_layers)]

    def num_params(self) -> int:
        """Number of trainable scalars (a tied table counts once)."""
        return sum(int(p.size) for p in self.params.values())

    def _unembedding(self):
        return self.params["token_embedding" if self.config.tie_weights else "lm_head.weight"]

    # ------------------------------------------------------------------ forward

    def forward(self, token_ids, targets, training: bool = True, rng=None):
        """``(loss, cache)``: the mean cross-entropy of predicting ``targets (B,T)`` from ``token_ids (B,T)``.

        Dropout is active when ``training`` and ``drop_prob > 0``; it then
        draws its masks from ``rng`` (a backend generator), which is required.
        """
        self._check_ids(token_ids, "token_ids")
        self._check_targets(targets, token_ids.shape)
        rng = self._dropout_rng(training, rng)
        p, config = self.params, self.config
        x, embedding_cache = self._embed(token_ids, start=0)  # (B,T) -> (B,T,C)
        x, embedding_dropout = dropout_if(x, config, rng)
        x, blocks = self._blocks(x, rng, training)  # (B,T,C)
        h, final_norm_cache = layer_norm_forward(x, p["final_norm.weight"], p.get("final_norm.bias"), eps=config.ln_eps)
        loss, loss_cache = unembedding_loss_forward(
            h, self._unembedding(), targets, IGNORE_INDEX, with_gradients=training
        )  # (B,T,C) -> ()
        cache = ModelCache(
            tuple(token_ids.shape), embedding_cache, embedding_dropout, blocks, final_norm_cache, loss_cache
        )
        return loss, cache

    # ----------------------------------------------------------------- backward

    def backward(self, cache: ModelCache, record=None) -> dict:
        """Gradients of the loss for every parameter: same names, shapes and dtype as ``params``.

        ``record(stage, grad, params)``, when given, is called with each upstream gradient in the
        order the backward makes them, and the parameter gradients (by name) that step produced;
        ``numforge trace --backward`` shows them. It changes nothing else (see ``blocks.py``).
        """
        config = self.config
        xp = get_xp(*self.params.values())
        grads = {}
        # forward: loss = cross_entropy(h @ unembedding^T, targets)
        dloss = xp.ones((), dtype=self.dtype)
        dh, dunembedding = unembedding_loss_backward(dloss, cache.loss)
        if record is not None:
            record("loss", dloss, {})
            unembedding = "token_embedding (output side: dlogits^T h)" if config.tie_weights else "lm_head.weight"
            record("final norm output h", dh, {unembedding: dunembedding})
        # forward: h = final_norm(x)
        dx, grads["final_norm.weight"], grads["final_norm.bias"] = layer_norm_backward(dh, cache.final_norm)
        if record is not None:
            record("residual after the last layer", dx, present_grads(grads, "final_norm."))
        # forward: x, blocks = self._blocks(x), layer by layer
        for i in reversed(range(config.num_layers)):
            layer_record = None if record is None else _layer_recorder(record, i)
            dx, layer_grads = block_backward(dx, cache.blocks[i], config, layer_record)
            grads.update({f"layers.{i}.{name}": g for name, g in layer_grads.items()})
        # forward: x = Drop(x)
        dx = dropout_if_backward(dx, cache.embedding_dropout)
        # forward: x = token_embedding[ids] * scale + position_embedding[:T]
        dtoken_embedding, dposition_embedding = self._embed_backward(dx, cache.embedding)
        if config.tie_weights:
            grads["token_embedding"] = dtoken_embedding + dunembedding  # input side + output side
        else:
            grads["token_embedding"] = dtoken_embedding
            grads["lm_head.weight"] = dunembedding
        if dposition_embedding is not None:
            grads["position_embedding"] = dposition_embedding
        if record is not None:
            parts = {"token_embedding (input side: scatter-add)": dtoken_embedding}
            if config.tie_weights:
                parts["token_embedding (input side + output side)"] = grads["token_embedding"]
            if dposition_embedding is not None:
                parts["position_embedding (summed over the batch)"] = dposition_embedding
            record("embedding sum", dx, parts)
        return {name: grads[name] for name in self.params}  # params' order; drops absent biases

    def _blocks(self, x, rng, training: bool, kv_cache: KVCache | None = None, keep_caches: bool = True):
        """Every layer in turn on ``x (B,T,C)``: ``(x, [BlockCache per layer])``.

        Without ``keep_caches`` (inference) each layer's cache is dropped as soon as the
        next layer starts, so memory does not grow with the number of layers; the list is empty.
        """
        caches = []
        for i, layer in enumerate(self.layers):
            x, block_cache = block_forward(x, layer, self.config, rng, training, kv_cache, i)  # (B,T,C)
            if keep_caches:
                caches.append(block_cache)
        return x, caches

    # -------------------------------------------------------------- embeddings

    def _embed(self, token_ids, start: int):
        """``token_embedding[ids] * s + positions[start:start+T]``, ``(B,T) -> (B,T,C)``."""
        T = token_ids.shape[1]
        tokens, embedding_cache = embedding_forward(token_ids, self.params["token_embedding"])  # (B,T) -> (B,T,C)
        if self.config.scale_embeddings:
            tokens = tokens * math.sqrt(self.config.d_model)
        if self.config.position == "learned":
            positions = self.params["position_embedding"][start : start + T]  # (T,C)
        else:
            positions = self.sinusoidal_table[start : start + T]  # (T,C)
        return tokens + positions, embedding_cache  # (B,T,C) + (T,C) -> (B,T,C)

    def _embed_backward(self, dx, embedding_cache):
        """``(dtoken_embedding, dposition_embedding or None)`` from ``dx (B,T,C)``."""
        dtokens = dx * math.sqrt(self.config.d_model) if self.config.scale_embeddings else dx
        dtoken_embedding = embedding_backward(dtokens, embedding_cache)  # (B,T,C) -> (V,C), scatter-add
        if self.config.position != "learned":
            return dtoken_embedding, None
        T = dx.shape[1]
        dposition_embedding = get_xp(dx).zeros_like(self.params["position_embedding"])  # (T_max,C)
        dposition_embedding[:T] = dx.sum(axis=0)  # (B,T,C) -> (T,C): every row used pos[t]
        return dtoken_embedding, dposition_embedding

    # ---------------------------------------------------------------- inference

    def logits(self, token_ids, last_only: bool = False, kv_cache: KVCache | None = None):
        """Next-token logits, ``(B,T,V)`` or with ``last_only`` ``(B,V)``; no dropout.

        With a ``kv_cache`` (from ``new_kv_cache``), ``token_ids`` are only the
        new tokens, at positions ``kv_cache.length, kv_cache.length + 1, ...``;
        their keys and values are appended to the cache.
        """
        self._check_ids(token_ids, "token_ids")
        start = 0 if kv_cache is None else self._check_kv_cache(kv_cache, token_ids.shape)
        p, config = self.params, self.config
        x, _ = self._embed(token_ids, start)  # (B,T) -> (B,T,C)
        x, _ = self._blocks(x, None, training=False, kv_cache=kv_cache, keep_caches=False)  # (B,T,C)
        if kv_cache is not None:
            kv_cache.advance(token_ids.shape[1])
        if last_only:
            x = x[:, -1]  # (B,T,C) -> (B,C)
        h, _ = layer_norm_forward(x, p["final_norm.weight"], p.get("final_norm.bias"), eps=config.ln_eps)
        return h @ self._unembedding().T  # (B,[T,]C) @ (C,V) -> (B,[T,]V)

    def new_kv_cache(self, batch_size: int) -> KVCache:
        """An empty cache of keys and values for ``batch_size`` sequences of up to ``max_seq_len``."""
        check_positive_int(batch_size, "batch_size")
        return KVCache(get_xp(*self.params.values()), batch_size, self.config, self.dtype)

    # -------------------------------------------------------------- parameters

    def load_params(self, params: dict) -> None:
        """Copy ``params`` (name -> array) into the model's arrays, which stay the same objects
        (so an optimizer built on ``model.params`` keeps working)."""
        if not isinstance(params, dict):
            raise TypeError(f"params must be a dict of name -> array, got {type(params).__name__}")
        missing, extra = sorted(set(self.params) - set(params)), sorted(set(params) - set(self.params))
        if missing or extra:
            raise ValueError(f"params names differ from the model's: missing {missing}, extra {extra}")
        for name, target in self.params.items():
            value = params[name]
            shape, dtype = tuple(getattr(value, "shape", ())), getattr(value, "dtype", type(value).__name__)
            if shape != tuple(target.shape) or dtype != target.dtype:
                raise ValueError(f"params[{name!r}] is {dtype}{shape}, expected {target.dtype}{tuple(target.shape)}")
        xp = get_xp(*self.params.values())
        for name, target in self.params.items():
            target[...] = xp.asarray(params[name])

    # -------------------------------------------------------------- validation

    # Shapes are checked here; the values are checked once, by the ops that use them: token ids by the
    # embedding (in [0, V)), targets by the loss (in [0, V) or IGNORE_INDEX).

    def _check_ids(self, ids, name: str) -> None:
        check_int(ids, name, ndim=2)
        B, T = ids.shape
        if B < 1 or T < 1:
            raise ValueError(f"{name} must be a non-empty (B,T) array, got shape {tuple(ids.shape)}")
        if T > self.config.max_seq_len:
            raise ValueError(f"{name} has sequence length {T} > max_seq_len {self.config.max_seq_len}")

    def _check_targets(self, targets, ids_shape) -> None:
        check_int(targets, "targets", ndim=2)
        if tuple(targets.shape) != tuple(ids_shape):
            raise ValueError(f"targets must have the shape of token_ids {tuple(ids_shape)}, got {tuple(targets.shape)}")

    def _check_kv_cache(self, kv_cache, ids_shape) -> int:
        if not isinstance(kv_cache, KVCache):
            raise TypeError(f"kv_cache must come from new_kv_cache, got {type(kv_cache).__name__}")
        if ids_shape[0] != kv_cache.batch_size:
            raise ValueError(f"token_ids batch {ids_shape[0]} != kv_cache batch {kv_cache.batch_size}")
        if kv_cache.length + ids_shape[1] > self.config.max_seq_len:
            raise ValueError(
                f"kv_cache holds {kv_cache.length} positions; {ids_shape[1]} more would "
                f"exceed max_seq_len {self.config.max_seq_len}"
            )
        return kv_cache.length

    def _dropout_rng(self, training: bool, rng):
        """The generator to draw dropout masks from, or None when dropout is off."""
        check_bool(training, "training")
        if not (training and self.config.drop_prob > 0):
            return None
        if rng is None:
            raise ValueError(
                f"drop_prob={self.config.drop_prob} with training=True needs rng, "
                "a generator (numforge.backend.default_rng(seed))"
            )
        return rng


def _layer_recorder(record, layer: int):
    """``record`` for block ``layer``: stages named ``"layer i ..."``, parameters by their full names."""

    def layer_record(stage: str, grad, params: dict) -> None:
        record(f"layer {layer} {stage}", grad, {f"layers.{layer}.{name}": g for name, g in params.items()})

    return layer_record


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
