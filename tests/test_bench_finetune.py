"""numforge bench finetune: a one-layer smoke run prints every side's tokens/s and peak RSS, and the ratios."""

import re

import pytest

from numforge import cli


def test_a_short_run_prints_each_side_and_the_ratios(capsys):
    pytest.importorskip("peft")
    argv = ["bench", "finetune", "--layers", "1", "--seq-len", "8", "--batch-size", "1", "--steps", "1", "--profile"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("CPU: ") and "load average" in out
    assert re.search(r"^load average before the rounds: [0-9. ]+\nload average after the rounds: ", out, re.MULTILINE)
    for side in ("numforge LoRA", "PEFT", "numforge full"):
        assert re.search(rf"^{side} +\d+ +[0-9.]+ +[0-9.]+ +\d+ +\d+ MiB +[0-9,]+$", out, flags=re.MULTILINE), side
    trained = dict(re.findall(r"^(numforge LoRA|PEFT) .* MiB +([0-9,]+)$", out, flags=re.MULTILINE))
    assert trained["numforge LoRA"] == trained["PEFT"] == f"{8 * (576 + 576) + 8 * (576 + 192):,}"  # q, v
    assert re.search(r"numforge LoRA / PEFT: [0-9.]+x tokens/s, peak RSS [0-9.]+x PEFT's", out)
    assert re.search(r"numforge LoRA / numforge full fine-tuning: [0-9.]+x tokens/s", out)
    assert "profile of 1 numforge steps on one thread" in out  # --profile
    assert re.search(r"matrix products \(numpy.matmul\): [0-9.]+% of \d+ ms/step", out)
