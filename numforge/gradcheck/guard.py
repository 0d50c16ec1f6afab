"""While a learner's functions run: they may not call numforge's answer, nor take finite differences of the forward.

Two shortcuts would pass every check without a line of the math: calling
numforge's own backward (or a helper only it uses: ``_backward_tiles``), and a
"backward" that evaluates the forward around its inputs to take finite
differences itself. ``Guard`` (``with guard:``, re-entrant) watches every
Python function call (``sys.settrace``, and ``threading.settrace`` for threads
started meanwhile; no line is traced) and knows a function by what its code
is, not by its name or file: ``content_key`` is the code object's bytecode,
names and constants, whatever ``co_name`` or ``co_filename`` say (a
``__code__.replace(co_name=...)``, numforge's source ``exec``'d under another
file name, are the same function). A frame is the learner's only if its code
was compiled from the learner's file, numforge's only if from numforge's. It records:

- a call of a ``denied`` function (numforge's answer, or its finite
  differences: ``check.numeric_gradient``), by content, made directly by the
  learner's code (the nearest caller that is numforge's or the learner's is
  the learner's: numforge calling numforge is its own business);
- while a learner's backward runs, an evaluation of the case's forward (numforge's,
  the learner's copy, any copy) that finite differences need and a backward does not:
  at a perturbation of an array the backward was given (some of its entries
  moved, or all of them by a tiny amount), on an array larger than any it was
  given (a Jacobian probed all at once), or more than ``FORWARD_BUDGET`` times in one
  backward. Running the forward on other arrays is a building block, not a
  shortcut: RoPE's backward is the forward's rotation with ``-sin``, applied to ``dy``.

- while a learner's backward of a case with a forward runs, a perturbation of an array it
  was given held by the learner's own code (its lines are traced then, and only then): some entries
  moved by a step tiny beside the array's scale, or a complex step. That is what
  every difference needs, whether the forward is numforge's, a copy, or its formula
  written out inline: the learner's code must hold ``x`` with one entry nudged to
  evaluate anything there. A derived backward never does: its arrays are ``x``
  itself or things far from it (``x - mean``, ``dy * mask``).

What cannot be seen is a difference taken on arrays the learner rebuilds from
scratch rather than from the ones given (a forward of its own on its own
copies of the inputs' values, entry by entry, in pure Python floats): the
course says so.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
from pathlib import Path

import numpy as np

from ..backend import to_numpy

NUMFORGE_DIR = os.path.realpath(Path(__file__).resolve().parent.parent)
FORWARD_BUDGET = 4  # forward evaluations one backward may make (a per-head loop); finite differences need 2 per entry
NEAR = 1e-3  # an array within this (relative) of one the backward was given, all entries moved, is a perturbation
PROBED = "a Jacobian probed all at once, finite differences in disguise"
PERTURBED = (
    "a finite difference; a backward must not run the forward again around its inputs (finite differences are "
    "the grader's job, not the backward's)"
)
REPEATED = "finite differences; a backward must not run the forward again and again"
NUDGED = (
    "a finite difference; a backward derives the gradient by the chain rule and never evaluates anything at "
    "nudged inputs (finite differences are the grader's job, not the backward's)"
)
NUDGE = 1e-4  # an entry moved by at most this (relative to the array's largest) is nudged, as a difference's step
TRACED = 100_000  # the learner's lines are traced in a backward given at most this many numbers (finite
# differences of more are too slow to be a shortcut; the tiled exercise's memory run is larger)
DEPTH = 2  # how deep arrays are looked for in what a function receives: cache.x, self.params[name]


def content_key(code) -> tuple:
    """What a code object computes: its bytecode, the names it uses, its constants (nested code by their key)."""
    consts = tuple(content_key(c) if hasattr(c, "co_code") else (type(c).__name__, repr(c)) for c in code.co_consts)
    return (code.co_code, code.co_names, code.co_argcount, code.co_kwonlyargcount, code.co_nlocals, consts)


@functools.cache
def _file_functions(path: str, mtime: float) -> dict[tuple, str]:
    """Content key -> qualified name of every function compiled from the file ``path`` (nested ones too)."""
    try:
        source = Path(path).read_text(encoding="utf-8")
        module = compile(source, path, "exec")
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return {}
    found, todo = {}, [(module, "")]
    while todo:
        code, prefix = todo.pop()
        for const in code.co_consts:
            if hasattr(const, "co_code"):
                qualname = getattr(const, "co_qualname", prefix + const.co_name)  # co_qualname: Python 3.11+
                found.setdefault(content_key(const), qualname)
                inner = ".<locals>." if const.co_flags & inspect.CO_OPTIMIZED else "."  # a function, or a class body
                todo.append((const, qualname + inner))
    return found


def file_functions(path: str) -> dict[tuple, str]:
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return {}
    return _file_functions(os.path.realpath(path), mtime)


def function_key(path: str, qualname: str) -> tuple | None:
    """The content key of the function ``qualname`` of the file ``path``, or None."""
    return next((key for key, name in file_functions(path).items() if name == qualname), None)


def _arrays(value, depth: int = DEPTH, kinds: str = "f") -> list:
    """The arrays of dtype ``kinds`` (float; ``"fc"``: complex too) in ``value``: itself, or (``depth`` levels
    down) in its fields, items and attributes."""
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        kind = getattr(value.dtype, "kind", None)  # a class (np.float64) has a descriptor here, not a kind
        return [value] if isinstance(kind, str) and kind in kinds else []
    if depth == 0 or isinstance(value, (str, bytes, type)) or callable(value):
        return []
    if isinstance(value, dict):
        items = list(value.values())
    elif isinstance(value, (tuple, list)):
        items = list(value)
    else:
        items = list(getattr(value, "__dict__", {}).values())
    return [a for item in items[:64] for a in _arrays(item, depth - 1, kinds)]


def _perturbation(array, given: np.ndarray) -> str | None:
    """How ``array`` is a perturbation of ``given`` (same shape, some entries moved, or all by a tiny amount)."""
    if tuple(array.shape) != given.shape or given.size == 0:
        return None
    mine = to_numpy(array).astype(np.float64, copy=False)
    moved = int(np.count_nonzero(mine != given))
    if moved == 0:
        return None
    distance = float(np.max(np.abs(mine - given)))
    if moved * 2 < given.size or distance <= NEAR * max(float(np.max(np.abs(given))), 1e-300):
        return f"{moved} of its {given.size} entries moved, by up to {distance:.1e}"
    return None


def _nudged(array, given: np.ndarray) -> str | None:
    """How ``array`` is ``given`` nudged (same shape; entries moved by at most ``NUDGE`` of its scale, or by an
    imaginary step), else None."""
    if tuple(array.shape) != given.shape or given.size == 0:
        return None
    mine = to_numpy(array)
    if mine.dtype.kind == "c":
        if np.any(mine.imag != 0) and np.array_equal(mine.real, given):
            return f"an imaginary step of up to {float(np.max(np.abs(mine.imag))):.1e} (a complex-step difference)"
        return None
    mine = mine.astype(np.float64, copy=False)
    finite = np.isfinite(given)  # a log-sum-exp's -inf rows: unmoved if a nudge, and outside the scale
    if not np.array_equal(mine[~finite], given[~finite], equal_nan=True) or not np.all(np.isfinite(mine[finite])):
        return None
    step = np.abs(mine[finite] - given[finite])
    moved = int(np.count_nonzero(step))
    scale = max(float(np.max(np.abs(given[finite]), initial=0.0)), 1e-300)
    if moved and float(step.max()) <= NUDGE * scale:
        return f"{moved} of its {given.size} entries moved by up to {float(step.max()):.1e} (a difference's step)"
    return None


class Guard:
    """``with Guard(learner_file, denied, forwards) as guard: ...``; a backward runs inside
    ``guard.backward(args)``; then ``guard.violations``. ``denied``: ``(file, qualified name)`` of what the
    learner's code may not call; ``forwards``: ``(file, qualified name)`` of the forwards a backward may not
    take differences of."""

    def __init__(self, learner_file, denied: set[tuple[str, str]], forwards: set[tuple[str, str]]):
        self.learner_file = os.path.realpath(learner_file)
        self.denied = {k: name for path, name in denied if (k := function_key(path, name)) is not None}
        self.forwards = {k: name for path, name in forwards if (k := function_key(path, name)) is not None}
        self.violations: list[str] = []
        self._recorded: set[str] = set()  # the kinds of violation recorded: one sentence each
        self._kinds: dict[int, tuple] = {}  # id(code) -> (code, owner, key)
        self._depth = 0
        self._backwards: list[tuple[str, list, list]] = []  # (name, arrays given, forward calls) of running backwards
        self._lock = threading.Lock()

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

    def enter_backward(self, name: str, args: tuple, kwargs: dict) -> None:
        """A learner's backward ``name`` starts with ``args``: what a finite difference would perturb, copied."""
        if not self._backwards:
            given = [to_numpy(a).astype(np.float64) for v in (*args, *kwargs.values()) for a in _arrays(v)]
            self._backwards.append((name, given, []))
        else:
            self._backwards.append(self._backwards[-1])  # a backward inside one: the outer one's budget

    def exit_backward(self) -> None:
        self._backwards.pop()

    def _kind(self, code) -> tuple[str | None, tuple]:
        """``(owner, content key)``: owner ``"learner"``, ``"numforge"`` (code compiled from that file) or None."""
        known = self._kinds.get(id(code))
        if known is None or known[0] is not code:
            key = content_key(code)
            path = os.path.realpath(code.co_filename)
            owner = "learner" if path == self.learner_file else "numforge" if path.startswith(NUMFORGE_DIR) else None
            if owner is not None and key not in file_functions(path):
                owner = None  # code that says it is from the file but was not compiled from it
            known = self._kinds[id(code)] = (code, owner, key)
        return known[1], known[2]

    def _hook(self, frame, event, arg):
        """On each call: the checks above; the learner's frames in a small backward get ``_line``, the others no
        tracing inside."""
        if event != "call":
            return None
        owner, key = self._kind(frame.f_code)
        if key in self.forwards:
            if self._backwards:
                self._check_forward(frame, self.forwards[key])
        elif key in self.denied and owner != "learner" and self._caller(frame) == "learner":
            name = self.denied[key]
            if name in ("numeric_gradient", "check_gradients", "check_op"):
                self._record(f"it calls numforge's finite differences ({name}): the backward is to compute the "
                             "gradient by the chain rule, the finite differences are the grader's")  # fmt: skip
            else:
                self._record(f"it calls numforge's own {name} (or a copy of it): the exercise is to write it")
        if owner == "learner" and self.forwards and self._backwards and self._small(self._backwards[-1][1]):
            return self._line
        return None

    def _caller(self, frame) -> str | None:
        caller = frame.f_back
        while caller is not None:
            owner, _ = self._kind(caller.f_code)
            if owner is not None:
                return owner
            caller = caller.f_back
        return None

    def _check_forward(self, frame, name: str) -> None:
        with self._lock:
            backward, given, calls = self._backwards[-1]
            calls.append(name)
        running = f"{backward} runs the forward {name}"
        largest = max((a.size for a in given), default=0)
        for value in list(frame.f_locals.values()):
            for array in _arrays(value):
                if array.size > largest:
                    more = f"on an array of {array.size} numbers, more than any it was given ({largest})"
                    return self._record(f"{running} {more}: {PROBED}", "forward")
                for original in given:
                    how = _perturbation(array, original)
                    if how is not None:
                        return self._record(f"{running} at a perturbation of an array it was given ({how}): "
                                            f"{PERTURBED}", "forward")  # fmt: skip
        if len(calls) > FORWARD_BUDGET:
            times = f"{len(calls)} times in one backward (at most {FORWARD_BUDGET})"
            self._record(f"{running} {times}: {REPEATED}", "forward")

    @staticmethod
    def _small(given: list) -> bool:
        """Whether a backward given ``given`` has its lines traced: some floats, at most ``TRACED`` of them."""
        return 0 < sum(a.size for a in given) <= TRACED

    def _line(self, frame, event, arg):
        """Before each line of the learner's code in a backward: does it hold a nudged copy of a given array?"""
        if event == "line" and self._backwards and "nudged" not in self._recorded:
            backward, given, _ = self._backwards[-1]
            for name, value in list(frame.f_locals.items()):
                for array in _arrays(value, depth=1, kinds="fc"):
                    how = next((h for original in given if (h := _nudged(array, original))), None)
                    if how is not None:
                        self._record(f"{backward} holds {name!r}, an array it was given with {how}: {NUDGED}",
                                     "nudged")  # fmt: skip
                        return None
        return self._line

    def _record(self, violation: str, kind: str | None = None) -> None:
        kind = kind or violation
        if kind not in self._recorded:
            self._recorded.add(kind)
            self.violations.append(violation)
