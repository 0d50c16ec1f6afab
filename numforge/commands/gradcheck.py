"""``numforge gradcheck``: float64 gradient checks of every op (and the model), as a table.

``--impl FILE`` grades a learner's own backward functions (any of the ops'
``*_backward``, same signatures) in numforge's place; ``--write-exercise OP
--out FILE`` writes the exercise to start from (``gradcheck/exercise.py``).
"""

from __future__ import annotations

import argparse
import fnmatch
from pathlib import Path

from ..atomic import write_text_atomic
from ..gradcheck import DEFAULT_TOL, all_cases, format_results
from ..gradcheck.exercise import exercise_ops, exercise_source, learner_backwards
from . import EXIT_FAILED

HELP = "check every hand-written backward against finite differences (float64), or grade your own"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--only",
        metavar="PATTERN",
        default="*",
        help="run only the case of this exact name (e.g. 'model[gelu]'), or the cases whose name matches "
        "this shell pattern (e.g. 'layer_norm*')",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--list", action="store_true", help="list the case names and exit")
    mode.add_argument(
        "--impl",
        metavar="FILE",
        help="grade the *_backward functions FILE defines (e.g. layer_norm_backward(dy, cache)) in numforge's place",
    )
    mode.add_argument(
        "--write-exercise",
        metavar="OP",
        choices=exercise_ops(),
        help=f"write numforge/ops/OP.py with its backward bodies removed to --out; OP: {', '.join(exercise_ops())}",
    )
    parser.add_argument("--out", metavar="FILE", help="where --write-exercise writes (never over an existing file)")


def run(args: argparse.Namespace) -> int:
    if args.write_exercise:
        return _write_exercise(args.write_exercise, args.out)
    if args.out:
        raise ValueError("--out goes with --write-exercise")
    # an exact name first: case names hold brackets, which a shell pattern reads as a character class
    cases = [c for c in all_cases() if c.name == args.only] or [
        c for c in all_cases() if fnmatch.fnmatchcase(c.name, args.only)
    ]
    learner = {}
    if args.impl:
        learner = learner_backwards(args.impl, {c.backward for c in all_cases() if c.backward})
        cases = [c for c in cases if c.backward in learner]
    if args.list:
        print("\n".join(c.name for c in cases))
        return 0
    if not cases:
        what = f" of {sorted(learner)}" if learner else ""
        raise ValueError(f"no gradient-check case{what} matches {args.only!r} (see: numforge gradcheck --list)")
    results, not_run = [], []
    for case in cases:
        if not learner:
            results.extend(case.run())
            continue
        try:
            results.extend(case.run(learner[case.backward]))
        except NotImplementedError:
            not_run.append(f"{case.name}: {case.backward} is not written yet (it raises NotImplementedError)")
        except Exception as error:  # the learner's code: report the error, grade the other cases
            not_run.append(f"{case.name}: {case.backward} failed: {type(error).__name__}: {error}")
    return _report(results, not_run)


def _report(results: list, not_run: list[str]) -> int:
    if results:
        print(format_results(results))
    failed = [r for r in results if not r.passed]
    for r in failed:
        versus = "" if r.vs_reference is None else f", {r.vs_reference:.2e} from numforge's backward"
        print(
            f"wrong: {r.op}, the gradient of {r.argument!r}: relative error {r.max_rel_error:.2e} "
            f"against finite differences{versus}"
        )
    for line in not_run:
        print(f"not checked: {line}")
    if results:
        worst = max(r.max_rel_error for r in results)
        print(
            f"\n{len(results) - len(failed)}/{len(results)} gradients within {DEFAULT_TOL:g} "
            f"(worst relative error {worst:.2e})"
            + (f"; {len(not_run)} case{'s' * (len(not_run) != 1)} not checked" if not_run else "")
        )
    return EXIT_FAILED if failed or not_run else 0


def _write_exercise(op: str, out: str | None) -> int:
    if not out:
        raise ValueError("--write-exercise needs --out FILE, the exercise file to write")
    if Path(out).exists():
        raise ValueError(f"{out} exists; choose another --out (an exercise never overwrites a file)")
    write_text_atomic(out, exercise_source(op, file_name=out))
    print(f"wrote {out}: numforge/ops/{op}.py with its backward bodies removed")
    print(f"write them, then run: numforge gradcheck --impl {out}")
    return 0
