"""Exercises graded by the checker: a real op's file with its backward bodies removed, and the loader of a
learner's answers.

``exercise_source("layernorm")`` is ``numforge/ops/layernorm.py`` as it is
now, with the body of every ``*_backward`` function replaced by
``raise NotImplementedError`` (each keeps its signature and docstring: what
to return, in which order) and its relative imports made absolute, so the
file runs from anywhere. Generated from the source on every call, an
exercise cannot drift from the op it teaches; its solution is the op itself.

``learner_backwards(path)`` loads a learner's file and returns the functions
it defines whose names are backwards that ``numforge gradcheck`` checks;
``numforge gradcheck --impl FILE`` then runs those cases with the learner's
function in place of numforge's (``Case.run(substitute)``).
"""

from __future__ import annotations

import ast
import importlib.util
import pkgutil
import re
from collections.abc import Callable
from pathlib import Path

from .. import ops

OPS_DIR = Path(ops.__file__).parent
STUB = 'raise NotImplementedError("{name}: write this backward, then run: numforge gradcheck --impl {file}")'


def exercise_ops() -> list[str]:
    """The ops modules an exercise can be written from: ``numforge/ops/*.py`` that define a ``*_backward``
    (not the private ``_*.py``, not a registry such as ``norms.py``)."""
    names = (m.name for m in pkgutil.iter_modules([str(OPS_DIR)]) if not m.name.startswith("_"))
    return sorted(name for name in names if _backwards(ast.parse((OPS_DIR / f"{name}.py").read_text(encoding="utf-8"))))


def _backwards(tree: ast.Module) -> list[ast.FunctionDef]:
    return [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name.endswith("_backward")]


def exercise_source(op: str, file_name: str = "THIS_FILE", solution: bool = False) -> str:
    """``numforge/ops/{op}.py`` as a standalone file with every ``*_backward`` body removed (``solution``: kept).

    ``file_name`` is the name the file will have, for the grading command it quotes.
    """
    if op not in exercise_ops():
        raise ValueError(f"no op {op!r} to write an exercise from; choose one of {exercise_ops()}")
    lines = (OPS_DIR / f"{op}.py").read_text(encoding="utf-8").splitlines()
    tree = ast.parse("\n".join(lines))
    backwards = _backwards(tree)
    if not solution:
        for function in reversed(backwards):  # bottom-up, so earlier line numbers stay valid
            body = function.body
            keep = body[0].end_lineno if _is_docstring(body[0]) else body[0].lineno - 1  # through the docstring
            indent = " " * body[0].col_offset
            lines[keep : function.end_lineno] = [indent + STUB.format(name=function.name, file=file_name)]
    text = "\n".join(_absolute_import(line) for line in lines)
    verb = "with the body of every *_backward function removed" if not solution else "(the solution)"
    names = ", ".join(f.name for f in backwards)
    header = (
        f"# Exercise: numforge/ops/{op}.py {verb}.\n"
        f"# Write {names}; each docstring says what to return, in which order.\n"
        f"# Grade it: numforge gradcheck --impl {file_name}  (numforge's forward makes the cache, your backward\n"
        "# reads it; each gradient is compared with finite differences and with numforge's own backward).\n"
        f"# The solution is numforge/ops/{op}.py.\n"
    )
    return header + text + "\n"


def learner_backwards(path: str | Path, known: set[str]) -> dict[str, Callable]:
    """The functions defined in the learner's file ``path`` whose names are in ``known``.

    Functions the file imports (numforge's own, say) are not the learner's and
    are left out. A file that cannot be loaded, or that defines none of
    ``known``, is a ``ValueError``.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--impl {path}: no such file")
    spec = importlib.util.spec_from_file_location(f"numforge_learner_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # the learner's file: any error in it is reported, not a crash
        raise ValueError(f"cannot load {path}: {type(error).__name__}: {error}") from error
    found = {
        name: value
        for name, value in vars(module).items()
        if name in known and callable(value) and getattr(value, "__module__", None) == module.__name__
    }
    if not found:
        raise ValueError(f"{path} defines none of the backward functions numforge checks: {sorted(known)}")
    return found


def _is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def _absolute_import(line: str) -> str:
    """``from ..backend import x`` -> ``from numforge.backend import x``; ``from ._sums`` -> ``numforge.ops._sums``."""
    match = re.match(r"from (\.+)(\w*) import", line)
    if not match:
        return line
    dots, module = match.groups()
    package = ["numforge", "ops"][: 3 - len(dots)]  # one dot: numforge.ops; two: numforge
    target = ".".join(package + ([module] if module else []))
    return f"from {target} import" + line[match.end() :]
