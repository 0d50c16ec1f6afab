"""One position's path through the model, step by step, for the studio's Walkthrough view.

``walkthrough_view(model, tokenizer, prompt, position, head)`` follows position ``t`` of the prompt, and query
head ``h`` inside each attention, from its token to the final norm's output (the logits, the softmax at a
temperature, top-k/top-p and the choice are the Next token view's answer, ``views.next_token_view``)::

    token embedding, position embedding, embedding sum x      forward_stages, at t                  (C,)
    per layer:
      pre-attention norm output h                             forward_stages, at t                  (C,)
      q, k, v (and q, k after QK-norm / the rotation)         forward_stages: q of head h at t      (D,)
                                                              k, v of h's key/value head g at t     (D,)
                                                              and at every key j <= t               (t+1, D)
      scores S = s q k_j^T                                    the kernel's cached q, k and scale    (T,)
      mask: S' = f(S) + the layer's score terms               attention.head_scores (ScoreSeam), t  (T,)
      softmax P = softmax(S')                                 attention.attention_weights, row t    (T,)
      weighted sum o = sum_j P_j v_j                          out_proj.x at t, head h's D values    (D,)
      heads merged, output projection, residual, the MLP's    forward_stages, at t
    final norm output h                                       forward_stages, at t                  (C,)

Every number is read from the cache of the one forward pass ``run_prompt`` made, or made by the kernel's own
functions on it (the scores from the cached ``q, k`` and scale, as the kernel forms them; the mask by the
terms the tiled kernel adds to each tile, ``ops/scores.py``); nothing is derived again by hand. A step holds its array's
``shape`` at the position, its norm, its first ``VALUES`` numbers (6 significant digits), a sentence and its
equation; the steps over keys hold one number per key (``None`` where the mask hides the key: ``-inf``).
"""

from __future__ import annotations

import numpy as np

from ..backend import to_numpy
from ..checks import check_index
from .attention import attention_weights, head_scores, kv_head
from .components import stage_name
from .equations import modifiers_text, scale_text, stage_equation
from .trace import at_position, forward_stages
from .views import rounded, token_rows

VALUES = 16  # the first numbers of a vector a step shows
KEY_VALUES = 4  # the first numbers of each key's (or value's) vector
ATTENTION_AFTER = "heads merged (out_proj input)"  # the trace's stage that the attention steps come before

SAYS = {  # a stage's kind -> the sentence the walkthrough says of it
    "token embedding": "The token's id picks its row of the embedding table: the token as a vector of C numbers.",
    "position embedding": "The position's own vector, added so that the model can tell where the token stands.",
    "embedding sum": "The residual stream: every block reads it and adds its own output to it.",
    "pre-attention norm output": "The stream brought to a fixed scale (times a learned gain) for attention to read.",
    "q": "The query of this position in the head followed: what it looks for among the earlier tokens.",
    "k": "The keys of the head's key/value head at every position up to this one: what each offers to be found by.",
    "v": "The values: what each position hands on to the positions that attend to it.",
    "q after rope": "The query turned by angles that grow with its position, so q.k depends on how far apart two "
    "tokens are.",
    "k after rope": "Each key turned by its own position's angles, the same rotation as the queries.",
    "q after qk_norm": "The query normalized over its values, so that no score can grow without bound.",
    "k after qk_norm": "Each key normalized the same way.",
    "scores": "One number per key: how well this position's query matches that key, q.k times the scale s.",
    "mask": "The mask hides every later position (-inf): a token may only look back at itself and what came before.",
    "softmax": "The scores made into weights, each >= 0, that sum to 1: how much of each position's value is taken.",
    "weighted sum": "The head's output: every visible position's value times its weight, added up.",
    ATTENTION_AFTER: "The outputs of all the heads side by side.",
    "attention branch output": "The output projection mixes the heads back into the stream's C numbers: what "
    "attention adds.",
    "residual after attention": "The stream plus attention's output: a block only adds to what was there.",
    "pre-MLP norm output": "The stream normalized again, this time for the MLP.",
    "pre-MLP norm output (router and experts input)": "The stream normalized again, for the router and the experts.",
    "router probabilities (N,E)": "The router's probabilities over the experts, for this token.",
    "gates of the chosen experts (N,k)": "The weights of the experts chosen for this token.",
    "MLP pre-activation": "The MLP widens the stream to F numbers; it reads this position only.",
    "MLP gate (pre-activation)": "The MLP's gate: F numbers from this position only.",
    "MLP up (pre-activation)": "The MLP's other half: F more numbers from this position.",
    "MLP activation (down_proj input)": "A nonlinearity, number by number.",
    "MLP branch output": "Projected back to the stream's C numbers: what the MLP adds.",
    "residual after MLP": "The stream after the block, the next block's input.",
    "final norm output": "The last stream, normalized: h, which the unembedding turns into one score per token.",
}


def walkthrough_view(model, tokenizer, prompt, position: int, head: int = 0) -> dict:
    """Position ``position``'s steps through the forward pass ``prompt.cache``, following query head ``head``
    (module docstring)."""
    config, T = model.config, len(prompt.ids)
    check_index(position, T, "position")
    check_index(head, config.num_heads, "head")
    kv = kv_head(config, head)
    steps = []
    for stage in forward_stages(model, prompt):
        if stage.kind == ATTENTION_AFTER:
            steps += attention_steps(model, prompt.cache.blocks[stage.layer].attention, stage.layer, position, head)
        steps.append(stage_step(stage, config, position, T, head, kv))
    return {
        "tokens": token_rows(tokenizer, prompt.ids),
        "position": position,
        "head": head,
        "kv_head": kv,
        "heads": config.num_heads,
        "kv_heads": config.num_kv_heads,
        "steps": steps,
    }


def vector(values) -> list[float]:
    return [rounded(float(v)) for v in np.ravel(values)[:VALUES]]


def step(kind: str, config, layer, shape, values, **more) -> dict:
    """A step of ``kind``: its name and equation by the model's components, its sentence, its numbers."""
    values = np.asarray(values, dtype=np.float64)
    return {
        "kind": kind,
        "name": stage_name(kind, config, layer),
        "layer": layer,
        "shape": list(shape),
        "says": SAYS.get(kind, ""),
        "equation": stage_equation(kind, config, layer),
        "norm": rounded(float(np.linalg.norm(values))),
        "values": vector(values),
        **more,
    }


def stage_step(stage, config, position: int, T: int, head: int, kv: int) -> dict:
    """A stage of the trace at ``position``: a vector ``(X,)``; of q (k, v) head ``head``'s (``kv``'s)
    ``(D,)`` with, for k and v, every key up to the position ``(t+1, D)`` as ``[norm, first values]`` rows."""
    part = at_position(stage.array, position, T)  # (X,) or (H,D)
    if len(stage.shape) != 4:
        return step(stage.kind, config, stage.layer, part.shape, part)
    if stage.kind.startswith("q"):
        return step(stage.kind, config, stage.layer, part.shape, part[head], head=head)
    keys = to_numpy(stage.array[0, kv, : position + 1]).astype(np.float64)  # (t+1,D), from NumPy or CuPy
    rows = [[rounded(float(np.linalg.norm(k)))] + [rounded(float(v)) for v in k[:KEY_VALUES]] for k in keys]
    return step(stage.kind, config, stage.layer, part.shape, part[kv], kv_head=kv, keys=rows)


def attention_steps(model, branch, layer: int, position: int, head: int) -> list[dict]:
    """The attention of ``layer`` at ``position``, head ``head``: the scores against every key, the mask, the
    softmax (each ``(T,)``, a key the mask hides ``None``), the weighted sum ``(D,)``."""
    config, kernel = model.config, branch.attention
    found = head_scores(config, kernel, layer, head, range(position, position + 1))  # (1,T) each
    scores, masked = found.raw[0], found.modified[0]  # (T,) S and S'
    T, D = scores.shape[-1], config.head_dim
    weights = attention_weights(kernel)[0, head, position]  # (T,) the kernel's own P
    merged = at_position(branch.out_proj.x, position, T)  # (H D,) the heads side by side
    hidden = np.isneginf(masked)  # (T,)
    equations = {
        "scores": f"S_j = s q . k_j,  s = {scale_text(config)}",
        "mask": f"S'_j = S_j with {modifiers_text(config, layer)}  (-inf: hidden)",
        "softmax": "P_j = exp(S'_j - max S') / sum_i exp(S'_i - max S')",
        "weighted sum": "o = sum_j P_j v_j",
    }
    each = {
        "scores": scores,
        "mask": np.where(hidden, 0.0, masked),
        "softmax": weights,
        "weighted sum": merged.reshape(config.num_heads, D)[head],  # (H D,) -> (H,D) -> (D,)
    }
    steps = []
    for kind, values in each.items():
        found = step(kind, config, layer, values.shape, values, equation=equations[kind], head=head)
        if kind != "weighted sum":  # one number per key, every key: the mask's hidden ones None (-inf)
            keyed = [None if kind == "mask" and h else rounded(float(v)) for v, h in zip(values, hidden)]
            found.update(values=keyed, norm=None, hidden=int(hidden.sum()))
        steps.append(found)
    return steps
