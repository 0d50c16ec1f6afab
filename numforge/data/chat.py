"""Chat conversations as training rows: the loss on the assistant's tokens only (TRL's ``assistant_only_loss``).

A chat file is JSON Lines, one conversation a line, as TRL and the hub's chat datasets write them::

    {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}

Each conversation is rendered with the model directory's template (``chat_template.py``) and tokenized whole.
Assistant turn i spans, in the text, from the end of ``render(messages[:i], add_generation_prompt=True)`` to
the end of ``render(messages[:i + 1])``, cut just after its last end-of-turn token (the tokenizer's
``eos_ids``: ``<|im_end|>``, ``<|eot_id|>``; the newline a template writes after it is not the model's to say).
The text spans become token spans by tokenizing each prefix: a prefix's ids must be the first ids of the
whole's, else the cut would fall inside a token. A template for which that fails (Qwen3 drops the
``<think>`` blocks of earlier turns, so a prefix is not a prefix of the whole) gives one example per
assistant turn instead, each rendered up to that turn; one that fails even so is refused.

A row is one example, ``T + 1`` ids: inputs ``ids[:-1]``, targets ``ids[1:]`` with every target that is not
the assistant's set to the ignore index (-1, ``model.IGNORE_INDEX``), padded with ignored targets; an example
longer than ``T + 1`` is truncated to its first ``T + 1`` tokens (what is cut is not trained on; a row left
with no assistant token is dropped).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..files import read_text
from .chat_template import ChatTemplate, check_messages

IGNORED = -1  # the loss head's ignore index (model.IGNORE_INDEX; data/ sits below model/)
PAD_ID = 0  # the input id under an ignored padding target (never in the loss: what follows it is ignored)


def read_chat_jsonl(path) -> list[list[dict]]:
    """The conversations of a chat JSONL file; a bad line is a ``ValueError`` naming ``file:line`` and what a
    line must be. Blank lines are skipped."""
    conversations = []
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f'{where}: not JSON ({err.msg}); each line must be {{"messages": [...]}}') from None
        if not isinstance(record, dict) or "messages" not in record:
            raise ValueError(f'{where}: expected an object {{"messages": [{{"role": ..., "content": ...}}, ...]}}')
        try:
            check_messages(record["messages"])
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: {err}") from None
        if not any(m["role"] == "assistant" for m in record["messages"]):
            raise ValueError(f"{where}: the conversation has no assistant message: nothing to train on")
        conversations.append(record["messages"])
    if not conversations:
        raise ValueError(f"{path}: no conversation in the file")
    return conversations


def _turn_spans(template: ChatTemplate, messages: list[dict]) -> list[tuple[str, str]]:
    """(text before, text up to the end of) each assistant turn of ``messages``."""
    return [
        (template.render(messages[:i], add_generation_prompt=True), template.render(messages[: i + 1]))
        for i, message in enumerate(messages)
        if message["role"] == "assistant"
    ]


def _end_of_turn(ids: list[int], start: int, stop: int, eos: set[int]) -> int:
    """``stop`` cut back to just after the last end-of-turn id in ``ids[start:stop]`` (none there: ``stop``)."""
    for k in range(stop - 1, start - 1, -1):
        if ids[k] in eos:
            return k + 1
    return stop


def _masked(ids: list[int], spans: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(ids (N,), trained (N,) bool: the ids inside ``spans``)."""
    trained = np.zeros(len(ids), dtype=bool)
    for start, stop in spans:
        trained[start:stop] = True
    return np.asarray(ids, dtype=np.int64), trained


def _token_spans(tokenizer, text: str, turns: list[tuple[str, str]]) -> tuple[list[int], list] | None:
    """(ids of ``text``, each turn's (start, stop) token span), or None when a turn's prefix text or ids are not a
    prefix of the whole's."""
    encode = lambda s: tokenizer.encode(s, allowed_special="all")  # noqa: E731 (the text's own special tokens)
    ids, eos, spans = encode(text), set(tokenizer.eos_ids), []
    for before, through in turns:
        if not (through.startswith(before) and text.startswith(through)):
            return None
        start, stop = len(encode(before)), len(encode(through))
        if encode(through) != ids[:stop] or encode(before) != ids[:start]:
            return None
        spans.append((start, _end_of_turn(ids, start, stop, eos)))
    return ids, spans


def assistant_examples(template: ChatTemplate, tokenizer, messages: list[dict]) -> list[tuple[np.ndarray, np.ndarray]]:
    """``messages`` as examples ``(ids (N,), trained (N,) bool)``: one when the template renders prefixes as
    prefixes, else one per assistant turn (see the module's docstring); a ``ValueError`` when neither works."""
    turns = _turn_spans(template, messages)
    whole = _token_spans(tokenizer, template.render(messages), turns)
    if whole is not None:
        return [_masked(*whole)]
    examples = []
    for before, through in turns:
        one = _token_spans(tokenizer, through, [(before, through)])
        if one is None:
            raise ValueError(
                "the chat template's text for an assistant turn does not tokenize as the end of its prefix's tokens "
                "(a token straddles the turn's start): the assistant's tokens cannot be told apart"
            )
        examples.append(_masked(*one))
    return examples


@dataclass
class ChatRows:
    """Examples as ``(N, T)`` rows: ``inputs`` int64 and ``targets`` int64, ignored (-1) where not trained."""

    inputs: np.ndarray
    targets: np.ndarray

    @classmethod
    def from_examples(cls, examples: list[tuple[np.ndarray, np.ndarray]], seq_len: int) -> ChatRows:
        """Each example in its own row of ``seq_len`` inputs (truncated to ``seq_len + 1`` ids, padded)."""
        inputs = np.full((len(examples), seq_len), PAD_ID, dtype=np.int64)  # (N,T)
        targets = np.full((len(examples), seq_len), IGNORED, dtype=np.int64)  # (N,T)
        for row, (ids, trained) in enumerate(examples):
            ids, trained = ids[: seq_len + 1], trained[: seq_len + 1]  # (n,) with n <= T + 1
            n = len(ids) - 1
            inputs[row, :n] = ids[:-1]
            targets[row, :n] = np.where(trained[1:], ids[1:], IGNORED)  # target t is id t + 1, trained or not
        return cls(inputs, targets)

    def __len__(self) -> int:
        return len(self.inputs)

    def evaluation_rows(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """``count`` rows, the first ones in order (cycling when there are fewer): the same every evaluation."""
        rows = np.arange(count) % len(self)  # (count,)
        return self.inputs[rows], self.targets[rows]


def rows_sha256(*parts: ChatRows) -> str:
    """The SHA-256 of the parts' inputs and targets, in turn (what a resumed run checks it trains on again)."""
    digest = hashlib.sha256()
    for rows in parts:
        digest.update(rows.inputs.tobytes())
        digest.update(rows.targets.tobytes())
    return digest.hexdigest()


class ChatSampler:
    """``B`` rows drawn uniformly (with replacement) from ``ChatRows`` per batch, by a NumPy generator seeded
    as ``BatchSampler``'s; ``state_dict`` / ``load_state_dict`` as its, so a resumed run draws the same rows."""

    def __init__(self, rows: ChatRows, batch_size: int, seed: int):
        self.rows = rows
        self.batch_size = batch_size
        self.rng = np.random.default_rng(seed)
        self.batches_drawn = 0

    def next_batch(self) -> tuple[np.ndarray, np.ndarray]:
        """``(inputs, targets)``, both int64 ``(B, T)``."""
        picks = self.rng.integers(0, len(self.rows), size=self.batch_size)  # (B,)
        self.batches_drawn += 1
        return self.rows.inputs[picks], self.rows.targets[picks]

    def state_dict(self) -> dict[str, Any]:
        return {"bit_generator": self.rng.bit_generator.state, "batches_drawn": self.batches_drawn}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["bit_generator"]
        self.batches_drawn = int(state["batches_drawn"])


def chat_rows(path, directory, tokenizer, seq_len: int, val_fraction: float = 0.1) -> tuple[ChatRows, ChatRows]:
    """(training rows, validation rows) of the chat file ``path`` with the template of ``directory``: the last
    ``val_fraction`` of the conversations (at least one) held out. A row left without a trained target by the
    truncation is dropped; each part must keep one."""
    conversations = read_chat_jsonl(path)
    if len(conversations) < 2:
        raise ValueError(f"{path}: one conversation only; at least 2 are needed (one is held out for validation)")
    held = max(1, int(round(len(conversations) * val_fraction)))
    template = ChatTemplate.from_directory(Path(directory))
    parts = []
    for name, part in (("training", conversations[:-held]), ("validation", conversations[-held:])):
        examples = [example for messages in part for example in assistant_examples(template, tokenizer, messages)]
        rows = ChatRows.from_examples(examples, seq_len)
        trained = (rows.targets != IGNORED).any(axis=1)  # (N,): a row truncated before its assistant's tokens: none
        if not trained.any():
            raise ValueError(f"{path}: no assistant token of the {name} conversations fits in --seq-len {seq_len}")
        parts.append(ChatRows(rows.inputs[trained], rows.targets[trained]))
    return parts[0], parts[1]
