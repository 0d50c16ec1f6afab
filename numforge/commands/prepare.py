"""``numforge prepare``: tokenize a corpus once, on every core, into token files that training memory-maps.

    numforge prepare --data PATH --tokenizer FILE --out DIR [--workers N] [--val-fraction F]
    numforge train --tokens DIR

The directory's format is in ``numforge/data/tokens.py``; how documents are read,
in ``numforge/data/sources.py``.
"""

from __future__ import annotations

import argparse

from ..data import prepare_tokens
from ..data.prepare import DEFAULT_VAL_FRACTION
from ..tokenizer import BPETokenizer
from ._data_flags import add_reading_flags, add_workers_flag, source_from

HELP = "tokenize a corpus once, on every core, into token files that 'numforge train --tokens' memory-maps"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        metavar="PATH",
        required=True,
        help="a text file (one document), a directory (its files matching --glob), a .jsonl or a .parquet file",
    )
    parser.add_argument("--tokenizer", metavar="FILE", required=True, help="a numforge tokenizer JSON")
    parser.add_argument("--out", metavar="DIR", required=True, help="the directory to create (it must not exist)")
    add_workers_flag(parser)
    parser.add_argument(
        "--val-fraction",
        type=float,
        default=DEFAULT_VAL_FRACTION,
        metavar="F",
        help=f"the last fraction F of the tokens validates (default {DEFAULT_VAL_FRACTION})",
    )
    add_reading_flags(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    tokenizer = BPETokenizer.load(args.tokenizer)
    prepare_tokens(
        source_from(args, args.data),
        tokenizer,
        args.out,
        workers=args.workers,
        val_fraction=args.val_fraction,
        progress=not args.no_progress,
        say=print,
    )
    print(f"train on them with: numforge train --tokens {args.out}")
    return 0
