"""The textbook GPT: the whole forward and backward pass in the plainest form. Read this first.

``gpt.py`` is the fast model; this file computes the same loss and the same
gradients (tested equal to 1e-12 in float64 under every ``GPTConfig`` option,
``tests/test_reference_model.py``) the way a textbook writes them:

- every array keeps its ``(B,T,...)`` shape (no ``(N,C)`` row views), every
  line that makes an array says its shape;
- attention holds its ``(B,H,T,T)`` scores and weights (no tiles, no online softmax);
- the logits ``(B,T,V)`` exist, the loss is a plain softmax cross-entropy,
  and its gradient ``softmax - onehot`` is computed in the backward, not fused into the forward;
- each component is its textbook formula, read from its registry entry: the
  norm's ``textbook`` and ``textbook_backward`` (``ops.norms.NORMS``: LayerNorm,
  RMSNorm), the activation's (``ops.activations.ACTIVATIONS``), the rotation's
  (``model.positions.POSITIONS``: RoPE as an explicit turn of each pair of
  coordinates). Those formulas live beside their op (``ops/layernorm.py::layer_norm_textbook``, ...),
  written as plainly as this file; a mixture of experts is ``ops/moe.py::moe_textbook`` and its
  ``moe_textbook_backward``: every expert on every row, the choice a mask (no sort, no dispatch);
  grouped-query attention is a ``repeat`` of each key/value head for its group of query heads;
- no array is changed in place once computed (the two embedding gradients are
  filled into zeros); no fast op of ``numforge/ops`` is called (only the components' textbook
  formulas, the score modifiers' textbook terms (the causal mask, ALiBi's bias), the position
  schemes' fixed tables and the attention-dropout mask are imported);
- ``reference_backward`` is one function that walks ``reference_forward`` in
  exact reverse order, each step naming the forward line it reverses.
- the parameters are spelt out by name where they are read (``"attn.qkv_proj"``), as a textbook
  writes them; ``gpt.py`` reads the same strings from ``names.py``, which declares them once (a name
  that differed would be a missing key in the tests that run both models).

The network (pre-norm; ``s = sqrt(C)`` if ``scale_embeddings`` else 1; ``G = H / H_kv``; ``sigma =
query_pre_attn_scalar^-1/2``, else ``D^-1/2``; ``f(S) = c tanh(S / c)`` with ``attn_softcap`` c, else ``S``;
``post`` a norm with ``post_norms`` (Gemma 2/3's sandwich), else nothing)::

    x = s * token_embedding[ids] + positions[:T]        positions: learned or sinusoidal; none when rotary
    x = Drop(x)
    for each layer:  h = pre_attn_norm(x)                                  LayerNorm or RMSNorm
                     q | k | v = h @ qkv_proj                              q (B,H,T,D), k, v (B,H_kv,T,D)
                     q, k = QK-norm and the rotation, in the config's order (either may be absent)
                     o = Drop(softmax(f(sigma q repeat(k, G)^T) + terms)) @ repeat(v, G)
                     x = x + Drop(post_attn_norm(o @ out_proj))
                     x = x + Drop(post_mlp_norm(mlp(pre_mlp_norm(x))))   with experts: the gated sum of top_k experts
    logits = final_norm(x) @ unembedding^T                     token_embedding (tied) or lm_head.weight
             (with logit_softcap c: c tanh(logits / c))
    loss = mean over targets != -1 of -log softmax(logits)[target]  (+ the experts' auxiliary losses, summed)

Dropout: with ``rng`` given and ``drop_prob > 0``, each dropout draws its
keep mask as ``rng.random(shape, dtype) >= drop_prob`` in forward order
(embeddings, then per layer the attention branch and the MLP branch), which
is exactly what ``GPT.forward`` draws from the same generator: given two
generators seeded alike, the two models drop the same elements. The attention
weights (when ``attention_dropout``) are dropped with a mask drawn from one seed
per row, ``floor(2**53 * rng.random((B, 1)))``, drawn just before the attention
branch's mask: ``ops/_attention_dropout.py`` makes the mask of those seeds. Without ``rng``
there is no dropout (evaluation).

Example::

    model = GPT(config, dtype="float64")
    logits, loss, cache = reference_forward(model.params, config, ids, targets)
    grads = reference_backward(model.params, config, cache)   # == model.backward(model.forward(ids, targets)[1])
"""

from __future__ import annotations

import math

from ..backend import get_xp, scatter_add, to_numpy
from ..checks import check_int
from ..ops._attention_dropout import AttentionDropout
from ..ops.activations import ACTIVATIONS
from ..ops.moe import moe_textbook, moe_textbook_backward
from ..ops.norms import NORMS
from ..ops.scores import SCORE_MODIFIERS, as_use
from ..ops.softcap import softcap_textbook, softcap_textbook_backward
from .config import GPTConfig
from .mlp_branch import projection
from .positions import LOCAL, POSITIONS
from .qk_norm import QK_NORM_EXTENTS

IGNORE_INDEX = -1


# ------------------------------------------------------------------ forward


def reference_forward(params: dict, config: GPTConfig, token_ids, targets, rng=None):
    """``(logits (B,T,V), loss (), cache)`` of the GPT with ``params`` on ``token_ids (B,T)``.

    ``targets (B,T)`` holds the next token of each position, or -1 (ignored).
    ``cache`` holds every intermediate the backward reads, by name.
    """
    B, T = _check_inputs(config, token_ids, targets)
    xp = get_xp(params["token_embedding"])
    C, H, H_kv, D = config.d_model, config.num_heads, config.num_kv_heads, config.head_dim
    G = H // H_kv  # query heads per key/value head
    p_drop = config.drop_prob if rng is not None else 0.0
    tables = _position_tables(params, config, T, xp)
    cache = {"token_ids": token_ids, "targets": targets, "tables": tables, "layers": []}
    aux_loss = 0.0  # the experts' auxiliary losses, summed over the layers

    # embeddings
    scale = math.sqrt(C) if config.scale_embeddings else 1.0
    tokens = params["token_embedding"][token_ids]  # (V,C) indexed by (B,T) -> (B,T,C)
    x = scale * tokens + tables.get("added", 0.0)  # (B,T,C) + (T,C) -> (B,T,C); rotary schemes add nothing
    x, cache["embedding_keep"] = _dropout(x, p_drop, rng)  # (B,T,C)

    for i in range(config.num_layers):
        w = _layer_params(params, i)
        saved = {}  # this layer's intermediates
        # attention branch: a = Drop(out_proj(attention(pre_attn_norm(x))))
        saved["x_attn_in"] = x  # (B,T,C)
        h, saved["attn_norm"] = _norm(x, w, "pre_attn_norm", config)  # (B,T,C)
        saved["attn_h"] = h
        qkv = _linear(h, w, "attn.qkv_proj")  # (B,T,C) @ (C,(H + 2 H_kv) D) -> (B,T,(H + 2 H_kv) D)
        q = qkv[..., : H * D].reshape(B, T, H, D).transpose(0, 2, 1, 3)  # (B,T,H D) -> (B,T,H,D) -> (B,H,T,D)
        k = qkv[..., H * D : (H + H_kv) * D].reshape(B, T, H_kv, D).transpose(0, 2, 1, 3)  # (B,H_kv,T,D)
        v = qkv[..., (H + H_kv) * D :].reshape(B, T, H_kv, D).transpose(0, 2, 1, 3)  # (B,H_kv,T,D)
        q, k = _qk_forward(q, k, w, config, tables, saved, i)  # QK-norm and the rotation, in the config's order
        k_rep = xp.repeat(k, G, axis=1)  # (B,H_kv,T,D) -> (B,H,T,D): query head h reads key head h // G
        v_rep = xp.repeat(v, G, axis=1)  # (B,H,T,D)
        scores = (q @ k_rep.transpose(0, 1, 3, 2)) * config.attention_scale()  # (B,H,T,D) @ (B,H,D,T) -> (B,H,T,T)
        saved["score_slope"] = 1.0  # f'(S): 1 without a transform
        # softcap: S = c tanh(S / c), first; causal: -inf where key j > query i (the future); window W: also where
        # j <= i - W; alibi: -m_h (i - j)
        uses = [(name, arg) for name, arg in map(as_use, config.score_modifiers(i))]  # each (name, argument)
        for name, arg in uses:
            modifier = SCORE_MODIFIERS[name]
            if modifier.transforms:  # f(S), its slope f'(S) from the transformed scores
                scores = modifier.textbook(xp, arg, scores)  # (B,H,T,T)
                saved["score_slope"] = saved["score_slope"] * modifier.slope(xp, arg, scores, 1.0)
        for name, arg in uses:
            if not SCORE_MODIFIERS[name].transforms:
                scores = scores + SCORE_MODIFIERS[name].textbook(xp, arg, scores.shape, scores.dtype)  # (B,H,T,T)
        weights = _softmax(scores)  # (B,H,T,T), each row sums to 1
        saved["weights_keep"] = None
        if p_drop > 0 and config.attention_dropout:
            row_seeds = tuple(int(u * 2**53) for u in to_numpy(rng.random((B, 1), dtype="float64")).ravel())  # (B,)
            dropout = AttentionDropout(p_drop, 0, range(B), range(H), T, row_seeds)
            saved["weights_keep"] = dropout.keep(xp, range(T), range(T))  # (B,H,T,T) bool
        dropped = _dropout_with(weights, saved["weights_keep"], p_drop)  # (B,H,T,T): Drop(weights)
        o = dropped @ v_rep  # (B,H,T,T) @ (B,H,T,D) -> (B,H,T,D)
        merged = o.transpose(0, 2, 1, 3).reshape(B, T, H * D)  # (B,H,T,D) -> (B,T,H,D) -> (B,T,H D)
        a = _linear(merged, w, "attn.out_proj")  # (B,T,H D) @ (H D,C) -> (B,T,C)
        if config.post_norms:  # Gemma: a = post_attn_norm(a)
            a, saved["attn_post_norm"] = _norm(a, w, "post_attn_norm", config)  # (B,T,C)
        a, saved["attn_keep"] = _dropout(a, p_drop, rng)  # (B,T,C)
        saved.update(q=q, k_rep=k_rep, v_rep=v_rep, weights=weights, merged=merged)
        x = x + a  # (B,T,C), the residual

        # MLP branch: m = Drop(down_proj(act(up_proj(pre_mlp_norm(x))))); gated: act(gate_proj(h), up_proj(h))
        h, saved["mlp_norm"] = _norm(x, w, "pre_mlp_norm", config)  # (B,T,C)
        saved["mlp_h"] = h
        if (
            config.num_experts
        ):  # with experts: m = sum_e g_e expert_e(h), every expert on every row, g_e = 0 off the top_k
            m, aux, _ = moe_textbook(h, *_experts(w), **config.experts_options())  # (B,T,C), ()
            aux_loss = aux_loss + aux  # the load-balancing and z-losses, times their coefficients
        else:
            activation = ACTIVATIONS[config.activation]
            inputs = [_linear(h, w, projection(name)) for name in activation.inputs]  # each (B,T,C) @ (C,F) -> (B,T,F)
            act = activation.textbook(*inputs, **config.activation_options())  # (B,T,F)
            m = _linear(act, w, "mlp.down_proj")  # (B,T,F) @ (F,C) -> (B,T,C)
            saved.update(mlp_inputs=inputs, act=act)
        if config.post_norms:  # Gemma: m = post_mlp_norm(m)
            m, saved["mlp_post_norm"] = _norm(m, w, "post_mlp_norm", config)  # (B,T,C)
        m, saved["mlp_keep"] = _dropout(m, p_drop, rng)  # (B,T,C)
        x = x + m  # (B,T,C), the residual
        cache["layers"].append(saved)

    # final norm, logits, loss
    h, cache["final_norm"] = _norm(x, params, "final_norm", config)  # (B,T,C)
    cache["final_h"] = h
    logits = h @ _unembedding(params, config).T  # (B,T,C) @ (C,V) -> (B,T,V)
    cache["raw_logits"] = logits
    if config.logit_softcap is not None:  # Gemma 2: logits = c tanh(logits / c)
        logits = softcap_textbook(logits, config.logit_softcap)  # (B,T,V)
    shifted = logits - logits.max(axis=-1, keepdims=True)  # (B,T,V), at most 0: exp cannot overflow
    log_probs = shifted - xp.log(xp.exp(shifted).sum(axis=-1, keepdims=True))  # (B,T,V): z - logsumexp(z)
    counted = targets != IGNORE_INDEX  # (B,T) bool
    count = int(counted.sum())
    safe_targets = xp.where(counted, targets, 0)  # (B,T): an ignored position reads index 0, then counts 0
    picked = xp.take_along_axis(log_probs, safe_targets[..., None], axis=-1)[..., 0]  # (B,T,V) -> (B,T)
    nll = -picked * counted  # (B,T)
    loss = nll.sum() / count if count else xp.zeros((), dtype=logits.dtype)  # ()
    if config.num_experts:
        loss = loss + aux_loss  # () the objective: cross-entropy plus the experts' auxiliary losses
    cache.update(probs=xp.exp(log_probs), counted=counted, count=count, safe_targets=safe_targets)  # probs (B,T,V)
    return logits, loss, cache


# ----------------------------------------------------------------- backward


def reference_backward(params: dict, config: GPTConfig, cache: dict) -> dict:
    """Gradients of the loss for every parameter (same names and shapes as ``params``).

    Each step reverses the forward line quoted above it, last line first.
    """
    xp = get_xp(params["token_embedding"])
    B, T = cache["token_ids"].shape
    C, H, H_kv, D = config.d_model, config.num_heads, config.num_kv_heads, config.head_dim
    G = H // H_kv
    grads = {}

    # forward: loss = mean over counted positions of -log softmax(logits)[target]
    V = cache["probs"].shape[-1]
    onehot = cache["safe_targets"][..., None] == xp.arange(V)  # (B,T,1) == (V,) -> (B,T,V) bool
    weight = cache["counted"].astype(cache["probs"].dtype) / max(cache["count"], 1)  # (B,T): 1/count or 0
    dlogits = (cache["probs"] - onehot) * weight[..., None]  # (B,T,V)
    if config.logit_softcap is not None:  # forward: logits = c tanh(logits / c)
        (dlogits,) = softcap_textbook_backward(dlogits, cache["raw_logits"], config.logit_softcap)  # (B,T,V)
    # forward: logits = h @ unembedding^T
    unembedding = _unembedding(params, config)  # (V,C)
    dh = dlogits @ unembedding  # (B,T,V) @ (V,C) -> (B,T,C)
    dunembedding = xp.einsum("btv,btc->vc", dlogits, cache["final_h"])  # (B,T,V), (B,T,C) -> (V,C)
    # forward: h = final_norm(x)
    dx = _norm_backward(dh, cache["final_norm"], params, "final_norm", config, grads)  # (B,T,C)

    for i in reversed(range(config.num_layers)):
        w, saved = _layer_params(params, i), cache["layers"][i]
        g = {}
        # forward: x = x + m  (the residual: dx flows on unchanged, and into the branch)
        dm = _dropout_backward(dx, saved["mlp_keep"], config.drop_prob)  # forward: m = Drop(m); (B,T,C)
        if config.post_norms:  # forward: m = post_mlp_norm(m)
            dm = _norm_backward(dm, saved["mlp_post_norm"], w, "post_mlp_norm", config, g)  # (B,T,C)
        if config.num_experts:  # forward: m, aux = moe(h); loss = cross-entropy + aux, so d loss / d aux = 1
            dh, *dexperts = moe_textbook_backward(
                dm, saved["mlp_h"], *_experts(w), **config.experts_options(), daux=1.0
            )
            g.update(
                {f"mlp.{name}.weight": d for name, d in zip(EXPERT_PARTS, dexperts)}
            )  # (C,E), (E,C,F) x 2, (E,F,C)
        else:
            # forward: m = act @ down_proj + b
            dact = _linear_backward(dm, saved["act"], w, "mlp.down_proj", g)  # (B,T,C) -> (B,T,F)
            # forward: act = activation(*inputs), inputs = (up,) or (gate, up): one (B,T,F) gradient per input
            activation = ACTIVATIONS[config.activation]
            dinputs = activation.textbook_backward(dact, *saved["mlp_inputs"], **config.activation_options())
            # forward: up = h @ up_proj + b (and gate = h @ gate_proj + b): h feeds each, their gradients add
            dh = sum(
                _linear_backward(d, saved["mlp_h"], w, projection(name), g)
                for name, d in zip(activation.inputs, dinputs)
            )  # (B,T,F) @ (F,C) -> (B,T,C), summed over the inputs
        # forward: h = pre_mlp_norm(x)
        dx_mlp = _norm_backward(dh, saved["mlp_norm"], w, "pre_mlp_norm", config, g)  # (B,T,C)
        dx = dx + dx_mlp  # (B,T,C): the skip path plus the branch path

        # forward: x = x + a
        da = _dropout_backward(dx, saved["attn_keep"], config.drop_prob)  # forward: a = Drop(a); (B,T,C)
        if config.post_norms:  # forward: a = post_attn_norm(a)
            da = _norm_backward(da, saved["attn_post_norm"], w, "post_attn_norm", config, g)  # (B,T,C)
        # forward: a = merged @ out_proj + b
        dmerged = _linear_backward(da, saved["merged"], w, "attn.out_proj", g)  # (B,T,C) -> (B,T,H D)
        # forward: merged = o.transpose(0, 2, 1, 3).reshape(B, T, H D)
        do = dmerged.reshape(B, T, H, D).transpose(0, 2, 1, 3)  # (B,T,H D) -> (B,H,T,D)
        # forward: o = dropped @ v_rep
        weights, keep = saved["weights"], saved["weights_keep"]  # (B,H,T,T)
        ddropped = do @ saved["v_rep"].transpose(0, 1, 3, 2)  # (B,H,T,D) @ (B,H,D,T) -> (B,H,T,T)
        dv_rep = _dropout_with(weights, keep, config.drop_prob).transpose(0, 1, 3, 2) @ do  # (B,H,T,T) @ (B,H,T,D)
        # forward: dropped = Drop(weights)
        dweights = _dropout_with(ddropped, keep, config.drop_prob)  # (B,H,T,T)
        # forward: weights = softmax(scores): dscores = P * (dP - rowsum(P * dP)); a hidden key has P = 0
        dscores = weights * (dweights - (weights * dweights).sum(axis=-1, keepdims=True))  # (B,H,T,T)
        # forward: scores = scores + terms (constants: dscores passes on unchanged)
        # forward: scores = f(scores) (softcap), so dscores = f'(S) dscores
        dscores = dscores * saved["score_slope"]  # (B,H,T,T)
        # forward: scores = q @ k_rep^T * sigma
        sigma = config.attention_scale()
        dq = (dscores @ saved["k_rep"]) * sigma  # (B,H,T,T) @ (B,H,T,D) -> (B,H,T,D)
        dk_rep = (dscores.transpose(0, 1, 3, 2) @ saved["q"]) * sigma  # (B,H,T,T) @ (B,H,T,D) -> (B,H,T,D)
        # forward: k_rep, v_rep = repeat(k, G), repeat(v, G): each key/value head sums its group's gradients
        dk = dk_rep.reshape(B, H_kv, G, T, D).sum(axis=2)  # (B,H,T,D) -> (B,H_kv,G,T,D) -> (B,H_kv,T,D)
        dv = dv_rep.reshape(B, H_kv, G, T, D).sum(axis=2)  # (B,H_kv,T,D)
        # forward: q, k = QK-norm and the rotation
        dq, dk = _qk_backward(dq, dk, w, config, cache["tables"], saved, g, i)
        # forward: q, k, v = split(qkv) into heads
        dq = dq.transpose(0, 2, 1, 3).reshape(B, T, H * D)  # (B,H,T,D) -> (B,T,H D)
        dk, dv = (d.transpose(0, 2, 1, 3).reshape(B, T, H_kv * D) for d in (dk, dv))  # (B,H_kv,T,D) -> (B,T,H_kv D)
        dqkv = xp.concatenate([dq, dk, dv], axis=-1)  # -> (B,T,(H + 2 H_kv) D)
        # forward: qkv = h @ qkv_proj + b
        dh = _linear_backward(dqkv, saved["attn_h"], w, "attn.qkv_proj", g)  # (B,T,(H + 2 H_kv) D) -> (B,T,C)
        # forward: h = pre_attn_norm(x)
        dx_attn = _norm_backward(dh, saved["attn_norm"], w, "pre_attn_norm", config, g)  # (B,T,C)
        dx = dx + dx_attn  # (B,T,C)
        grads.update({f"layers.{i}.{name}": value for name, value in g.items()})

    # forward: x = Drop(x)
    dx = _dropout_backward(dx, cache["embedding_keep"], config.drop_prob)  # (B,T,C)
    # forward: x = scale * token_embedding[ids] + positions[:T]
    added = POSITIONS[config.position].added
    if added in params:  # a trained position table
        dposition = xp.zeros_like(params[added])  # (T_max,C)
        dposition[:T] = dx.sum(axis=0)  # (B,T,C) -> (T,C): position t served every sequence of the batch
        grads[added] = dposition
    scale = math.sqrt(C) if config.scale_embeddings else 1.0
    dtoken_input = xp.zeros_like(params["token_embedding"])  # (V,C)
    scatter_add(dtoken_input, cache["token_ids"], scale * dx)  # (B,T,C) summed into rows ids: a repeated id adds up
    if config.tie_weights:
        grads["token_embedding"] = dtoken_input + dunembedding  # (V,C): the input side plus the output side
    else:
        grads["token_embedding"] = dtoken_input
        grads["lm_head.weight"] = dunembedding
    return {name: grads[name] for name in params}  # params' order; absent biases (None) dropped


# ------------------------------------------------------- q and k: QK-norm and the rotation by position


def _qk_forward(q, k, w: dict, config: GPTConfig, tables: dict, saved: dict, layer: int):
    """QK-norm (over each head's ``D``, or each position's whole projection) and the rotation, in
    ``config.qk_norm_order``; ``saved`` keeps their inputs. A local layer (``config.local_rotation``: Gemma 3's)
    turns by its own tables."""
    norm_first = config.qk_norm and config.qk_norm_order == "before_rope"
    if norm_first:
        q, saved["q_norm"] = _qk_norm(q, w, "attn.q_norm", config)  # (B,H,T,D)
        k, saved["k_norm"] = _qk_norm(k, w, "attn.k_norm", config)  # (B,H_kv,T,D)
    rotation = POSITIONS[config.position].rotation
    if rotation is not None:  # RoPE: pair (i, i + D/2) of position t turned by t theta_i
        saved["q_rotation"], saved["k_rotation"] = q, k  # the rotation's inputs
        rows = tables["rotation_local" if config.local_rotation(layer) else "rotation"]  # cos, sin (T,D)
        q = rotation.textbook(q, *rows)  # (B,H,T,D)
        k = rotation.textbook(k, *rows)  # (B,H_kv,T,D)
    if config.qk_norm and not norm_first:
        q, saved["q_norm"] = _qk_norm(q, w, "attn.q_norm", config)
        k, saved["k_norm"] = _qk_norm(k, w, "attn.k_norm", config)
    return q, k


def _qk_backward(dq, dk, w: dict, config: GPTConfig, tables: dict, saved: dict, grads: dict, layer: int):
    """``_qk_forward`` walked back: the norms' backward, the inverse rotation."""
    norm_first = config.qk_norm and config.qk_norm_order == "before_rope"
    if config.qk_norm and not norm_first:
        dq = _qk_norm_backward(dq, saved["q_norm"], w, "attn.q_norm", config, grads)
        dk = _qk_norm_backward(dk, saved["k_norm"], w, "attn.k_norm", config, grads)
    rotation = POSITIONS[config.position].rotation
    if rotation is not None:  # forward: q = rotate(q, +angle), so dq = rotate(dq, -angle): the inverse rotation
        rows = tables["rotation_local" if config.local_rotation(layer) else "rotation"]  # cos, sin (T,D)
        (dq,) = rotation.textbook_backward(dq, saved["q_rotation"], *rows)  # (B,H,T,D)
        (dk,) = rotation.textbook_backward(dk, saved["k_rotation"], *rows)  # (B,H_kv,T,D)
    if norm_first:
        dq = _qk_norm_backward(dq, saved["q_norm"], w, "attn.q_norm", config, grads)
        dk = _qk_norm_backward(dk, saved["k_norm"], w, "attn.k_norm", config, grads)
    return dq, dk


# ---------------------------------------------------------- the pieces, each beside its backward


def _linear(x, w: dict, name: str):
    """``y = x W + b`` with ``W = w[name.weight]`` ``(C_in,C_out)`` and ``b = w[name.bias]`` (absent: no ``+ b``)."""
    y = x @ w[f"{name}.weight"]  # (B,T,C_in) @ (C_in,C_out) -> (B,T,C_out)
    bias = w.get(f"{name}.bias")
    return y if bias is None else y + bias  # (B,T,C_out) + (C_out,)


def _linear_backward(dy, x, w: dict, name: str, grads: dict):
    """``dx = dy W^T``; writes ``grads[name.weight] = sum over (b,t) of x^T dy`` and ``grads[name.bias] = sum of dy``.

    The bias gradient is written even when the layer has no bias; ``reference_backward`` keeps only ``params``'s names.
    """
    grads[f"{name}.weight"] = get_xp(x).einsum("btc,btf->cf", x, dy)  # (B,T,C_in), (B,T,C_out) -> (C_in,C_out)
    grads[f"{name}.bias"] = dy.sum(axis=(0, 1))  # (B,T,C_out) -> (C_out,)
    return dy @ w[f"{name}.weight"].T  # (B,T,C_out) @ (C_out,C_in) -> (B,T,C_in)


def _norm(x, w: dict, name: str, config: GPTConfig):
    """``(y, x)``: ``config.norm`` over the last axis of ``x`` by its textbook formula, with its parameters
    ``w[name.weight]``, ``w[name.bias]``, ... (absent: None); ``x`` is what its backward reads."""
    norm = NORMS[config.norm]
    return norm.textbook(x, *_norm_params(w, name, config), eps=config.norm_eps), x


def _norm_backward(dy, x, w: dict, name: str, config: GPTConfig, grads: dict):
    """``dx``; writes ``grads[name.weight]``, ... (``reference_backward`` keeps those ``params`` has)."""
    norm = NORMS[config.norm]
    dx, *dparams = norm.textbook_backward(dy, x, *_norm_params(w, name, config), eps=config.norm_eps)
    grads.update({f"{name}.{param}": d for param, d in zip(norm.parameters, dparams)})
    return dx


def _qk_norm(x, w: dict, name: str, config: GPTConfig):
    """``(y, rows)``: the norm of heads ``x (B,H,T,D)`` over ``config.qk_norm_extent``'s values (each head's
    ``D``, or the ``H D`` of a position's heads side by side, ``(B,T,H D)``); ``rows`` what its backward reads."""
    extent = QK_NORM_EXTENTS[config.qk_norm_extent]
    y, rows = _norm(extent.to_rows(x), w, name, config)
    return extent.from_rows(y, x.shape[1]), rows  # -> (B,H,T,D)


def _qk_norm_backward(dy, rows, w: dict, name: str, config: GPTConfig, grads: dict):
    """``dx (B,H,T,D)`` of ``_qk_norm``: the norm's backward on the same rows."""
    extent = QK_NORM_EXTENTS[config.qk_norm_extent]
    dx = _norm_backward(extent.to_rows(dy), rows, w, name, config, grads)
    return extent.from_rows(dx, dy.shape[1])  # -> (B,H,T,D)


def _norm_params(w: dict, name: str, config: GPTConfig) -> list:
    return [w.get(f"{name}.{param}") for param in NORMS[config.norm].parameters]  # (C,) each, or None


def _softmax(z):
    """``exp(z - max) / sum(exp(z - max))`` over the last axis (``-inf`` entries give 0)."""
    e = get_xp(z).exp(z - z.max(axis=-1, keepdims=True))  # (...,K)
    return e / e.sum(axis=-1, keepdims=True)  # (...,K)


def _dropout(x, p: float, rng):
    """``(x * keep / (1 - p), keep)``, ``keep = rng.random(shape) >= p``; ``(x, None)`` when ``p`` is 0."""
    if p == 0.0:
        return x, None
    keep = rng.random(x.shape, dtype=x.dtype) >= p  # (B,T,C) bool, drawn as GPT.forward draws it
    return x * keep / (1.0 - p), keep


def _dropout_with(x, keep, p: float):
    """``x * keep / (1 - p)`` with a given mask; ``x`` when there is none."""
    return x if keep is None else x * keep * x.dtype.type(1.0 / (1.0 - p))


def _dropout_backward(dy, keep, p: float):
    """``dy * keep / (1 - p)``; ``dy`` when there was no dropout."""
    return dy if keep is None else dy * keep / (1.0 - p)


def _position_tables(params: dict, config: GPTConfig, T: int, xp) -> dict:
    """The first ``T`` rows of the position scheme's arrays: ``"added"`` ``(T,C)`` for a scheme that adds rows
    to the embeddings (the trained table or the fixed one), ``"rotation"`` the rotation's tables (RoPE's cos and
    sin, ``(T,D)`` each)."""
    scheme = POSITIONS[config.position]
    tables = {**params, **scheme.tables(config, params["token_embedding"].dtype)}
    found = {} if scheme.added is None else {"added": xp.asarray(tables[scheme.added][:T])}  # (T,C)
    if scheme.rotation is not None:
        found["rotation"] = [xp.asarray(tables[name][:T]) for name in scheme.rotation.tables]  # RoPE: (T,D) each
        if config.rope_local_theta is not None:  # the local layers' own (Gemma 3)
            found["rotation_local"] = [xp.asarray(tables[name + LOCAL][:T]) for name in scheme.rotation.tables]
    return found


EXPERT_PARTS = (
    "router",
    "experts.gate_proj",
    "experts.up_proj",
    "experts.down_proj",
)  # under mlp., moe_textbook's order


def _experts(w: dict) -> list:
    """A layer's router and stacked experts: ``W_r (C,E)``, ``W_gate (E,C,F)``, ``W_up (E,C,F)``, ``W_down (E,F,C)``."""
    return [w[f"mlp.{name}.weight"] for name in EXPERT_PARTS]


def _unembedding(params: dict, config: GPTConfig):
    return params["token_embedding" if config.tie_weights else "lm_head.weight"]  # (V,C)


def _layer_params(params: dict, i: int) -> dict:
    """Layer ``i``'s parameters by short name (``"attn.qkv_proj.weight"``); an absent bias reads as None."""
    prefix = f"layers.{i}."
    return {name[len(prefix) :]: value for name, value in params.items() if name.startswith(prefix)}


def _check_inputs(config: GPTConfig, token_ids, targets) -> tuple[int, int]:
    if not isinstance(config, GPTConfig):
        raise TypeError(f"config must be a GPTConfig, got {type(config).__name__}")
    check_int(token_ids, "token_ids", ndim=2)
    check_int(targets, "targets", ndim=2)
    if tuple(targets.shape) != tuple(token_ids.shape):
        raise ValueError(f"targets must have the shape of token_ids {tuple(token_ids.shape)}, got {targets.shape}")
    B, T = token_ids.shape
    if not 1 <= T <= config.max_seq_len:
        raise ValueError(f"token_ids has sequence length {T}, expected 1 to max_seq_len {config.max_seq_len}")
    V = config.vocab_size
    if B < 1 or not bool(((token_ids >= 0) & (token_ids < V)).all()):
        raise ValueError(f"token_ids must be a non-empty (B,T) array of ids in [0, {V})")
    if not bool((((targets >= 0) & (targets < V)) | (targets == IGNORE_INDEX)).all()):
        raise ValueError(f"targets must hold ids in [0, {V}) or the ignore index {IGNORE_INDEX}")
    return B, T
