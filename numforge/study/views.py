"""The studio's views as JSON-ready data: what ``numforge studio`` serves and ``numforge inspect`` embeds.

Each function turns the results of the study functions (``explain``,
``forward_stages``, ``backward_stages``, ``attention_weights``,
``position_predictions``, ``logit_lens``, ``next_token``, ``generate_ids``,
``read_loss_csv``) into plain lists and dicts; none computes anything of
its own. Tokens are sent as ids, with one ``labels`` map ``{id: shown}``
(``shown_token``) per answer, so the page writes every token one way.

Attention weights are sent as float16 (about 3 significant digits; weights
below 6e-8 become 0), without the masked upper triangle: row ``i`` holds keys
``0..i``, rows one after the other, little-endian, base64 (``tril``). At
GPT-2's context (1024) one head is 1.0 MB before base64 instead of the 8 MB
of a full float64 matrix. The overview's thumbnails are float16 too, whole ``(n,n)`` matrices
(``float16_base64``): ``L H n^2`` numbers whatever the prompt's length. The scores mode's matrices and q, k
vectors, one head's, are float32, whole, row-major (``float32_base64``: the scores hold every key, and a masked
entry's ``-inf`` is a float32 like any other).
"""

from __future__ import annotations

import base64
import math

import numpy as np

from ..backend import to_numpy
from ..checks import check_index
from ..generate import decodable_ids, generate_ids
from ..model.positions import POSITIONS
from ..tokenizer.explain import explain
from ..training.logs import LOSS_CSV, read_loss_csv
from .attention import attention_weights, head_scores, kv_head, overview
from .equations import modifiers_text, scale_text, stage_equation
from .next_token import next_token
from .predictions import logit_lens, position_predictions
from .prompt import describe_model, shown_text, shown_token, token_label
from .trace import at_position, forward_stages

MAX_MERGE_CELLS = 200_000  # the tokenizer view's merge steps: the sum over merges of the chunk's length after it
TOP_TOKENS = 20  # rows of the next-token table
HIDDEN_VALUES = 64  # first values of the hidden state shown


def rounded(value: float | None, digits: int = 6) -> float | None:
    """``value`` to ``digits`` significant digits (None stays None): the numbers the page shows."""
    return None if value is None else float(f"{value:.{digits}g}")


def tril_float16(matrix: np.ndarray) -> str:
    """The lower triangle of a ``(T,T)`` matrix (row ``i``: columns ``0..i``) as little-endian float16, base64."""
    rows, cols = np.tril_indices(matrix.shape[0])
    return base64.b64encode(matrix[rows, cols].astype("<f2").tobytes()).decode("ascii")


def float16_base64(array: np.ndarray) -> str:
    """Every entry of ``array``, row-major, as little-endian float16, base64."""
    return base64.b64encode(np.ascontiguousarray(array, dtype="<f2").tobytes()).decode("ascii")


def float32_base64(array: np.ndarray) -> str:
    """Every entry of ``array``, row-major, as little-endian float32, base64."""
    return base64.b64encode(np.ascontiguousarray(array, dtype="<f4").tobytes()).decode("ascii")


class Labels:
    """The ``{id: shown}`` map of one answer: every id it mentions, written by ``shown_token``."""

    def __init__(self, tokenizer):
        self.tokenizer, self.found = tokenizer, {}

    def __call__(self, token_id: int) -> int:
        token_id = int(token_id)
        if token_id not in self.found:
            self.found[token_id] = shown_token(self.tokenizer, token_id)
        return token_id

    def json(self) -> dict[str, str]:
        return {str(i): shown for i, shown in self.found.items()}


def token_rows(tokenizer, ids) -> list[dict]:
    """One row per token: id, text (``token_label``), shown (``shown_token``), bytes in hex."""
    return [
        {
            "id": int(i),
            "text": token_label(tokenizer, i),
            "shown": shown_token(tokenizer, i),
            "bytes": tokenizer.token_bytes(i).hex(" ") if tokenizer.has_token(i) else "",
        }
        for i in ids
    ]


def model_view(model, source: str, has_run: bool) -> dict:
    c = model.config
    return {
        "description": describe_model(model),
        "architecture": architecture(c),
        "source": source,
        "vocab_size": c.vocab_size,
        "context": c.max_seq_len,
        "layers": c.num_layers,
        "heads": c.num_heads,
        "kv_heads": c.num_kv_heads,
        "kv_head_of": kv_head_of(c),
        "head_dim": c.head_dim,
        "d_model": c.d_model,
        "norm": c.norm,
        "position": c.position,
        "tied": c.tie_weights,
        "attention": c.attention,
        "training": has_run,
    }


def kv_head_of(config) -> list[int]:
    """The key/value head each query head attends with: ``h // G``, ``G = H / H_kv`` (``ops/attention.py``)."""
    return [kv_head(config, h) for h in range(config.num_heads)]


def architecture(config) -> str:
    """One sentence naming the model's parts: ``"4 query heads of width 8 over 2 key/value heads (query heads
    0-1 share key/value head 0, 2-3 head 1); rmsnorm; rope positions (q and k rotated by their positions, no
    parameters); swiglu MLP; untied unembedding (lm_head)"``, naming a sliding window (after the heads) and
    experts (in the MLP) where the model has them."""
    H, H_kv, owner = config.num_heads, config.num_kv_heads, kv_head_of(config)
    groups = [[h for h in range(H) if owner[h] == g] for g in range(H_kv)]
    shared = "; ".join(f"query heads {g[0]}-{g[-1]} share key/value head {n}" for n, g in enumerate(groups))
    heads = (
        f"{H} heads of width {config.head_dim}, each with its own keys and values"
        if H == H_kv
        else f"{H} query heads of width {config.head_dim} over {H_kv} key/value heads ({shared})"
    )
    about = POSITIONS[config.position].about.split(": ", 1)[-1]
    tied = "tied unembedding (the token table)" if config.tie_weights else "untied unembedding (lm_head)"
    mlp = f"{config.activation} MLP" + (f" ({config.about_experts()} per token)" if config.num_experts else "")
    window = f"; {config.about_window()}" if config.sliding_window else ""
    return f"{heads}{window}; {config.norm}; {config.position} positions ({about}); {mlp}; {tied}"


def tokenizer_view(tokenizer, text: str) -> dict:
    """The text's chunks (the split pattern's cut), each with its merges in rank order (``explain``)."""
    chunks = explain(tokenizer, text)
    if sum(len(m.ids) for chunk in chunks for m in chunk.merges) > MAX_MERGE_CELLS:
        raise ValueError(f"this text takes more than {MAX_MERGE_CELLS:,} merge steps to show; give a shorter text")
    label = Labels(tokenizer)
    ids = [label(i) for chunk in chunks for i in chunk.ids]
    found = [
        {
            "text": chunk.text,
            "shown": shown_text(chunk.text),
            "special": chunk.special,
            "whole": chunk.whole_id is not None,  # in the vocabulary whole (ignore_merges): no merge applies
            "start": [label(i) for i in chunk.start_ids],
            "merges": [
                {"rank": m.rank, "pair": [label(m.pair[0]), label(m.pair[1])], "id": label(m.new_id), "ids": m.ids}
                for m in chunk.merges
            ],
            "ids": list(chunk.ids),
        }
        for chunk in chunks
    ]
    return {
        "characters": len(text),
        "bytes": len(text.encode("utf-8", "surrogatepass")),
        "chunks": found,
        "tokens": token_rows(tokenizer, ids),
        "labels": label.json(),
    }


def trace_view(model, tokenizer, prompt, grad_stages, position: int, k: int = 3) -> dict:
    """The forward stages, the backward stages (``grad_stages``; None for a one-token prompt), each with its
    equation and its values at ``position``; the per-position predictions."""
    T, label = len(prompt.ids), Labels(tokenizer)
    check_index(position, T, "position")
    forward = [
        {
            "name": s.name,
            "equation": stage_equation(s.kind, model.config, s.layer),
            "shape": list(s.shape),
            "mean": s.mean,
            "std": s.std,
            "min": s.min,
            "max": s.max,
            "source": s.source,
            "at": stage_at(s, position, T),
        }
        for s in forward_stages(model, prompt)
    ]
    backward = [
        {
            "name": s.name,
            "equation": stage_equation(s.kind, model.config, s.layer, backward=True),
            "shape": list(s.shape),
            "norm": s.norm,
            "mean": s.mean,
            "std": s.std,
            "max_abs": s.max_abs,
            "params": [[name, list(shape), norm] for name, shape, norm in s.params],
            "at": stage_at(s, position, T),
        }
        for s in grad_stages or ()
    ]
    return {
        "tokens": token_rows(tokenizer, prompt.ids),
        "loss": prompt.loss,
        "position": position,
        "forward": forward,
        "backward": backward,
        "predictions": predictions_json(prompt, label, k),
        "labels": label.json(),
    }


def lens_view(model, tokenizer, prompt, k: int = 3) -> dict:
    """The logit lens (``logit_lens``): each residual stream's top ``k`` at every position. Its own answer, as
    it costs one unembedding per stream (at GPT-2's shape and context, more than the forward and backward)."""
    label, lens = Labels(tokenizer), logit_lens(model, prompt, k)
    return {
        "streams": [{"name": r.name, "source": r.source} for r in lens],
        "top": [[[[label(i), rounded(p, 4)] for i, p in top] for top in r.top] for r in lens],
        "labels": label.json(),
    }


def stage_at(stage, position: int, T: int) -> list[float] | None:
    """A stage's array at ``position`` (``at_position``) as ``[norm, first 4 values]``, 4 significant digits;
    None for an array with no position axis."""
    part = at_position(stage.array, position, T)
    if part is None:
        return None
    return [rounded(float(np.linalg.norm(part)), 4)] + [rounded(float(v), 4) for v in part.ravel()[:4]]


def predictions_json(prompt, label: Labels, k: int) -> list[dict]:
    return [
        {
            "target": None if p.target is None else label(p.target),
            "target_prob": rounded(p.target_prob),
            "loss": rounded(p.loss),
            "top": [[label(i), rounded(q, 4)] for i, q in p.top],
        }
        for p in position_predictions(prompt, k)
    ]


def attention_view(model, tokenizer, prompt, layer: int, heads: list[int], k: int = 3) -> dict:
    """The weights of ``heads`` of ``layer`` (``tril_float16`` each), and the top-``k`` predictions per position."""
    config = model.config
    check_index(layer, config.num_layers, "layer")
    for head in heads:
        check_index(head, config.num_heads, "head")
    weights = attention_weights(prompt.cache.blocks[layer].attention.attention)  # (1,H,T,T)
    label = Labels(tokenizer)
    return {
        "layer": layer,
        "heads": heads,
        "T": len(prompt.ids),
        "tokens": token_rows(tokenizer, prompt.ids),
        "path": config.attention,
        "encoding": "tril float16 base64",
        "weights": [tril_float16(weights[0, h]) for h in heads],
        "predictions": predictions_json(prompt, label, k),
        "labels": label.json(),
    }


def attention_overview_view(model, prompt) -> dict:
    """Every layer's and head's weights pooled to at most ``OVERVIEW_CELLS`` squared cells (``thumbs[layer][head]``,
    ``float16_base64`` of ``(n,n)``; cell ``(a,b)`` the mean of the queries in bin ``a`` and the keys in bin
    ``b``, the bins' ``edges``), and per head its mean entropy, distance, weight on the first and on the previous
    token (``head_summaries``; ``summaries[layer][head]``)."""
    config, found = model.config, overview(prompt.cache)
    return {
        "T": len(prompt.ids),
        "layers": config.num_layers,
        "heads": config.num_heads,
        "kv_head_of": kv_head_of(config),
        "path": config.attention,
        "cells": len(found.edges) - 1,
        "edges": [int(e) for e in found.edges],
        "encoding": "float16 base64, (n,n) row-major",
        "thumbs": [[float16_base64(head) for head in layer] for layer in found.thumbs],
        "summaries": [[summary(layer, h) for h in range(config.num_heads)] for layer in found.summaries],
    }


def summary(layer: dict[str, np.ndarray], head: int) -> dict[str, float | None]:
    """Head ``head``'s numbers of ``head_summaries``, 6 significant digits (NaN: None)."""
    return {name: None if math.isnan(v[head]) else rounded(float(v[head])) for name, v in layer.items()}


def attention_scores_view(model, prompt, layer: int, head: int) -> dict:
    """Query head ``head`` of ``layer``, every query against every key (``head_scores``): ``S = s q k^T``
    (``scores``), ``f(S)`` (``capped``: S itself without a soft cap), the modifiers' ``terms`` and ``S' = f(S) +
    terms`` (``modified``), each ``(T,T)``; the cached ``q`` of the head and ``k`` of the key/value head it reads,
    ``(T,D)`` each; all ``float32_base64``."""
    config = model.config
    check_index(layer, config.num_layers, "layer")
    check_index(head, config.num_heads, "head")
    kernel, T = prompt.cache.blocks[layer].attention.attention, len(prompt.ids)
    found, kv = head_scores(config, kernel, layer, head, range(T)), kv_head(config, head)
    q, k = kernel.q[0, head], kernel.k[0, kv]  # (T,D) each: query head h, and the kv head it reads
    return {
        "layer": layer,
        "head": head,
        "kv_head": kv,
        "T": T,
        "D": config.head_dim,
        "scale": float(kernel.scale),
        "scale_text": scale_text(config),
        "modifiers": modifiers_text(config, layer),
        "softcap": config.attn_softcap,
        "encoding": "float32 base64, row-major",
        **{name: float32_base64(getattr(found, name)) for name in ("raw", "capped", "terms", "modified")},
        "q": float32_base64(to_numpy(q)),
        "k": float32_base64(to_numpy(k)),
    }


def next_token_view(model, tokenizer, prompt, position, settings: dict, all_logits: bool = False) -> dict:
    """The pipeline at ``position`` (``next_token``) under ``settings`` (temperature, top_k, top_p, greedy, seed)."""
    allowed = decodable_ids(tokenizer, model.config.vocab_size)
    nt = next_token(prompt, position, allowed=allowed, **settings)
    label = Labels(tokenizer)
    order = np.argsort(-nt.probs, kind="stable")[:TOP_TOKENS]
    chosen, target = label(nt.chosen), prompt.targets[nt.position]
    answer = {
        "tokens": token_rows(tokenizer, prompt.ids),
        "text": tokenizer.decode(list(prompt.ids)),
        "position": nt.position,
        **settings,
        "hidden": {
            "first": [rounded(v, 4) for v in nt.hidden[:HIDDEN_VALUES]],
            "size": int(nt.hidden.size),
            "norm": float(np.linalg.norm(nt.hidden.astype(np.float64))),
            "source": f"loss.rows[{nt.position}]",
        },
        "logits": {
            "min": float(nt.logits.min()),
            "max": float(nt.logits.max()),
            "mean": float(nt.logits.mean()),
            "std": float(nt.logits.std()),
            "source": f"loss.rows[{nt.position}] @ loss.table^T",
        },
        "top": [[label(i), float(nt.logits[i]), float(nt.probs[i]), float(nt.kept[i])] for i in order],
        "kept_count": int(np.count_nonzero(nt.kept)),
        "kept_mass": float(nt.probs[nt.kept > 0].sum()),
        "chosen": {
            **token_rows(tokenizer, [chosen])[0],
            "logit": float(nt.logits[chosen]),
            "p": float(nt.probs[chosen]),
            "q": float(nt.kept[chosen]),
        },
        "target": None if target < 0 else label(target),
        "vocab_size": int(nt.logits.size),
    }
    answer["labels"] = label.json()  # after every id above was labelled
    if all_logits:
        answer["all_logits"] = nt.logits.tolist()
    return answer


def generate_view(model, tokenizer, ids: list[int], count: int, settings: dict) -> dict:
    """``count`` new tokens after ``ids`` with the KV cache (``generate_ids``, as ``numforge sample`` does)."""
    room = model.config.max_seq_len - len(ids)
    if count > room:
        raise ValueError(f"the context holds {room} more tokens after these {len(ids)}; ask for at most {room}")
    temperature = 0 if settings["greedy"] else settings["temperature"]
    new = list(
        generate_ids(
            model,
            ids,
            count,
            temperature=temperature,
            top_k=settings["top_k"],
            top_p=settings["top_p"],
            seed=settings["seed"],
            stop_ids=tokenizer.eos_ids,
            allowed=decodable_ids(tokenizer, model.config.vocab_size),
        )
    )
    return {"ids": new, "tokens": token_rows(tokenizer, new), "text": tokenizer.decode(new)}


def training_view(run_dir, sample: dict | None) -> dict:
    """The run's ``loss.csv`` so far (step, train and validation loss, learning rate) and ``sample``."""
    rows = read_loss_csv(run_dir / LOSS_CSV, up_to_step=math.inf)
    return {
        "run": run_dir.name,
        "rows": [
            [int(r["step"]), float(r["train_loss"]), float(r["val_loss"]) if r["val_loss"] else None, float(r["lr"])]
            for r in rows
        ],
        "sample": sample,
    }
