"""``numforge gradcheck``: float64 gradient checks of every op (and the model), as a table."""

from __future__ import annotations

import argparse
import fnmatch

from ..gradcheck import DEFAULT_TOL, all_cases, format_results
from . import EXIT_FAILED

HELP = "check every hand-written backward against finite differences (float64)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--only",
        metavar="PATTERN",
        default="*",
        help="run only the cases whose name matches this shell pattern, e.g. 'layer_norm*'",
    )
    parser.add_argument("--list", action="store_true", help="list the case names and exit")


def run(args: argparse.Namespace) -> int:
    cases = [c for c in all_cases() if fnmatch.fnmatch(c.name, args.only)]
    if args.list:
        print("\n".join(c.name for c in cases))
        return 0
    if not cases:
        raise ValueError(f"no gradient-check case matches {args.only!r} (see: numforge gradcheck --list)")
    results = [row for case in cases for row in case.run()]
    print(format_results(results))
    failed = [r for r in results if not r.passed]
    worst = max(r.max_rel_error for r in results)
    print(
        f"\n{len(results) - len(failed)}/{len(results)} gradients within {DEFAULT_TOL:g} "
        f"(worst relative error {worst:.2e})"
    )
    return EXIT_FAILED if failed else 0
