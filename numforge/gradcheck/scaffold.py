"""A scaffold: a real source file with the answer taken out, at three levels of hints.

An exercise names the functions the learner writes (``graded``: a backward that a
gradient-check case substitutes, a forward that computes its own gradients,
``AdamW.step``). The file's own reference graph says what else is the answer:

- the exercise's functions: the graded ones and every other ``*backward``
  function or method, and every backward walked step by step
  (``*backward_steps``: ``GPT.backward_steps``) (``E``);
- the helpers only they use (``H``): every function ``E`` reaches (by name, or
  as ``self.name`` inside a class) that no other code of the file reaches
  without passing through ``E``, and that no other numforge module imports.

Everything else (the forward, its helpers, the caches, the registries, the
imports) is kept as it is. The hint levels:

- 0: signatures and shapes. ``E``'s graded functions keep their signature and
  a docstring that says what to return and the shapes of one check; the other
  ``E`` functions and ``H`` are removed (unless kept code names them, then
  they are stubs); module-docstring paragraphs and sections whose first word
  is ``Backward`` or ``Update`` (the formulas, by the house convention) are removed.
- 1: the chain-rule steps. Every ``E`` and ``H`` function is a stub, its
  docstring listing the forward lines its real body reverses (its
  ``# forward: ...`` comments, each cut before its ``so ...``).
- 2: the formulas: the real docstrings, module docstring whole; bodies still removed.

A stub's body is ``raise NotImplementedError(...)``: calling it, as a shortcut
to the answer, fails the grade like any unwritten backward.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

HINT_LEVELS = (0, 1, 2)
ANSWER_WORDS = ("Backward", "Update")  # a module-docstring paragraph or section that starts so holds the formulas
STUB = 'raise NotImplementedError("{name}: not written yet")'
BACKWARD_SUFFIXES = ("backward", "backward_steps")  # the names of E's functions besides the graded ones
WIDTH = 110  # generated docstrings are filled to this width
FORWARD_COMMENT = re.compile(r"#\s*(?:\.\.\.\s*)?forward:\s*(.+)$")


@dataclass(frozen=True)
class Parts:
    """The functions of a file by role, qualified names in file order."""

    graded: tuple[str, ...]
    exercise: tuple[str, ...]  # E: graded first-class, and every *backward and *backward_steps
    helpers: tuple[str, ...]  # H: used only by E
    kept_references: frozenset[str]  # every name the kept code (and module-level statements) refers to


def functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """Module-level functions by name and methods by ``Class.method``, in file order."""
    found = {}
    for statement in tree.body:
        if isinstance(statement, ast.FunctionDef):
            found[statement.name] = statement
        elif isinstance(statement, ast.ClassDef):
            for item in statement.body:
                if isinstance(item, ast.FunctionDef):
                    found[f"{statement.name}.{item.name}"] = item
    return found


def _references(node: ast.AST, owner: str | None, names: set[str]) -> set[str]:
    """The functions of ``names`` that ``node`` refers to: by name, ``self.x`` / ``Class.x`` for methods."""
    found = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name) and child.id in names:
            found.add(child.id)
        elif isinstance(child, ast.Attribute) and isinstance(child.value, ast.Name):
            base = owner if child.value.id in ("self", "cls") else child.value.id
            if base is not None and f"{base}.{child.attr}" in names:
                found.add(f"{base}.{child.attr}")
    return found


def analyse(tree: ast.Module, graded: tuple[str, ...], used_outside: set[str] = frozenset()) -> Parts:
    """Split the file's functions into the exercise ``E``, its helpers ``H`` and the rest (module docstring)."""
    nodes = functions(tree)
    missing = [name for name in graded if name not in nodes]
    if missing:
        raise ValueError(f"the exercise names {missing}, which the file does not define")
    names = set(nodes)
    edges = {
        name: _references(node, name.split(".")[0] if "." in name else None, names) for name, node in nodes.items()
    }
    exercise = [name for name in nodes if name in graded or name.split(".")[-1].endswith(BACKWARD_SUFFIXES)]
    top_level = set()  # what module-level statements and class bodies refer to (registries, defaults)
    for statement in tree.body:
        if isinstance(statement, ast.ClassDef):
            for item in statement.body:
                if not isinstance(item, ast.FunctionDef):
                    top_level |= _references(item, statement.name, names)
        elif not isinstance(statement, ast.FunctionDef):
            top_level |= _references(statement, None, names)

    def closure(start: set[str], stop: set[str]) -> set[str]:
        seen, todo = set(), [n for n in start if n not in stop]
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(n for n in edges[name] if n not in seen and n not in stop)
        return seen

    reached_from_exercise = closure(set(exercise), set()) - set(exercise)
    roots = (names - set(exercise) - reached_from_exercise) | ((top_level | set(used_outside)) & names)
    forward_side = closure(roots - set(exercise), set(exercise))
    helpers = [name for name in nodes if name in reached_from_exercise - forward_side]
    kept = forward_side - set(helpers)
    kept_references = set(top_level)
    for name in kept:
        kept_references |= edges[name]
    return Parts(tuple(graded), tuple(exercise), tuple(helpers), frozenset(kept_references))


def forward_steps(source_lines: list[str], node: ast.FunctionDef) -> list[str]:
    """The forward equations of the ``# forward: ...`` comments of a function's body, in order: each comment cut
    before what it concludes (``, so ...``), its ``;``-separated equations each cut before a ``: `` (what follows
    is the backward's), and what is no equation dropped (a shape, ``transposed: dx = ...``, a remark)."""
    steps = []
    for line in source_lines[node.body[0].lineno - 1 : node.end_lineno]:
        match = FORWARD_COMMENT.search(line)
        if match:
            for part in re.split(r",? so\b", match[1])[0].split(";"):
                step = part.split(": ")[0].strip().rstrip(",")
                if "=" in step and step not in steps:
                    steps.append(step)
    return steps


def strip_answers(doc: str) -> str:
    """``doc`` without its paragraphs and sections whose first word is one of ``ANSWER_WORDS``.

    A paragraph's indented blocks (a ``::`` literal block) go with it; a section (a title over a line of
    dashes) goes whole, to the next title.
    """
    kept, dropping_section, dropping = [], False, False
    for block in re.split(r"\n[ \t]*\n", doc):
        lines = block.strip("\n").splitlines() or [""]
        first = lines[0]
        word = re.match(r"[`*]*(\w+)", first.strip())
        answer = word is not None and word[1] in ANSWER_WORDS
        if len(lines) > 1 and re.fullmatch(r"\s*-{3,}\s*", lines[1]):  # a section title
            dropping_section = dropping = answer
        elif first.strip() and not first.startswith((" ", "\t")):  # a paragraph (indented blocks follow theirs)
            dropping = dropping_section or answer
        if not dropping:
            kept.append(block)
    return "\n\n".join(kept)


def _docstring_span(node) -> tuple[int, int] | None:
    """The 0-based ``[start, stop)`` source lines of a node's docstring, or None."""
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        if isinstance(body[0].value.value, str):
            return body[0].lineno - 1, body[0].end_lineno
    return None


def _wrapped(text: str, width: int) -> str:
    """``text`` with each paragraph that is not indented filled to ``width``."""
    paragraphs = text.split("\n\n")
    return "\n\n".join(p if p.startswith(" ") else textwrap.fill(p, width) for p in paragraphs)


def _quoted(text: str, indent: str) -> list[str]:
    """A docstring's source lines: ``text`` between triple quotes, each line after the first indented."""
    lines = text.strip("\n").splitlines() or [""]
    if len(lines) == 1:
        return [f'{indent}"""{lines[0]}"""']
    return [f'{indent}"""{lines[0]}', *[(indent + line) if line.strip() else "" for line in lines[1:]], f'{indent}"""']


def make_scaffold(
    source: str,
    parts: Parts,
    hints: int,
    describe: Callable[[str], str],
    keep_docstrings: bool = False,
) -> str:
    """``source`` with the answer removed at hint level ``hints`` (module docstring).

    ``describe(name)`` is the level-0 docstring of a graded function (what to return, the shapes of one
    check); ``keep_docstrings`` keeps the real ones at every level (where they are a specification, not
    the formulas: the tokenizer's tie rule, AdamW's "in place").
    """
    if hints not in HINT_LEVELS:
        raise ValueError(f"hints must be one of {HINT_LEVELS}, got {hints!r}")
    lines = source.splitlines()
    tree = ast.parse(source)
    nodes = functions(tree)
    removable = set(parts.exercise) - set(parts.graded) | set(parts.helpers)
    removable -= parts.kept_references
    edits = []  # (start, stop, replacement lines), applied bottom-up
    for name in [*parts.exercise, *parts.helpers]:
        node = nodes[name]
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
        if hints == 0 and name in removable:
            edits.append((first, node.end_lineno, []))
            continue
        span = _docstring_span(node)
        start = node.body[0].lineno - 1 if span is None else span[0]
        indent = " " * node.body[0].col_offset
        stub = [indent + STUB.format(name=name)]
        if hints == 2 or keep_docstrings:  # the real docstring, its source lines as they are
            edits.append((start, node.end_lineno, ([] if span is None else lines[span[0] : span[1]]) + stub))
            continue
        if name in parts.graded:
            doc = describe(name)
        else:
            doc = f"Part of the backward that {', '.join(parts.graded)} can use: write it, or do without it."
        doc = _wrapped(doc, WIDTH - len(indent))
        if hints == 1:
            steps = forward_steps(lines, node)
            if steps:
                doc += "\n\nThe forward lines its body reverses, in this order:\n\n" + "\n".join(
                    f"    {i}. {step}" for i, step in enumerate(steps, 1)
                )
        edits.append((start, node.end_lineno, _quoted(doc, indent) + stub))
    module_span = _docstring_span(tree)
    if module_span is not None and hints < 2:
        doc = strip_answers(ast.get_docstring(tree, clean=False) or "")
        edits.append((module_span[0], module_span[1], _quoted(doc, "")))
    for start, stop, replacement in sorted(edits, reverse=True):
        lines[start:stop] = replacement
    text = re.sub(r"\n{4,}", "\n\n\n", "\n".join(lines))  # a removed function leaves at most two blank lines
    return text.rstrip("\n") + "\n"
