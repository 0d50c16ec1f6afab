"""numforge bench train: a one-step smoke run prints the table row, the matmul rate and a profile."""

import re

import pytest

from numforge import backend, cli


def test_one_step_of_the_small_config_prints_its_row_and_profile(capsys):
    if backend.backend_name() != "numpy":
        pytest.skip("the bench sets NumPy's OpenBLAS threads")
    assert (
        cli.main(["bench", "train", "--config", "small", "--steps", "1", "--warmup", "0", "--no-torch", "--profile"])
        == 0
    )
    out = capsys.readouterr().out
    rate = re.search(r"float32 matmul rate .*: ([0-9.]+) GFLOP/s", out)
    assert rate and float(rate.group(1)) > 0
    row = re.search(r"^small\s+1334016\s+(\d+)\s+([0-9.]+)%", out, re.MULTILINE)  # params of the small config
    assert row and int(row.group(1)) > 0 and 0 < float(row.group(2)) < 100
    assert "profile of 1 numforge steps" in out and "linear.py:linear_backward" in out
    share = re.search(r"matrix products \(numpy.matmul\): ([0-9.]+)% of", out)
    assert share and 20 < float(share.group(1)) < 100
