"""The README and docs/ say true things: every command they quote runs, or its block says why it cannot.

The conventions are the course's (``tests/test_course.py``): a ```` ```bash ````
block of ``numforge ...`` and ``python ...`` lines runs in document order in one
temporary directory per document, a ```` ```text ```` block right after it is
its output, and an HTML comment just before it holds its marks:
``<!-- check: skip="REASON" -->`` (not run, and why: MPI across machines, a
download, a server that runs until Ctrl-C), ``given="corpus/ my.txt"`` (the
files it reads, written first), ``hf=gpt2`` or ``hf=llama`` (``$DIR`` is a tiny
Hugging Face directory). A block without ``skip`` runs, so a new command cannot
go unchecked by accident. The documents share one cache (``NUMFORGE_CACHE``:
trained tokenizers and token files are named by what made them), so the
default tokenizer is trained once for all of them.
"""

import pathlib
import re

import pytest
from test_course import REFERENCE, Commands, bash_blocks, environment, function_source, run_document

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
MAX_README_LINES = 200
# a path the documents name in backticks: it must exist (a moved or renamed file leaves no stale pointer)
NAMED_PATH = re.compile(r"`((?:numforge|tests|demos|bench|docs)/[\w/.-]+\.(?:py|md|png))")


def doc_id(path: pathlib.Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One command runner and one cache for every document."""
    cache = tmp_path_factory.mktemp("docs_cache")
    env = environment(cache)
    runner = Commands(env, tmp_path_factory.mktemp("docs_command_outputs"))
    yield runner, env
    if runner.server is not None:
        runner.close()


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_every_command_runs_or_says_why_not(doc, tmp_path, shared):
    commands, env = shared
    text = doc.read_text(encoding="utf-8")
    ran, skipped = run_document(text, doc_id(doc), commands, env, tmp_path)
    assert ran + skipped == len([block for block in bash_blocks(text) if block.commands])


def test_every_document_with_commands_is_checked_here():
    """The list above is docs/ whole: a new page is checked without a line of this file."""
    assert {p.name for p in DOCS} >= {"README.md", "training.md", "parallel.md", "huggingface.md", "studio.md"}
    with_blocks = [p for p in ROOT.glob("docs/**/*.md") if "```bash" in p.read_text(encoding="utf-8")]
    assert set(with_blocks) <= set(DOCS), sorted(set(with_blocks) - set(DOCS))


def test_the_readme_is_a_front_door():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_README_LINES, f"README.md has {len(text.splitlines())} lines"
    for marker in ("<!-- main-command -->", "<!-- test-command -->"):
        after = text.split(marker, 1)[1]
        assert re.match(r"\n(<!--[^>]*-->\n)?```bash\n", after), f"no bash block right after {marker}"
    for first in ("numforge/model/reference.py", "numforge/model/gpt.py", "numforge/ops/"):
        assert first in text.split("## Five commands", 1)[0], f"the README does not send a reader to {first} first"


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_links_and_named_paths_exist(doc):
    text = doc.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert (doc.parent / target).exists(), f"{doc_id(doc)} links to {target}, which does not exist"
    for path in NAMED_PATH.findall(text):
        assert (ROOT / path).exists(), f"{doc_id(doc)} names {path}, which does not exist"
    for path, name in REFERENCE.findall(text):
        assert function_source(ROOT / path, name) is not None, f"{doc_id(doc)}: no {name} in {path}"


def test_links_to_a_section_name_one():
    """``page.md#section`` names a heading of that page, as GitHub spells its anchors."""
    for doc in DOCS:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", doc.read_text(encoding="utf-8")):
            page = doc.parent / target if target else doc
            headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), flags=re.MULTILINE)
            anchors = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}
            assert anchor in anchors, f"{doc_id(doc)} links to {target}#{anchor}; its sections: {sorted(anchors)}"
