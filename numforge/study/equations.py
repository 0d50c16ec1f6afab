"""The equation each stage of ``trace.py`` (forward) and ``backward.py`` (backward) computes, as one line of text.

The studio and the inspector page show it beside the stage's numbers. A
stage named ``layer i ...`` has the equation of its name without the layer;
``x`` is the residual stream entering the block, ``h`` a norm's output, ``N``
the number of positions with a target. The model's norm (``layernorm``:
``w * (x - mean) / sqrt(var + eps) + b``; ``rmsnorm``: ``w * x / sqrt(mean(x^2) + eps)``)
and its MLP activation are named from the config. Rotary positions turn each
head's q and k by an angle ``t theta`` per pair of values (``rotate_half``
pairs, ``ops/rope.py``); QK-norm normalizes each head's q and k over its ``D``
values, or each position's whole q and k projections (``model/qk_norm.py``). In the
backward, ``d`` of an array is the gradient of the loss with respect to it, and each line reverses the forward
line of the same name.
"""

from __future__ import annotations

import re

from ..model.positions import POSITIONS
from ..model.qk_norm import QK_NORM_EXTENTS
from ..ops.activations import ACTIVATIONS

FORWARD = {
    "token embedding": "e[t] = W_tok[id[t]]  (times sqrt(C) when the embeddings are scaled)",
    "position embedding": "p[t] = W_pos[t]  (learned) or the fixed sinusoidal table's row t",
    "embedding sum": "x = e + p",
    "embedding sum, no position added": "x = e  (nothing added: {position} positions act in every attention layer)",
    "pre-attention norm output": "h = {norm}(x)",
    "q": "q|k|v = h W_qkv + b_qkv, q split into H heads of D (C / H unless the config says)",
    "k": "q|k|v = h W_qkv + b_qkv, k split into H heads of D (H_kv heads with grouped-query attention)",
    "v": "q|k|v = h W_qkv + b_qkv, v split into H heads of D (H_kv heads with grouped-query attention)",
    "q after rope": "q' = q * cos(t theta) + rotate_half(q) * sin(t theta)  (the kernel's q)",
    "k after rope": "k' = k * cos(t theta) + rotate_half(k) * sin(t theta)  (the kernel's k)",
    "q after qk_norm": "q' = {norm}(q) over {qk_over}, times q_norm.weight",
    "k after qk_norm": "k' = {norm}(k) over {qk_over}, times k_norm.weight",
    "heads merged (out_proj input)": "y = [P_1 v_1 | ... | P_H v_H],  P = softmax(q k^T / sqrt(D), causal mask)",
    "attention branch output": "a = y W_out + b_out",
    "residual after attention": "x' = x + a",
    "pre-MLP norm output": "h' = {norm}(x')",
    "MLP pre-activation": "u = h' W_up + b_up",
    "MLP gate (pre-activation)": "g = h' W_gate + b_gate",
    "MLP up (pre-activation)": "u = h' W_up + b_up",
    "MLP activation (down_proj input)": "m = {act}",
    "MLP branch output": "f = m W_down + b_down",
    "residual after MLP": "x'' = x' + f  (the next block's x)",
    "final norm output": "h = {norm}(x_L);  logits z = h W_U^T",
}

BACKWARD = {
    "loss": "loss = mean over N of -log softmax(z)[target];  d loss = 1",
    "final norm output h": "dz = (softmax(z) - onehot(target)) / N;  dh = dz W_U;  dW_U = dz^T h",
    "residual after the last layer": "dx_L = {norm} backward of dh",
    "MLP activation (down_proj input)": "dm = df W_down^T  (df = the residual's gradient, copied into the branch)",
    "MLP pre-activation": "du = dm * act'(u)",
    "MLP gate (pre-activation)": "dg = dm * u * silu'(g)",
    "MLP up (pre-activation)": "du = dm * silu(g)",
    "pre-MLP norm output": "dh' = {paths}",
    "MLP branch -> residual": "the branch's part of dx' = {norm} backward of dh'",
    "residual after attention (skip + MLP)": "dx' = dx'' (the skip) + the MLP branch's part",
    "heads merged (out_proj input)": "dy = dx' W_out^T",
    "q": "dS = P * (dP - rowsum(dP * P)),  dP = dy v^T;  dq = dS k / sqrt(D)",
    "k": "dk = dS^T q / sqrt(D)  (with grouped keys: summed over the query heads that share them)",
    "v": "dv = P^T dy  (with grouped values: summed over the query heads that share them)",
    "q before rope": "dq = dq' * cos(t theta) + rotate_half^T(dq' * sin(t theta)): the rotation turned back",
    "k before rope": "dk = dk' * cos(t theta) + rotate_half^T(dk' * sin(t theta)): the rotation turned back",
    "q before q_norm": "dq = {norm} backward of dq' over {qk_over};  dq_norm.weight = its sum",
    "k before k_norm": "dk = {norm} backward of dk' over {qk_over};  dk_norm.weight = its sum",
    "pre-attention norm output": "dh = [dq | dk | dv] W_qkv^T",
    "attention branch -> residual": "the branch's part of dx = {norm} backward of dh",
    "residual into the block (skip + attention)": "dx = dx' (the skip) + the attention branch's part",
    "embedding sum": "dW_tok[id[t]] += dx[t] (scatter-add: repeated ids add);  dW_pos[t] = sum over the batch of dx[t]",
}

_LAYER = re.compile(r"layer \d+ ")


def stage_equation(name: str, config, backward: bool = False) -> str | None:
    """The equation of the stage ``name`` (``"layer 0 q"``, ``"final norm output"``) for a model of ``config``;
    None for a stage this table does not know yet (the page then shows none; the tests ask for every stage)."""
    table = BACKWARD if backward else FORWARD
    key = _LAYER.sub("", name, count=1)
    if key == "embedding sum" and not backward and POSITIONS[config.position].added is None:
        key = "embedding sum, no position added"
    if key not in table:
        return None
    activation = ACTIVATIONS[config.activation]
    letters = [name[0] for name in activation.inputs]  # u; gated: g, u
    act = f"{config.activation}({', '.join(letters)}) = {activation.equation}"
    paths = " + ".join(f"d{letter} W_{name}^T" for letter, name in zip(letters, activation.inputs))
    qk_over = QK_NORM_EXTENTS[config.qk_norm_extent].over
    return table[key].format(act=act, paths=paths, norm=config.norm, qk_over=qk_over, position=config.position)
