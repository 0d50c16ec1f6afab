"""Data parallelism: N ranks under mpiexec, and --grad-accum K, compute what one process computes.

The MPI tests launch ``mpiexec -n 2`` (the mpich wheel's, from the ``mpi`` or
``test`` extra) on a tiny model for a few steps, and skip when mpi4py or
mpiexec is missing. Parameters are compared by the largest relative
difference of any parameter tensor, ``max|a - b| / max|b|``.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import processes_mentioning
from parallel_run import (
    FLOAT32_TOLERANCE,
    max_relative_difference,
    tiny_flags,
    tiny_run,
    without_key_bias,
    write_corpus,
)

from numforge import checkpoint, cli
from numforge.training import LOSS_CSV
from numforge.training.parallel import LAUNCHER_SIZE_VARIABLES, MpiUnavailableError, SingleProcess, connect

ROOT = Path(__file__).resolve().parent.parent
RUN_SCRIPT = str(Path(__file__).resolve().parent / "parallel_run.py")


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path / "corpus.txt")


def test_grad_accum_4_equals_the_whole_batch_float64(tmp_path, corpus):
    whole = tiny_run(tmp_path / "whole", corpus, tmp_path, grad_accum=1)
    accumulated = tiny_run(tmp_path / "accumulated", corpus, tmp_path, grad_accum=4)
    assert max_relative_difference(accumulated, whole) < 1e-10
    start = tiny_run(tmp_path / "start", corpus, tmp_path, steps=1)  # the runs moved far from where they began
    assert max_relative_difference(start, whole) > 1e-2


def test_grad_accum_must_split_the_batch(tmp_path, corpus, capsys):
    assert cli.main(["train", *tiny_flags(tmp_path, corpus, "run"), "--batch-size", "6", "--grad-accum", "4"]) == 2
    assert "numforge train: --batch-size (6) must divide by --grad-accum (4)" in capsys.readouterr().err


def test_one_process_never_imports_mpi4py(monkeypatch):
    for name in LAUNCHER_SIZE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # an import of it would fail
    assert isinstance(connect(), SingleProcess)
    monkeypatch.setenv("PMI_SIZE", "2")  # launched as one of two ranks, without mpi4py
    with pytest.raises(MpiUnavailableError, match=r"one of 2 MPI ranks .* not installed: pip install -e \"\.\[mpi\]\""):
        connect()


def test_a_launcher_of_another_mpi_is_refused(monkeypatch):
    pytest.importorskip("mpi4py", reason='needs mpi4py: pip install -e ".[mpi]"')
    monkeypatch.setenv("PMI_SIZE", "3")  # what a launcher of another MPI library than mpi4py's leaves: MPI sees 1
    with pytest.raises(MpiUnavailableError, match="the launcher started 3 ranks but MPI sees 1"):
        connect()


# ---------------------------------------------------------------- under mpiexec


def mpiexec_path() -> str:
    pytest.importorskip("mpi4py", reason='the MPI tests need mpi4py and an MPI: pip install -e ".[mpi]"')
    beside_python = Path(sys.executable).parent / "mpiexec"  # the mpich wheel's, in this environment
    found = str(beside_python) if beside_python.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.skip('the MPI tests need mpiexec: pip install -e ".[mpi]"')
    return found


def mpi_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "NUMFORGE_MPI"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def mpiexec(*args, timeout=120) -> subprocess.CompletedProcess:
    command = [mpiexec_path(), *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=mpi_env())


def numforge_train(*args) -> list[str]:
    return [sys.executable, "-m", "numforge", "train", *map(str, args)]


@pytest.mark.parametrize("threads", [1, 2])  # 2: each rank's 4 rows in parts of 2, on two threads
def test_two_ranks_train_as_one_process_float64(tmp_path, corpus, threads):
    one = tiny_run(tmp_path / "one", corpus, tmp_path)  # dropout on: the masks must not depend on the rank
    result = mpiexec("-n", 2, sys.executable, RUN_SCRIPT, tmp_path / "two", corpus, tmp_path, "--threads", threads)
    assert result.returncode == 0, result.stderr
    two = dict(np.load(tmp_path / "two" / "final.npz"))
    assert max_relative_difference(two, one) < 1e-10


def test_two_ranks_float32_and_resume_on_two_ranks_or_one(tmp_path, corpus):
    assert cli.main(["train", *tiny_flags(tmp_path, corpus, "one")]) == 0
    straight = mpiexec("-n", 2, *numforge_train(*tiny_flags(tmp_path, corpus, "straight")))
    assert straight.returncode == 0, straight.stderr
    one, two = checkpoint.load_checkpoint(tmp_path / "one"), checkpoint.load_checkpoint(tmp_path / "straight")
    assert (one.state["world_size"], two.state["world_size"]) == (1, 2)
    assert max_relative_difference(without_key_bias(two.params), without_key_bias(one.params)) < FLOAT32_TOLERANCE

    first_half = mpiexec("-n", 2, *numforge_train(*tiny_flags(tmp_path, corpus, "split", steps=10)))
    assert first_half.returncode == 0, first_half.stderr
    shutil.copytree(tmp_path / "split", tmp_path / "split-then-one")
    resumed = mpiexec("-n", 2, *numforge_train("--resume", tmp_path / "split", "--max-steps", 20, "--no-progress"))
    assert resumed.returncode == 0, resumed.stderr
    split = checkpoint.load_checkpoint(tmp_path / "split")
    for name in two.params:
        assert np.array_equal(split.params[name], two.params[name]), f"{name} differs"
    assert (tmp_path / "split" / LOSS_CSV).read_text() == (tmp_path / "straight" / LOSS_CSV).read_text()

    assert cli.main(["train", "--resume", str(tmp_path / "split-then-one"), "--max-steps", "20", "--no-progress"]) == 0
    on_one = checkpoint.load_checkpoint(tmp_path / "split-then-one")
    assert on_one.state["world_size"] == 1
    assert max_relative_difference(without_key_bias(on_one.params), without_key_bias(two.params)) < FLOAT32_TOLERANCE


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="looks for left-over processes in /proc")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_stops_every_rank_at_one_step_with_one_resumable_checkpoint(tmp_path, corpus, signum):
    flags = tiny_flags(tmp_path, corpus, "run", steps=100_000)
    flags += ["--eval-every", "2", "--save-every", "100000"]
    job = subprocess.Popen([mpiexec_path(), "-n", "2", *numforge_train(*flags)], env=mpi_env(), stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (tmp_path / "run" / LOSS_CSV).exists():  # written at the first evaluation, step 2
        assert job.poll() is None and time.monotonic() < deadline, "the job ended or hung before step 2"
        time.sleep(0.1)
    if signum == signal.SIGTERM:  # SIGUSR1 first (mpiexec passes it on): a checkpoint, and training goes on
        job.send_signal(signal.SIGUSR1)
        while checkpoint.latest_checkpoint_dir(tmp_path / "run") is None:
            assert job.poll() is None and time.monotonic() < deadline, "no checkpoint after SIGUSR1"
            time.sleep(0.05)
    job.send_signal(signum)
    _, stderr = job.communicate(timeout=60)
    assert job.returncode == 128 + signum, stderr.decode()
    assert processes_mentioning(str(tmp_path / "run")) == []
    checkpoints = [p for p in (tmp_path / "run").iterdir() if p.name.startswith("ckpt-")]
    step = checkpoint.load_checkpoint(tmp_path / "run").state["step"]
    assert len(checkpoints) == 1 and step >= 2
    assert stderr.decode().count(f"checkpoint at step {step} written to") == 1  # rank 0 alone, after every rank
    assert cli.main(["train", "--resume", str(tmp_path / "run"), "--max-steps", str(step + 1), "--no-progress"]) == 0


RANK_1_AT_STEP_3 = """
import sys
from numforge import cli
from numforge.model import GPT

forward, steps = GPT.forward, []

def failing_forward(self, token_ids, targets, *, rng=None, for_backward=True, recompute=False, segments=None):
    loss, cache = forward(
        self, token_ids, targets, rng=rng, for_backward=for_backward, recompute=recompute, segments=segments
    )
    steps.extend([1] if for_backward else [])
    if len(steps) == 3 and for_backward:
        if sys.argv[1] == "raise":
            raise RuntimeError("rank 1 lost its disk")
        loss = float("nan")
    return loss, cache

GPT.forward = failing_forward
sys.exit(cli.main(["train", *sys.argv[2:]]))
"""


@pytest.mark.parametrize("failure", ["raise", "nan"])
def test_a_failing_rank_ends_the_job_with_its_message_once(tmp_path, corpus, failure):
    flags = [*tiny_flags(tmp_path, corpus, "run"), "--save-every", "2"]
    result = mpiexec(  # a job whose other rank waited for the failed one forever would raise TimeoutExpired
        *("-n", 1, *numforge_train(*flags)),
        *(":", "-n", 1, sys.executable, "-c", RANK_1_AT_STEP_3, failure, *flags),
    )
    if failure == "raise":
        assert result.returncode != 0
        assert result.stderr.count("numforge train (rank 1 of 2): RuntimeError: rank 1 lost its disk") == 1
    else:  # every rank sees the summed loss, and stops before the update
        assert result.returncode == 1, result.stderr
        assert result.stderr.count("training stopped at step 3: the loss is nan") == 1
    assert checkpoint.latest_checkpoint_dir(tmp_path / "run").name == "ckpt-00000002"


def test_a_batch_that_does_not_split_over_ranks_is_refused_once_before_training(tmp_path, corpus):
    flags = [*tiny_flags(tmp_path, corpus, "run"), "--batch-size", "6", "--grad-accum", "2"]
    result = mpiexec("-n", 2, *numforge_train(*flags), timeout=60)
    assert result.returncode == 2
    assert result.stderr.count("the batch size 6 must divide by ranks x --grad-accum = 2 x 2 = 4") == 1
    assert not (tmp_path / "run").exists()


def test_bench_train_ranks_prints_one_and_two_ranks_side_by_side(capsys):
    mpiexec_path()  # skips without MPI
    args = ["bench", "train", "--ranks", "2", "--rounds", "1", "--config", "small", "--steps", "1", "--warmup", "0"]
    args += ["--no-torch"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    row = re.search(r"^\s*small\s+([\d,]+)\s+([\d,]+)\s+([0-9.]+)x\s+([0-9.]+)x\s+([0-9.]+)", out, re.MULTILINE)
    assert row, "no row for the small config"
    one, two, speed_up = int(row[1].replace(",", "")), int(row[2].replace(",", "")), float(row[3])
    assert one > 0 and two > 0 and speed_up == pytest.approx(two / one, rel=0.01)
    assert float(row[5]) > 0  # the all-reduce took some time
