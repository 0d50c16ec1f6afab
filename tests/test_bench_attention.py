"""`numforge bench attention` runs end to end with grouped-query attention (timings not asserted), names the
CPU it ran on, and refuses key/value heads that do not divide the query heads."""

from numforge import backend
from numforge.bench.attention import _seen_scores
from numforge.bench.measure import cpu_description
from numforge.cli import main


def test_grouped_query_bench_runs_and_names_its_cpu(capsys):
    argv = ["bench", "attention", "--seq-lens", "32", "64", "--heads", "4", "--kv-heads", "2", "--head-dim", "8",
            "--repeats", "1", "--threads", "1", "--no-torch"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "B=1 H=4 H_kv=2 D=8 float32 causal" in out
    assert f"CPU: {cpu_description()}" in out and "vector extensions:" in out
    if backend.backend_name() == "numpy":  # plain vs tiled memory, measured up to T = 2048
        assert "mem tiled/plain" in out


def test_the_window_bench_runs_its_kernels_with_the_window_and_states_the_targets(capsys):
    argv = ["bench", "attention", "--seq-lens", "32", "64", "--heads", "4", "--kv-heads", "2", "--head-dim", "8",
            "--window", "8", "--repeats", "1", "--threads", "1", "--no-torch",
            "--block-q", "8", "--block-k", "8"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "B=1 H=4 H_kv=2 D=8 float32 sliding window W=8" in out and "1024 no window" in out
    assert "T=64: tiled median" in out and "the T=1024 unwindowed (target <= 1.5; the window keeps 0.00x its" in out
    if backend.backend_name() == "numpy":  # plain and tiled with the same window: the same outputs
        diff = [line.split()[-1] for line in out.splitlines() if line.strip().startswith(("32 ", "64 "))][:2]
        assert len(diff) == 2 and all(float(d) < 1e-5 for d in diff), out


def test_the_scores_a_window_keeps():
    assert _seen_scores(3, 2) == 1 + 2 + 2 and _seen_scores(2, 5) == 1 + 2  # a window longer than T: causal
    assert _seen_scores(8192, 512) == 8192 * 512 - 512 * 511 // 2


def test_the_window_is_causal_and_refuses_non_causal(capsys):
    assert main(["bench", "attention", "--window", "4", "--non-causal", "--no-torch"]) != 0
    assert "--window is causal itself" in capsys.readouterr().err


def test_kv_heads_that_do_not_divide_the_heads_are_refused(capsys):
    assert main(["bench", "attention", "--heads", "8", "--kv-heads", "3", "--no-torch"]) != 0
    assert "--kv-heads must divide --heads (8), got 3" in capsys.readouterr().err


def test_cpu_description_reads_the_model_name_and_the_avx_flags(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: Example CPU 9000\nflags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw\n\n"
        "processor\t: 1\nmodel name\t: Example CPU 9000\nflags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw\n"
    )
    assert cpu_description(cpuinfo) == "Example CPU 9000, vector extensions: avx avx2 avx512f avx512bw"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Old CPU\nflags\t\t: fpu sse2\n")
    assert cpu_description(cpuinfo) == "Old CPU, vector extensions: no AVX"
    assert cpu_description(tmp_path / "missing").endswith("vector extensions: not read")
