"""``numforge tokenizer train --data FILE --vocab-size N --out FILE``: learn a byte-level BPE tokenizer."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..tokenizer import BPETokenizer

HELP = "train a byte-level BPE tokenizer on text files"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    train = sub.add_parser("train", help="learn merges from text files and save the tokenizer")
    train.add_argument("--data", metavar="FILE", nargs="+", required=True, help="UTF-8 text file(s) to learn from")
    train.add_argument("--vocab-size", type=int, required=True, help="256 bytes + merges + special tokens")
    train.add_argument("--out", metavar="FILE", required=True, help="where to write the tokenizer (JSON)")
    train.add_argument(
        "--special-token",
        metavar="TEXT",
        action="append",
        help="a special token (repeat for several); default: <|endoftext|>",
    )


def run(args: argparse.Namespace) -> int:
    specials = tuple(args.special_token) if args.special_token else ("<|endoftext|>",)
    try:
        texts = [Path(path).read_text(encoding="utf-8") for path in args.data]
    except (OSError, UnicodeDecodeError) as error:
        print(f"error: cannot read the training data: {error}", file=sys.stderr)
        return 1
    out_dir = Path(args.out).resolve().parent
    if not out_dir.is_dir():  # found now, not after a long training run
        print(f"error: cannot write {args.out}: no directory {out_dir}", file=sys.stderr)
        return 1
    start = time.perf_counter()
    try:
        tok = BPETokenizer.train(texts, args.vocab_size, special_tokens=specials, progress=True)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    seconds = time.perf_counter() - start
    tok.save(args.out)
    megabytes = sum(len(text.encode("utf-8")) for text in texts) / 1e6
    print(
        f"trained {tok.vocab_size} tokens ({len(tok.merges)} merges, {len(tok.special_tokens)} special) "
        f"on {megabytes:.2f} MB in {seconds:.1f} s; wrote {args.out}"
    )
    return 0
