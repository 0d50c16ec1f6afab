"""``numforge gradcheck``: float64 gradient checks of every op, a block and the whole model, as a table.

``--write-exercise NAME --out FILE [--hints 0|1|2]`` writes an exercise: a real
file with the answer removed (``gradcheck/exercise.py``); ``--impl FILE``
grades the learner's functions in numforge's place and says what is wrong with
each wrong gradient (``gradcheck/grade.py``); ``--show CASE`` prints a case's
gradients beside the finite-difference ones; ``--progress`` is ``numforge course``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..atomic import write_text_atomic
from ..gradcheck import all_cases
from ..gradcheck.exercise import exercise_names, exercise_source, get_exercise, load_learner
from ..gradcheck.grade import Outcome, Ticker, grade, learner_cases, matching, passed, report, run_case
from ..gradcheck.scaffold import HINT_LEVELS
from ..gradcheck.show import show
from . import EXIT_FAILED, course

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
        "--write-exercise",
        metavar="NAME",
        choices=exercise_names(),
        help=f"write an exercise to --out: the file with its answer removed; NAME: {', '.join(exercise_names())}",
    )
    mode.add_argument(
        "--show", metavar="CASE", help="print the gradients of one case beside the finite-difference ones"
    )
    mode.add_argument(
        "--progress", action="store_true", help="which exercises in this directory pass (numforge course)"
    )
    parser.add_argument(
        "--impl",
        metavar="FILE",
        help="grade the functions FILE defines (e.g. layer_norm_backward(dy, cache)) in numforge's place",
    )
    parser.add_argument("--out", metavar="FILE", help="where --write-exercise writes (never over an existing file)")
    parser.add_argument(
        "--hints",
        type=int,
        choices=HINT_LEVELS,
        default=0,
        help="with --write-exercise: 0 signatures and shapes (default), 1 also the chain-rule steps, 2 the formulas",
    )


def run(args: argparse.Namespace) -> int:
    if args.write_exercise:
        return _write_exercise(args.write_exercise, args.out, args.hints)
    if args.out or args.hints:
        raise ValueError("--out and --hints go with --write-exercise")
    if args.show:
        return _show(args.show, args.impl)
    if args.progress:  # numforge course, here
        return course.run(argparse.Namespace(dir=Path(".")))
    if args.impl:
        if args.list:
            print("\n".join(c.name for c in learner_cases(load_learner(args.impl), args.only)))
            return 0
        outcomes = grade(args.impl, args.only, Ticker(f" of {args.impl}", sys.stderr))
        print(report(outcomes))
        return 0 if passed(outcomes) else EXIT_FAILED
    cases = matching(all_cases(), args.only)
    if args.list:
        print("\n".join(c.name for c in cases))
        return 0
    if not cases:
        raise ValueError(f"no gradient-check case matches {args.only!r} (see: numforge gradcheck --list)")
    ticker, outcomes = Ticker("", sys.stderr), []
    for done, case in enumerate(cases):
        ticker(done, len(cases), case.name)
        outcomes.append(Outcome(case, case.run()))
    print(report(outcomes))
    return 0 if all(r.passed for o in outcomes for r in o.rows) else EXIT_FAILED


def _show(name: str, impl: str | None) -> int:
    cases = [c for c in (learner_cases(load_learner(impl)) if impl else all_cases()) if c.name == name]
    if not cases:
        raise ValueError(f"no case {name!r}{' for ' + impl if impl else ''} (see: numforge gradcheck --list)")
    case = cases[0]
    if impl is None:
        print(show(case, case.run(), "numforge's backward"))
        return 0
    outcome = run_case(case, load_learner(impl), impl)
    if outcome.problem:
        raise ValueError(f"{case.name}: {outcome.problem}")
    print(show(case, outcome.rows, "yours"))
    return 0 if outcome.label == "right" else EXIT_FAILED


def _write_exercise(name: str, out: str | None, hints: int) -> int:
    if not out:
        raise ValueError("--write-exercise needs --out FILE, the exercise file to write")
    if Path(out).exists():
        raise ValueError(f"{out} exists; choose another --out (an exercise never overwrites a file)")
    exercise = get_exercise(name)
    write_text_atomic(out, exercise_source(name, file_name=out, hints=hints))
    print(f"wrote {out}: {exercise.source_name} with the answer removed (hints {hints})")
    print(f"write {', '.join(exercise.graded)}")
    print(f"then run: numforge gradcheck --impl {out}")
    return 0
