"""While a learner's functions run: they may not call numforge's own answer, nor the forward from a backward.

Two shortcuts would pass every check without a line of the math: calling
numforge's own backward (or a helper only it uses: ``_backward_tiles``), and a
"backward" that runs the forward again to take finite differences itself.
``Guard`` (``with guard:``, re-entrant) watches every Python function call
(``sys.settrace``, and ``threading.settrace`` for threads started meanwhile;
no line is traced) and records:

- a call of a ``denied`` function (numforge's file and qualified name) made
  directly by the learner's code (the nearest caller that is numforge's or the
  learner's is the learner's: numforge calling numforge is its own business);
- a call of a ``forwards`` function (numforge's, or the learner's copy) made
  while a learner's backward is on the stack above it, before any numforge frame.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

NUMFORGE_DIR = os.path.realpath(Path(__file__).resolve().parent.parent)
QUALIFIED = sys.version_info >= (3, 11)  # code objects know their qualified name (Class.method); before, only the name


def _name(qualname: str) -> str:
    return qualname if QUALIFIED else qualname.rsplit(".", 1)[-1]


def _code_name(code) -> str:
    return code.co_qualname if QUALIFIED else code.co_name


class Guard:
    """``with Guard(learner_file, denied, forwards, backwards) as guard: ...``; then ``guard.violations``."""

    def __init__(self, learner_file, denied: set[tuple[str, str]], forwards: set[str], backwards: set[str]):
        self.learner_file = os.path.realpath(learner_file)
        self.denied = {(os.path.realpath(path), _name(name)) for path, name in denied}
        self.forwards, self.backwards = {_name(n) for n in forwards}, {_name(n) for n in backwards}
        self.violations: list[str] = []
        self._owners: dict[str, tuple[str, str | None]] = {}
        self._depth = 0

    def __enter__(self) -> Guard:
        if self._depth == 0:
            self._previous = sys.gettrace()
            sys.settrace(self._hook)
            threading.settrace(self._hook)
        self._depth += 1
        return self

    def __exit__(self, *exc) -> None:
        self._depth -= 1
        if self._depth == 0:
            sys.settrace(self._previous)
            threading.settrace(None)

    def _file(self, filename: str) -> tuple[str, str | None]:
        """``(real path, owner)`` of a code object's file: ``"learner"``, ``"numforge"`` or None (numpy, ...)."""
        known = self._owners.get(filename)
        if known is None:
            path = os.path.realpath(filename)
            owner = "learner" if path == self.learner_file else ("numforge" if path.startswith(NUMFORGE_DIR) else None)
            known = self._owners[filename] = (path, owner)
        return known

    def _owner(self, filename: str) -> str | None:
        return self._file(filename)[1]

    def _hook(self, frame, event, arg) -> None:  # returns None: no tracing inside the frame
        if event != "call":
            return
        code = frame.f_code
        path, owner = self._file(code.co_filename)
        if owner is None:
            return
        name = _code_name(code)
        if name in self.forwards:
            self._check_forward(frame, name)
        elif (path, name) in self.denied and self._caller(frame) == "learner":
            relative = os.path.relpath(path, os.path.dirname(NUMFORGE_DIR))
            self._record(f"it calls numforge's own {name} ({relative}): the exercise is to write it")

    def _caller(self, frame) -> str | None:
        caller = frame.f_back
        while caller is not None:
            owner = self._owner(caller.f_code.co_filename)
            if owner is not None:
                return owner
            caller = caller.f_back
        return None

    def _check_forward(self, frame, name: str) -> None:
        caller = frame.f_back
        while caller is not None:
            owner = self._owner(caller.f_code.co_filename)
            if owner == "numforge":
                return
            caller_name = _code_name(caller.f_code)
            if owner == "learner" and (caller_name in self.backwards or caller_name.endswith("backward")):
                self._record(
                    f"{caller_name} calls {name}: a backward must not run the forward again "
                    "(finite differences are the grader's job, not the backward's)"
                )
                return
            caller = caller.f_back

    def _record(self, violation: str) -> None:
        if violation not in self.violations:
            self.violations.append(violation)
