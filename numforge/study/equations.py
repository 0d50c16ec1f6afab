"""The equation each stage of ``trace.py`` (forward) and ``backward.py`` (backward) computes, as one line of text.

The studio and the inspector page show it beside the stage's numbers. A
stage's equation is its kind's (``components.py``), said with what the model
has: ``x`` is the residual stream entering the block, ``h`` a norm's output,
``N`` the number of positions with a target. The norm (``LayerNorm``:
``w * (x - mean) / sqrt(var + eps) + b``; ``RMSNorm``: ``w * x / sqrt(mean(x^2) + eps)``;
Gemma's ``RMSNorm (1 + w)``), the MLP activation, the biases (only where the
model has them), the embedding scale, the attention's scale and the score
modifiers of the stage's layer (``config.score_modifiers``: causal or a window,
ALiBi, a soft cap), the post-norms and the unembedding (tied or ``lm_head``,
soft-capped or not) are read from the config. Rotary positions turn each
head's q and k by an angle ``t theta`` per pair of values (``rotate_half``
pairs, ``ops/rope.py``); QK-norm normalizes each head's q and k over its ``D``
values, or each position's whole q and k projections (``model/qk_norm.py``). In
the backward, ``d`` of an array is the gradient of the loss with respect to it,
and each line reverses the forward line of the same kind.
"""

from __future__ import annotations

from ..model.positions import POSITIONS
from ..model.qk_norm import QK_NORM_EXTENTS
from ..ops.activations import ACTIVATIONS
from ..ops.scores import as_use
from .components import norm_title, position_added

FORWARD = {
    "token embedding": "e[t] = W_tok[id[t]]{embed_scale}",
    "position embedding": "p[t] = {position_row}",
    "embedding sum": "x = e + p",
    "embedding sum, no position added": "x = e  (nothing added: {position} positions act in every attention layer)",
    "pre-attention norm output": "h = {norm}(x)",
    "q": "q|k|v = h W_qkv{b_qkv}, q split into H = {H} heads of D = {D}",
    "k": "q|k|v = h W_qkv{b_qkv}, k split into H_kv = {H_kv} heads of D = {D}{groups}",
    "v": "q|k|v = h W_qkv{b_qkv}, v split into H_kv = {H_kv} heads of D = {D}{groups}",
    "q after rope": "q' = q * cos(t theta) + rotate_half(q) * sin(t theta)  (the kernel's q)",
    "k after rope": "k' = k * cos(t theta) + rotate_half(k) * sin(t theta)  (the kernel's k)",
    "q after qk_norm": "q' = {norm}(q) over {qk_over}, times q_norm.weight",
    "k after qk_norm": "k' = {norm}(k) over {qk_over}, times k_norm.weight",
    "heads merged (out_proj input)": "y = [P_1 v_1 | ... | P_H v_H],  P = softmax(S'),  S = s q k^T, s = {scale}; "
    "S' = S with {modifiers}",
    "attention branch output": "a = {post_open}y W_out{b_out}{post_close}",
    "residual after attention": "x' = x + a",
    "pre-MLP norm output": "h' = {norm}(x')",
    "pre-MLP norm output (router and experts input)": "h' = {norm}(x')",
    "router probabilities (N,E)": "p = softmax(h' W_router)  over the {E} experts",
    "gates of the chosen experts (N,k)": "the top {top_k} experts of p;  gates g = their p{renormalized}",
    "MLP pre-activation": "u = h' W_up{b_up}",
    "MLP gate (pre-activation)": "g = h' W_gate{b_gate}",
    "MLP up (pre-activation)": "u = h' W_up{b_up}",
    "MLP activation (down_proj input)": "m = {act}",
    "MLP branch output": "{mlp_branch}",
    "residual after MLP": "x'' = x' + f  (the next block's x)",
    "final norm output": "h = {norm}(x_L);  logits z = {logits}",
}

BACKWARD = {
    "loss": "loss = mean over N of -log softmax(z)[target];  d loss = 1",
    "final norm output h": "dz = (softmax(z) - onehot(target)) / N{dcap};  dh = dz {W_U};  d{W_U} = dz^T h",
    "residual after the last layer": "dx_L = {norm} backward of dh",
    "MLP activation (down_proj input)": "dm = df W_down^T  (df = the residual's gradient, copied into the branch)",
    "MLP pre-activation": "du = dm * act'(u)",
    "MLP gate (pre-activation)": "dg = dm * u * {gate_fn}'(g)",
    "MLP up (pre-activation)": "du = dm * {gate_fn}(g)",
    "pre-MLP norm output": "dh' = {paths}",
    "pre-MLP norm output (router and experts input)": "dh' = the router's path + each chosen expert's, times its gate",
    "MLP branch -> residual": "the branch's part of dx' = {norm} backward of dh'",
    "residual after attention (skip + MLP)": "dx' = dx'' (the skip) + the MLP branch's part",
    "heads merged (out_proj input)": "dy = dx' W_out^T",
    "q": "dS = P * (dP - rowsum(dP * P)),  dP = dy v^T;  dq = s dS k",
    "k": "dk = s dS^T q  (with grouped keys: summed over the query heads that share them)",
    "v": "dv = P^T dy  (with grouped values: summed over the query heads that share them)",
    "q before rope": "dq = dq' * cos(t theta) + rotate_half^T(dq' * sin(t theta)): the rotation turned back",
    "k before rope": "dk = dk' * cos(t theta) + rotate_half^T(dk' * sin(t theta)): the rotation turned back",
    "q before q_norm": "dq = {norm} backward of dq' over {qk_over};  dq_norm.weight = its sum",
    "k before k_norm": "dk = {norm} backward of dk' over {qk_over};  dk_norm.weight = its sum",
    "pre-attention norm output": "dh = [dq | dk | dv] W_qkv^T",
    "attention branch -> residual": "the branch's part of dx = {norm} backward of dh",
    "residual into the block (skip + attention)": "dx = dx' (the skip) + the attention branch's part",
    "embedding sum": "dW_tok[id[t]] += dx[t]{embed_scale} (scatter-add: repeated ids add){dpos}",
}


def modifiers_text(config, layer: int) -> str:
    """Layer ``layer``'s score modifiers in the kernel's order, with their arguments: ``"softcap c = 50, causal"``,
    ``"window W = 4, alibi"`` (``config.score_modifiers``, ``ops/scores.py``)."""
    letters = {"softcap": "c", "window": "W"}  # the argument's letter in SCORE_MODIFIERS' about
    uses = [as_use(m) for m in config.score_modifiers(layer)]
    return ", ".join(name if arg is None else f"{name} {letters.get(name, 'arg')} = {arg:g}" for name, arg in uses)


def scale_text(config) -> str:
    """The attention scale ``s`` as the config sets it (``GPTConfig.attention_scale``)."""
    if config.query_pre_attn_scalar:
        return f"1/sqrt({config.query_pre_attn_scalar:g})  (query_pre_attn_scalar)"
    return f"1/sqrt(D) = 1/sqrt({config.head_dim})"


def _fields(config, layer: int | None) -> dict:
    """The words each equation's ``{...}`` takes for a model of ``config`` (module docstring)."""
    activation = ACTIVATIONS[config.activation]
    letters = [name[0] for name in activation.inputs]  # u; gated: g, u
    bias = lambda switch, name: f" + b_{name}" if config.has_bias(switch) else ""  # noqa: E731
    norm, table = norm_title(config), "W_tok" if config.tie_weights else "W_lm_head"
    cap = config.logit_softcap
    trained = bool(POSITIONS[config.position].parameter_shapes(config))
    mlp_bias = bias("mlp_bias", "down")
    down = f"{norm}(m W_down{mlp_bias})  (the post-MLP norm)" if config.post_norms else f"m W_down{mlp_bias}"
    group = config.num_heads // config.num_kv_heads
    experts = "sum over the chosen experts j of g_j expert_j(h'),  expert_e = (silu(h' W_gate_e) * h' W_up_e) W_down_e"
    return {
        "act": f"{activation.title}({', '.join(letters)}) = {activation.equation}",
        "paths": " + ".join(f"d{letter} W_{name}^T" for letter, name in zip(letters, activation.inputs)),
        "gate_fn": activation.equation.split("(")[0],  # silu, gelu_tanh: the gate's function
        "norm": norm,
        "qk_over": QK_NORM_EXTENTS[config.qk_norm_extent].over,
        "position": config.position,
        "position_row": "W_pos[t]  (a trained table)" if trained else f"row t of the fixed {config.position} table",
        "embed_scale": " * sqrt(C)" if config.scale_embeddings else "",
        "b_qkv": bias("qkv_bias", "qkv"),
        "b_out": bias("out_bias", "out"),
        "b_up": bias("mlp_bias", "up"),
        "b_gate": bias("mlp_bias", "gate"),
        "post_open": f"{norm}(" if config.post_norms else "",
        "post_close": ")  (the post-attention norm)" if config.post_norms else "",
        "mlp_branch": f"f = {experts if config.num_experts else down}",
        "H": config.num_heads,
        "H_kv": config.num_kv_heads,
        "D": config.head_dim,
        "groups": f"; query heads h share kv head h // {group}" if group > 1 else "",
        "scale": scale_text(config),
        "modifiers": modifiers_text(config, 0 if layer is None else layer),
        "E": config.num_experts,
        "top_k": config.experts_top_k,
        "renormalized": ", renormalized to sum to 1" if config.experts_renormalize else "",
        "logits": f"h {table}^T" if cap is None else f"{cap:g} tanh(h {table}^T / {cap:g})  (soft-capped)",
        "W_U": table,
        "dcap": "" if cap is None else ", times the cap's slope 1 - (z / c)^2",
        "dpos": ";  dW_pos[t] = sum over the batch of dx[t]" if position_added(config) else "",
    }


def stage_equation(kind: str, config, layer: int | None = None, backward: bool = False) -> str | None:
    """The equation of a stage of ``kind`` (``"q"``, ``"final norm output"``: the stage's ``kind``, without its
    layer) of layer ``layer`` (None outside the blocks) for a model of ``config``; None for a kind this table does
    not know yet (the page then shows none; the tests ask for every stage)."""
    table = BACKWARD if backward else FORWARD
    key = kind
    if key == "embedding sum" and not backward and not position_added(config):
        key = "embedding sum, no position added"
    if key not in table:
        return None
    return table[key].format(**_fields(config, layer))
