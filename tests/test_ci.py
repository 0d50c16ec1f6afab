"""CI runs every comparison: README's test command installs the extras CI requires, and a skip for one of
their packages fails a CI run (tests/conftest.py)."""

import re
from pathlib import Path

from conftest import CI_EXTRAS, missing_reference_skips, required_modules

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_test_command_installs_exactly_the_extras_ci_requires():
    block = README.read_text(encoding="utf-8").split("<!-- test-command -->", 1)[1].split("```", 2)[1]
    (extras,) = re.findall(r'pip install -e "\.\[([^\]]*)\]"', block)
    assert tuple(extras.split(",")) == CI_EXTRAS


def test_the_references_are_among_the_modules_ci_requires():
    assert {"torch", "transformers", "tokenizers", "tiktoken", "safetensors"} <= required_modules()


def test_ci_requires_no_gpu_package():
    assert "cupy" not in required_modules()


def test_a_skip_naming_a_required_module_is_caught_and_others_are_not():
    skips = [
        ("tests/test_a.py::t1", "could not import 'torch': No module named 'torch'"),
        ("tests/test_b.py::t2", "the torch twin needs torch"),
        ("tests/test_c.py::t3", "could not import 'cupy': No module named 'cupy'"),
        ("tests/test_d.py::t4", "no flock on this system: runs are not locked"),
        ("tests/test_e.py::t5", "torchvision is not a word match"),
    ]
    caught = missing_reference_skips(skips, {"torch", "tokenizers"})
    assert [test for test, _ in caught] == ["tests/test_a.py::t1", "tests/test_b.py::t2"]
    assert missing_reference_skips(skips, set()) == []
