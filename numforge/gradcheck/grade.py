"""Grading a learner's file: every case it is for, run with the learner's functions, and the report.

``grade(path, pattern)`` loads the file, runs every case whose functions it
defines (``Case.learner``) under a ``Guard`` (no calling numforge's own answer,
no forward inside a backward), and returns one ``Outcome`` per case: its rows,
or why it was not checked. ``report(outcomes)`` is what ``numforge gradcheck
--impl`` prints: the tables, one ``wrong:`` paragraph per wrong gradient with
what the diagnosis found (``diagnose.py``), then, for a function graded by
several cases that fare differently, on which cases it fails and the
simplest thing those cases share (``Tq != Tk``, ``weight_decay > 0``).
"""

from __future__ import annotations

import fnmatch
import functools
import itertools
import re
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..table import format_table
from .cases import Case, exercise_cases
from .check import GradResult, MatchResult, format_results
from .exercise import defines, denied_functions, get_exercise, load_learner
from .guard import Guard

CHECK_FILE = str(Path(__file__).resolve().parent / "check.py")
FINITE_DIFFERENCES = ("numeric_gradient", "check_gradients", "check_op")  # what no learner's function may call


@dataclass
class Outcome:
    """One case run on a learner's file: its rows, or (``problem``) why it was not checked or not accepted."""

    case: Case
    rows: list = field(default_factory=list)
    problem: str | None = None
    label: str = "right"  # right | wrong (...) | not written yet | raises X | refused


def matching(cases: list[Case], pattern: str) -> list[Case]:
    """The case named ``pattern`` exactly, else those whose names match it as a shell pattern (names hold brackets)."""
    return [c for c in cases if c.name == pattern] or [c for c in cases if fnmatch.fnmatchcase(c.name, pattern)]


def learner_cases(module, pattern: str = "*") -> list[Case]:
    """The cases a learner's module can be graded by: it defines every function the case substitutes."""
    return [c for c in matching(exercise_cases(), pattern) if all(defines(module, name) for name in c.learner)]


def grade(path: str | Path, pattern: str = "*", on_case=None) -> list[Outcome]:
    """Every case of the learner's file ``path`` (matching ``pattern``), run with the learner's functions;
    ``on_case(done, total, name)`` before each (a progress line)."""
    module = load_learner(path)
    if not matching(exercise_cases(), pattern):
        raise ValueError(f"--only {pattern!r} matches no case (see: numforge gradcheck --list --impl {path})")
    cases = learner_cases(module, pattern)
    if not cases:
        names = sorted({n for c in exercise_cases() for n in c.learner})
        raise ValueError(f"{path} defines none of the functions numforge grades (matching {pattern!r}): {names}")
    outcomes = []
    for done, case in enumerate(cases):
        if on_case is not None:
            on_case(done, len(cases), case.name)
        outcomes.append(run_case(case, module, path))
    return outcomes


class Ticker:
    """``on_case`` for ``grade``: a line on ``stream`` when ``every`` seconds have passed since the last one
    (``graded 12 of 37 cases of mine.py; now model[relu2]``), so a long grading is never silent."""

    def __init__(self, label: str, stream, every: float = 5.0):
        self.label, self.stream, self.every = label, stream, every
        self.last = time.monotonic()

    def __call__(self, done: int, total: int, name: str) -> None:
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            print(f"graded {done} of {total} cases{self.label}; now {name}", file=self.stream, flush=True)


def run_case(case: Case, module, path) -> Outcome:
    """``case`` with the learner's functions, under the guard; whatever the learner's code raises (or the grading
    of what it returned: a dict where an array goes) is the case's outcome, never the grader's crash."""
    backwards = set(case.learner) - set(case.forwards)
    home = str(get_exercise(case.exercise_name).path)
    denied = denied_functions(case.exercise_name) | {(CHECK_FILE, name) for name in FINITE_DIFFERENCES}
    guard = Guard(path, denied, {(home, name) for name in case.forwards})
    try:
        with _guarded(module, case.learner, guard, backwards):
            rows = case.run(module)
    except (Exception, SystemExit) as error:  # the learner's code: report the error, grade the other cases
        if guard.violations:
            return Outcome(case, [], "; ".join(guard.violations), "refused")
        if isinstance(error, NotImplementedError):
            where = _raised_in(error, path) or ", ".join(case.learner)
            return Outcome(case, [], f"{where} is not written yet (it raises NotImplementedError)", "not written yet")
        message = f"{', '.join(case.learner)} failed: {type(error).__name__}: {error}"
        return Outcome(case, [], message, f"raises {type(error).__name__}")
    if guard.violations:
        return Outcome(case, [], "; ".join(guard.violations), "refused")
    wrong = [r.argument for r in rows if not r.passed]
    label = "right" if not wrong else f"wrong ({', '.join(wrong)})" if isinstance(rows[0], GradResult) else "wrong"
    return Outcome(case, rows, None, label)


@contextmanager
def _guarded(module, names: tuple[str, ...], guard: Guard, backwards: set[str]):
    """The learner's functions ``names`` (``Class.method`` too) run under ``guard`` while the block runs, those of
    ``backwards`` as backwards (the forward is counted); only they: finite differences and numforge's reference
    run at full speed."""
    saved = []
    for name in names:
        owner_name, _, attribute = name.rpartition(".")
        owner = getattr(module, owner_name) if owner_name else module
        function = owner.__dict__[attribute] if owner_name else getattr(module, attribute)
        saved.append((owner, attribute, function))
        setattr(owner, attribute, _under(function, guard, name if name in backwards else None))
    try:
        yield
    finally:
        for owner, attribute, function in reversed(saved):
            setattr(owner, attribute, function)


def _under(function, guard: Guard, backward: str | None):
    @functools.wraps(function)
    def guarded(*args, **kwargs):
        with guard:
            if backward is None:
                return function(*args, **kwargs)
            guard.enter_backward(backward, args, kwargs)
            try:
                return function(*args, **kwargs)
            finally:
                guard.exit_backward()

    return guarded


def _raised_in(error: BaseException, path) -> str | None:
    """The learner's function a stub's error names (``GPT.backward: not written yet``), else the one the
    traceback ends in, else None."""
    stub = re.fullmatch(r"([\w.]+): not written yet", str(error))
    if stub:
        return stub[1]
    frames = [
        f for f in traceback.extract_tb(error.__traceback__) if Path(f.filename).resolve() == Path(path).resolve()
    ]
    return frames[-1].name if frames else None


def report(outcomes: list[Outcome]) -> str:
    """The tables, the wrong gradients with their diagnoses, the cases not checked, the fail pattern, the count."""
    gradients = [r for o in outcomes for r in o.rows if isinstance(r, GradResult)]
    matches = [r for o in outcomes for r in o.rows if isinstance(r, MatchResult)]
    parts = []
    if gradients:
        parts.append(format_results(gradients))
    if matches:
        rows = [(r.op, r.argument, "pass" if r.passed else "FAIL") for r in matches]
        parts.append(format_table(("function", "checked on", "result"), rows, align="left"))
    lines = []
    for r in gradients:
        if not r.passed:
            versus = "" if r.vs_reference is None else f", {r.vs_reference:.2e} from numforge's"
            what = r.problem or f"relative error {r.max_rel_error:.2e} against {r.against}{versus}"
            lines.append(f"wrong: {r.op}, the {r.quantity} of {r.argument!r}: {what}")
            lines.extend(f"  - {note}" for note in r.notes)
    for r in matches:
        if not r.passed:
            lines.append(f"wrong: {r.op} on {r.argument}: {r.detail}")
            lines.extend(f"  - {note}" for note in r.notes)
    for o in outcomes:
        if o.problem:
            lines.append(f"{'refused' if o.label == 'refused' else 'not checked'}: {o.case.name}: {o.problem}")
    lines.extend(pattern_lines(outcomes))
    parts.append("\n".join(lines))
    parts.append(_count(gradients, matches, outcomes))
    return "\n\n".join(p for p in parts if p)


def passed(outcomes: list[Outcome]) -> bool:
    return bool(outcomes) and all(o.problem is None and o.label == "right" for o in outcomes)


def _count(gradients: list[GradResult], matches: list[MatchResult], outcomes: list[Outcome]) -> str:
    counts = []
    for quantity in dict.fromkeys(r.quantity for r in gradients):
        rows = [r for r in gradients if r.quantity == quantity]
        worst, good, tol = max(r.max_rel_error for r in rows), sum(r.passed for r in rows), rows[0].tol
        counts.append(f"{good}/{len(rows)} {quantity}s within {tol:g} (worst relative error {worst:.2e})")
    if matches:
        counts.append(f"{sum(r.passed for r in matches)}/{len(matches)} outputs equal the reference's")
    skipped = sum(o.problem is not None for o in outcomes)
    if skipped:
        counts.append(f"{skipped} case{'s' * (skipped != 1)} not checked")
    return "; ".join(counts)


# ---------------------------------------------------------------- on which cases a function fails


def pattern_lines(outcomes: list[Outcome]) -> list[str]:
    """For each learner function graded by several cases with different outcomes: the cases of each outcome, and
    the simplest feature they share that the others lack (``where Tq != Tk``)."""
    lines = []
    by_function: dict[tuple[str, ...], list[Outcome]] = {}
    for o in outcomes:
        by_function.setdefault(o.case.learner, []).append(o)
    for function, group in by_function.items():
        labels = list(dict.fromkeys(o.label for o in group))
        if len(group) < 2 or len(labels) < 2:
            continue
        features = {o.case.name: (o.case.features() if o.case.features else ({}, {})) for o in group}
        lines.append(f"by case, {', '.join(function)}:")
        for label in labels:
            inside = [o.case.name for o in group if o.label == label]
            where = _separating(inside, features)
            lines.append(f"  {label} on {len(inside)} case{'s' * (len(inside) != 1)}{where}: {', '.join(inside)}")
    return lines


def _candidates(features: dict) -> list[tuple[str, str, object]]:
    """``(text if true, text if false, test)`` for the features every case has: size equalities, then options."""
    sizes = [set(s) for s, _ in features.values()]
    options = [set(o) for _, o in features.values()]
    common_sizes = [n for n in next(iter(features.values()))[0] if all(n in s for s in sizes)]
    found = [
        (f"{a} = {b}", f"{a} != {b}", lambda f, a=a, b=b: f[0][a] == f[0][b])
        for a, b in itertools.combinations(common_sizes, 2)
    ]
    keys = set.union(*options) if options else set()
    for key in sorted(keys):
        values = list({repr(o.get(key)): o.get(key) for _, o in features.values()}.values())  # a dict is no key
        if all(isinstance(v, bool) or v is None for v in values):
            found.append((key, f"not {key}", lambda f, k=key: bool(f[1].get(k))))
        elif all(isinstance(v, (int, float)) or v is None for v in values):
            found.append((f"{key} > 0", f"{key} = 0", lambda f, k=key: (f[1].get(k) or 0) > 0))
        else:
            for value in sorted({str(v) for v in values}):
                found.append((f"{key} = {value}", f"{key} != {value}", lambda f, k=key, v=value: str(f[1].get(k)) == v))
    return found


def _separating(inside: list[str], features: dict) -> str:
    """`` where <feature>`` if one feature holds for exactly the cases ``inside``, else ``""``."""
    for if_true, if_false, test in _candidates(features):
        holds = {name for name, f in features.items() if test(f)}
        if holds == set(inside):
            return f" where {if_true}"
        if holds == set(features) - set(inside):
            return f" where {if_false}"
    return ""
