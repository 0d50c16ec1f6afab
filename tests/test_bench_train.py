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
    assert out.startswith("CPU: ") and "vector extensions" in out.splitlines()[0] and "load average" in out
    assert "small: 4 layers, d_model 128, 4 heads (4 key/value), layernorm, learned positions, gelu" in out
    rate = re.search(r"float32 matmul rate .*: ([0-9.]+) GFLOP/s", out)
    assert rate and float(rate.group(1)) > 0
    row = re.search(r"^small\s+1334016\s+(\d+)\s+([0-9.]+)%", out, re.MULTILINE)  # params of the small config
    assert row and int(row.group(1)) > 0 and 0 < float(row.group(2)) < 100
    assert "profile of 1 numforge steps" in out and "linear.py:linear_backward" in out
    share = re.search(r"matrix products \(numpy.matmul\): ([0-9.]+)% of", out)
    assert share and 20 < float(share.group(1)) < 100


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_the_torch_model_of_the_bench_computes_numforges_loss(arch):
    """The same weights, the same batch: PyTorch's loss is numforge's, to float32 rounding."""
    torch = pytest.importorskip("torch")
    from numforge.bench.train_models import build
    from numforge.bench.train_torch import torch_loss, torch_params, torch_tables
    from numforge.model import GPT

    config, ids, targets = build("small", "tiled", arch)
    model = GPT(config, seed=0)
    loss, _ = model.forward(backend.asarray(ids), backend.asarray(targets), for_backward=False)
    with torch.no_grad():
        theirs = torch_loss(torch_params(model.params, requires_grad=False), config, torch.from_numpy(ids),
                            torch.from_numpy(targets), torch_tables(model))  # fmt: skip
    assert float(loss) == pytest.approx(theirs.item(), rel=1e-5)  # measured: a few 1e-7
    if arch == "llama":
        assert (config.norm, config.position, config.activation, config.tie_weights) == (
            "rmsnorm",
            "rope",
            "swiglu",
            False,
        )
        assert config.num_kv_heads < config.num_heads


def test_on_two_threads_it_says_where_it_ran_and_what_the_threads_gain(capsys):
    if backend.backend_name() != "numpy":
        pytest.skip("the bench sets NumPy's OpenBLAS threads")
    args = ["bench", "train", "--config", "small", "--steps", "1", "--warmup", "0", "--no-torch", "--threads", "2"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("CPU: ") and "cores usable" in out and "NumPy " in out and "PyTorch: not run" in out
    assert "threads: numforge 2 (--threads; the batch's rows in 2 part(s), one BLAS thread each)" in out
    gain = re.search(r"numforge on 2 threads: ([0-9.]+)x its speed on one thread", out)
    assert gain and float(gain.group(1)) > 0
    free = re.search(r"products on 2 threads ran ([0-9.]+)x and ([0-9.]+)x one thread", out)
    assert free and 0 < float(free.group(1)) < 3 and 0 < float(free.group(2)) < 3
    assert "target (" not in out  # issue 27's targets are for one thread and for the default threads


def test_threads_default_or_a_count():
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["bench", "train", "--threads", "all"])
    assert cli.build_parser().parse_args(["bench", "train", "--threads", "default"]).threads == "default"
