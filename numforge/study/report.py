"""The inspector page: the studio's views of one prompt, written as one self-contained HTML file (no server).

``inspect_data(model, tokenizer, text)`` makes, from one forward pass and
one backward on ``text``, the answers the studio's routes would give
(``views.py``): the tokenizer's steps, the forward and backward stages with
their values at every position, the predictions and the logit lens, every
layer's attention weights (float16, without the masked triangle) and the
next-token pipeline at the last position (temperature 1, greedy).
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
    model_view,
    next_token_view,
    stage_at,
    tokenizer_view,
    trace_view,
)

LAST_POSITION_SETTINGS = {"temperature": 1.0, "top_k": None, "top_p": None, "greedy": True, "seed": 0}


def inspect_data(model, tokenizer, text: str, k: int = 3) -> dict:
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
            "at": [
                {"forward": [stage_at(s, t, T) for s in forward], "backward": [stage_at(s, t, T) for s in grads or ()]}
                for t in range(T)
            ],
            "next": next_token_view(model, tokenizer, prompt, None, LAST_POSITION_SETTINGS),
            "attention": [
                attention_view(model, tokenizer, prompt, layer, heads, k) for layer in range(model.config.num_layers)
            ],
        },
    }


def write_page(path, data: dict) -> None:
    write_text_atomic(path, render_page(data))
