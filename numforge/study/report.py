"""The inspector page: one self-contained HTML file showing a whole forward and backward pass.

``inspect_data(model, tokenizer, text)`` gathers, from one forward pass and
one backward on ``text``: the tokens and their ids, the forward stages
(``trace.py``), the attention weights of every layer and head
(``attention.py``), the per-position predictions and the logit lens
(``predictions.py``) and the backward stages (``backward.py``), as plain
JSON-ready data. ``render_page(data)`` writes it as HTML: tables for the
numbers, the data embedded once as JSON (``<script type="application/json"
id="data">``), and a small script (``report_page.py``) that draws the
attention heatmaps on canvases with the weights on hover. No network, no
external file: the page opens from disk in any browser.
"""

from __future__ import annotations

import html
import json

import numpy as np

from ..atomic import write_text_atomic
from .attention import model_attention_weights
from .backward import backward_stages
from .predictions import logit_lens, position_predictions
from .prompt import describe_model, run_prompt, token_label
from .report_page import SCRIPT, STYLE
from .trace import forward_stages


def inspect_data(model, tokenizer, text: str, k: int = 3) -> dict:
    """Everything the page shows, as JSON-ready data (module docstring)."""
    prompt = run_prompt(model, tokenizer, text)
    T = len(prompt.ids)
    visible = np.tril(np.ones((T, T), dtype=bool))  # causal: query i sees keys j <= i

    def labelled(top):
        return [[i, token_label(tokenizer, i), p] for i, p in top]

    weights = [
        [np.where(visible, layer[0, h], np.nan).tolist() for h in range(layer.shape[1])]
        for layer in model_attention_weights(prompt.cache)
    ]  # per layer, per head, (T,T); masked entries NaN, written as null
    data = {
        "prompt": text,
        "model": describe_model(model),
        "tokens": [{"position": t, "id": i, "text": s} for t, (i, s) in enumerate(zip(prompt.ids, prompt.tokens))],
        "loss": prompt.loss,
        "forward": [
            {
                "name": s.name,
                "shape": list(s.shape),
                "mean": s.mean,
                "std": s.std,
                "min": s.min,
                "max": s.max,
                "last": list(s.last),
                "source": s.source,
            }
            for s in forward_stages(model, prompt)
        ],
        "attention": {"path": model.config.attention, "weights": _nulls(weights)},
        "predictions": [
            {
                "position": p.position,
                "token": p.token,
                "target": p.target,
                "target_prob": p.target_prob,
                "loss": p.loss,
                "top": labelled(p.top),
            }
            for p in position_predictions(prompt, k)
        ],
        "lens": [
            {"name": r.name, "source": r.source, "top": [labelled(top) for top in r.top]}
            for r in logit_lens(model, prompt, k)
        ],
        "backward": [],
    }
    if prompt.loss is not None:
        stages, _ = backward_stages(model, prompt)
        data["backward"] = [
            {
                "name": s.name,
                "shape": list(s.shape),
                "norm": s.norm,
                "mean": s.mean,
                "std": s.std,
                "max_abs": s.max_abs,
                "params": [[name, list(shape), norm] for name, shape, norm in s.params],
            }
            for s in stages
        ]
    return data


def _nulls(nested):
    """NaN -> None, all the way down (JSON has no NaN)."""
    if isinstance(nested, list):
        return [_nulls(x) for x in nested]
    return None if isinstance(nested, float) and nested != nested else nested


def _table(header: list[str], rows: list[list], text: tuple[int, ...] = (0,), classes: list[str] | None = None) -> str:
    """An HTML table; the columns numbered in ``text`` are left-aligned, the others (numbers) right-aligned."""

    def cells(values, tag):
        return "".join(
            f"<{tag}{' class=t' if c in text else ''}>{html.escape(str(v))}</{tag}>" for c, v in enumerate(values)
        )

    body = "".join(
        f"<tr{' class=' + classes[r] if classes and classes[r] else ''}>{cells(row, 'td')}</tr>"
        for r, row in enumerate(rows)
    )
    return f"<table><tr>{cells(header, 'th')}</tr>{body}</table>"


def _g(value, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}g}"


def _top(top, width: int = 24) -> str:
    """``"text" p, ...``: each token's text (JSON-quoted, cut to ``width``) and its probability."""
    return ", ".join(f"{_cut(json.dumps(text), width)} {p:.3f}" for _, text, p in top)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def render_page(data: dict) -> str:
    """The whole page as one HTML string (module docstring)."""
    tokens = "".join(
        f'<span class="tok">{html.escape(json.dumps(t["text"]))} <small>{t["id"]}</small></span>'
        for t in data["tokens"]
    )
    forward = _table(
        ["stage", "shape", "mean", "std", "min", "max", "last position, first values", "read from"],
        [
            [
                s["name"],
                tuple(s["shape"]),
                _g(s["mean"]),
                _g(s["std"]),
                _g(s["min"]),
                _g(s["max"]),
                " ".join(_g(v) for v in s["last"]),
                s["source"],
            ]
            for s in data["forward"]
        ],  # fmt: skip
        text=(0, 6, 7),
    )
    predictions = _table(
        ["pos", "token", "target (next token)", "p(target)", "loss", "top predictions"],
        [
            [
                p["position"],
                json.dumps(data["tokens"][p["position"]]["text"]),
                "(none: the end)" if p["target"] is None else json.dumps(data["tokens"][p["position"] + 1]["text"]),
                _g(p["target_prob"]),
                _g(p["loss"]),
                _top(p["top"]),
            ]
            for p in data["predictions"]
        ],  # fmt: skip
        text=(1, 2, 5),
    )
    lens = _table(
        ["residual stream"] + [json.dumps(t["text"]) for t in data["tokens"]],
        [[r["name"]] + [_top(top[:1], 14) for top in r["top"]] for r in data["lens"]],
        text=tuple(range(len(data["tokens"]) + 1)),
    )
    rows, classes = [], []
    for s in data["backward"]:
        rows.append(
            [s["name"], tuple(s["shape"]), _g(s["norm"]), _g(s["mean"], 3), _g(s["std"], 3), _g(s["max_abs"], 3)]
        )
        classes.append("")
        for name, shape, norm in s["params"]:
            rows.append([f"    param {name}", tuple(shape), _g(norm), "", "", ""])
            classes.append("param")
    backward = _table(
        ["upstream gradient (d loss / d ...)", "shape", "norm", "mean", "std", "max |.|"], rows, (0,), classes
    )
    loss = "none (one token: no target)" if data["loss"] is None else f"{data['loss']:.6f}"
    payload = json.dumps(data, allow_nan=False).replace("</", "<\\/")  # no "</script>" inside the script
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>numforge inspect: {html.escape(data["prompt"])}</title>
<style>{STYLE}</style></head>
<body>
<h1>numforge inspect</h1>
<p>prompt {html.escape(json.dumps(data["prompt"]))}; model: {html.escape(data["model"])}; loss {loss}</p>
<h2>Tokens and their ids</h2><p>{tokens}</p>
<h2>Forward pass, stage by stage</h2>{forward}
<h2>Attention weights, per layer and head</h2>
<p class="note">Rows are queries, columns keys; the masked upper triangle is blank; hover a cell for its weight.
The {html.escape(data["attention"]["path"])} path's weights{
        " (rebuilt from its saved log-sum-exp, P = exp(S - L))" if data["attention"]["path"] == "tiled" else ""
    }.</p>
<div id="attention"></div>
<h2>Predictions at each position</h2>{predictions}
<h2>Logit lens: each residual stream's top-1 prediction</h2>{lens}
<h2>Backward pass, stage by stage (in the order the backward makes them)</h2>{backward}
<div id="tip"></div>
<script type="application/json" id="data">{payload}</script>
<script>{SCRIPT}</script>
</body></html>
"""


def write_page(path, data: dict) -> None:
    write_text_atomic(path, render_page(data))
