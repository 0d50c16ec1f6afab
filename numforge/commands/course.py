"""``numforge course``: the course's exercises and which of them the files in a directory pass.

Each exercise file (``numforge gradcheck --write-exercise NAME --out FILE``)
is graded as ``numforge gradcheck --impl FILE`` grades it; exercises with no
file are listed with the command that starts them (``gradcheck/progress.py``).
"""

from __future__ import annotations

import argparse
import sys

from ..checks import path_flag
from ..gradcheck.grade import Ticker
from ..gradcheck.progress import format_progress, progress
from . import EXIT_FAILED

HELP = "which exercises of the course the exercise files in a directory pass"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dir", metavar="DIR", type=path_flag, default=".", help="where the exercise files are (default: here)"
    )


def run(args: argparse.Namespace) -> int:
    ticker = Ticker("", sys.stderr)  # one clock for every file: a line every 5 s of the whole grading

    def for_file(label: str) -> Ticker:
        ticker.label = label
        return ticker

    rows = progress(args.dir, for_file)
    print(format_progress(rows))
    return 0 if all(row.done for row in rows) else EXIT_FAILED
