"""GPT: a decoder-only transformer, its forward pass and its backward pass, by hand.

The network (pre-norm blocks), on token ids ``(B,T)``, with the parameters by name::

    x = token_embedding[ids] * (sqrt(C) if scale_embeddings) + positions[:T]           (B,T,C)
        (packed rows, ``segments``: positions[each token's place in its own sequence], packing.py)
    x = Drop(x)
    for each layer i:  x = x + Drop(attn(pre_attn_norm(x)))          layers.{i}.*, blocks.py
                       x = x + Drop(mlp(pre_mlp_norm(x)))
    h = final_norm(x)
    logits = h @ unembedding^T      unembedding = token_embedding (tied) or lm_head.weight    (B,T,V)
             (with logit_softcap c: c tanh(logits / c), Gemma 2)
    loss = mean cross-entropy(logits, targets) over targets != -1                          unembedding.py
           (+ with experts, each layer's auxiliary loss: load balancing and router z-loss)  moe_branch.py

The components are the registries' (``config.norm`` from ``ops.norms.NORMS``,
``config.position`` from ``positions.POSITIONS``, ``config.activation`` from
``ops.activations.ACTIVATIONS``), and this file names none of them: the
position scheme either adds rows to the embeddings (``positions`` above: the
``position_embedding`` parameter, or a fixed table) or rotates q and k inside
every attention layer (RoPE: then nothing is added here). GPT-2 is the
default; ``GPTConfig(**ARCHS["llama"])`` is Llama's RMSNorm, rotary positions,
SwiGLU, no biases and untied head, and ``num_kv_heads``, ``head_dim`` and
``qk_norm`` give Mistral's, Qwen2's and Qwen3's grouped-query attention,
head widths and QK-norm.

``forward`` and ``backward_steps`` below are mirror images: ``backward_steps`` walks
the same lines bottom-up, each gradient step reversing the forward line it names,
and hands out each step's gradients; ``backward`` keeps the parameters' and drops the rest.
``forward`` (training and evaluation) and ``logits`` (inference, with or
without a KV cache) walk the layers through one loop, ``_blocks``. With tied
weights the token table gets one gradient, the visible sum of its input-side
(scatter-add) and output-side (``dlogits^T h``) parts.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..backend import array_module, get_xp, resolve_dtype, scatter_add
from ..checks import check_bool, check_int, check_positive_int
from ..ops.embedding import embedding_backward, embedding_forward
from ..ops.norms import NORMS
from ..ops.softcap import softcap_in_place
from .blocks import (
    BlockCache,
    BlockInput,
    ResidualStep,
    block_backward_steps,
    block_forward,
    recompute_block,
    rng_copy,
)
from .config import GPTConfig
from .kv_cache import KVCache
from .layers import LayerParams, dropout_if, dropout_if_backward, norm_backward, norm_forward
from .lora import LoraConfig, adapter_shapes, adapters, init_adapters, merged_params
from .names import (
    FINAL_NORM,
    LM_HEAD,
    RESIDUAL_OUTPUTS,
    TOKEN_EMBEDDING,
    Experts,
    Linear,
    Norm,
    final_norm,
    layer_layout,
)
from .packing import Packing, packing
from .positions import POSITIONS
from .unembedding import unembedding_loss, unembedding_loss_backward, unembedding_loss_forward

INIT_STD = 0.02
IGNORE_INDEX = -1


def parameter_shapes(config: GPTConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter's name and shape, in a fixed order: the layers' as ``names.layer_layout`` declares them."""
    V, C = config.vocab_size, config.d_model
    shapes = {TOKEN_EMBEDDING: (V, C), **POSITIONS[config.position].parameter_shapes(config)}
    for i in range(config.num_layers):
        for name, part in layer_layout(config).items():
            shapes.update(_part_shapes(f"layers.{i}.{name}", part, config))
    shapes.update(_part_shapes(FINAL_NORM, final_norm(config), config))
    if not config.tie_weights:
        shapes[LM_HEAD] = (V, C)
    return shapes


def _part_shapes(prefix: str, part: Linear | Experts | Norm, config: GPTConfig) -> dict[str, tuple[int, ...]]:
    """A linear layer's ``weight (c_in, c_out)`` and bias ``(c_out,)``; experts' ``weight (count, c_in, c_out)``;
    a norm's ``(width,)`` parameters: those it needs, and of its optional ones the weight when
    ``config.norm_weight`` and the bias when its switch is on."""
    if isinstance(part, Experts):
        return {f"{prefix}.weight": (part.count, part.c_in, part.c_out)}
    has_bias = part.bias_switch is not None and config.has_bias(part.bias_switch)
    if isinstance(part, Linear):
        return {f"{prefix}.weight": (part.c_in, part.c_out), **({f"{prefix}.bias": (part.c_out,)} if has_bias else {})}
    norm = NORMS[config.norm]
    wanted = {"weight": config.norm_weight, "bias": has_bias}
    return {f"{prefix}.{name}": (part.width,) for name in norm.parameters if name not in norm.optional or wanted[name]}


def init_value(name: str, shape: tuple[int, ...], config: GPTConfig, rng: np.random.Generator):
    """GPT-2 init: normal(0, 0.02) matrices, residual outputs scaled by ``1/sqrt(2 L)``,
    zero biases, norm parameters at the norm's own starting values (a weight of 1, a bias of 0)."""
    layer, _, param = name.rpartition(".")
    if layer.endswith("norm"):
        return np.full(shape, NORMS[config.norm].parameters[param])
    if param == "bias":
        return np.zeros(shape)
    std = INIT_STD
    if layer.endswith(RESIDUAL_OUTPUTS):
        std /= math.sqrt(2 * config.num_layers)
    return rng.normal(0.0, std, size=shape)


def check_params(params, expected: dict[str, tuple[tuple, np.dtype]]) -> None:
    """``params`` (name -> array) has exactly the names of ``expected`` (name -> (shape, dtype)), each of its
    shape and dtype; else a ValueError naming the first difference (a TypeError when it is not a dict)."""
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict of name -> array, got {type(params).__name__}")
    missing, extra = sorted(set(expected) - set(params)), sorted(set(params) - set(expected))
    if missing or extra:
        raise ValueError(f"params names differ from the model's: missing {missing}, extra {extra}")
    for name, (shape, dtype) in expected.items():
        value = params[name]
        given, kind = tuple(getattr(value, "shape", ())), getattr(value, "dtype", type(value).__name__)
        if given != tuple(shape) or kind != dtype:
            raise ValueError(f"params[{name!r}] is {kind}{given}, expected {dtype}{tuple(shape)}")


def _plus(loss, aux_loss):
    """``loss + aux_loss``, or ``loss`` itself when the layers have no auxiliary loss (None)."""
    return loss if aux_loss is None else loss + aux_loss


class ModelCache(NamedTuple):
    """What ``backward`` needs: the op caches of every stage, in forward order."""

    ids_shape: tuple
    embedding: object
    embedding_dropout: object
    blocks: list[BlockCache | BlockInput]  # per layer: BlockCache(attention, mlp), or with recompute its input
    final_norm: object
    loss: object
    packing: Packing | None = None  # packed rows: segment ids and positions (packing.py); None: one sequence a row


class HeadBackward(NamedTuple):
    """The loss and the final norm walked back: the first of ``GPT.backward_steps``."""

    dloss: object  # () d loss / d loss = 1
    dh: object  # (B,T,C) the final norm's output
    dunembedding: object  # (V,C) dlogits^T h: lm_head's gradient, or the tied token table's output side
    dx: object  # (B,T,C) the residual after the last layer
    grads: dict  # the final norm's parameters


class LayerBackward(NamedTuple):
    """One branch of layer ``layer`` walked back (``blocks.ResidualStep``); ``grads`` by full name."""

    layer: int
    step: ResidualStep
    grads: dict


class EmbeddingBackward(NamedTuple):
    """The embedding walked back: the last of ``GPT.backward_steps``."""

    dx: object  # (B,T,C) the embedding sum (through its dropout's backward)
    dtoken_embedding: object  # (V,C) the token table's input side: the scatter-add of dx
    position_grads: dict  # the position table's gradient, if it has one: dx summed over the batch
    grads: dict  # token_embedding (both sides when tied), lm_head.weight (untied), the position table


class GPT:
    """``GPT(config, seed=0, dtype="float32", params=None)``: parameters and the hand-written passes.

    ``params`` (name -> array: every name and shape of ``parameter_shapes(config)``, of ``dtype``) are the
    model's values, taken instead of initial ones drawn from ``seed``: a model read from disk spends no
    time on values it would replace (SmolLM2-135M's shape takes 2.9 s to draw on a 2-core AMD EPYC).
    Arrays already C-contiguous on the backend are taken as they are, without a copy.
    """

    def __init__(self, config: GPTConfig, seed: int = 0, dtype="float32", *, params: dict | None = None):
        if not isinstance(config, GPTConfig):
            raise TypeError(f"config must be a GPTConfig, got {type(config).__name__}")
        self.config = config
        self.dtype = resolve_dtype(dtype)
        xp = array_module()
        shapes = parameter_shapes(config)
        if params is None:
            rng = np.random.default_rng(seed)  # NumPy on every backend: same seed, same model
            self.params = {
                name: xp.asarray(init_value(name, shape, config, rng), dtype=self.dtype)
                for name, shape in shapes.items()
            }
        else:
            check_params(params, {name: (shape, self.dtype) for name, shape in shapes.items()})
            self.params = {name: xp.asarray(params[name], order="C") for name in shapes}
        self.positions = POSITIONS[config.position]
        tables = self.positions.tables(config, self.dtype)  # fixed, not parameters: built once, for every length
        self.position_tables = {name: xp.asarray(table) for name, table in tables.items()}
        self.lora: LoraConfig | None = None
        self.adapters: dict = {}
        self.layers = [LayerParams(self.params, f"layers.{i}.") for i in range(config.num_layers)]

    def add_lora(self, lora: LoraConfig, seed: int = 0, values: dict | None = None) -> None:
        """Freeze every parameter and add LoRA adapters (``lora.py``): ``values`` (name -> array, every name and
        shape of ``lora.adapter_shapes``), else PEFT's init drawn from ``seed``. ``trainable`` is then the adapters:
        ``backward`` gives their gradients alone and computes no gradient of a frozen matrix."""
        if not isinstance(lora, LoraConfig):
            raise TypeError(f"lora must be a LoraConfig, got {type(lora).__name__}")
        layout = adapters(self.config, lora)  # a ValueError for a target the model has not
        shapes = adapter_shapes(self.config, lora)
        xp = array_module()
        values = init_adapters(self.config, lora, seed) if values is None else values
        if not isinstance(values, dict):
            raise TypeError(f"values must be a dict of name -> array, got {type(values).__name__}")
        values = {name: xp.asarray(value, dtype=self.dtype) for name, value in values.items()}
        check_params(values, {name: (shape, self.dtype) for name, shape in shapes.items()})
        self.lora, self.adapters = lora, values
        self.layers = [
            LayerParams(self.params, f"layers.{i}.", lora, self.adapters, layout) for i in range(self.config.num_layers)
        ]

    def merged(self) -> GPT:
        """A new model without adapters whose weights hold them: ``W + (alpha / r) A B`` (``lora.merged_params``)."""
        if self.lora is None:
            raise ValueError("this model has no LoRA adapters to merge")
        params = merged_params(self.params, self.adapters, self.config, self.lora)
        return GPT(self.config, dtype=self.dtype, params=params)

    @property
    def trainable(self) -> dict:
        """The parameters training updates: ``params``, or with LoRA the adapters alone (the base frozen)."""
        return self.params if self.lora is None else self.adapters

    def num_params(self) -> int:
        """Number of trainable scalars (a tied table counts once)."""
        return sum(int(p.size) for p in self.params.values())

    def _unembedding(self):
        return self.params[TOKEN_EMBEDDING if self.config.tie_weights else LM_HEAD]

    # ------------------------------------------------------------------ forward

    def forward(
        self,
        token_ids,
        targets,
        *,
        rng=None,
        for_backward: bool = True,
        keep_caches: bool = False,
        recompute=False,
        segments=None,
    ):
        """``(loss, cache)``: the mean cross-entropy of predicting ``targets (B,T)`` from ``token_ids (B,T)``, plus
        with experts the layers' auxiliary losses (load balancing, router z-loss; ``moe_branch.py``), every mode alike.

        Dropout is on when a generator ``rng`` (``numforge.backend.default_rng(seed)``) is given
        and ``drop_prob > 0``: its masks are drawn from ``rng``. ``for_backward`` (the default) keeps
        what ``backward`` needs and what speeds it up (the loss's gradients, fused into its pass;
        the attention's probability tiles). Evaluation passes False and gets ``(loss, None)``: it keeps
        no cache (each layer's is dropped before the next runs), so its memory does not grow with the layers,
        and its loss holds a chunk of rows of logits at a time, never the ``(B,T,V)`` logits.
        ``keep_caches`` (the study tools) keeps every cache without those speed-ups: a backward still runs
        on it, computing the loss's gradients then. ``recompute`` (with ``for_backward``) keeps of each block only
        its input (``blocks.BlockInput``), and ``backward`` runs each block's forward again just before its
        backward: the same gradients bit for bit, the blocks' activations alive one block at a time.
        ``segments (B,T)``: packed rows, each position's sequence (non-decreasing along a row, ``packing.py``):
        no token attends to another sequence's, and positions restart at 0 with each sequence.
        """
        self._check_forward(token_ids, targets, for_backward, keep_caches, recompute)
        keep_caches = keep_caches or for_backward
        packed = packing(segments, token_ids.shape)
        lora_dropout = self.lora is not None and self.lora.dropout > 0
        rng = rng if self.config.drop_prob > 0 or lora_dropout else None
        x, embedding_cache = self._embed(token_ids, start=0, packed=packed)  # (B,T) -> (B,T,C)
        x, embedding_dropout = dropout_if(x, self.config, rng)
        x, blocks, aux_loss = self._blocks(
            x, rng=rng, for_backward=for_backward, keep_caches=keep_caches, recompute=recompute, packed=packed
        )  # (B,T,C)
        h, final_norm_cache = norm_forward(x, self.params, FINAL_NORM, self.config)  # (B,T,C)
        if not keep_caches:  # evaluation: only h goes on, into the loss alone, a chunk of rows of logits at a time
            del x, final_norm_cache
            loss = unembedding_loss(h, self._unembedding(), targets, IGNORE_INDEX, self.config.logit_softcap)  # -> ()
            return _plus(loss, aux_loss), None
        loss, loss_cache = unembedding_loss_forward(
            h,
            self._unembedding(),
            targets,
            IGNORE_INDEX,
            with_gradients=for_backward,
            softcap=self.config.logit_softcap,
            table_grad=self.lora is None,
        )  # (B,T,C) -> ()
        cache = ModelCache(
            tuple(token_ids.shape), embedding_cache, embedding_dropout, blocks, final_norm_cache, loss_cache, packed
        )
        return _plus(loss, aux_loss), cache

    def _check_forward(self, token_ids, targets, for_backward, keep_caches, recompute) -> None:
        self._check_ids(token_ids, "token_ids")
        self._check_targets(targets, token_ids.shape)
        check_bool(for_backward, "for_backward")
        check_bool(keep_caches, "keep_caches")
        check_bool(recompute, "recompute")
        if recompute and (keep_caches or not for_backward):
            raise ValueError(
                "recompute keeps only each block's input for a backward: it needs for_backward=True "
                "and keep_caches=False"
            )

    # ----------------------------------------------------------------- backward

    def backward(self, cache: ModelCache) -> dict:
        """Gradients of the loss for every parameter: same names, shapes and dtype as ``params`` (``trainable``).

        The chain rule is ``backward_steps``; this keeps each step's parameter gradients and drops the
        rest of the step before the next one runs (as a plain walk would free them).
        """
        grads = {}
        for step in self.backward_steps(cache):
            grads.update(step.grads)
            del step  # not alive while the next step runs
        return {name: grads[name] for name in self.trainable}  # params' order

    def backward_steps(self, cache: ModelCache):
        """The backward, one step at a time, in the order it runs: ``HeadBackward`` (the loss, the final norm),
        a ``LayerBackward`` per branch of each layer, the last layer first (its MLP branch, then its attention
        branch: ``blocks.block_backward_steps``), and ``EmbeddingBackward``. Each step holds every gradient it
        made, by reference, and its parameter gradients by full name (``grads``); ``study/backward.py`` shows them.
        """
        config = self.config
        xp = get_xp(*self.params.values())
        # forward: loss = cross_entropy(h @ unembedding^T, targets)
        dloss = xp.ones((), dtype=self.dtype)
        dh, dunembedding = unembedding_loss_backward(dloss, cache.loss)
        # forward: h = final_norm(x)
        dx, norm_grads = norm_backward(dh, cache.final_norm, FINAL_NORM, config)
        yield HeadBackward(dloss, dh, dunembedding, dx, norm_grads)
        # forward: x, blocks = self._blocks(x), layer by layer; loss = cross-entropy + the layers' aux losses
        for i in reversed(range(config.num_layers)):
            block = cache.blocks[i]
            if isinstance(block, BlockInput):  # recomputation: the block's forward again, just before its backward
                block = recompute_block(block, self.layers[i], config, self.position_tables)
            for step in block_backward_steps(dx, block, config, daux=dloss):
                dx = step.dx
                yield LayerBackward(i, step, {f"layers.{i}.{name}": g for name, g in step.grads.items()})
                del step  # not alive while the next branch runs
            del block  # a recomputed cache is not alive while the next block is recomputed
        if self.lora is not None:  # the tables are frozen: no scatter-add, no gradient
            return
        # forward: x = Drop(x)
        dx = dropout_if_backward(dx, cache.embedding_dropout)
        # forward: x = token_embedding[ids] * scale + positions[:T] (packed: positions[each token's own])
        dtoken_embedding, position_grads = self._embed_backward(dx, cache.embedding, cache.packing)
        grads = dict(position_grads)
        if config.tie_weights:
            grads[TOKEN_EMBEDDING] = dtoken_embedding + dunembedding  # input side + output side
        else:
            grads[TOKEN_EMBEDDING] = dtoken_embedding
            grads[LM_HEAD] = dunembedding
        yield EmbeddingBackward(dx, dtoken_embedding, position_grads, grads)

    def _blocks(
        self,
        x,
        *,
        rng,
        for_backward: bool,
        kv_cache: KVCache | None = None,
        keep_caches=True,
        recompute=False,
        packed: Packing | None = None,
    ):
        """Every layer in turn on ``x (B,T,C)``: ``(x, [BlockCache per layer], aux_loss)``, ``aux_loss`` the sum of
        the layers' auxiliary losses (an MLP with experts has one), None when no layer has one.

        Without ``keep_caches`` (evaluation, inference) no layer keeps a cache (``block_forward``'s
        ``keep_cache``), so memory does not grow with the number of layers; the list is empty. With
        ``recompute`` no layer keeps its cache either, and the list holds each block's ``BlockInput``.
        ``packed``: the rows' sequences (``packing.py``), or None.
        """
        caches, aux_loss = [], None
        for i, layer in enumerate(self.layers):
            saved = BlockInput(x, rng_copy(rng), i, packed) if recompute else None  # before the block draws from rng
            x, block_cache = block_forward(
                x,
                layer,
                self.config,
                rng=rng,
                for_backward=for_backward,
                kv_cache=kv_cache,
                layer=i,
                tables=self.position_tables,
                keep_cache=keep_caches and not recompute,
                packed=packed,
            )  # (B,T,C)
            if block_cache.aux_loss is not None:
                aux_loss = block_cache.aux_loss if aux_loss is None else aux_loss + block_cache.aux_loss
            if keep_caches:
                caches.append(saved if recompute else block_cache)
        return x, caches, aux_loss

    # -------------------------------------------------------------- embeddings

    def _embed(self, token_ids, start: int, packed: Packing | None = None):
        """``token_embedding[ids] * s``, plus the position rows ``[start, start + T)`` when the
        position scheme adds any (packed rows: the rows of each token's position in its own sequence);
        ``(B,T) -> (B,T,C)``."""
        T = token_ids.shape[1]
        tokens, embedding_cache = embedding_forward(token_ids, self.params[TOKEN_EMBEDDING])  # (B,T) -> (B,T,C)
        if self.config.scale_embeddings:  # sqrt(C) rounded to the table's dtype first, as transformers' Gemma does
            tokens = tokens * tokens.dtype.type(math.sqrt(self.config.d_model))
        added = self.positions.added
        if added is None:  # positions enter the attention instead (a rotation of q and k)
            return tokens, embedding_cache
        table = {**self.params, **self.position_tables}[added]  # (T_max,C)
        if packed is not None:
            return tokens + get_xp(table).take(table, packed.positions, axis=0), embedding_cache  # + (B,T,C)
        return tokens + table[start : start + T], embedding_cache  # (B,T,C) + (T,C) -> (B,T,C)

    def _embed_backward(self, dx, embedding_cache, packed: Packing | None = None):
        """``(dtoken_embedding, {position parameter: its gradient})`` from ``dx (B,T,C)``."""
        dtokens = dx * dx.dtype.type(math.sqrt(self.config.d_model)) if self.config.scale_embeddings else dx
        dtoken_embedding = embedding_backward(dtokens, embedding_cache)  # (B,T,C) -> (V,C), scatter-add
        added = self.positions.added
        if added not in self.params:  # no trained position table
            return dtoken_embedding, {}
        T = dx.shape[1]
        dpositions = get_xp(dx).zeros_like(self.params[added])  # (T_max,C)
        if packed is not None:  # forward: + pos[positions[b, t]], so row positions[b, t] gets dx[b, t], summed
            scatter_add(dpositions, packed.positions.reshape(-1), dx.reshape(-1, dx.shape[-1]))  # (N,), (N,C)
        else:
            dpositions[:T] = dx.sum(axis=0)  # (B,T,C) -> (T,C): every row used pos[t]
        return dtoken_embedding, {added: dpositions}

    # ---------------------------------------------------------------- inference

    def logits(self, token_ids, last_only: bool = False, kv_cache: KVCache | None = None):
        """Next-token logits, ``(B,T,V)`` or with ``last_only`` ``(B,V)``; no dropout.

        With a ``kv_cache`` (from ``new_kv_cache``), ``token_ids`` are only the
        new tokens, at positions ``kv_cache.length, kv_cache.length + 1, ...``;
        their keys and values are appended to the cache.
        """
        self._check_ids(token_ids, "token_ids")
        start = 0 if kv_cache is None else self._check_kv_cache(kv_cache, token_ids.shape)
        x, _ = self._embed(token_ids, start)  # (B,T) -> (B,T,C)
        x, _, _ = self._blocks(x, rng=None, for_backward=False, kv_cache=kv_cache, keep_caches=False)  # (B,T,C)
        if kv_cache is not None:
            kv_cache.advance(token_ids.shape[1])
        if last_only:
            x = x[:, -1]  # (B,T,C) -> (B,C)
        h, _ = norm_forward(x, self.params, FINAL_NORM, self.config)  # (B,[T,]C)
        logits = h @ self._unembedding().T  # (B,[T,]C) @ (C,V) -> (B,[T,]V)
        cap = self.config.logit_softcap
        return logits if cap is None else softcap_in_place(logits, cap)  # c tanh(z / c): Gemma 2's logit cap

    def new_kv_cache(self, batch_size: int, max_len: int | None = None) -> KVCache:
        """An empty cache of keys and values for ``batch_size`` sequences of up to ``max_len`` positions
        (default and at most ``max_seq_len``)."""
        check_positive_int(batch_size, "batch_size")
        if max_len is not None:
            check_positive_int(max_len, "max_len")
            if max_len > self.config.max_seq_len:
                raise ValueError(f"max_len {max_len} exceeds max_seq_len {self.config.max_seq_len}")
        return KVCache(get_xp(*self.params.values()), batch_size, self.config, self.dtype, max_len)

    # -------------------------------------------------------------- parameters

    def load_params(self, params: dict) -> None:
        """Copy ``params`` (name -> array) into the model's arrays, which stay the same objects
        (so an optimizer built on ``model.params`` keeps working)."""
        check_params(params, {name: (tuple(target.shape), target.dtype) for name, target in self.params.items()})
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
        if kv_cache.length + ids_shape[1] > kv_cache.max_seq_len:
            raise ValueError(
                f"kv_cache holds {kv_cache.length} positions; {ids_shape[1]} more would exceed the "
                f"{kv_cache.max_seq_len} it was made for (the model's max_seq_len is {self.config.max_seq_len})"
            )
        return kv_cache.length
