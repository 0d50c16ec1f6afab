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

A row is ``T`` positions: an example of ``n + 1`` ids takes ``n`` of them, inputs ``ids[:-1]`` and targets
``ids[1:]`` with every target that is not the assistant's set to the ignore index (-1, ``model.IGNORE_INDEX``).
An example longer than ``T + 1`` ids is truncated to its first ``T + 1`` (what is cut is not trained on; an
example left with no assistant token is dropped). Two ways to lay examples in rows:

- packed (``--chat``'s default): several examples a row, end to end, each with its segment id
  (``segments (N,T)``: ``[0 0 0 1 1 2 2]``), so that the model attends within each and counts its positions
  from 0 (``model/packing.py``): each example computes what it would alone. Rows are filled by first fit
  decreasing: the examples, longest first (ties in file order), each into the first row with room for it, else
  a new row. An example is never split across rows: one truncated to a whole row fills a row alone. What is
  left of a row is padding (inputs ``PAD_ID``, targets ignored), a segment of its own;
- unpacked (``--no-pack``): one example a row, padded; no segments.

Packed rows hold the same examples and train the same targets in fewer rows: the 11 training examples of
``tests/chat_templates.py``'s 12 conversations with Llama 3's template fill 4 rows of ``T = 96`` instead of 11
(74 tokens a row instead of 27, padding 23% instead of 72%); SmolLM2's, 73 tokens each, pack only from
``T = 146`` (at 256: 4 rows instead of 11, padding 22% instead of 72%).
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


def fitted(examples: list[tuple[np.ndarray, np.ndarray]], seq_len: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each example as ``(inputs (n,), targets (n,))``, ``n <= seq_len``: its first ``seq_len + 1`` ids, targets
    ignored where not trained; an example left with no trained target is dropped."""
    pieces = []
    for ids, trained in examples:
        ids, trained = ids[: seq_len + 1], trained[: seq_len + 1]  # (n + 1,) with n <= T
        targets = np.where(trained[1:], ids[1:], IGNORED)  # target t is id t + 1, trained or not
        if (targets != IGNORED).any():
            pieces.append((ids[:-1], targets))
    return pieces


def first_fit_decreasing(lengths: list[int], capacity: int) -> list[list[int]]:
    """Rows of indices into ``lengths`` (each <= ``capacity``): longest first (ties in order), each into the first
    row with room left, else a new one; a row's indices in ascending order.

    Example: ``first_fit_decreasing([3, 5, 2, 4], 8) == [[0, 1], [2, 3]]`` (5 + 3, then 4 + 2).
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])  # stable: ties keep their order
    rows, free = [], np.zeros(len(lengths), dtype=np.int64)  # (N,): room left in each row (at most N rows)
    for i in order:
        fits = np.flatnonzero(free[: len(rows)] >= lengths[i])
        row = int(fits[0]) if fits.size else len(rows)
        if row == len(rows):
            rows.append([])
            free[row] = capacity
        rows[row].append(i)
        free[row] -= lengths[i]
    return [sorted(members) for members in rows]


@dataclass
class ChatRows:
    """Examples as ``(N, T)`` rows: ``inputs`` int64 and ``targets`` int64, ignored (-1) where not trained;
    ``segments`` int64 each position's example in its row when packed (the padding a segment of its own), None
    unpacked; ``filled (N,)`` the positions of each row that hold an example's tokens (the rest is padding)."""

    inputs: np.ndarray
    targets: np.ndarray
    segments: np.ndarray | None
    filled: np.ndarray

    @classmethod
    def from_examples(cls, examples: list[tuple[np.ndarray, np.ndarray]], seq_len: int, pack: bool = False):
        """The ``fitted`` examples in rows of ``seq_len`` positions: packed by ``first_fit_decreasing`` with their
        segments, or one a row; a ``ValueError`` when none keeps a trained target."""
        pieces = fitted(examples, seq_len)
        if not pieces:
            raise ValueError(f"no assistant token fits in a row of {seq_len} tokens")
        lengths = [len(inputs) for inputs, _ in pieces]
        rows = first_fit_decreasing(lengths, seq_len) if pack else [[i] for i in range(len(pieces))]
        inputs = np.full((len(rows), seq_len), PAD_ID, dtype=np.int64)  # (N,T)
        targets = np.full((len(rows), seq_len), IGNORED, dtype=np.int64)  # (N,T)
        segments = np.zeros((len(rows), seq_len), dtype=np.int64)  # (N,T)
        filled = np.zeros(len(rows), dtype=np.int64)  # (N,)
        for row, members in enumerate(rows):
            for segment, i in enumerate(members):
                start, stop = filled[row], filled[row] + lengths[i]
                inputs[row, start:stop], targets[row, start:stop] = pieces[i]
                segments[row, start:stop] = segment
                filled[row] = stop
            segments[row, filled[row] :] = len(members)  # the padding: a segment of its own
        return cls(inputs, targets, segments if pack else None, filled)

    def __len__(self) -> int:
        return len(self.inputs)

    @property
    def examples(self) -> int:
        """How many examples the rows hold (one a row unpacked)."""
        if self.segments is None:
            return len(self)
        padded = self.filled < self.inputs.shape[1]  # (N,): a row whose last segment is its padding
        return int((self.segments[:, -1] + 1 - padded).sum())

    def padding(self) -> float:
        """The share of the rows' positions that hold no example's token."""
        return 1 - float(self.filled.sum()) / self.inputs.size

    def layout(self) -> str:
        """How the examples lie in the rows, beside the other way: "11 examples packed into 4 rows of 96
        positions (11 unpacked): 74.0 tokens a row, padding 23% (72% unpacked)"."""
        T, tokens = self.inputs.shape[1], int(self.filled.sum())
        if self.segments is None:
            packed = len(first_fit_decreasing(self.filled.tolist(), T))
            return (
                f"{len(self)} examples, one a row of {T} positions (--no-pack; packed: {packed} rows): "
                f"{tokens / len(self):.1f} tokens a row, padding {self.padding():.0%} "
                f"({1 - tokens / (packed * T):.0%} packed)"
            )
        return (
            f"{self.examples} examples packed into {len(self)} rows of {T} positions ({self.examples} unpacked): "
            f"{tokens / len(self):.1f} tokens a row, padding {self.padding():.0%} "
            f"({1 - tokens / (self.examples * T):.0%} unpacked)"
        )

    def evaluation_rows(self, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(inputs, targets, segments or None)`` of ``count`` rows, the first ones in order (cycling when there
        are fewer): the same every evaluation."""
        rows = np.arange(count) % len(self)  # (count,)
        return self.inputs[rows], self.targets[rows], None if self.segments is None else self.segments[rows]


def rows_sha256(*parts: ChatRows) -> str:
    """The SHA-256 of the parts' inputs and targets, in turn (what a resumed run checks it trains on again)."""
    digest = hashlib.sha256()
    for rows in parts:
        digest.update(rows.inputs.tobytes())
        digest.update(rows.targets.tobytes())
        if rows.segments is not None:  # packed: the same examples in other rows are other rows
            digest.update(rows.segments.tobytes())
    return digest.hexdigest()


class ChatSampler:
    """``B`` rows drawn uniformly (with replacement) from ``ChatRows`` per batch, by a NumPy generator seeded
    as ``BatchSampler``'s; ``state_dict`` / ``load_state_dict`` as its, so a resumed run draws the same rows."""

    def __init__(self, rows: ChatRows, batch_size: int, seed: int):
        self.rows = rows
        self.batch_size = batch_size
        self.rng = np.random.default_rng(seed)
        self.batches_drawn = 0

    def next_batch(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(inputs, targets, segments)``, each int64 ``(B, T)``; segments None for unpacked rows."""
        picks = self.rng.integers(0, len(self.rows), size=self.batch_size)  # (B,)
        self.batches_drawn += 1
        segments = None if self.rows.segments is None else self.rows.segments[picks]
        return self.rows.inputs[picks], self.rows.targets[picks], segments

    def state_dict(self) -> dict[str, Any]:
        return {"bit_generator": self.rng.bit_generator.state, "batches_drawn": self.batches_drawn}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["bit_generator"]
        self.batches_drawn = int(state["batches_drawn"])


def chat_rows(
    path, directory, tokenizer, seq_len: int, val_fraction: float = 0.1, pack: bool = True
) -> tuple[ChatRows, ChatRows]:
    """(training rows, validation rows) of the chat file ``path`` with the template of ``directory``, packed or
    one example a row (``ChatRows.from_examples``): the last ``val_fraction`` of the conversations (at least
    one) held out. Each part must keep an assistant token within ``seq_len``."""
    conversations = read_chat_jsonl(path)
    if len(conversations) < 2:
        raise ValueError(f"{path}: one conversation only; at least 2 are needed (one is held out for validation)")
    held = max(1, int(round(len(conversations) * val_fraction)))
    template = ChatTemplate.from_directory(Path(directory))
    parts = []
    for name, part in (("training", conversations[:-held]), ("validation", conversations[-held:])):
        examples = [example for messages in part for example in assistant_examples(template, tokenizer, messages)]
        try:
            parts.append(ChatRows.from_examples(examples, seq_len, pack))
        except ValueError:
            raise ValueError(
                f"{path}: no assistant token of the {name} conversations fits in --seq-len {seq_len}"
            ) from None
    return parts[0], parts[1]
