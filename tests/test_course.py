"""The course and the derivations say true things: every command they quote runs and prints what they say.

The documents are ``demos/course.md`` and ``demos/derivations/*.md``. In them:

- A ```` ```bash ```` block holds commands: every line is ``numforge ...`` or
  ``python ...`` (or a ``#`` comment). They run in document order, in one
  temporary directory per document (so ``numforge train --out runs/x`` feeds a
  later ``numforge sample --checkpoint runs/x``), with ``NUMFORGE_CACHE`` in a
  temporary directory, demos in quick mode (``NUMFORGE_DEMO_QUICK=1``) and one
  BLAS thread. ``numforge ...`` runs as ``python -m numforge ...``; each
  command but ``python -c`` in a process forked from one that imported numforge
  once (``tests/forked_commands.py``, where forking is safe: most of a
  command's start is the imports), else started afresh; an argument
  that starts with ``demos/`` or ``numforge/`` names the repository's file.
  Each must exit 0.
- An HTML comment ``<!-- check: exit=1 -->`` just before a bash block sets
  the exit status its commands must have instead (a grader that finds a
  backward not written yet exits 1). The same comment holds the other marks,
  space-separated: ``skip="REASON"``: the block is not run, and REASON says why
  (it needs MPI across machines, a download, minutes of work); every block
  without it runs, so no command goes unchecked by accident.
  ``given="corpus/ my.txt"``: what the block reads, written first: a name
  ending in ``/`` a directory of two text files, any other name a text file
  (pieces of Python's docs, 60 KB in all; a ``.jsonl`` name: 12 chat conversations).
  ``hf=gpt2``, ``hf=llama`` or ``hf=chat``: ``$DIR``
  is a tiny Hugging Face directory of that family (``tests/hf_dirs.py``: random
  weights, context 256; 4 layers for Llama; ``chat``: a transformers-saved Llama
  with SmolLM2's tokenizer and chat template, ``tests/chat_templates.py``), and the block's ``DIR=...`` line,
  which says where a real one lies, is not run. ``max_steps=N``: every
  ``--max-steps`` of the block runs as ``--max-steps N`` (a fine-tune of a real
  model takes hundreds of steps, the test's few).
- A `` # `` outside quotes starts a comment, as in bash; ``$NAME`` is a
  variable a mark sets.
- A ```` ```text ```` block right after a bash block is (an excerpt of) the
  output of that block's last command: its lines appear in the output, each
  inside one output line (spaces collapsed), in order within stdout and within
  stderr. ``...`` inside a line
  stands for any text, a line of only ``...`` for any lines, and a number in
  scientific notation (``2.06e-10``) for any such number (the last digits of a
  rounding error differ between machines).
- A ```` ```python ```` block whose first line is ``# numforge/PATH.py::NAME``
  quotes code: the source of that function (``Class.method`` for a method),
  verbatim and contiguous, line after line (indentation aside); a line ``# ...``
  marks a gap, and the runs it separates come in the source's order. So a quote
  can never drop the line that makes it right (a ``/= width`` between two lines
  it shows), and a derivation's "this is the line" stays true.
- Every ``numforge/PATH.py::NAME`` reference names a file that exists and a
  function or class of that name in it; every relative link resolves.
"""

import ast
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = [ROOT / "demos" / "course.md", *sorted((ROOT / "demos" / "derivations").glob("*.md"))]
BLOCK = re.compile(r"(?:<!--\s*check:(?P<marks>[^>]*)-->\s*\n)?```(?P<lang>\w*)\n(?P<body>.*?)\n```", re.S)
REFERENCE = re.compile(r"(numforge/[\w/]+\.py)::([\w.]+)")
SCIENTIFIC = re.compile(r"[-+]?\d\.\d+e[-+]\d+")
TIMEOUT = 300
_PURE_RESULTS = {}  # `numforge gradcheck` commands read and write no file: run each once for all documents


MARKS = {"exit", "skip", "given", "hf", "max_steps"}


@dataclass
class Block:
    commands: list[str]
    exit_status: int = 0
    expected: list[str] = field(default_factory=list)
    skip: str | None = None  # why the block is not run
    given: list[str] = field(default_factory=list)  # the files and directories written before it runs
    hf: str | None = None  # the family of the tiny Hugging Face directory $DIR names
    max_steps: int | None = None  # what every --max-steps of the block runs as


def bash_blocks(text: str) -> list[Block]:
    """The bash blocks of a document, each with its marks and the text block that follows it."""
    blocks, previous_end = [], None
    for match in BLOCK.finditer(text):
        lang, body = match["lang"], match["body"]
        if lang == "text" and blocks and previous_end is not None and not text[previous_end : match.start()].strip():
            blocks[-1].expected = body.splitlines()
        if lang == "bash":
            marks = {k: v.strip('"') for k, v in re.findall(r'(\w+)=("[^"]*"|\S+)', match["marks"] or "")}
            commands = [line for line in body.splitlines() if line.strip() and not line.startswith("#")]
            unknown = set(marks) - MARKS
            assert not unknown, f"unknown check marks {sorted(unknown)} before {commands}"
            assert "skip" not in marks or len(marks["skip"].split()) >= 3, f"skip= needs a reason, before {commands}"
            assert marks.get("hf") in (None, *TINY_HF), f"hf= is one of {sorted(TINY_HF)}, before {commands}"
            if "hf" in marks:  # the document's DIR=... says where a real directory lies; the test's is tiny
                commands = [line for line in commands if not line.startswith("DIR=")]
            given = marks.get("given", "").split()
            steps = int(marks["max_steps"]) if "max_steps" in marks else None
            blocks.append(
                Block(commands, int(marks.get("exit", 0)), [], marks.get("skip"), given, marks.get("hf"), steps)
            )
        previous_end = match.end()
    return blocks


def without_comment(command: str) -> str:
    """``command`` up to a ``#`` that starts a word outside quotes, as bash reads it."""
    quote = None
    for i, char in enumerate(command):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or command[i - 1].isspace()):
            return command[:i]
    return command


def argv(command: str, variables: dict | None = None) -> list[str]:
    variables = variables or {}
    unset = set(re.findall(r"\$(\w+)", command)) - set(variables)
    assert not unset, f"{command!r} uses ${sorted(unset)[0]}, which no mark sets"
    words = [re.sub(r"\$(\w+)", lambda m: variables[m[1]], w) for w in shlex.split(without_comment(command))]
    if words[0] == "numforge":
        words = [sys.executable, "-m", "numforge", *words[1:]]
    elif words[0] == "python":
        words = [sys.executable, *words[1:]]
    else:
        raise AssertionError(f"a bash block line must start with 'numforge ' or 'python ': {command!r}")
    return [str(ROOT / w) if w.startswith(("demos/", "numforge/")) else w for w in words]


def environment(tmp_path: pathlib.Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(NUMFORGE_CACHE=str(tmp_path / "cache"), NUMFORGE_DEMO_QUICK="1", OPENBLAS_NUM_THREADS="1")
    env.update(NO_COLOR="1", MPLBACKEND="Agg")
    return env


class Commands:
    """Runs the documents' commands through ``tests/forked_commands.py`` (each in a process of its own, forked from
    one that imported numforge), where it can: ``python -m MODULE`` and ``python SCRIPT``; ``python -c`` (any other
    interpreter option), and every command where it cannot fork, as processes started afresh."""

    def __init__(self, env: dict, outputs: pathlib.Path):
        self.outputs, self.count = outputs, 0
        server = ROOT / "tests" / "forked_commands.py"
        self.server = subprocess.Popen(
            [sys.executable, str(server)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        hello = json.loads(self.server.stdout.readline() or '{"ready": false}')
        if not hello["ready"]:
            self.close()
            self.server = None

    def run(self, command: str, env: dict, cwd: pathlib.Path, variables=None) -> subprocess.CompletedProcess:
        words = argv(command, variables)
        if self.server is None or (words[1].startswith("-") and words[1] != "-m"):  # python -c, python -X ...
            return subprocess.run(words, capture_output=True, text=True, env=env, cwd=cwd, timeout=TIMEOUT)
        self.count += 1
        out, err = (self.outputs / f"{self.count}.{stream}" for stream in ("stdout", "stderr"))
        request = dict(argv=words[1:], cwd=str(cwd), env=env, stdout=str(out), stderr=str(err), timeout=TIMEOUT)
        self.server.stdin.write(json.dumps(request) + "\n")
        self.server.stdin.flush()
        reply = self.server.stdout.readline()
        assert reply, f"tests/forked_commands.py ended while running {command!r}"
        returncode = json.loads(reply)["returncode"]
        return subprocess.CompletedProcess(words, returncode, out.read_text(), err.read_text())

    def close(self) -> None:
        self.server.stdin.close()
        self.server.wait()


@pytest.fixture(scope="session")
def commands(tmp_path_factory):
    outputs = tmp_path_factory.mktemp("command_outputs")
    runner = Commands(environment(outputs), outputs)
    yield runner
    if runner.server is not None:
        runner.close()


def run_command(commands: Commands, command: str, env: dict, cwd: pathlib.Path, variables=None):
    pure = command.startswith("numforge gradcheck ") and "--impl" not in command and "--write" not in command
    if pure and command in _PURE_RESULTS:
        return _PURE_RESULTS[command]
    result = commands.run(command, env, cwd, variables)
    if pure:
        _PURE_RESULTS[command] = result
    return result


def expected_pattern(line: str) -> re.Pattern:
    line = " ".join(line.split())
    parts = []
    for piece in line.split("..."):
        numbers = SCIENTIFIC.split(piece)
        parts.append(SCIENTIFIC.pattern.join(re.escape(p) for p in numbers))
    return re.compile(".*".join(parts))


def assert_output_shows(expected: list[str], result: subprocess.CompletedProcess, command: str) -> None:
    """Each expected line appears in stdout or stderr, in order within its stream (results on stdout, progress on
    stderr: their interleaving is not the document's to promise)."""
    streams = [[" ".join(line.split()) for line in text.splitlines()] for text in (result.stdout, result.stderr)]
    at = [0, 0]
    for want in expected:
        if want.strip() in ("", "..."):
            continue
        pattern = expected_pattern(want)
        for i, lines in enumerate(streams):
            found = next((k for k in range(at[i], len(lines)) if pattern.search(lines[k])), None)
            if found is not None:
                at[i] = found + 1
                break
        else:
            output = f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
            raise AssertionError(f"{command!r} did not print {want!r} (in order). Its output:\n{output}")


def doc_id(path: pathlib.Path) -> str:
    return str(path.relative_to(ROOT / "demos"))


def test_every_derivation_and_the_course_exist():
    names = {p.name for p in DOCS}
    assert "course.md" in names and (ROOT / "demos" / "derivations" / "README.md").exists()
    assert len(names) >= 17  # the course, the index and one derivation per op of issue 14


def write_given(names: list[str], where: pathlib.Path) -> None:
    """The files a block reads (its ``given=`` mark): a name ending in ``/`` a directory of two text files, any other
    name a text file; pieces of Python's own docs, 60 KB; a ``.jsonl`` name: 12 short chat conversations."""
    from pydoc_data.topics import topics

    text = "".join(topics[key] for key in sorted(topics))[:60_000]
    for name in names:
        path = where / name
        if name.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
            (path / "a.txt").write_text(text[:30_000], encoding="utf-8")
            (path / "b.txt").write_text(text[30_000:], encoding="utf-8")
        elif name.endswith(".jsonl"):
            from chat_templates import write_chat_jsonl

            path.parent.mkdir(parents=True, exist_ok=True)
            write_chat_jsonl(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")


def tiny_hf_dir(family: str, where: pathlib.Path) -> str:
    """A tiny Hugging Face directory of ``family`` (``tests/hf_dirs.py``), written once per document."""
    path = where / f"hf-{family}"
    if not path.exists():
        TINY_HF[family](path)
    return str(path)


def _tiny_gpt2(path):
    from hf_dirs import TINY, write_gpt2_dir

    write_gpt2_dir(path, {**TINY, "n_positions": 256})


def _tiny_llama(path):
    from hf_dirs import llama_fields, write_llama_dir

    write_llama_dir(path, llama_fields("llama", num_hidden_layers=4, max_position_embeddings=256))


def _tiny_chat(path):
    from chat_templates import chat_model_directory

    chat_model_directory(path)


TINY_HF = {"gpt2": _tiny_gpt2, "llama": _tiny_llama, "chat": _tiny_chat}


def run_document(text: str, name: str, commands: Commands, env: dict, cwd: pathlib.Path) -> tuple[int, int]:
    """Runs every block of a document that is not marked skip, in order, in ``cwd``; (blocks run, blocks skipped)."""
    ran = skipped = 0
    for block in bash_blocks(text):
        if block.skip:
            skipped += 1
            continue
        write_given(block.given, cwd)
        variables = {"DIR": tiny_hf_dir(block.hf, cwd)} if block.hf else {}
        for i, command in enumerate(block.commands):
            if block.max_steps is not None:
                command = re.sub(r"--max-steps \d+", f"--max-steps {block.max_steps}", command)
            result = run_command(commands, command, env, cwd, variables)
            output = result.stdout + result.stderr
            assert result.returncode == block.exit_status, f"{name}: {command!r} exited {result.returncode}:\n{output}"
            if i == len(block.commands) - 1:
                assert_output_shows(block.expected, result, command)
        ran += 1 if block.commands else 0
    return ran, skipped


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_quoted_commands_run_and_print_what_the_document_says(doc, tmp_path, commands):
    ran, _ = run_document(doc.read_text(encoding="utf-8"), doc_id(doc), commands, environment(tmp_path), tmp_path)
    assert ran, f"{doc_id(doc)} quotes no command to run"


def function_source(path: pathlib.Path, name: str) -> str | None:
    """The source of the function or class ``name`` (``Class.method`` for a method) in ``path``, or None."""
    source = path.read_text(encoding="utf-8")
    scope = ast.parse(source)
    for part in name.split("."):
        found = [
            node
            for node in ast.iter_child_nodes(scope)
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == part
        ]
        if not found:
            return None
        scope = found[0]
    return ast.get_source_segment(source, scope)


GAP = "# ..."


def quote_problem(quoted: list[str], source: str) -> str | None:
    """Why ``quoted`` (lines, ``# ...`` marking each gap) is not the source verbatim, run by run in order; or None."""
    lines = [line.strip() for line in source.splitlines()]
    runs, run = [], []
    for line in quoted:
        if line.strip() == GAP:
            runs.append(run)
            run = []
        else:
            run.append(line.strip())
    runs.append(run)
    at = 0
    for run in (r for r in runs if r):
        found = next((i for i in range(at, len(lines) - len(run) + 1) if lines[i : i + len(run)] == run), None)
        if found is None:  # say where the run stops being the source
            for size in range(len(run), 0, -1):
                starts = [i for i in range(at, len(lines) - size + 1) if lines[i : i + size] == run[:size]]
                if starts:
                    after = lines[starts[0] + size] if starts[0] + size < len(lines) else "(the end)"
                    return f"after {run[size - 1]!r} the source goes on with {after!r}, the quote with {run[size]!r}"
            return f"{run[0]!r} is not in the source (after the quote's previous run)"
        at = found + len(run)
    return None


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_code_references_and_quotes_are_true(doc):
    text = doc.read_text(encoding="utf-8")
    for path, name in REFERENCE.findall(text):
        assert (ROOT / path).exists(), f"{doc_id(doc)} names {path}, which does not exist"
        assert function_source(ROOT / path, name) is not None, f"{doc_id(doc)}: no {name} in {path}"
    for match in BLOCK.finditer(text):
        lines = match["body"].splitlines()
        reference = REFERENCE.fullmatch(lines[0].lstrip("# ").strip()) if match["lang"] == "python" else None
        if reference is None:
            continue
        problem = quote_problem(lines[1:], function_source(ROOT / reference[1], reference[2]))
        assert problem is None, f"{doc_id(doc)} quotes {lines[0]} with a gap not marked '{GAP}': {problem}"


def test_quotes_are_checked_for_contiguity_not_only_presence():
    source = "def f(x):\n    a = x\n    a /= 2\n    b = a\n    return b\n"
    assert quote_problem(["a = x", "a /= 2", "b = a"], source) is None
    assert quote_problem(["a = x", "# ...", "b = a"], source) is None  # a marked gap
    assert "goes on with 'a /= 2', the quote with 'b = a'" in quote_problem(["a = x", "b = a"], source)
    assert quote_problem(["b = a", "# ...", "a = x"], source) is not None  # runs out of order
    assert quote_problem(["c = 1"], source) is not None


def test_every_python_block_of_the_derivations_quotes_the_code():
    """Every ```python block names the function it quotes, so the contiguity test reaches it."""
    for doc in DOCS:
        for match in BLOCK.finditer(doc.read_text(encoding="utf-8")):
            if match["lang"] == "python":
                first = match["body"].splitlines()[0]
                assert REFERENCE.fullmatch(first.lstrip("# ").strip()), (
                    f"{doc_id(doc)}: a python block quoting {first!r}"
                )


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_every_exercise_named_is_one_and_every_derivation_ends_with_questions(doc):
    from numforge.gradcheck import all_cases
    from numforge.gradcheck.exercise import exercise_names

    text = doc.read_text(encoding="utf-8")
    for name in re.findall(r"--write-exercise ([a-z_]+)", text):
        assert name in exercise_names(), f"{doc_id(doc)} names the exercise {name!r}; there are {exercise_names()}"
    cases = {case.name for case in all_cases()}
    for quoted, bare in re.findall(r"--show (?:'([^']+)'|([a-z][\w.\[\]<>]*))", text):  # CASE: a placeholder
        assert (quoted or bare) in cases, f"{doc_id(doc)} shows the case {quoted or bare!r}, which does not exist"
    if doc.parent.name == "derivations" and doc.name != "README.md":
        questions = text.split("\n## Questions\n", 1)
        assert len(questions) == 2 and "--write-exercise" in questions[1], (
            f"{doc_id(doc)}: no questions, or no exercise"
        )


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_relative_links_resolve(doc):
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text(encoding="utf-8")):
        if "://" not in target:
            assert (doc.parent / target).exists(), f"{doc_id(doc)} links to {target}, which does not exist"


def test_the_checker_of_shown_output_can_fail():
    shown = subprocess.CompletedProcess([], 0, stdout="op x 2x3 2.06e-10 pass\n5/5 gradients\n", stderr="step 1\n")
    assert_output_shows(["op x 2x3 9.99e-01 pass", "...", "step 1", "5/5 ..."], shown, "cmd")  # any rounding error
    for wrong in (["op x 2x3 9.99e-01 FAIL"], ["5/5 gradients", "op x"], ["6/5 gradients"]):
        with pytest.raises(AssertionError, match="did not print"):
            assert_output_shows(wrong, shown, "cmd")


def test_blocks_read_their_exit_mark_and_their_shown_output():
    text = "<!-- check: exit=1 -->\n```bash\n# a comment\nnumforge a\nnumforge b\n```\n\n```text\nout\n```\n"
    text += "```bash\npython c.py\n```\nprose\n```text\nnot its output\n```\n"
    first, second = bash_blocks(text)
    assert (first.commands, first.exit_status, first.expected) == (["numforge a", "numforge b"], 1, ["out"])
    assert (second.commands, second.exit_status, second.expected) == (["python c.py"], 0, [])
    with pytest.raises(AssertionError, match="unknown check marks"):
        bash_blocks('<!-- check: needs="x" -->\n```bash\nnumforge a\n```\n')
    with pytest.raises(AssertionError, match="must start with"):
        argv("pip install numforge")


def test_blocks_read_their_skip_given_and_hf_marks_and_comments():
    text = '<!-- check: skip="it needs three machines" -->\n```bash\nmpiexec -n 3 numforge train\n```\n'
    text += '<!-- check: hf=gpt2 given="corpus/ my.txt" max_steps=3 -->\n'
    text += "```bash\nDIR=~/real/gpt2\nnumforge sample $DIR\n```\n"
    skipped, tiny = bash_blocks(text)
    assert (skipped.skip, tiny.skip, skipped.max_steps) == ("it needs three machines", None, None)
    assert (tiny.commands, tiny.given, tiny.hf, tiny.max_steps) == (
        ["numforge sample $DIR"],
        ["corpus/", "my.txt"],
        "gpt2",
        3,
    )
    assert argv("numforge sample $DIR --prompt 'a # b' x#y  # a comment", {"DIR": "/d"})[3:] == [
        "sample", "/d", "--prompt", "a # b", "x#y"
    ]  # fmt: skip
    for wrong, message in (('skip=""', "needs a reason"), ('skip="slow"', "needs a reason"), ("hf=bert", "hf= is")):
        with pytest.raises(AssertionError, match=message):
            bash_blocks(f"<!-- check: {wrong} -->\n```bash\nnumforge a\n```\n")
    with pytest.raises(AssertionError, match="which no mark sets"):
        argv("numforge sample $DIR")
