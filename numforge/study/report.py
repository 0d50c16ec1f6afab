"""The inspector page: the studio's views of one prompt, written as one self-contained HTML file (no server).

``inspect_data(model, tokenizer, text)`` makes, from one forward pass and
one backward on ``text``, the answers the studio's routes would give
(``views.py``): the tokenizer's steps, the forward and backward stages with
their values at the last position and their norms at every position, the predictions, the logit lens, every
layer's attention weights (float16, without the masked triangle; from layer 0
up, as many layers as ``attention_mib`` holds, layer 0 always) and the
next-token pipeline at the last position (temperature 1, greedy).
At GPT-2 124M's shape and a whole context of 1024 tokens every layer's
weights would be 151 MB (201 MB as base64), one layer 12.6 MB.
``page.render_page(data)`` embeds them once, as JSON, in the studio's own
page, whose script reads them instead of asking a server.
"""

from __future__ import annotations

from ..atomic import write_text_atomic
from .backward import backward_stages
from .page import render_page
from .prompt import run_prompt
from .trace import forward_stages
from .views import (
    attention_view,
    lens_view,
    model_view,
    next_token_view,
    stage_at,
    tokenizer_view,
    trace_view,
)

LAST_POSITION_SETTINGS = {"temperature": 1.0, "top_k": None, "top_p": None, "greedy": True, "seed": 0}
ATTENTION_MIB = 16.0  # the attention weights a page holds by default (numforge inspect --attention-mib)


def attention_layers(config, T: int, attention_mib: float = ATTENTION_MIB) -> int:
    """How many layers' attention weights (``H`` heads of ``T (T+1) / 2`` float16 each) fit in ``attention_mib``
    MiB; at least one. Example: GPT-2 124M at T 1024 holds 12.6 MB a layer, so 16 MiB holds one."""
    per_layer = config.num_heads * T * (T + 1) // 2 * 2
    return max(1, min(config.num_layers, int(attention_mib * 2**20 // per_layer)))


def inspect_data(model, tokenizer, text: str, k: int = 3, attention_mib: float = ATTENTION_MIB) -> dict:
    """Everything the page shows, as JSON-ready data (module docstring)."""
    prompt = run_prompt(model, tokenizer, text)
    grads = backward_stages(model, prompt)[0] if prompt.loss is not None else None
    T = len(prompt.ids)
    forward = forward_stages(model, prompt)
    heads = list(range(model.config.num_heads))
    return {
        "prompt": text,
        "model": model_view(model, "", has_run=False),
        "answers": {
            "tokenize": tokenizer_view(tokenizer, text),
            "trace": trace_view(model, tokenizer, prompt, grads, T - 1, k),
            "lens": lens_view(model, tokenizer, prompt, k),
            "at": [{"forward": norms_at(forward, t, T), "backward": norms_at(grads or (), t, T)} for t in range(T)],
            "next": next_token_view(model, tokenizer, prompt, None, LAST_POSITION_SETTINGS),
            "attention": [attention_view(model, tokenizer, prompt, 0, heads, k)]
            + [
                {"layer": layer, "weights": attention_view(model, tokenizer, prompt, layer, heads, k)["weights"]}
                for layer in range(1, attention_layers(model.config, T, attention_mib))
            ],  # the tokens and predictions once, with layer 0
        },
    }


def norms_at(stages, position: int, T: int) -> list:
    """Each stage's ``[norm]`` at ``position`` (``stage_at`` without the first values, to keep the page small)."""
    return [None if at is None else at[:1] for at in (stage_at(s, position, T) for s in stages)]


def write_page(path, data: dict) -> None:
    write_text_atomic(path, render_page(data))
