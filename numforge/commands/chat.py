"""``numforge chat``: talk to a chat model in the terminal, its replies streamed as they are sampled.

A thin loop over ``ChatSession`` (``chat_session.py``): each line read is a message, or one of ``COMMANDS``.
The model must have a chat template (``chat_template.jinja`` or tokenizer_config.json's ``chat_template``): a
Hugging Face directory's own, or for a numforge run the one of the chat model it was fine-tuned from
(``checkpoint.chat_template_directory``).
End of input (Ctrl-D) and Ctrl-C end the chat with status 0."""

from __future__ import annotations

import argparse
import sys

from ..chat_session import ChatSession
from ..checkpoint import chat_template_directory, load_model
from ..checks import int_at_least, text_flag
from ..data.chat_template import ChatTemplate
from .sample import add_sampling_arguments

HELP = "talk to a chat model: its chat template, replies streamed, the KV cache kept across turns"
DEFAULT_CONTEXT = 4096  # positions the cache holds by default, at most (Llama 3.2's 131,072 would not fit)
COMMANDS = {
    "/help": "this list",
    "/reset": "forget the conversation (the system message stays)",
    "/temperature T": "sample at temperature T from now on (0 is greedy)",
    "/quit": "end the chat (so do Ctrl-D and Ctrl-C)",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_sampling_arguments(parser, prompt=False)  # --checkpoint, --max-new-tokens, --temperature, --top-k, ...
    parser.add_argument("--system", type=text_flag, help="the system message the conversation starts with")
    parser.add_argument(
        "--context",
        type=int_at_least(2),
        help=f"positions the KV cache holds (default: the model's context, at most {DEFAULT_CONTEXT})",
    )


def run(args: argparse.Namespace) -> int:
    model, tokenizer = load_model(args.checkpoint, trust_pattern=args.trust_pattern)
    try:
        template = ChatTemplate.from_directory(chat_template_directory(args.checkpoint))
    except ValueError as err:
        raise ValueError(f"numforge chat needs the model's chat template: {err}") from None
    session = ChatSession(
        model,
        tokenizer,
        template,
        system=args.system,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        context=args.context or min(model.config.max_seq_len, DEFAULT_CONTEXT),
        on_notice=lambda text: print(f"[{text}]", file=sys.stderr, flush=True),
    )
    return chat_loop(session, sys.stdin, sys.stdout)


def chat_loop(session: ChatSession, stdin, stdout) -> int:
    """Read messages from ``stdin`` until ``/quit`` or its end, the replies streamed to ``stdout``; 0."""
    say = lambda text: (stdout.write(text), stdout.flush())  # noqa: E731
    say("numforge chat: /help lists the commands\n")
    try:
        while True:
            say("> ")
            line = stdin.readline()
            if not line:
                say("\n")
                return 0
            text = line.rstrip("\n")
            if not stdin.isatty():
                say(text + "\n")  # the transcript shows what was read
            if text.startswith("/"):
                if command(session, text, say) == "quit":
                    return 0
            elif text.strip():
                reply(session, text, say)
    except KeyboardInterrupt:
        say("\n")
        return 0


def reply(session: ChatSession, text: str, say) -> None:
    """Stream the reply to ``text``, then say why it stopped unless at its end-of-turn token."""
    try:
        for piece in session.send(text):
            say(piece)
    except ValueError as err:  # a message too long for the context, a template refusing the conversation
        say(f"[{err}]\n")
        return
    say("\n" if session.stop_reason == "end" else f"\n[stopped: {session.stop_reason}]\n")


def command(session: ChatSession, text: str, say) -> str | None:
    """Do one ``/command``; ``"quit"`` for ``/quit``."""
    name, _, value = text.partition(" ")
    if name == "/quit":
        return "quit"
    if name == "/help":
        say("".join(f"  {usage:<16} {what}\n" for usage, what in COMMANDS.items()))
    elif name == "/reset":
        session.reset()
        say("[conversation reset]\n")
    elif name == "/temperature":
        try:
            temperature = float(value)
            if not temperature >= 0 or temperature == float("inf"):
                raise ValueError
        except ValueError:
            say(f"[/temperature takes a number >= 0, got {value.strip()!r}]\n")
            return None
        session.temperature = temperature
        say(f"[temperature {temperature:g}]\n")
    else:
        say(f"[unknown command {name!r}: /help lists the commands]\n")
    return None
