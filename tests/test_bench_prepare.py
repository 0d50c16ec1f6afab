"""`numforge bench prepare` runs end to end on a small corpus (timings not asserted), its own checks agreeing."""

import importlib.util

from numforge.cli import main


def test_bench_prepare_runs_and_its_own_checks_agree(capsys):
    argv = ["bench", "prepare", "--megabytes", "0.4", "--vocab-size", "300", "--repeats", "1", "--workers", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "corpus: 0.4 MB (8 copies of 0.1 MB" in out
    assert "identical token files from every run: yes" in out
    assert "a quarter of the corpus" in out and "largest worker" in out
    if importlib.util.find_spec("tiktoken") is not None:  # never a dependency: compared when present
        assert "same ids as tiktoken: yes" in out
