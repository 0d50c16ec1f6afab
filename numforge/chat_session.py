"""``ChatSession``: a conversation with a chat model, its KV cache kept from turn to turn.

Each turn renders the whole conversation with the model's chat template (``data/chat_template.py``) and the
opening of the assistant's reply (``add_generation_prompt``), but feeds the model only what the cache does not
hold yet::

    cached text   = what the cache's ids decode to (the history so far, the last reply and its end token)
    rendered text = template(messages + the new user message, add_generation_prompt=True)
    rendered text starts with the cached text  ->  feed encode(rendered text after it)   (the new turn only)
    otherwise (a template that rewrites the past)  ->  a fresh cache, the whole rendered text fed, said so

The new turn is encoded on its own, so the cache's ids may split a turn's junction differently from encoding
the whole text at once; the text the model read is the rendered text exactly. The reply is sampled one token
at a time (``generate.sample_next``) until an end-of-turn id (the tokenizer's ``eos_ids`` and the template's
``eos_token``), ``max_new_tokens``, or a full context. When the rendered prompt leaves fewer than
``reserve`` free positions, the oldest turns (a user message and its reply) are dropped, the system message
kept, and the cache rebuilt from the trimmed conversation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from .backend import asarray, to_numpy
from .checks import check_int_value, check_positive_int
from .generate import allowed_logits, check_sampling, decodable_ids, sample_next


class ChatSession:
    """``send(text)`` yields the reply's text piece by piece; ``messages`` is the conversation so far.

    ``template``: a ``ChatTemplate`` (``render(messages, add_generation_prompt)``); ``context``: the positions
    the cache holds (default, and at most, the model's ``max_seq_len``); ``on_notice``: told when the history
    is trimmed or the cache rebuilt.
    """

    def __init__(
        self,
        model,
        tokenizer,
        template,
        *,
        system: str | None = None,
        temperature: float = 0.8,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        max_new_tokens: int = 256,
        context: int | None = None,
        on_notice: Callable[[str], None] | None = None,
    ):
        check_sampling(temperature, top_k, top_p)
        check_positive_int(max_new_tokens, "max_new_tokens")
        self.context = model.config.max_seq_len if context is None else min(context, model.config.max_seq_len)
        check_int_value(self.context, "context", minimum=2)
        self.model, self.tokenizer, self.template = model, tokenizer, template
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        self.max_new_tokens = max_new_tokens
        self.reserve = min(max_new_tokens, self.context // 2)  # free positions a prompt must leave for the reply
        self.rng = np.random.default_rng(seed)
        self.on_notice = on_notice
        self.end_ids = end_of_turn_ids(tokenizer, template)
        self.allowed = decodable_ids(tokenizer, model.config.vocab_size)
        self.system = system
        self.stop_reason = None  # after a reply: "end" (an end-of-turn id), "length" (max_new_tokens), "context"
        self.reset()

    def reset(self) -> None:
        """Forget the conversation (the system message stays) and empty the cache."""
        self.messages = [] if self.system is None else [{"role": "system", "content": self.system}]
        self._new_cache()

    def _new_cache(self) -> None:
        self.cache = self.model.new_kv_cache(1, max_len=self.context)
        self.ids = []  # the ids the cache holds, in order
        self.pending = []  # ids sampled but not yet fed (a reply's end token): fed with the next turn
        self.cached_text = ""  # the text self.ids + self.pending stand for (a reply: its decoded text)

    def send(self, text: str) -> Iterator[str]:
        """Add the user's ``text``, feed the new turn, and yield the reply as it is sampled; the reply joins
        ``messages`` once it ends (also when the caller stops iterating early)."""
        if not isinstance(text, str):
            raise TypeError(f"a message must be a string, got {text!r}")
        self.messages.append({"role": "user", "content": text})
        self.stop_reason = None
        try:
            logits = self._feed_prompt()
        except ValueError:
            self.messages.pop()
            raise
        decoder, reply_ids = self.tokenizer.incremental_decoder(), []
        try:
            for token in self._sample(logits):
                reply_ids.append(token)
                if piece := decoder.decode([token]):
                    yield piece
            if piece := decoder.flush():
                yield piece
        finally:
            content = self.tokenizer.decode(reply_ids)  # as the next turn's rendering will hold it
            self.messages.append({"role": "assistant", "content": content})
            end = self.pending if self.stop_reason == "end" else []  # at a full context: the reply's last id
            self.cached_text += content + self.tokenizer.decode(end)

    def _feed_prompt(self):
        """Feed what the cache lacks of the rendered conversation (trimmed to fit); the last position's logits."""
        rendered = self._fitting_prompt()
        if not rendered.startswith(self.cached_text):
            if self.ids:
                self._notice("the template rewrote the history: the cache is rebuilt from the whole conversation")
            self._new_cache()
        new_ids = self.pending + self.tokenizer.encode(rendered[len(self.cached_text) :], allowed_special="all")
        if len(self.ids) + len(new_ids) + self.reserve > self.context:  # the junction encoded longer: start over
            self._new_cache()
            new_ids = self.tokenizer.encode(rendered, allowed_special="all")
        self.cached_text, self.pending = rendered, []
        return self._feed(new_ids)

    def _fitting_prompt(self) -> str:
        """The rendered conversation, its oldest turns dropped (system message kept) until it leaves ``reserve``
        free positions; a ``ValueError``, the history untouched, when the new message alone does not fit."""
        messages, dropped = list(self.messages), 0
        first = 1 if messages[0]["role"] == "system" else 0
        while True:
            rendered = self.template.render(messages, add_generation_prompt=True)
            length = len(self.tokenizer.encode(rendered, allowed_special="all"))
            if length + self.reserve <= self.context:
                break
            if len(messages) - first <= 1:
                raise ValueError(
                    f"the message does not fit: the prompt would be {length} tokens, and the context of "
                    f"{self.context} keeps {self.reserve} for the reply"
                )
            turn_end = first + 1
            while turn_end < len(messages) - 1 and messages[turn_end]["role"] != "user":
                turn_end += 1  # a turn: the user message and every reply up to the next user message
            del messages[first:turn_end]
            dropped += 1
        if dropped:
            self._notice(f"the history passed the context of {self.context} tokens: dropped the {dropped} oldest "
                         f"turn{'s' if dropped > 1 else ''}; the cache is rebuilt")  # fmt: skip
            self.messages[:] = messages
            self._new_cache()
        return rendered

    def _feed(self, new_ids: list[int]):
        """Run ``new_ids`` through the model into the cache; ``(V,)`` logits of the last one."""
        logits = self.model.logits(asarray(np.asarray(new_ids)[None, :]), last_only=True, kv_cache=self.cache)
        self.ids.extend(new_ids)
        return allowed_logits(to_numpy(logits).reshape(-1), self.allowed)  # (1,V) -> (V,)

    def _sample(self, logits) -> Iterator[int]:
        """The reply's ids, each fed into the cache before it is yielded (a caller that stops early leaves the
        cache holding the reply it saw); the end-of-turn id, or the last id at a full context, kept in
        ``pending`` for the next turn."""
        for _ in range(self.max_new_tokens):
            token = sample_next(logits, self.rng, self.temperature, self.top_k, self.top_p)
            if token in self.end_ids:
                self.pending, self.stop_reason = [token], "end"
                return
            if len(self.ids) >= self.context:
                self.pending, self.stop_reason = [token], "context"
                yield token
                return
            logits = self._feed([token])
            yield token
        self.stop_reason = "length"

    def _notice(self, text: str) -> None:
        if self.on_notice is not None:
            self.on_notice(text)


def end_of_turn_ids(tokenizer, template) -> frozenset[int]:
    """The ids a reply stops at: the tokenizer's ``eos_ids`` and the template's ``eos_token`` when it is one
    token; a ``ValueError`` when there are none."""
    ends = set(tokenizer.eos_ids)
    eos_text = template.special_tokens.get("eos_token")
    if eos_text:
        eos = tokenizer.encode(eos_text, allowed_special="all")
        if len(eos) == 1:
            ends.add(eos[0])
    if not ends:
        raise ValueError("no end-of-turn token: the directory names no eos_token_id and the template no eos_token")
    return frozenset(ends)
