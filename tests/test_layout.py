"""The house: every module imports, no import cycle, imports only point down the layers, the map is true.

The map of every module is docs/inside.md's (the README keeps a short one, by part)."""

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import numforge

ROOT = Path(numforge.__file__).parent
# Each top-level part of numforge and its floor (docs/inside.md, "What is inside"): a part imports only from lower
# floors, or from inside itself.
FLOORS = {
    "backend": 0, "locks": 0, "interrupts": 0, "allocator": 0, "table": 0, "resources": 0, "blas": 0, "files": 0,
    "checks": 1, "atomic": 1,
    "ops": 2,
    "tokenizer": 3,
    "model": 4,
    "optim": 5,
    "data": 6, "hf": 6,
    "checkpoint": 7,
    "training": 8, "generate": 8,
    "study": 9, "gradcheck": 9, "chat_session": 9,
    "bench": 10,
    "commands": 11, "cli": 12, "__main__": 13, "__init__": 13,
}  # fmt: skip


def module_names() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(numforge.__path__, "numforge."))


def module_file(name: str) -> Path:
    path = ROOT.joinpath(*name.split(".")[1:])
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def imports_of(name: str) -> set[str]:
    """The numforge modules ``name`` imports anywhere in its file (lazy imports inside functions too)."""
    path = module_file(name)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("numforge"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            if not base.startswith("numforge"):
                continue
            for alias in node.names:  # "from . import x": x may be a module of its own
                candidate = f"{base}.{alias.name}"
                found.add(candidate if module_file(candidate).exists() else base)
    found.discard(name)
    return found


def part(name: str) -> str:
    return "__init__" if name == "numforge" else name.split(".")[1]


OPTIONAL = {"torch", "transformers", "tiktoken", "tokenizers", "cupy", "cupyx", "mpi4py", "safetensors", "pyarrow"}


def test_every_module_imports():
    """Every module imports; one that needs an optional package may fail only by that package's absence."""
    for name in module_names():
        if name == "numforge.__main__":
            continue
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as error:
            if (error.name or "").split(".")[0] not in OPTIONAL:
                raise


def test_no_import_cycle():
    graph = {name: imports_of(name) for name in module_names()}
    state = {}  # name -> "open" while on the path, "done" after

    def visit(name, path):
        state[name] = "open"
        for other in sorted(graph.get(name, ())):
            if state.get(other) == "open":
                cycle = path[path.index(other) :] + [other]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if other not in state:
                visit(other, path + [other])
        state[name] = "done"

    for name in graph:
        if name not in state:
            visit(name, [name])


def test_imports_point_down():
    for name in module_names():
        assert part(name) in FLOORS, f"{name} is on no floor: add its part to FLOORS and to the map in docs/inside.md"
        for other in imports_of(name):
            same_part = part(other) == part(name)
            assert same_part or FLOORS[part(other)] < FLOORS[part(name)], (
                f"{name} (floor {FLOORS[part(name)]}) imports {other} (floor {FLOORS[part(other)]}): "
                "imports must point down"
            )


def test_the_map_names_every_module_and_nothing_else():
    inside = (ROOT.parent / "docs" / "inside.md").read_text(encoding="utf-8")
    tree = inside.split("<!-- map -->", 1)[1].split("```", 2)[1]
    listed = set(re.findall(r"^ +([a-z_]+/) ", tree, flags=re.MULTILINE)) | set(re.findall(r"([a-z0-9_]+\.py)", tree))
    on_disk = {p.name + "/" for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    for package in [ROOT] + [p for p in ROOT.rglob("*") if p.is_dir() and (p / "__init__.py").exists()]:
        on_disk |= {p.name for p in package.glob("*.py") if p.name != "__init__.py"}
    assert listed == on_disk, f"in the map, not on disk: {sorted(listed - on_disk)}; on disk, not in the map: " + str(
        sorted(on_disk - listed)
    )


MAX_FUNCTION_LINES = 60  # a function a reader takes in at once; the textbook model alone is one walk of the network
LONG_BY_DESIGN = {"model/reference.py"}  # reference_forward and reference_backward: the whole pass, each in one place


def test_no_function_outside_the_textbook_model_is_over_60_lines():
    long = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.relative_to(ROOT).as_posix() in LONG_BY_DESIGN:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "functions over 60 lines: " + ", ".join(long)
