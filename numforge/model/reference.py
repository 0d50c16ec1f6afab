"""The textbook GPT: the whole forward and backward pass in the plainest form. Read this first.

``gpt.py`` is the fast model; this file computes the same loss and the same
gradients (tested equal to 1e-12 in float64 under every ``GPTConfig`` option,
``tests/test_reference_model.py``) the way a textbook writes them:

- every array keeps its ``(B,T,...)`` shape (no ``(N,C)`` row views), every
  line that makes an array says its shape;
- attention holds its ``(B,H,T,T)`` scores and weights (no tiles, no online softmax);
- the logits ``(B,T,V)`` exist, the loss is a plain softmax cross-entropy,
  and its gradient ``softmax - onehot`` is computed in the backward, not fused into the forward;
- no array is changed in place once computed (the two embedding gradients are
  filled into zeros); no op of ``numforge/ops`` is called (only the normal CDF
  of exact GELU, the sinusoidal table and the attention-dropout mask are imported);
- ``reference_backward`` is one function that walks ``reference_forward`` in
  exact reverse order, each step naming the forward line it reverses.

The network (pre-norm, GPT-2 style; ``s = sqrt(C)`` if ``scale_embeddings`` else 1)::

    x = s * token_embedding[ids] + positions[:T]               positions: learned or sinusoidal
    x = Drop(x)
    for each layer:  x = x + Drop(attention(pre_attn_norm(x)))     attention: Drop(softmax(scores)) @ v
                     x = x + Drop(mlp(pre_mlp_norm(x)))
    logits = final_norm(x) @ unembedding^T                     token_embedding (tied) or lm_head.weight
    loss = mean over targets != -1 of -log softmax(logits)[target]

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
from ..ops._erf import normal_cdf
from .config import GPTConfig
from .positions import sinusoidal_positions

GELU_CUBIC = 0.044715  # GPT-2's tanh approximation: u = sqrt(2/pi) (x + 0.044715 x^3)
IGNORE_INDEX = -1


# ------------------------------------------------------------------ forward


def reference_forward(params: dict, config: GPTConfig, token_ids, targets, rng=None):
    """``(logits (B,T,V), loss (), cache)`` of the GPT with ``params`` on ``token_ids (B,T)``.

    ``targets (B,T)`` holds the next token of each position, or -1 (ignored).
    ``cache`` holds every intermediate the backward reads, by name.
    """
    B, T = _check_inputs(config, token_ids, targets)
    xp = get_xp(params["token_embedding"])
    C, H = config.d_model, config.num_heads
    D = C // H
    p_drop = config.drop_prob if rng is not None else 0.0
    cache = {"token_ids": token_ids, "targets": targets, "layers": []}

    # embeddings
    scale = math.sqrt(C) if config.scale_embeddings else 1.0
    tokens = params["token_embedding"][token_ids]  # (V,C) indexed by (B,T) -> (B,T,C)
    x = scale * tokens + _positions(params, config, T, xp)  # (B,T,C) + (T,C) -> (B,T,C)
    x, cache["embedding_keep"] = _dropout(x, p_drop, rng)  # (B,T,C)

    for i in range(config.num_layers):
        w = _layer_params(params, i)
        saved = {}  # this layer's intermediates
        # attention branch: a = Drop(out_proj(attention(pre_attn_norm(x))))
        saved["x_attn_in"] = x  # (B,T,C)
        h, saved["attn_xhat"], saved["attn_rstd"] = _layer_norm(x, w, "pre_attn_norm", config.ln_eps)  # (B,T,C)
        saved["attn_h"] = h
        qkv = _linear(h, w, "attn.qkv_proj")  # (B,T,C) @ (C,3C) -> (B,T,3C)
        q, k, v = qkv[..., :C], qkv[..., C : 2 * C], qkv[..., 2 * C :]  # 3 x (B,T,C)
        q = q.reshape(B, T, H, D).transpose(0, 2, 1, 3)  # (B,T,C) -> (B,T,H,D) -> (B,H,T,D)
        k = k.reshape(B, T, H, D).transpose(0, 2, 1, 3)  # (B,H,T,D)
        v = v.reshape(B, T, H, D).transpose(0, 2, 1, 3)  # (B,H,T,D)
        scores = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(D)  # (B,H,T,D) @ (B,H,D,T) -> (B,H,T,T)
        future = xp.triu(xp.ones((T, T), dtype=bool), k=1)  # (T,T): True where key j > query i
        scores = xp.where(future, -xp.inf, scores)  # (B,H,T,T), the future hidden
        weights = _softmax(scores)  # (B,H,T,T), each row sums to 1
        saved["weights_keep"] = None
        if p_drop > 0 and config.attention_dropout:
            row_seeds = tuple(int(u * 2**53) for u in to_numpy(rng.random((B, 1), dtype="float64")).ravel())  # (B,)
            dropout = AttentionDropout(p_drop, 0, range(B), range(H), T, row_seeds)
            saved["weights_keep"] = dropout.keep(xp, range(T), range(T))  # (B,H,T,T) bool
        dropped = _dropout_with(weights, saved["weights_keep"], p_drop)  # (B,H,T,T): Drop(weights)
        o = dropped @ v  # (B,H,T,T) @ (B,H,T,D) -> (B,H,T,D)
        merged = o.transpose(0, 2, 1, 3).reshape(B, T, C)  # (B,H,T,D) -> (B,T,H,D) -> (B,T,C)
        a = _linear(merged, w, "attn.out_proj")  # (B,T,C) @ (C,C) -> (B,T,C)
        a, saved["attn_keep"] = _dropout(a, p_drop, rng)  # (B,T,C)
        saved.update(q=q, k=k, v=v, weights=weights, merged=merged)
        x = x + a  # (B,T,C), the residual

        # MLP branch: m = Drop(down_proj(act(up_proj(pre_mlp_norm(x)))))
        h, saved["mlp_xhat"], saved["mlp_rstd"] = _layer_norm(x, w, "pre_mlp_norm", config.ln_eps)  # (B,T,C)
        saved["mlp_h"] = h
        up = _linear(h, w, "mlp.up_proj")  # (B,T,C) @ (C,F) -> (B,T,F)
        gate = _linear(h, w, "mlp.gate_proj") if config.gated else None  # (B,T,C) @ (C,F) -> (B,T,F)
        act = _activation(config, up, gate)  # (B,T,F)
        m = _linear(act, w, "mlp.down_proj")  # (B,T,F) @ (F,C) -> (B,T,C)
        m, saved["mlp_keep"] = _dropout(m, p_drop, rng)  # (B,T,C)
        saved.update(up=up, gate=gate, act=act)
        x = x + m  # (B,T,C), the residual
        cache["layers"].append(saved)

    # final norm, logits, loss
    h, cache["final_xhat"], cache["final_rstd"] = _layer_norm(x, params, "final_norm", config.ln_eps)  # (B,T,C)
    cache["final_h"] = h
    logits = h @ _unembedding(params, config).T  # (B,T,C) @ (C,V) -> (B,T,V)
    shifted = logits - logits.max(axis=-1, keepdims=True)  # (B,T,V), at most 0: exp cannot overflow
    log_probs = shifted - xp.log(xp.exp(shifted).sum(axis=-1, keepdims=True))  # (B,T,V): z - logsumexp(z)
    counted = targets != IGNORE_INDEX  # (B,T) bool
    count = int(counted.sum())
    safe_targets = xp.where(counted, targets, 0)  # (B,T): an ignored position reads index 0, then counts 0
    picked = xp.take_along_axis(log_probs, safe_targets[..., None], axis=-1)[..., 0]  # (B,T,V) -> (B,T)
    nll = -picked * counted  # (B,T)
    loss = nll.sum() / count if count else xp.zeros((), dtype=logits.dtype)  # ()
    cache.update(probs=xp.exp(log_probs), counted=counted, count=count, safe_targets=safe_targets)  # probs (B,T,V)
    return logits, loss, cache


# ----------------------------------------------------------------- backward


def reference_backward(params: dict, config: GPTConfig, cache: dict) -> dict:
    """Gradients of the loss for every parameter (same names and shapes as ``params``).

    Each step reverses the forward line quoted above it, last line first.
    """
    xp = get_xp(params["token_embedding"])
    B, T = cache["token_ids"].shape
    C, H = config.d_model, config.num_heads
    D = C // H
    grads = {}

    # forward: loss = mean over counted positions of -log softmax(logits)[target]
    V = cache["probs"].shape[-1]
    onehot = cache["safe_targets"][..., None] == xp.arange(V)  # (B,T,1) == (V,) -> (B,T,V) bool
    weight = cache["counted"].astype(cache["probs"].dtype) / max(cache["count"], 1)  # (B,T): 1/count or 0
    dlogits = (cache["probs"] - onehot) * weight[..., None]  # (B,T,V)
    # forward: logits = h @ unembedding^T
    unembedding = _unembedding(params, config)  # (V,C)
    dh = dlogits @ unembedding  # (B,T,V) @ (V,C) -> (B,T,C)
    dunembedding = xp.einsum("btv,btc->vc", dlogits, cache["final_h"])  # (B,T,V), (B,T,C) -> (V,C)
    # forward: h = final_norm(x)
    dx = _layer_norm_backward(dh, cache["final_xhat"], cache["final_rstd"], params, "final_norm", grads)  # (B,T,C)

    for i in reversed(range(config.num_layers)):
        w, saved = _layer_params(params, i), cache["layers"][i]
        g = {}
        # forward: x = x + m  (the residual: dx flows on unchanged, and into the branch)
        dm = _dropout_backward(dx, saved["mlp_keep"], config.drop_prob)  # forward: m = Drop(m); (B,T,C)
        # forward: m = act @ down_proj + b
        dact = _linear_backward(dm, saved["act"], w, "mlp.down_proj", g)  # (B,T,C) -> (B,T,F)
        # forward: act = activation(up) or activation(gate, up)
        dup, dgate = _activation_backward(config, dact, saved["up"], saved["gate"])  # (B,T,F)
        # forward: up = h @ up_proj + b   (and gate = h @ gate_proj + b: h feeds both, their gradients add)
        dh = _linear_backward(dup, saved["mlp_h"], w, "mlp.up_proj", g)  # (B,T,F) -> (B,T,C)
        if config.gated:
            dh = dh + _linear_backward(dgate, saved["mlp_h"], w, "mlp.gate_proj", g)  # (B,T,C) + (B,T,C)
        # forward: h = pre_mlp_norm(x)
        dx_mlp = _layer_norm_backward(dh, saved["mlp_xhat"], saved["mlp_rstd"], w, "pre_mlp_norm", g)  # (B,T,C)
        dx = dx + dx_mlp  # (B,T,C): the skip path plus the branch path

        # forward: x = x + a
        da = _dropout_backward(dx, saved["attn_keep"], config.drop_prob)  # forward: a = Drop(a); (B,T,C)
        # forward: a = merged @ out_proj + b
        dmerged = _linear_backward(da, saved["merged"], w, "attn.out_proj", g)  # (B,T,C) -> (B,T,C)
        # forward: merged = o.transpose(0, 2, 1, 3).reshape(B, T, C)
        do = dmerged.reshape(B, T, H, D).transpose(0, 2, 1, 3)  # (B,T,C) -> (B,H,T,D)
        # forward: o = dropped @ v
        weights, keep = saved["weights"], saved["weights_keep"]  # (B,H,T,T)
        ddropped = do @ saved["v"].transpose(0, 1, 3, 2)  # (B,H,T,D) @ (B,H,D,T) -> (B,H,T,T)
        dv = _dropout_with(weights, keep, config.drop_prob).transpose(0, 1, 3, 2) @ do  # (B,H,T,T) @ (B,H,T,D)
        # forward: dropped = Drop(weights)
        dweights = _dropout_with(ddropped, keep, config.drop_prob)  # (B,H,T,T)
        # forward: weights = softmax(scores): dscores = P * (dP - rowsum(P * dP)); a hidden key has P = 0
        dscores = weights * (dweights - (weights * dweights).sum(axis=-1, keepdims=True))  # (B,H,T,T)
        # forward: scores = q @ k^T / sqrt(D)
        dq = (dscores @ saved["k"]) / math.sqrt(D)  # (B,H,T,T) @ (B,H,T,D) -> (B,H,T,D)
        dk = (dscores.transpose(0, 1, 3, 2) @ saved["q"]) / math.sqrt(D)  # (B,H,T,T) @ (B,H,T,D) -> (B,H,T,D)
        # forward: q, k, v = split(qkv) into heads
        dq, dk, dv = (d.transpose(0, 2, 1, 3).reshape(B, T, C) for d in (dq, dk, dv))  # 3 x (B,H,T,D) -> (B,T,C)
        dqkv = xp.concatenate([dq, dk, dv], axis=-1)  # 3 x (B,T,C) -> (B,T,3C)
        # forward: qkv = h @ qkv_proj + b
        dh = _linear_backward(dqkv, saved["attn_h"], w, "attn.qkv_proj", g)  # (B,T,3C) -> (B,T,C)
        # forward: h = pre_attn_norm(x)
        dx_attn = _layer_norm_backward(dh, saved["attn_xhat"], saved["attn_rstd"], w, "pre_attn_norm", g)  # (B,T,C)
        dx = dx + dx_attn  # (B,T,C)
        grads.update({f"layers.{i}.{name}": value for name, value in g.items()})

    # forward: x = Drop(x)
    dx = _dropout_backward(dx, cache["embedding_keep"], config.drop_prob)  # (B,T,C)
    # forward: x = scale * token_embedding[ids] + positions[:T]
    if config.position == "learned":
        dposition = xp.zeros_like(params["position_embedding"])  # (T_max,C)
        dposition[:T] = dx.sum(axis=0)  # (B,T,C) -> (T,C): position t served every sequence of the batch
        grads["position_embedding"] = dposition
    scale = math.sqrt(C) if config.scale_embeddings else 1.0
    dtoken_input = xp.zeros_like(params["token_embedding"])  # (V,C)
    scatter_add(dtoken_input, cache["token_ids"], scale * dx)  # (B,T,C) summed into rows ids: a repeated id adds up
    if config.tie_weights:
        grads["token_embedding"] = dtoken_input + dunembedding  # (V,C): the input side plus the output side
    else:
        grads["token_embedding"] = dtoken_input
        grads["lm_head.weight"] = dunembedding
    return {name: grads[name] for name in params}  # params' order; absent biases (None) dropped


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


def _layer_norm(x, w: dict, name: str, eps: float):
    """``(y, xhat, rstd)``: ``xhat = (x - mean) / sqrt(var + eps)`` over the last axis, ``y = xhat weight + bias``."""
    xp = get_xp(x)
    mean = x.mean(axis=-1, keepdims=True)  # (B,T,C) -> (B,T,1)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)  # (B,T,1), the biased variance
    rstd = 1.0 / xp.sqrt(var + eps)  # (B,T,1)
    xhat = (x - mean) * rstd  # (B,T,C)
    y = xhat * w[f"{name}.weight"]  # (B,T,C) * (C,) -> (B,T,C)
    bias = w.get(f"{name}.bias")
    return (y if bias is None else y + bias), xhat, rstd


def _layer_norm_backward(dy, xhat, rstd, w: dict, name: str, grads: dict):
    """``dx = rstd (g - mean(g) - xhat mean(g xhat))`` with ``g = dy weight``, means over the last axis;
    writes ``grads[name.weight] = sum of dy xhat`` and ``grads[name.bias] = sum of dy`` over ``(b,t)``."""
    grads[f"{name}.weight"] = (dy * xhat).sum(axis=(0, 1))  # (B,T,C) -> (C,)
    grads[f"{name}.bias"] = dy.sum(axis=(0, 1))  # (B,T,C) -> (C,)
    g = dy * w[f"{name}.weight"]  # (B,T,C): the gradient reaching xhat
    return rstd * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))  # (B,T,C)


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


def _activation(config: GPTConfig, up, gate):
    """The MLP's activation on ``(B,T,F)``: ``relu(up)``, ``gelu(up)`` or ``silu(gate) * up``."""
    xp = get_xp(up)
    if config.activation == "relu":
        return xp.maximum(up, 0.0)
    if config.activation == "swiglu":
        return gate / (1.0 + xp.exp(-gate)) * up  # silu(g) = g sigma(g)
    if config.gelu_approximate == "none":
        return up * normal_cdf(up)  # x Phi(x)
    u = math.sqrt(2.0 / math.pi) * (up + GELU_CUBIC * up**3)
    return 0.5 * up * (1.0 + xp.tanh(u))  # x (1 + tanh(u)) / 2


def _activation_backward(config: GPTConfig, dact, up, gate):
    """``(dup, dgate)`` from ``dact (B,T,F)``; ``dgate`` is None unless the activation is SwiGLU."""
    xp = get_xp(up)
    if config.activation == "relu":
        return dact * (up > 0), None  # relu'(x) = [x > 0]
    if config.activation == "swiglu":
        sigma = 1.0 / (1.0 + xp.exp(-gate))  # (B,T,F)
        dgate = dact * up * sigma * (1.0 + gate * (1.0 - sigma))  # d(g sigma(g))/dg = sigma + g sigma (1 - sigma)
        return dact * gate * sigma, dgate  # d/dup = silu(g)
    if config.gelu_approximate == "none":
        phi = xp.exp(-0.5 * up**2) / math.sqrt(2.0 * math.pi)  # the normal density
        return dact * (normal_cdf(up) + up * phi), None  # (x Phi(x))' = Phi(x) + x phi(x)
    u = math.sqrt(2.0 / math.pi) * (up + GELU_CUBIC * up**3)
    du = math.sqrt(2.0 / math.pi) * (1.0 + 3.0 * GELU_CUBIC * up**2)
    tanh_u = xp.tanh(u)
    return dact * (0.5 * (1.0 + tanh_u) + 0.5 * up * (1.0 - tanh_u**2) * du), None  # product and chain rules


def _positions(params: dict, config: GPTConfig, T: int, xp):
    """The first ``T`` rows of the learned table or of the fixed sinusoidal one, ``(T,C)``."""
    if config.position == "learned":
        return params["position_embedding"][:T]  # (T_max,C) -> (T,C)
    dtype = params["token_embedding"].dtype
    return xp.asarray(sinusoidal_positions(config.max_seq_len, config.d_model, dtype)[:T])  # (T,C)


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
