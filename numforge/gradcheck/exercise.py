"""Exercises: a real numforge file with the answer removed, the grading cases it is for, and a learner's file loaded.

An exercise is made of the cases that grade it (``cases.exercise_cases``): every
case names the functions a learner writes and the module they live in, and
the cases of one module are one exercise, named by the module
(``layernorm``, ``attention``, ``blocks``, ``gpt``) or by the case
(``tokenizer``, ``adamw``). A new op is an exercise as soon as its
gradient-check case is registered: nothing here names an op.

``exercise_source("layernorm", hints=0)`` is ``numforge/ops/layernorm.py`` as it
is now, with the answer removed (``scaffold.py``: the backward bodies, the
helpers only they use, the formulas in the docstrings, by hint level) and its
relative imports made absolute, so the file runs from anywhere. Generated from
the source on every call, an exercise cannot drift from the file it teaches;
its solution is the file itself (``solution=True``).

``load_learner(path)`` loads a learner's file; ``defines(module, "GPT.backward")``
says whether it defines a function (a method of a class defined there).
``denied_functions(exercise)`` is what the learner's code may not call while
graded (``guard.py``): numforge's own answer, wherever it lives.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path

from .cases import Case, exercise_cases
from .scaffold import HINT_LEVELS, analyse, functions, make_scaffold

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # numforge/
HEADER_TAG = "# numforge exercise:"
FROM_IMPORT = re.compile(
    r"^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.M
)  # the scaffold's first line: "# numforge exercise: layernorm (hints 0)"


@dataclass(frozen=True)
class Exercise:
    """The cases of one module; ``graded`` the functions the learner writes, in file order."""

    name: str
    module: str
    cases: tuple[Case, ...]

    @property
    def path(self) -> Path:
        return PACKAGE_DIR.joinpath(*self.module.split(".")[1:]).with_suffix(".py")

    @property
    def source_name(self) -> str:
        return self.path.relative_to(PACKAGE_DIR.parent).as_posix()

    @property
    def graded(self) -> tuple[str, ...]:
        names = {name for case in self.cases for name in case.learner}
        return tuple(name for name in _tree_functions(self.path) if name in names)

    @property
    def keep_docstrings(self) -> bool:
        return any(case.keep_docstrings for case in self.cases)

    def parts(self):
        return analyse(_tree(self.path), self.graded, used_outside(self.module))

    def describe(self, name: str) -> str:
        """The level-0 docstring of the graded function ``name``, from the first case that grades it."""
        case = next(c for c in self.cases if name in c.learner)
        return case.describe(name) if case.describe else f"{name}: write it (graded by the case {case.name})."


@functools.cache
def exercises() -> dict[str, Exercise]:
    """Every exercise by name, in the order of the registry."""
    grouped: dict[str, list[Case]] = {}
    for case in exercise_cases():
        grouped.setdefault(case.exercise_name, []).append(case)
    found = {}
    for name, cases in grouped.items():
        modules = {case.module for case in cases}
        if len(modules) != 1:
            raise ValueError(f"the cases of exercise {name!r} name several modules: {sorted(modules)}")
        found[name] = Exercise(name, modules.pop(), tuple(cases))
    return found


def exercise_names() -> list[str]:
    return list(exercises())


def get_exercise(name: str) -> Exercise:
    if name not in exercises():
        raise ValueError(f"no exercise {name!r}; choose one of {exercise_names()}")
    return exercises()[name]


def exercise_source(name: str, file_name: str = "THIS_FILE", hints: int = 0, solution: bool = False) -> str:
    """The exercise file: the module's source with the answer removed at ``hints`` (or kept: ``solution``)."""
    exercise = get_exercise(name)
    if hints not in HINT_LEVELS:
        raise ValueError(f"--hints must be one of {HINT_LEVELS}, got {hints!r}")
    source = exercise.path.read_text(encoding="utf-8") if solution else _scaffold(name, hints)
    text = "\n".join(_absolute_import(line, exercise.module) for line in source.splitlines())
    return _header(exercise, file_name, hints, solution) + text + "\n"


def _header(exercise: Exercise, file_name: str, hints: int, solution: bool) -> str:
    graded = ", ".join(exercise.graded)
    lines = [
        f"{HEADER_TAG} {exercise.name} ({'the solution' if solution else f'hints {hints}'})",
        f"# {exercise.source_name} with the answer removed: write {graded}.",
        *([] if solution else [f"# Hints {hints}{_more_hints(exercise, hints)}"]),
        f"# Grade it: numforge gradcheck --impl {file_name}  (--show CASE: {_shown(exercise)})",
        *[f"# The math: {doc}" for doc in derivations_of(exercise)],
        f"# The solution, once you are done: {exercise.source_name}.",
    ]
    return "\n".join(lines) + "\n"


def _shown(exercise: Exercise) -> str:
    """What ``--show`` puts side by side: gradients, or (nothing differentiated: no forward) outputs."""
    if any(case.forwards for case in exercise.cases):
        return "your gradient beside the true one"
    return "what yours does beside what numforge's does"


@functools.cache
def _scaffold(name: str, hints: int) -> str:
    exercise = get_exercise(name)
    source = exercise.path.read_text(encoding="utf-8")
    return make_scaffold(source, exercise.parts(), hints, exercise.describe, exercise.keep_docstrings)


def _more_hints(exercise: Exercise, hints: int) -> str:
    """What a higher hint level would add, said only where it adds anything to this exercise."""
    texts = [_scaffold(exercise.name, level) for level in HINT_LEVELS]
    adds = {1: "the helpers' signatures and the chain-rule steps", 2: "the formulas (the real docstrings)"}
    more = [f"--hints {n} adds {adds[n]}" for n in HINT_LEVELS[hints + 1 :] if texts[n] != texts[n - 1]]
    return f"; {', '.join(more)}." if more else " (the most there are)."


def derivations_of(exercise: Exercise) -> list[str]:
    """The derivation documents that quote the exercise's file (``demos/derivations/*.md``), when they are here."""
    folder = PACKAGE_DIR.parent / "demos" / "derivations"
    needle = exercise.source_name + "::"
    return [
        path.relative_to(PACKAGE_DIR.parent).as_posix()
        for path in sorted(folder.glob("*.md"))
        if any(f"{needle}{name.split('.')[0]}" in path.read_text(encoding="utf-8") for name in exercise.graded)
    ]


def load_learner(path: str | Path):
    """The learner's file as a module; a file that is missing or does not load is a ``ValueError``."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--impl {path}: no such file")
    spec = importlib.util.spec_from_file_location("numforge_learner_" + re.sub(r"\W", "_", path.stem), path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # the learner's file: any error in it is reported, not a crash
        raise ValueError(f"cannot load {path}: {type(error).__name__}: {error}") from error
    return module


def defines(module, qualname: str) -> bool:
    """Whether ``module`` itself defines ``qualname`` (a function, or ``Class.method`` of a class defined there)."""
    owner_name, _, method = qualname.rpartition(".")
    owner = getattr(module, owner_name, None) if owner_name else module
    if owner is None or (owner_name and getattr(owner, "__module__", None) != module.__name__):
        return False
    value = owner.__dict__.get(method) if owner_name else getattr(module, method, None)
    return callable(value) and getattr(value, "__module__", None) == module.__name__


def resolve(module, qualname: str):
    value = module
    for part in qualname.split("."):
        value = getattr(value, part)
    return value


# ---------------------------------------------------------------- numforge's own source, read once


@functools.cache
def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(_text(path))


def _tree_functions(path: Path) -> list[str]:
    return list(functions(_tree(path)))


@functools.cache
def _modules() -> dict[str, Path]:
    """Every numforge module by dotted name."""
    found = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


@functools.cache
def imports_of(module: str) -> tuple[tuple[str, str], ...]:
    """``(module, name)`` for every ``from numforge... import name`` in ``module``, at any depth (relative ones
    resolved), read from the text: the house writes imports one way, and parsing every file is slow."""
    path = _modules()[module]
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = []
    for dots, name, names in FROM_IMPORT.findall(_text(path)):
        base = ".".join(package[: len(package) - len(dots) + 1] + ([name] if name else [])) if dots else name
        if base.startswith("numforge"):
            for alias in re.sub(r"#[^\n]*", "", names).strip("()").split(","):
                if alias.strip():
                    found.append((base, alias.split(" as ")[0].strip()))
    return tuple(found)


@functools.cache
def used_outside(module: str) -> frozenset[str]:
    """The names of ``module`` that other numforge modules import."""
    return frozenset(
        name for other in _modules() if other != module for base, name in imports_of(other) if base == module
    )


@functools.cache
def denied_functions(name: str) -> frozenset[tuple[str, str]]:
    """``(file, qualified name)`` of what the learner's code may not call while exercise ``name`` is graded:
    every numforge function named ``*backward*``, every exercise's functions and helpers (``scaffold.Parts``),
    every function of the exercise's ``scope`` (the fast tokenizer beside the textbook one), but what its own
    file imports (the exercise's tools: a block's backward calls the ops' backwards)."""
    exercise = get_exercise(name)
    answer = set()
    for other in exercises().values():
        parts = other.parts()
        answer |= {(str(other.path), q) for q in (*parts.exercise, *parts.helpers)}
    scope = tuple(s for case in exercise.cases for s in case.scope)
    for module, path in _modules().items():
        in_scope = module.startswith(scope or ("\0",))
        if not in_scope and "backward" not in _text(path):
            continue  # no function of it can be named *backward*
        for qualname in _tree_functions(path):
            if in_scope or "backward" in qualname.rsplit(".", 1)[-1]:
                answer.add((str(path), qualname))
    return frozenset(answer - _allowed(exercise.module))


def _allowed(module: str) -> set[tuple[str, str]]:
    """The functions ``module`` imports from numforge, a class's methods, a registry's entries' functions."""
    allowed = set()
    for base, name in imports_of(module):
        value = getattr(import_module(base), name, None)
        for function in _functions_in(value):
            code = getattr(function, "__code__", None)
            if code is not None:
                allowed.add((str(Path(code.co_filename).resolve()), function.__qualname__))
    return allowed


def _functions_in(value) -> list:
    """The functions a class holds, or a registry's entries (tuples, nested ones too: a position scheme's rotation)."""
    if isinstance(value, type):
        return [v for v in vars(value).values() if callable(v)]
    if isinstance(value, Mapping):
        return [f for entry in value.values() for f in _functions_in(entry)]
    if isinstance(value, tuple):
        return [f for item in value for f in _functions_in(item)]
    return [value] if callable(value) else []


def _absolute_import(line: str, module: str) -> str:
    """``from ..backend import x`` -> ``from numforge.backend import x``, relative to ``module``'s package."""
    match = re.match(r"(\s*)from (\.+)(\w*(?:\.\w+)*) import", line)
    if not match:
        return line
    indent, dots, name = match.groups()
    package = module.split(".")[: len(module.split(".")) - len(dots)]
    target = ".".join(package + ([name] if name else []))
    return f"{indent}from {target} import" + line[match.end() :]
