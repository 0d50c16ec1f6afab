"""``numforge course``: which exercises the learner has passed, read from the exercise files in a directory.

An exercise file is one ``numforge gradcheck --write-exercise`` wrote: its first
line names the exercise (``# numforge exercise: layernorm (hints 0)``). Each one
found is graded as ``--impl`` would grade it; every exercise is listed, with
its lesson in ``demos/course.md`` (when the course is there) and, for one not
started, the command that starts it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..table import format_table
from .exercise import HEADER_TAG, PACKAGE_DIR, exercise_names
from .grade import grade, passed

COURSE = PACKAGE_DIR.parent / "demos" / "course.md"


@dataclass(frozen=True)
class Progress:
    exercise: str
    lesson: str
    file: str
    status: str
    done: bool


def exercise_files(directory: Path) -> dict[str, list[Path]]:
    """Exercise name -> the files in ``directory`` (not below it) that hold it, by their first line."""
    found: dict[str, list[Path]] = {}
    for path in sorted(directory.glob("*.py")):
        try:
            with path.open(encoding="utf-8") as file:
                first = file.readline()
        except (OSError, UnicodeDecodeError):
            continue
        if first.startswith(HEADER_TAG):
            found.setdefault(first[len(HEADER_TAG) :].split()[0], []).append(path)
    return found


def lessons() -> dict[str, str]:
    """Exercise name -> the course lesson that sets it (``"4"``), from ``demos/course.md`` when it is there."""
    if not COURSE.exists():
        return {}
    found, lesson = {}, "-"
    for line in COURSE.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"## Lesson (\d+)\.", line)
        lesson = heading[1] if heading else lesson
        for name in re.findall(r"--write-exercise (\w+)", line):
            found.setdefault(name, lesson)
    return found


def _status(path: Path, on_case=None) -> tuple[str, bool]:
    try:
        outcomes = grade(path, on_case=on_case)
    except ValueError as error:
        return f"cannot grade: {error}", False
    if passed(outcomes):
        rows = sum(len(o.rows) for o in outcomes)
        return f"passed ({len(outcomes)} cases, {rows} checks)", True
    labels = [o.label for o in outcomes]
    counted = {label: labels.count(label) for label in dict.fromkeys(labels)}
    return "; ".join(f"{label}: {n} of {len(outcomes)} cases" for label, n in counted.items()), False


def progress(directory: str | Path = ".", ticker=None) -> list[Progress]:
    """Every exercise, in lesson order, with the status of each of its files here; ``ticker(label)``, if given,
    makes the ``on_case`` of a file's grading (``grade.Ticker``: a progress line every few seconds)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(f"{directory}: no such directory")
    files, lesson_of = exercise_files(directory), lessons()
    rows = []
    in_order = sorted(exercise_names(), key=lambda n: int(lesson_of[n]) if lesson_of.get(n, "-").isdigit() else 1e9)
    for name in in_order:  # the course's order, the exercises no lesson sets last
        lesson = lesson_of.get(name, "-")
        if name not in files:
            start = f"not started: numforge gradcheck --write-exercise {name} --out my_{name}.py"
            rows.append(Progress(name, lesson, "-", start, False))
        for path in files.get(name, []):
            status, done = _status(path, None if ticker is None else ticker(f" of {path.name}"))
            rows.append(Progress(name, lesson, path.name, status, done))
    return rows


def format_progress(rows: list[Progress]) -> str:
    table = format_table(
        ("lesson", "exercise", "file", "status"),
        [(r.lesson, r.exercise, r.file, r.status) for r in rows],
        align="left",
    )
    done = len({r.exercise for r in rows if r.done})
    return f"{table}\n\n{done}/{len({r.exercise for r in rows})} exercises passed"
