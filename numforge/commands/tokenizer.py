"""``numforge tokenizer show|train``: see how text becomes tokens, or learn a tokenizer of your own.

- ``numforge tokenizer show "some text" [--tokenizer FILE]``: the text cut into
  tokens, each with its id and bytes (default: the cached tokenizer of the
  default corpus, trained once).
- ``numforge tokenizer train --data FILE... --vocab-size N --out FILE``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ..checks import check_positive_int
from ..data import DEFAULT_VOCAB_SIZE, default_tokenizer
from ..tokenizer import EOT, BPETokenizer

HELP = "show text cut into BPE tokens, or train a byte-level BPE tokenizer"

# background colours that alternate from token to token on a terminal
_COLOURS = ("\x1b[48;5;153m", "\x1b[48;5;223m", "\x1b[48;5;194m", "\x1b[48;5;225m")
_RESET = "\x1b[0m"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = sub.add_parser("show", help="show text split into its tokens, with each token's id and bytes")
    show.add_argument("text", help="the text to tokenize")
    show.add_argument(
        "--tokenizer",
        metavar="FILE",
        help="a numforge tokenizer file (numforge tokenizer train ...); "
        f"default: the {DEFAULT_VOCAB_SIZE}-token one of the default corpus (trained once, then cached)",
    )
    show.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour token boundaries (auto: on a terminal, unless NO_COLOR is set); otherwise [brackets]",
    )
    train = sub.add_parser("train", help="learn merges from text files and save the tokenizer")
    train.add_argument("--data", metavar="FILE", nargs="+", required=True, help="UTF-8 text file(s) to learn from")
    train.add_argument("--vocab-size", type=int, required=True, help="256 bytes + merges + special tokens")
    train.add_argument("--out", metavar="FILE", required=True, help="where to write the tokenizer (JSON)")
    train.add_argument(
        "--special-token", metavar="TEXT", action="append", help=f"a special token (repeat for several); default: {EOT}"
    )


def run(args: argparse.Namespace) -> int:
    return {"show": show, "train": train}[args.action](args)


def show(args: argparse.Namespace) -> int:
    tok = BPETokenizer.load(args.tokenizer) if args.tokenizer else default_tokenizer(say=_to_stderr)
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


def train(args: argparse.Namespace) -> int:
    check_positive_int(args.vocab_size, "--vocab-size")
    specials = tuple(args.special_token) if args.special_token else (EOT,)
    texts = []
    for path in args.data:
        try:
            texts.append(Path(path).read_text(encoding="utf-8"))
        except UnicodeDecodeError as error:
            raise ValueError(f"{path} is not UTF-8 text ({error.reason} at byte {error.start})") from None
    out_dir = Path(args.out).resolve().parent
    if not out_dir.is_dir():  # found now, not after a long training run
        raise ValueError(f"cannot write {args.out}: no directory {out_dir}")
    start = time.perf_counter()
    tok = BPETokenizer.train(texts, args.vocab_size, special_tokens=specials, progress=True)
    seconds = time.perf_counter() - start
    tok.save(args.out)
    megabytes = sum(len(text.encode("utf-8")) for text in texts) / 1e6
    print(
        f"trained {tok.vocab_size} tokens ({len(tok.merges)} merges, {len(tok.special_tokens)} special) "
        f"on {megabytes:.2f} MB in {seconds:.1f} s; wrote {args.out}"
    )
    return 0


def _to_stderr(text: str) -> None:
    print(text, file=sys.stderr)
