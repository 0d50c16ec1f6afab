"""A model directory's chat template, rendered as transformers' ``apply_chat_template(tokenize=False)`` renders it.

A chat model's directory carries a Jinja template that turns a conversation into the one text the model
was trained on: ``chat_template`` in ``tokenizer_config.json``, or ``chat_template.jinja`` beside it
(transformers 5 saves it there). Example, SmolLM2-Instruct's template on one user message::

    [{"role": "user", "content": "Hi"}]  ->  "<|im_start|>system\\nYou are a helpful AI assistant named
    SmolLM, trained by Hugging Face<|im_end|>\\n<|im_start|>user\\nHi<|im_end|>\\n"

and with ``add_generation_prompt=True`` the opening of the assistant's turn, ``<|im_start|>assistant\\n``,
after it: what a prompt for generation ends with.

A template is code from the hub, so it runs as transformers runs it: in Jinja's
``ImmutableSandboxedEnvironment`` (no attribute starting with ``_``, no mutation of lists or dicts passed
in), with ``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols`` extension (``break``, ``continue``),
and the helpers templates call: ``raise_exception(message)`` (a ``ValueError`` naming the message),
``namespace`` (no name starting with ``_``), ``dict(...)``, ``tojson`` (``json.dumps``, no HTML escaping,
non-ASCII kept), ``strftime_now(format)`` (today's date, as Llama 3.1+ prints it), and the directory's
special tokens as variables (``bos_token``, ``eos_token``, ...).
A ``{% generation %}...{% endgeneration %}`` block (the marker TRL reads) renders its body; the
assistant's tokens are found by rendering prefixes instead (``data/chat.py``).

``jinja2`` is optional: ``pip install "numforge[chat]"``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from ..files import read_json, read_text
from ..tokenizer.hf_dir import CHAT_TEMPLATE_FILE, NAMED

CHAT_INSTALL_HINT = 'pip install "numforge[chat]"'
CONFIG_FILE = "tokenizer_config.json"


def _jinja():
    """The ``jinja2`` module, or an ``ImportError`` saying how to install it."""
    try:
        import jinja2
        import jinja2.ext
        import jinja2.sandbox
    except ImportError as err:
        raise ImportError(f"chat templates are rendered by jinja2, not installed: {CHAT_INSTALL_HINT}") from err
    return jinja2


def template_source(directory) -> str | None:
    """The text of a model directory's chat template, or None: ``chat_template.jinja`` if present, else
    tokenizer_config.json's ``chat_template`` (a string, or transformers' list of named templates, of which
    ``default``). Reading it needs no jinja2."""
    directory = Path(directory)
    if (directory / CHAT_TEMPLATE_FILE).is_file():
        return read_text(directory / CHAT_TEMPLATE_FILE)
    config_path = directory / CONFIG_FILE
    source = (read_json(config_path, expect=dict) if config_path.is_file() else {}).get("chat_template")
    if isinstance(source, list):  # [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
        source = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}.get("default")
    return source if isinstance(source, str) and source else None


def _raise_exception(message):
    raise ValueError(f"the chat template refused the conversation: {message}")


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format):
    return datetime.now().strftime(format)


def _namespace_class(jinja2):
    """Jinja's ``namespace`` refusing names that start with ``_`` (no way to reach Python's internals)."""

    def check(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a chat template may not set {name!r} on a namespace")

    class Namespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):  # Jinja's signature: the first argument is self, namespace(self=1) works
            self, attrs = args[0], dict(*args[1:], **kwargs)
            for name in attrs:
                check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

    return Namespace


def _environment():
    """A sandboxed Jinja environment with the settings and helpers chat templates expect (module docstring)."""
    jinja2 = _jinja()

    class Generation(jinja2.ext.Extension):
        """``{% generation %}body{% endgeneration %}`` renders ``body``."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = lambda *args, **kwargs: dict(*args, **kwargs)  # the call alone: no dict.fromkeys & co
    env.globals["namespace"] = _namespace_class(jinja2)
    return env


def _token_text(value, where: str) -> str | None:
    """A special token as tokenizer_config.json names it: a string, or an AddedToken object's ``content``."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    raise ValueError(f"{where}: expected a token string or an object with a string 'content', got {value!r}")


class ChatTemplate:
    """One chat template, compiled once: ``render(messages)`` is the conversation as the model reads it.

    ``special_tokens``: the variables the template sees besides ``messages`` and ``add_generation_prompt``
    (``{"bos_token": "<|begin_of_text|>", ...}``), as transformers passes the tokenizer's special tokens.
    """

    def __init__(self, source: str, special_tokens: dict[str, str] | None = None):
        if not isinstance(source, str) or not source:
            raise TypeError(f"a chat template must be a non-empty string, got {source!r}")
        jinja2 = _jinja()
        self.source = source
        self.special_tokens = dict(special_tokens or {})
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as err:
            raise ValueError(f"the chat template does not parse: line {err.lineno}: {err.message}") from None

    @classmethod
    def from_directory(cls, directory) -> ChatTemplate:
        """The template of a model directory (``template_source``), its special tokens from
        tokenizer_config.json."""
        directory = Path(directory)
        config_path = directory / CONFIG_FILE
        config = read_json(config_path, expect=dict) if config_path.is_file() else {}
        tokens = {name: _token_text(config.get(name), f"{config_path}: {name}") for name in NAMED}
        tokens = {name: text for name, text in tokens.items() if text is not None}
        source = template_source(directory)
        if source is None:
            raise ValueError(
                f"{directory}: no chat template (neither {CHAT_TEMPLATE_FILE} nor a 'chat_template' string in "
                f"{CONFIG_FILE}); a base model has none: fine-tune from a chat model's directory"
            )
        return cls(source, tokens)

    def render(self, messages: Sequence[dict], add_generation_prompt: bool = False, **variables) -> str:
        """The text of ``messages`` (each ``{"role": ..., "content": ...}``); with ``add_generation_prompt`` the
        opening of the assistant's next turn after it. ``variables`` (``enable_thinking=False``, ...) override
        the special tokens, as ``apply_chat_template``'s keyword arguments do."""
        check_messages(messages)
        context = {**self.special_tokens, **variables}
        jinja2 = _jinja()
        try:
            return self._template.render(
                messages=[dict(m) for m in messages], tools=None, documents=None,
                add_generation_prompt=bool(add_generation_prompt), **context,
            )  # fmt: skip
        except jinja2.TemplateError as err:
            raise ValueError(f"the chat template failed on this conversation: {err}") from None


def check_messages(messages) -> None:
    """A ``TypeError``/``ValueError`` unless ``messages`` is a non-empty list of ``{"role": str, "content": str}``."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise TypeError(f"messages must be a non-empty list of {{'role', 'content'}} objects, got {messages!r}")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise TypeError(f"messages[{i}] must be an object with 'role' and 'content', got {message!r}")
        for key in ("role", "content"):
            if not isinstance(message.get(key), str):
                raise ValueError(f"messages[{i}] must have a string {key!r}, got {message.get(key)!r}")
