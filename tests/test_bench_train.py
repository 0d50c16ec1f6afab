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


def test_the_torch_twin_of_the_moe_bench_gives_numforges_loss_and_gradients_in_float64():
    """The bench's small Mixtral (8 experts, top-2, renormalised, both auxiliary losses) on 2 rows of 48 of its
    batch: torch's sorted dispatch (``ops.moe.moe_torch``) and autograd give numforge's loss and every gradient."""
    torch = pytest.importorskip("torch")
    import numpy as np

    from numforge.bench.train_models import build
    from numforge.bench.train_torch import torch_loss, torch_params, torch_tables
    from numforge.model import GPT

    config, ids, targets = build("small", "tiled", "moe")
    assert (config.num_experts, config.experts_top_k, config.experts_renormalize) == (8, 2, True)
    assert config.router_aux_loss_coef > 0 and config.router_z_loss_coef > 0
    model = GPT(config, seed=0, dtype="float64")
    ids, targets = ids[:2, :48].copy(), targets[:2, :48].copy()
    loss, cache = model.forward(backend.asarray(ids), backend.asarray(targets))
    grads = model.backward(cache)
    params = torch_params(model.params)
    theirs = torch_loss(params, config, torch.from_numpy(ids), torch.from_numpy(targets), torch_tables(model))
    theirs.backward()
    assert float(loss) == pytest.approx(theirs.item(), rel=1e-13)
    assert set(grads) == set(params) and any(".mlp.router." in name for name in grads)
    for name, grad in grads.items():
        expected = params[name].grad.numpy()
        scale = np.abs(expected).max()
        assert scale > 0, name
        np.testing.assert_allclose(backend.to_numpy(grad), expected, rtol=0, atol=1e-12 * scale, err_msg=name)


def test_the_moe_bench_runs_side_by_side_with_torch(capsys):
    if backend.backend_name() != "numpy":
        pytest.skip("the bench sets NumPy's OpenBLAS threads")
    torch = pytest.importorskip("torch")
    argv = ["bench", "train", "--arch", "moe", "--config", "small", "--steps", "1", "--warmup", "0"]
    assert cli.main([*argv, "--threads", "default"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("CPU: ") and "load average" in out and f"PyTorch {torch.__version__}" in out
    assert "small: 4 layers, d_model 128, 4 heads (2 key/value), rmsnorm, rope positions, swiglu experts: 8 of " in out
    assert "width 128, top-2, renormalised, untied, no biases, T 128" in out
    # the small config with 8 experts: 4 x (router 128 x 8 + 8 x 3 x 128 x 128 + qkv 128 x 256 + out 128 x 128
    # + 2 norms of 128) + the embedding and the head, 2 x 4096 x 128, + the final norm
    params = 4 * (128 * 8 + 8 * 3 * 128 * 128 + 128 * 256 + 128 * 128 + 2 * 128) + 2 * 4096 * 128 + 128
    row = re.search(rf"^small\s+{params}\s+(\d+)\s+[0-9.]+%\s+(\d+)\s+[0-9.]+%\s+([0-9.]+)x", out, re.MULTILINE)
    assert row and int(row.group(1)) > 0 and int(row.group(2)) > 0 and float(row.group(3)) > 0
    assert re.search(r"^target \(default threads\): small ratio >= 1.00x: [0-9.]+x, ", out, re.MULTILINE)
