"""``numforge studio [--checkpoint DIR] [--run DIR] [--host H] [--port N] [--no-browser]``: the local web app."""

from __future__ import annotations

import argparse
import os
import sys
import webbrowser
from pathlib import Path

from ..chat_session import ChatSession
from ..checkpoint import chat_template_directory, latest_checkpoint_dir
from ..checks import int_at_least, path_flag
from ..data.chat_template import ChatTemplate
from ..study.studio import Studio, StudioServer
from ..training.logs import LOSS_CSV
from ._default_model import default_model
from ._model import add_checkpoint_arguments, study_model_and_source
from .chat import DEFAULT_CONTEXT

HELP = (
    "serve the studio, a local web page to type a prompt and watch the model work: the tokenizer, the next "
    "token at a temperature, attention, the forward and backward pass, a run's training curve, a chat"
)
NO_TEMPLATE = (
    "the default model (trained on pydoc_data.topics) has no chat template: start the studio with --checkpoint DIR "
    "of a chat model (SmolLM2-Instruct, Qwen, Llama 3 Instruct, or a chat fine-tune)"
)
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
DEFAULT_PORT = 8765


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_checkpoint_arguments(
        parser,
        "the model `numforge train` trains with no flags (pydoc_data.topics, 600 steps), trained once (about a "
        "minute on 2 cores) and cached in the cache's models/ ($NUMFORGE_CACHE, else $XDG_CACHE_HOME/numforge or "
        "~/.cache/numforge)",
    )
    parser.add_argument(
        "--run",
        dest="run_dir",  # not "run": cli.py keeps the command's function there
        metavar="DIR",
        type=path_flag,
        help="a run directory whose loss.csv the Training view follows as it grows "
        "(default: the run --checkpoint names, if it is one, or the default model's)",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default 127.0.0.1: this machine only; another one is warned about)",
    )
    parser.add_argument(
        "--port", type=int_at_least(0), default=DEFAULT_PORT, help=f"the port (default {DEFAULT_PORT}; 0: any free one)"
    )
    parser.add_argument("--no-browser", action="store_true", help="do not open a browser; only print the URL")


def watched_run(args: argparse.Namespace, default_run: Path | None = None) -> Path | None:
    """The run directory of the Training view: ``--run``, else ``--checkpoint``'s run, else ``default_run``."""
    if args.run_dir is not None:
        run = Path(args.run_dir)
        if not run.is_dir():
            raise ValueError(f"--run {args.run_dir}: not a directory (give a run directory written by numforge train)")
        return run
    if args.checkpoint is None or latest_checkpoint_dir(args.checkpoint) is None:
        return default_run  # no checkpoint, or a Hugging Face directory
    checkpoint = Path(args.checkpoint)
    return checkpoint.parent if (checkpoint / "params.npz").is_file() else checkpoint  # a ckpt-* directory: its run


def chat_of(checkpoint):
    """``(new_chat, None)``, ``new_chat(model, tokenizer, **settings)`` a ``ChatSession`` with the template of the
    model at ``checkpoint``, read as ``numforge chat`` reads it (its context at most ``chat.DEFAULT_CONTEXT``);
    or ``(None, why)`` when there is no template to read (or no jinja2 to render it)."""
    try:
        template = ChatTemplate.from_directory(chat_template_directory(checkpoint))
    except (ValueError, ImportError) as error:
        return None, str(error)

    def new_chat(model, tokenizer, **settings) -> ChatSession:
        context = min(model.config.max_seq_len, DEFAULT_CONTEXT)
        return ChatSession(model, tokenizer, template, context=context, **settings)

    return new_chat, None


def say(text: str) -> None:
    print(f"numforge studio: {text}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    if args.port > 65535:
        raise ValueError(f"--port must be in [0, 65535], got {args.port}")
    if args.checkpoint is None:
        model, tokenizer, source, default_run = default_model(say=say)
        new_chat, no_chat = None, NO_TEMPLATE
    else:
        (model, tokenizer, source), default_run = study_model_and_source(args), None
        new_chat, no_chat = chat_of(args.checkpoint)
    studio = Studio(model, tokenizer, source, watched_run(args, default_run), new_chat, no_chat)
    try:
        server = StudioServer(studio, args.host, args.port)
    except OSError as error:
        raise ValueError(
            f"cannot listen on {args.host}:{args.port}: {error.strerror or error}; "
            "choose another port with --port N (0: any free one)"
        ) from None
    if args.host not in LOCAL_HOSTS:
        print(
            f"numforge studio: warning: --host {args.host} lets other machines reach the studio; "
            "anyone with its URL (and the token in it) can run the model",
            file=sys.stderr,
        )
    print(f"numforge studio: {source}")
    if studio.run_dir is not None:
        print(f"numforge studio: the Training view follows {studio.run_dir / LOSS_CSV}")
    print(f"numforge studio: listening on {server.url} (Ctrl-C stops it)", flush=True)
    if not args.no_browser and has_display():
        webbrowser.open(server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("numforge studio: stopped", flush=True)
    finally:
        server.server_close()
    return 0


def has_display() -> bool:
    """A graphical browser can open: macOS, Windows, or a desktop session (never a text browser in this terminal)."""
    return sys.platform in ("darwin", "win32") or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
