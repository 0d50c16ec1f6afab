"""Shared test set-up.

Tests build arrays through the selected backend (``NUMFORGE_BACKEND``, NumPy
by default) and compare through ``to_numpy``, so the whole suite runs on
NumPy or, on a GPU machine, on CuPy.
"""

import os

import pytest
from hypothesis import HealthCheck, settings

from numforge import backend

# Locally each run draws new examples; under CI (CI=true) the draws are fixed, so a
# landing is judged on the same examples every time (new ones are found by local runs,
# e.g. NUMFORGE_HYPOTHESIS_EXAMPLES=1000 python -m pytest -q).
settings.register_profile(
    "default",
    max_examples=int(os.environ.get("NUMFORGE_HYPOTHESIS_EXAMPLES", "30")),
    derandomize=os.environ.get("CI", "").lower() in ("1", "true", "yes"),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("default")


@pytest.fixture
def xp():
    """The selected backend's array module."""
    return backend.array_module()


# ------------------------------------------------------------------ skips CI may not have
#
# CI installs the extras that README.md's test command installs (CI_EXTRAS; tests/test_ci.py holds the two
# together), the references torch, transformers, tokenizers and tiktoken among them. A test that skips there
# because one of their modules is missing would let a regression in a comparison land green: under CI=true
# such a skip fails the run. Every run prints its skips grouped by reason, so the summary names them.

CI_EXTRAS = ("test", "compare")
_skips: list[tuple[str, str]] = []  # (test id, reason) of every skipped test or module


def required_modules(extras=CI_EXTRAS) -> set[str]:
    """The top-level modules that numforge's ``extras`` install (``mpich``'s binary and ``ruff`` provide none;
    two-letter shims such as pytest's ``py`` are left out: as words they would match too much)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    modules_of = {}  # distribution name (normalised) -> its top-level modules
    for module, distributions in metadata.packages_distributions().items():
        for distribution in distributions:
            modules_of.setdefault(distribution.lower().replace("_", "-"), set()).add(module)
    wanted = set()
    for line in metadata.requires("numforge") or ():
        requirement = Requirement(line)
        if requirement.marker is not None and any(requirement.marker.evaluate({"extra": e}) for e in extras):
            wanted |= modules_of.get(requirement.name.lower().replace("_", "-"), set())
    return {module for module in wanted if not module.startswith("_") and len(module) > 2}


def _record_skip(report) -> None:
    if report.skipped and isinstance(report.longrepr, tuple):
        _skips.append((report.nodeid, str(report.longrepr[2]).removeprefix("Skipped: ")))


def pytest_runtest_logreport(report):
    _record_skip(report)


def pytest_collectreport(report):
    _record_skip(report)


def missing_reference_skips(skips, modules) -> list[tuple[str, str]]:
    """The ``(test, reason)`` pairs whose reason names one of ``modules`` as a word."""
    import re

    names = re.compile(r"\b(" + "|".join(sorted(map(re.escape, modules))) + r")\b") if modules else None
    return [(test, reason) for test, reason in skips if names is not None and names.search(reason)]


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        return
    bad = missing_reference_skips(_skips, required_modules())
    if bad:
        print(f"\nCI: {len(bad)} test(s) skipped for a package that {'/'.join(CI_EXTRAS)} install:")
        for test, reason in bad:
            print(f"  {test}: {reason}")
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter):
    if not _skips:
        return
    counts = {}
    for _, reason in _skips:
        counts[reason] = counts.get(reason, 0) + 1
    terminalreporter.write_line(f"skipped {len(_skips)}: " + "; ".join(f"{n} x {r}" for r, n in counts.items()))
