"""``numforge studio``: a local web server over the study views (``views.py``), safe by construction.

The standard library's ``http.server`` serves it: one page, its static files
(``web/studio.css`` and the ES modules of ``web/js/``) and a handful of JSON routes (``ROUTES``),
each a thin call of a view function. Nothing here computes: every number
comes from the study functions, on the model chosen when the server starts.

What keeps it safe:

- it listens on ``127.0.0.1`` unless told otherwise (``numforge studio --host``
  warns); a request whose ``Host`` header is not this server's own name and
  port is refused, so a web page served from elsewhere cannot reach it
  through a DNS name it re-points at 127.0.0.1 (DNS rebinding);
- a random token (``secrets.token_urlsafe``) is part of the URL it prints; the
  page and every API call must carry it (``?token=`` or the
  ``X-Numforge-Token`` header); a request with an ``Origin`` other than its own
  is refused, and a POST must say ``Content-Type: application/json``, which a
  plain HTML form cannot send;
- bodies are bounded (``MAX_BODY`` bytes, with a ``Content-Length``; arrays and objects nested at most
  ``MAX_DEPTH`` deep, checked before the body is parsed), prompts
  by the model's context; the client names no file (the model and the run are
  chosen at start), only routes from a fixed table;
- one model call at a time (``Studio.lock``; a streamed chat reply holds it to its last line); reading a
  request happens before the lock, a request whose client hung up while it waited for the lock (the page aborts
  a question the learner's typing made old) is dropped without a model call (``Studio.dropped`` counts them), and a
  connection silent for ``timeout`` seconds is closed; ``BACKLOG`` connections wait
  to be accepted (a page opens several at once), and a client that hangs up before its answer is routine:
  nothing is logged;
- every error is a JSON ``{"error": message}`` with a 4xx status (a bug: 500
  with the exception's type; the traceback goes to the server's stderr, never
  to the page); the page inserts every string as text (``textContent``) and is
  served with a Content-Security-Policy that allows only its own script.
"""

from __future__ import annotations

import hmac
import json
import math
import secrets
import select
import socket
import sys
import threading
import traceback
from collections.abc import Iterator
from contextlib import closing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from ..checkpoint import checkpoint_step, latest_checkpoint_dir, load_model
from ..checks import check_int_value, check_positive_int, is_real
from ..files import parse_json
from ..generate import RUN_SAMPLE, generate
from .backward import backward_stages
from .page import MODULES, module_order, studio_page, web_file
from .prompt import check_ids, run_ids
from .routing import routing_view
from .trainer import Trainer
from .views import (
    attention_overview_view,
    attention_scores_view,
    attention_view,
    generate_view,
    lens_view,
    model_view,
    next_token_view,
    tokenizer_view,
    trace_view,
    training_view,
)
from .walkthrough import walkthrough_view

MAX_BODY = 96 * 1024  # bytes of one request body: MAX_TOKENIZER_TEXT characters of 4 UTF-8 bytes each fit
MAX_ANSWER = 64 * 1024 * 1024  # bytes of one answer (GPT-2's 12 heads at context 1024: 17 MB)
MAX_DEPTH = 16  # arrays and objects nested in one body (the routes' bodies nest 2 deep)
LOCK_POLL = 0.05  # seconds between two looks at a waiting request's connection
MAX_TOKENIZER_TEXT = 20_000  # characters the tokenizer view takes (a prompt: at most the model's context)
MAX_CHAT_TEXT = 4_000  # characters of one chat message (the context refuses a longer turn in tokens)
MAX_CHAT_TOKENS = 200  # tokens one chat reply may take (the session keeps room for it, at most half its context)
CHAT_SEED = 0  # each conversation samples from this seed: the same messages and settings, the same replies
CHAT_STOPS = {"end": "end of turn", "length": "max tokens", "context": "full context"}  # ChatSession.stop_reason
BACKLOG = 128  # connections the listening socket queues before they are accepted (socketserver's default: 5)
TOKEN_HEADER = "X-Numforge-Token"
PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


class Studio:
    """The model, its tokenizer, the run to watch, and the last prompt's passes (kept for the next request)."""

    def __init__(
        self,
        model,
        tokenizer,
        source: str,
        run_dir: Path | None = None,
        new_chat=None,
        no_chat: str | None = "this model has no chat template",
    ):
        """``new_chat(model, tokenizer, **settings)``: a ``ChatSession`` on the model shown, ``settings`` its keyword
        arguments (``commands/studio.py``'s ``chat_of``); None: no Chat view, and ``no_chat`` says why."""
        self.model, self.tokenizer, self.source, self.run_dir = model, tokenizer, source, run_dir
        self.lock = threading.Lock()  # one model call at a time
        self.dropped = 0  # requests whose client hung up before the model was called for them
        self._last = None  # (ids, prompt, grad stages or None)
        self._sample = None  # (checkpoint directory, the sample's JSON)
        self.trainer = None if run_dir is None else Trainer(run_dir)
        self.new_chat, self.no_chat = new_chat, no_chat
        self._chat, self._system = None, None  # the ChatSession (made on first use) and its system message
        self._notices = []  # what the session said while feeding the turn under way (history trimmed, ...)

    # Every method below runs under self.lock (Handler.answer takes it).

    def prompt(self, body: dict, with_backward: bool = False):
        """``(prompt, grad stages)``: the passes on the body's ``ids`` or ``text``, kept while the ids stay the same."""
        try:
            if "ids" in body:
                ids = check_ids(self.model, body["ids"])
            else:
                ids = tuple(prompt_ids(self.model, self.tokenizer, text_field(body, "text")))
        except FieldError:
            raise
        except ValueError as error:
            raise FieldError("prompt", str(error)) from None
        if self._last is None or self._last[0] != ids:
            self._last = (ids, run_ids(self.model, self.tokenizer, ids), None)
        _, prompt, grads = self._last
        if with_backward and grads is None and prompt.loss is not None:
            grads, _ = backward_stages(self.model, prompt)
            self._last = (ids, prompt, grads)
        return prompt, grads

    def model_info(self, body: dict) -> dict:
        limits = {"max_body": MAX_BODY, "max_tokenizer_text": MAX_TOKENIZER_TEXT}  # the page's checks before sending
        return model_view(self.model, self.source, self.run_dir is not None) | limits

    def tokenize(self, body: dict) -> dict:
        text = text_field(body, "text")
        if len(text) > MAX_TOKENIZER_TEXT:
            raise FieldError(
                "prompt",
                f"the tokenizer view shows at most {MAX_TOKENIZER_TEXT:,} characters; this text has {len(text):,}: "
                f"remove {len(text) - MAX_TOKENIZER_TEXT:,}",
            )
        return tokenizer_view(self.tokenizer, text)

    def trace(self, body: dict) -> dict:
        prompt, grads = self.prompt(body, with_backward=True)
        position = optional_int(body, "position", len(prompt.ids) - 1)
        return trace_view(self.model, self.tokenizer, prompt, grads, position)

    def walkthrough(self, body: dict) -> dict:
        prompt, _ = self.prompt(body)
        position = optional_int(body, "position", len(prompt.ids) - 1)
        return walkthrough_view(self.model, self.tokenizer, prompt, position, optional_int(body, "head", 0))

    def lens(self, body: dict) -> dict:
        prompt, _ = self.prompt(body)
        return lens_view(self.model, self.tokenizer, prompt)

    def routing(self, body: dict) -> dict:
        prompt, _ = self.prompt(body)
        return routing_view(self.model, self.tokenizer, prompt)

    def attention(self, body: dict) -> dict:
        prompt, _ = self.prompt(body)
        heads = body.get("heads")
        if heads is None:
            heads = list(range(self.model.config.num_heads))
        if not isinstance(heads, list) or not heads or len(heads) > self.model.config.num_heads:
            raise FieldError(
                "heads",
                f"heads must be a list of 1 to num_heads head numbers, or null for all, got "
                f"{len(heads) if isinstance(heads, list) else repr(heads)}",
            )
        if len(set(map(repr, heads))) != len(heads):
            raise FieldError("heads", "heads must name each head at most once")
        return attention_view(self.model, self.tokenizer, prompt, optional_int(body, "layer", 0), heads)

    def attention_overview(self, body: dict) -> dict:
        prompt, _ = self.prompt(body)
        return attention_overview_view(self.model, prompt)

    def attention_scores(self, body: dict) -> dict:
        prompt, _ = self.prompt(body)
        layer, head = optional_int(body, "layer", 0), optional_int(body, "head", 0)
        return attention_scores_view(self.model, prompt, layer, head)

    def next_token(self, body: dict) -> dict:
        prompt, _ = self.prompt(body)
        position = optional_int(body, "position", len(prompt.ids) - 1)
        all_logits = body.get("all_logits", False)
        if not isinstance(all_logits, bool):
            raise ValueError(f"all_logits must be true or false, got {all_logits!r}")
        return next_token_view(self.model, self.tokenizer, prompt, position, sampling(body), all_logits)

    def generate(self, body: dict) -> dict:
        prompt, _ = self.prompt(body)
        count = check_positive_int(optional_int(body, "count", 1), "count")
        return generate_view(self.model, self.tokenizer, list(prompt.ids), count, sampling(body))

    def training(self, body: dict) -> dict:
        if self.run_dir is None:
            return {"run": None}
        return training_view(self.run_dir, self.run_sample()) | {"trainer": self.trainer.state()}

    def train_start(self, body: dict) -> dict:
        self.needs_run()
        try:
            return self.trainer.start(optional_int(body, "max_steps", 0))
        except (ValueError, TypeError) as error:
            raise FieldError("max_steps", str(error)) from None

    def train_stop(self, body: dict) -> dict:
        self.needs_run()
        return self.trainer.stop()

    def use_latest(self, body: dict) -> dict:
        """Every view's model becomes the run's latest checkpoint (read whole, as ``sample`` reads it)."""
        self.needs_run()
        latest = latest_checkpoint_dir(self.run_dir)
        if latest is None:
            raise ValueError(f"run {self.run_dir.name} has no checkpoint yet")
        self.model, self.tokenizer = load_model(latest)
        self.source, self._last = f"run {self.run_dir.name}, checkpoint of step {checkpoint_step(latest)}", None
        self._chat = None  # a new conversation, with the new model
        return self.model_info(body)

    def chat_history(self, body: dict) -> dict:
        """The conversation so far, the positions its KV cache holds and can hold, and the reply's largest length;
        ``available`` false (and ``why``) when the model has no chat template."""
        if self.new_chat is None:
            return {"available": False, "why": self.no_chat, "messages": [], "cached": 0, "context": None,
                    "max_new_tokens": MAX_CHAT_TOKENS}  # fmt: skip
        session = self.chat_session()
        return {"available": True, "why": None, "messages": list(session.messages), "cached": len(session.ids),
                "context": session.context, "max_new_tokens": MAX_CHAT_TOKENS}  # fmt: skip

    def chat_reset(self, body: dict) -> dict:
        """A new conversation (a new session: its sampling starts from ``CHAT_SEED`` again) that opens with
        ``system`` (null, absent or empty: none)."""
        system = body.get("system")
        if system is not None:
            system = chat_text(body, "system", "chat_system") or None
        self.chat_session()  # refused when there is no chat
        self._chat, self._system = None, system
        return self.chat_history(body)

    def chat(self, body: dict) -> ChatLines:
        """The reply to ``text``, streamed as lines: ``{"notice"}`` (the history trimmed, the cache rebuilt), then
        ``{"piece"}`` for each decoded piece, then ``{"done", "stop", "messages", "cached"}``. The message is
        checked and the turn's first step taken here, before the first line, so a refusal is a 400 like any
        other route's; ``temperature`` (0 is greedy) and ``max_tokens`` apply from this turn on."""
        session = self.chat_session()
        text = chat_text(body, "text", "chat")
        if not text.strip():
            raise FieldError("chat", "the message is empty: type at least one character")
        temperature = body.get("temperature", session.temperature)
        if not is_real(temperature) or not 0 <= temperature <= 100:
            raise FieldError("chat_temperature", f"the temperature must be from 0 (greedy) to 100, got {temperature!r}")
        max_tokens = body.get("max_tokens", session.max_new_tokens)
        if not (
            isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and 1 <= max_tokens <= MAX_CHAT_TOKENS
        ):
            raise FieldError(
                "chat_max_tokens", f"max tokens must be a whole number from 1 to {MAX_CHAT_TOKENS}, got {max_tokens!r}"
            )
        session.temperature, session.max_new_tokens = float(temperature), max_tokens
        self._notices.clear()
        reply = session.send(text)
        try:
            first = next(reply, None)  # the prompt fed, the first piece sampled (None: the reply ended at once)
        except ValueError as error:  # too long for the context, or the template refused the conversation
            raise FieldError("chat", str(error)) from None
        return ChatLines(session, reply, list(self._notices), first)

    def chat_session(self):
        """The conversation (made on first use, on the model shown); refused when the model has no template."""
        if self.new_chat is None:
            raise ValueError(f"no chat here: {self.no_chat}")
        if self._chat is None:
            self._chat = self.new_chat(
                self.model,
                self.tokenizer,
                system=self._system,
                seed=CHAT_SEED,
                max_new_tokens=MAX_CHAT_TOKENS,
                on_notice=self._notices.append,
            )  # made for replies of MAX_CHAT_TOKENS: it keeps room for them (ChatSession.reserve)
        return self._chat

    def needs_run(self) -> None:
        if self.run_dir is None:
            raise ValueError("no run to train: start the studio with --checkpoint RUN_DIR or --run RUN_DIR")

    def run_sample(self) -> dict | None:
        """``numforge train``'s closing sample (``RUN_SAMPLE``) from the run's latest checkpoint, made once for
        each checkpoint (the last one made while a running trainer removes the checkpoint being read)."""
        latest = latest_checkpoint_dir(self.run_dir)
        if latest is None:
            return None
        if self._sample is None or self._sample[0] != latest:
            try:
                model, tokenizer = load_model(latest)
            except FileNotFoundError:  # removed while read: a trainer keeps only its latest checkpoints
                return None if self._sample is None else self._sample[1]
            text = generate(model, tokenizer, **RUN_SAMPLE).text
            V = model.config.vocab_size
            found = {"step": checkpoint_step(latest), "vocab_size": V, "ln_vocab": math.log(V), "text": text}
            self._sample = (latest, found | {"temperature": RUN_SAMPLE["temperature"], "seed": RUN_SAMPLE["seed"]})
        return self._sample[1]


class ChatLines:
    """The lines of one streamed reply (``Studio.chat``): the notices, a ``{"piece"}`` for each piece (the first
    one already sampled), ``{"done"}``; ``close()`` ends the reply where it is, its text so far joining the
    conversation (a client that hung up)."""

    def __init__(self, session, reply: Iterator[str], notices: list[str], first: str | None):
        self.session, self.reply, self.notices, self.first = session, reply, notices, first

    def __iter__(self) -> Iterator[dict]:
        yield from ({"notice": text} for text in self.notices)
        if self.first is not None:
            yield {"piece": self.first}
        yield from ({"piece": piece} for piece in self.reply)
        session = self.session
        yield {"done": True, "stop": CHAT_STOPS[session.stop_reason], "messages": list(session.messages),
               "cached": len(session.ids)}  # fmt: skip

    def close(self) -> None:
        self.reply.close()


class FieldError(ValueError):
    """A value the learner can fix: ``field`` names the control at fault (``prompt``, ``top_p``, ...), where the
    page shows the message."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def text_field(body: dict, name: str, field: str = "prompt") -> str:
    """The body's text ``name``: a string of whole characters (a lone surrogate, half of a character that
    JSON can carry but no text holds, is refused with its place); ``field`` names the control at fault."""
    value = body.get(name)
    if not isinstance(value, str):
        raise FieldError(field, f"{name} must be a string, got {type(value).__name__}")
    for n, c in enumerate(value):
        if "\ud800" <= c <= "\udfff":
            raise FieldError(
                field,
                f"the text holds a lone surrogate (U+{ord(c):04X}, character {n + 1}): half of a character, not "
                "text; delete it, or paste the whole character again",
            )
    return value


def chat_text(body: dict, name: str, field: str) -> str:
    """A chat message or system message: ``text_field``'s whole characters, at most ``MAX_CHAT_TEXT`` of them."""
    text = text_field(body, name, field)
    if len(text) > MAX_CHAT_TEXT:
        raise FieldError(
            field,
            f"the studio's chat takes at most {MAX_CHAT_TEXT:,} characters a message; this one has {len(text):,}: "
            f"remove {len(text) - MAX_CHAT_TEXT:,}",
        )
    return text


def prompt_ids(model, tokenizer, text: str) -> list[int]:
    """``encode_prompt``'s ids of ``text``, its refusals said as what the learner can do."""
    ids = tokenizer.encode_prompt(text)
    if not ids:
        raise FieldError("prompt", "the prompt is empty: type at least one character")
    context = model.config.max_seq_len
    if len(ids) > context:
        raise FieldError(
            "prompt",
            f"the prompt is {len(ids):,} tokens; this model reads at most {context:,} (its context): "
            f"shorten it by {len(ids) - context:,} tokens",
        )
    return ids


def optional_int(body: dict, name: str, default: int) -> int:
    value = body.get(name)
    return default if value is None else check_int_value(value, name)


def sampling(body: dict) -> dict:
    """The sampling settings of a request: temperature (> 0), top_k, top_p (or null), greedy, seed."""
    temperature = body.get("temperature", 1.0)
    if not is_real(temperature) or not 0 < temperature <= 100:
        raise FieldError("temperature", f"the temperature must be more than 0 and at most 100, got {temperature!r}")
    greedy = body.get("greedy", True)
    if not isinstance(greedy, bool):
        raise FieldError("greedy", f"greedy must be true or false, got {greedy!r}")
    top_p = body.get("top_p")
    if top_p is not None and not (is_real(top_p) and 0 < top_p <= 1):
        raise FieldError(
            "top_p", f"top-p must be more than 0 and at most 1 (1 keeps every token; empty: no top-p), got {top_p!r}"
        )
    try:
        seed = optional_int(body, "seed", 0)
    except (ValueError, TypeError) as error:
        raise FieldError("seed", str(error)) from None
    if not 0 <= seed < 2**63:
        raise FieldError("seed", f"the seed must be a whole number from 0 to 2**63 - 1, got {seed}")
    top_k = body.get("top_k")
    if top_k is not None and not (isinstance(top_k, int) and not isinstance(top_k, bool) and top_k >= 1):
        raise FieldError("top_k", f"top-k must be a whole number of at least 1 (empty: every token), got {top_k!r}")
    return {"temperature": float(temperature), "top_k": top_k, "top_p": top_p, "greedy": greedy, "seed": seed}


ROUTES = {  # path -> (method, Studio method name); "page" is the HTML page
    "/": ("GET", "page"),
    "/api/model": ("GET", "model_info"),
    "/api/training": ("GET", "training"),
    "/api/tokenize": ("POST", "tokenize"),
    "/api/trace": ("POST", "trace"),
    "/api/lens": ("POST", "lens"),
    "/api/walkthrough": ("POST", "walkthrough"),
    "/api/attention": ("POST", "attention"),
    "/api/attention/overview": ("POST", "attention_overview"),
    "/api/attention/scores": ("POST", "attention_scores"),
    "/api/routing": ("POST", "routing"),
    "/api/next": ("POST", "next_token"),
    "/api/generate": ("POST", "generate"),
    "/api/training/start": ("POST", "train_start"),
    "/api/training/stop": ("POST", "train_stop"),
    "/api/training/use-latest": ("POST", "use_latest"),
    "/api/chat/history": ("GET", "chat_history"),
    "/api/chat/reset": ("POST", "chat_reset"),
    "/api/chat": ("POST", "chat"),  # streamed: one JSON object a line
}
STATIC = {"/static/studio.css": ("studio.css", "text/css")} | {  # path -> (file of web/, type): nothing else is served
    f"/static/{MODULES}/{name}": (f"{MODULES}/{name}", "text/javascript") for name in module_order()
}  # the script's modules: the entry and what it imports (a browser runs a module only as text/javascript)


class RequestError(Exception):
    """A request refused: its HTTP status and the message the JSON answer carries."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class StudioServer(ThreadingHTTPServer):
    """The HTTP server: the studio, the token, the Host names it answers to, the page and static files."""

    daemon_threads = True  # Ctrl-C does not wait for a request in progress
    block_on_close = False
    request_queue_size = BACKLOG

    def __init__(self, studio: Studio, host: str = "127.0.0.1", port: int = 0, timeout: float = 30.0):
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), Handler)
        self.studio, self.token, self.request_timeout = studio, secrets.token_urlsafe(24), timeout
        port = self.server_address[1]
        names = {"127.0.0.1", "localhost", "[::1]"}
        if host in ("0.0.0.0", "::"):
            names |= {socket.gethostname(), socket.getfqdn()}
        elif host not in ("127.0.0.1", "::1"):
            names.add(f"[{host}]" if ":" in host else host)
        self.hosts = {f"{name}:{port}".lower() for name in names}
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else (f"[{host}]" if ":" in host else host)
        self.url = f"http://{shown}:{port}/?token={self.token}"
        self.files = {path: (web_file(name).encode("utf-8"), kind) for path, (name, kind) in STATIC.items()}
        self.page = studio_page().encode("utf-8")

    def handle_error(self, request, client_address) -> None:
        """A client that hung up (reset, a broken pipe) is routine: nothing is logged; any other error is a bug,
        its traceback on stderr."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    """One request: checks (Host, token, Origin, body), then one route; every answer JSON but the page."""

    server: StudioServer

    def version_string(self) -> str:
        return "numforge-studio"

    def setup(self) -> None:
        self.timeout = self.server.request_timeout  # a silent connection is closed after this long
        super().setup()

    def do_GET(self) -> None:
        self.handle_request("GET")

    def do_POST(self) -> None:
        self.handle_request("POST")

    def do_PUT(self) -> None:
        self.handle_request("PUT")

    do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = do_PUT

    def handle_request(self, method: str) -> None:
        try:
            self.check_host()
            url = urlsplit(self.path)
            if url.path in STATIC and method == "GET":
                body, kind = self.server.files[url.path]
                return self.send(200, body, kind)
            self.check_token(url.query)
            self.check_origin()
            if url.path not in ROUTES:
                raise RequestError(404, f"no route {url.path!r}; the routes are {sorted(ROUTES)}")
            wanted, name = ROUTES[url.path]
            if method != wanted:
                raise RequestError(405, f"{url.path} takes {wanted}, not {method}")
            if name == "page":
                return self.send(200, self.server.page, "text/html", {"Content-Security-Policy": PAGE_POLICY})
            body = self.read_json() if method == "POST" else {}
            answer = self.answer(name, body)
            if answer is not None:  # None: streamed already
                self.send_json(200, answer)
        except RequestError as error:
            self.send_json(error.status, {"error": str(error)})
        except FieldError as error:  # the page shows it by the control at fault
            self.send_json(400, {"error": str(error), "field": error.field})
        except (ValueError, TypeError) as error:  # a request the study functions refuse
            self.send_json(400, {"error": str(error)})
        except ConnectionError:  # the client hung up before its answer: nothing to answer, nothing to log
            self.close_connection = True
        except Exception as error:  # a bug: the type in the page, the traceback on the server's stderr
            traceback.print_exc(file=sys.stderr)
            self.send_json(500, {"error": f"internal error ({type(error).__name__}); see the server's output"})

    def answer(self, name: str, body: dict) -> dict | None:
        """The route's answer under the model's lock; a client that hung up while the request waited for it is
        dropped before any model call (``ConnectionAbortedError``: nothing to answer). An answer that is an
        object of lines (``ChatLines``) is streamed here, under the lock (each line may be a model call): then None."""
        studio = self.server.studio
        while not studio.lock.acquire(timeout=LOCK_POLL):
            if self.client_gone():
                break
        else:
            try:
                if not self.client_gone():
                    answer = getattr(studio, name)(body)
                    if isinstance(answer, dict):
                        return answer
                    self.stream(answer)
                    return None
            finally:
                studio.lock.release()
        studio.dropped += 1
        raise ConnectionAbortedError("the client hung up before its answer")

    def client_gone(self) -> bool:
        """Whether the client closed its side: the socket reads as at its end (a request's body is read by now,
        so anything readable is the end or a reset)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    # ------------------------------------------------------------ checks

    def check_host(self) -> None:
        host = (self.headers.get("Host") or "").lower()
        if host not in self.server.hosts:
            raise RequestError(
                403,
                f"Host {host!r} is not this server's name ({sorted(self.server.hosts)[0]}): refused (DNS rebinding)",
            )

    def check_token(self, query: str) -> None:
        given = self.headers.get(TOKEN_HEADER) or (parse_qs(query).get("token") or [""])[0]
        if not hmac.compare_digest(given.encode("utf-8"), self.server.token.encode("utf-8")):
            raise RequestError(403, "missing or wrong token: open the URL that numforge studio printed")

    def check_origin(self) -> None:
        origin = self.headers.get("Origin")
        if origin is not None and origin.lower() != f"http://{self.headers.get('Host', '').lower()}":
            raise RequestError(403, f"requests from the origin {origin!r} are refused")

    def read_json(self) -> dict:
        kind = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if kind != "application/json":
            raise RequestError(415, f"the body must be JSON (Content-Type: application/json), got {kind or 'none'!r}")
        if "Transfer-Encoding" in self.headers:
            raise RequestError(411, "send the body with a Content-Length, not a Transfer-Encoding")
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            raise RequestError(411, "a Content-Length header is required")
        if int(length) > MAX_BODY:
            raise RequestError(
                413,
                f"the text is too long to send: the request is {int(length):,} bytes and the studio reads at most "
                f"{MAX_BODY:,} (the tokenizer view takes {MAX_TOKENIZER_TEXT:,} characters, the other views the "
                "model's context); shorten it",
            )
        try:  # the house's JSON reader: "the body: line 1 column 2: Expecting value", "... must hold a JSON object"
            return parse_json(self.rfile.read(int(length)), "the body", expect=dict, max_depth=MAX_DEPTH)
        except ValueError as error:
            raise RequestError(400, str(error)) from None

    # ------------------------------------------------------------ answers

    def send_json(self, status: int, data: dict) -> None:
        body = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
        if len(body) > MAX_ANSWER:
            message = f"the answer would be {len(body):,} bytes, more than {MAX_ANSWER:,}: ask for fewer heads"
            return self.send_json(413, {"error": message})
        self.send(status, body, "application/json")

    def send(self, status: int, body: bytes, kind: str, headers: dict | None = None) -> None:
        self.start_answer(status, kind, {"Content-Length": str(len(body))} | (headers or {}))
        if self.command != "HEAD":
            self.wfile.write(body)

    def stream(self, lines: ChatLines) -> None:
        """Send ``lines`` as they come, one JSON object a line (NDJSON), the connection closed after the last; a
        client gone is looked for before each line, and then no further line is asked for (the chat stops
        sampling). A bug after the first line (no status can say it now) is said in a last ``{"error"}`` line."""
        self.close_connection = True  # no Content-Length: the answer ends when the connection does
        with closing(lines):
            self.start_answer(200, "application/x-ndjson", {})
            try:
                for line in lines:
                    if self.client_gone():
                        return
                    self.write_line(line)
            except ConnectionError:
                raise
            except Exception as error:
                traceback.print_exc(file=sys.stderr)
                self.write_line({"error": f"internal error ({type(error).__name__}); see the server's output"})

    def write_line(self, data: dict) -> None:
        self.wfile.write(json.dumps(data, ensure_ascii=False, allow_nan=False).encode("utf-8") + b"\n")
        self.wfile.flush()

    def start_answer(self, status: int, kind: str, headers: dict) -> None:
        """The status line and the headers every answer carries, then ``headers``."""
        self.send_response(status)
        self.send_header("Content-Type", f"{kind}; charset=utf-8")
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (a malformed request line, headers too long): JSON too, never HTML,
        with a status line even when the request line was too broken to name a version."""
        self.close_connection = True
        self.request_version = "HTTP/1.0"
        try:
            self.send_json(code, {"error": message or self.responses.get(code, ("error",))[0]})
        except OSError:
            pass

    def log_message(self, format: str, *args) -> None:
        """Only refusals and failures, and never the query (it holds the token)."""

    def log_request(self, code="-", size="-") -> None:
        if isinstance(code, int) and code >= 400:
            path = urlsplit(self.path).path if getattr(self, "path", None) else "?"
            print(f"numforge studio: {self.command or '-'} {path} -> {int(code)}", file=sys.stderr)
