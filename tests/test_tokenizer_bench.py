"""`numforge bench tokenizer` runs end to end on a small corpus (timings not asserted); bad numbers are usage errors."""

import pytest

from numforge.cli import main


def test_bench_runs_and_its_own_checks_agree(capsys):
    argv = [
        "bench",
        "tokenizer",
        "--megabytes",
        "0.05",
        "--vocab-size",
        "300",
        "--repeats",
        "1",
        "--reference-kb",
        "1",
        "--reference-merges",
        "10",
        "--no-peers",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "corpus: 0.05 MB of Python" in out
    assert "same merges: yes" in out and "same ids: yes" in out  # fast == reference on the slice
    assert "100,000 copies of one character, slowest:" in out


@pytest.mark.parametrize(
    "option, value, wanted",
    [
        ("--repeats", "0", "an integer >= 1"),
        ("--vocab-size", "3.5", "an integer >= 1"),
        ("--megabytes", "nan", "a finite number > 0"),
    ],
)
def test_bad_numbers_are_usage_errors_naming_the_option(capsys, option, value, wanted):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "tokenizer", option, value])
    assert exit_info.value.code == 2
    assert f"argument {option}: expected {wanted}, got '{value}'" in capsys.readouterr().err
