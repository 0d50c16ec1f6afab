"""``numforge tokenize "some text"``: show how a tokenizer cuts text into tokens."""

from __future__ import annotations

import argparse
import os
import sys
import time

from ..tokenizer import BPETokenizer

HELP = "show text split into its BPE tokens, with each token's id and bytes"

DEFAULT_VOCAB_SIZE = 2048
# background colours that alternate from token to token on a terminal
_COLOURS = ("\x1b[48;5;153m", "\x1b[48;5;223m", "\x1b[48;5;194m", "\x1b[48;5;225m")
_RESET = "\x1b[0m"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("text", help="the text to tokenize")
    parser.add_argument(
        "--tokenizer",
        metavar="FILE",
        help="a numforge tokenizer file (numforge tokenizer train ...); default: train a "
        f"{DEFAULT_VOCAB_SIZE}-token one on Python's own documentation text first",
    )
    parser.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour token boundaries (auto: on a terminal, unless NO_COLOR is set); otherwise [brackets]",
    )


def run(args: argparse.Namespace) -> int:
    if args.tokenizer:
        try:
            tok = BPETokenizer.load(args.tokenizer)
        except (OSError, ValueError) as error:
            print(f"error: cannot load the tokenizer: {error}", file=sys.stderr)
            return 1
    else:
        tok = _default_tokenizer()
    ids = tok.encode(args.text, allowed_special="all")
    pieces = [tok.token_bytes(i).decode("utf-8", errors="backslashreplace") for i in ids]
    colour = args.color == "always" or (args.color == "auto" and sys.stdout.isatty() and "NO_COLOR" not in os.environ)
    if colour:
        print("".join(f"{_COLOURS[n % len(_COLOURS)]}{piece}{_RESET}" for n, piece in enumerate(pieces)))
    else:
        print("".join(f"[{piece}]" for piece in pieces))
    print(f"{len(args.text)} characters, {len(args.text.encode('utf-8'))} bytes -> {len(ids)} tokens")
    print(f"{'id':>7}  bytes")
    for token in ids:
        print(f"{token:>7}  {tok.token_bytes(token)!r}")
    return 0


def _default_tokenizer() -> BPETokenizer:
    """A small tokenizer trained on the documentation text every CPython ships (pydoc_data.topics)."""
    from pydoc_data.topics import topics

    start = time.perf_counter()
    tok = BPETokenizer.train(list(topics.values()), DEFAULT_VOCAB_SIZE)
    print(
        f"(no --tokenizer given: trained a {tok.vocab_size}-token tokenizer on Python's pydoc topics "
        f"in {time.perf_counter() - start:.1f} s)",
        file=sys.stderr,
    )
    return tok
