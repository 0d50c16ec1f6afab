"""Threads inside one process: the rows of each micro-batch split over them compute what one thread computes.

Runs are compared as in ``test_parallel.py``: the largest relative difference
of any parameter tensor, ``max|a - b| / max|b|``. Every test asks for its
thread count, so it runs the same on one core (``taskset -c 0``) as on many.
"""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from parallel_run import FLOAT32_TOLERANCE, max_relative_difference, tiny_flags, tiny_run, without_key_bias
from parallel_run import write_corpus as write_tiny_corpus

from numforge import checkpoint, cli, interrupts
from numforge.blas import blas_threads, numpy_openblas
from numforge.ops._parallel import worker_count
from numforge.training import LOSS_CSV
from numforge.training.logs import read_loss_csv
from numforge.training.threads import THREADS_VARIABLE, Threads, part_weight, row_parts, thread_count, usable_cores

ROOT = Path(__file__).resolve().parent.parent
# float64, the batch in parts on 2, 3 or 8 threads vs one thread, 20 steps with dropout, measured: at most 1.2e-12
FLOAT64_TOLERANCE = 1e-10


@pytest.fixture
def corpus(tmp_path):
    return write_tiny_corpus(tmp_path / "corpus.txt")


def test_row_parts_examples():
    assert row_parts(range(0, 10), 3) == [range(0, 4), range(4, 7), range(7, 10)]
    assert row_parts(range(8, 16), 2) == [range(8, 12), range(12, 16)]  # a rank's or a micro-batch's rows
    assert row_parts(range(0, 2), 4) == [range(0, 1), range(1, 2)]  # never an empty part
    assert row_parts(range(3, 4), 2) == [range(3, 4)]


@given(st.integers(0, 50), st.integers(1, 40), st.integers(1, 12))
def test_row_parts_cover_the_rows_in_order_in_nearly_equal_parts(start, count, threads):
    rows = range(start, start + count)
    parts = row_parts(rows, threads)
    assert [row for part in parts for row in part] == list(rows)
    assert len(parts) == min(threads, count)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_part_weights_count_each_part_by_its_rows():
    rows = range(0, 10)
    parts = row_parts(rows, 3)  # 4, 3, 3 full rows of 16 targets
    weights = [part_weight(len(part) * 16, len(rows) * 16, len(parts)) for part in parts]
    assert weights == pytest.approx([1.2, 0.9, 0.9])
    # sum_p w_p mean_p / P is the mean over the 10 rows of any per-row values
    values = np.arange(10.0) ** 2
    means = [values[part.start : part.stop].mean() for part in parts]
    assert sum(w * m for w, m in zip(weights, means)) / len(parts) == pytest.approx(values.mean())
    assert part_weight(4 * 16, 8 * 16, 2) is None  # equal parts: no scaling


def test_thread_count_from_the_flag_the_variable_or_the_cores(monkeypatch):
    monkeypatch.delenv(THREADS_VARIABLE, raising=False)
    assert usable_cores() == len(os.sched_getaffinity(0))
    assert thread_count() == usable_cores()  # every core this process may use
    assert thread_count(ranks=2) == 1  # under mpiexec: a rank per core
    assert thread_count(3) == 3
    monkeypatch.setenv(THREADS_VARIABLE, "5")
    assert thread_count() == thread_count(ranks=2) == 5
    assert thread_count(2) == 2  # the flag wins
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(THREADS_VARIABLE, bad)
        with pytest.raises(ValueError, match=f"NUMFORGE_THREADS must be an integer >= 1, got '{bad}'"):
            thread_count()
    with pytest.raises(ValueError, match="threads must be a positive integer, got 0"):
        thread_count(0)


def test_parts_run_at_once_each_on_one_blas_thread_and_come_back_in_order():
    second_done = threading.Event()
    seen = {}

    def work(part):
        if part.start == 0:  # the first part ends last: it waits for the second, which must run beside it
            assert second_done.wait(timeout=60), "the second part never ran while the first waited"
        seen[part.start] = (threading.current_thread() is threading.main_thread(), blas_threads())
        seen[part.start] += (worker_count(np, 1, 8, 2048, 2048),)  # the tiled attention would not split again
        if part.start == 2:
            second_done.set()
        return part.start

    assert Threads(2).map(work, row_parts(range(0, 4), 2)) == [0, 2]
    assert seen == {0: (False, 1, 1), 2: (False, 1, 1)}
    assert Threads(1).map(lambda part: threading.current_thread() is threading.main_thread(), [range(2)]) == [True]


def test_a_micro_batch_of_one_row_runs_in_the_caller_on_the_threads_blas():
    if numpy_openblas() is None:
        pytest.skip("reads the threads of NumPy's bundled OpenBLAS")
    before = blas_threads()

    def work(part):
        return threading.current_thread() is threading.main_thread(), blas_threads()

    seen = Threads(2).map(work, [range(1)])
    assert seen == [(True, 2)] and blas_threads() == before


def test_an_error_in_a_part_is_raised_in_the_caller():
    def work(part):
        if part.start == 2:
            raise RuntimeError("part 2 failed")
        return part.start

    with pytest.raises(RuntimeError, match="part 2 failed"):
        Threads(2).map(work, row_parts(range(0, 4), 2))


@pytest.mark.parametrize(
    "threads, grad_accum",
    [(2, 1), (3, 1), (2, 2), (8, 1), (2, 8)],
    # 3: parts of 3, 3 and 2 rows (weighted); 2 x 2: parts of 2 rows; 8: 1 row each; 2 x 8: micro-batches of 1 row
)
def test_threads_train_as_one_thread_float64_with_dropout(tmp_path, corpus, threads, grad_accum):
    one = tiny_run(tmp_path / "one", corpus, tmp_path, threads=1)
    many = tiny_run(tmp_path / "many", corpus, tmp_path, threads=threads, grad_accum=grad_accum)
    assert max_relative_difference(many, one) < FLOAT64_TOLERANCE
    start = tiny_run(tmp_path / "start", corpus, tmp_path, steps=1)  # the runs moved far from where they began
    assert max_relative_difference(start, one) > 1e-2
    losses = [read_loss_csv(tmp_path / name / LOSS_CSV, 20) for name in ("one", "many")]
    for a, b in zip(*losses, strict=True):  # validation is split over the threads too
        for field in ("train_loss", "val_loss"):
            assert (a[field] == b[field] == "") or float(a[field]) == pytest.approx(float(b[field]), rel=1e-10)


def test_the_command_on_two_threads_matches_one_thread_float32(tmp_path, corpus, capsys):
    assert cli.main(["train", *tiny_flags(tmp_path, corpus, "one"), "--threads", "1"]) == 0
    assert cli.main(["train", *tiny_flags(tmp_path, corpus, "two"), "--threads", "2"]) == 0
    assert ", 2 threads" in capsys.readouterr().out
    one, two = checkpoint.load_checkpoint(tmp_path / "one"), checkpoint.load_checkpoint(tmp_path / "two")
    assert (one.state["threads"], two.state["threads"]) == (1, 2)
    assert max_relative_difference(without_key_bias(two.params), without_key_bias(one.params)) < FLOAT32_TOLERANCE
    a, b = (read_loss_csv(tmp_path / name / LOSS_CSV, 20) for name in ("one", "two"))
    assert [float(row["train_loss"]) for row in a] == pytest.approx([float(row["train_loss"]) for row in b], rel=1e-5)


def test_the_command_uses_every_core_by_default(tmp_path, corpus, monkeypatch):
    monkeypatch.delenv(THREADS_VARIABLE, raising=False)
    assert cli.main(["train", *tiny_flags(tmp_path, corpus, "run", steps=2)]) == 0
    assert checkpoint.load_checkpoint(tmp_path / "run").state["threads"] == len(os.sched_getaffinity(0))
    monkeypatch.setenv(THREADS_VARIABLE, "3")
    assert cli.main(["train", "--resume", str(tmp_path / "run"), "--max-steps", "3", "--no-progress"]) == 0
    assert checkpoint.load_checkpoint(tmp_path / "run").state["threads"] == 3


def test_resume_on_the_same_threads_is_bit_identical(tmp_path, corpus):
    straight = tiny_flags(tmp_path, corpus, "straight")
    assert cli.main(["train", *straight, "--threads", "2"]) == 0
    assert cli.main(["train", *tiny_flags(tmp_path, corpus, "split", steps=10), "--threads", "2"]) == 0
    assert cli.main(["train", "--resume", str(tmp_path / "split"), "--max-steps", "20", "--threads", "2"]) == 0
    a, b = checkpoint.load_checkpoint(tmp_path / "straight"), checkpoint.load_checkpoint(tmp_path / "split")
    for name in a.params:
        assert np.array_equal(a.params[name], b.params[name]), f"{name} differs"
        assert np.array_equal(a.optimizer_state["v"][name], b.optimizer_state["v"][name]), f"{name}'s v differs"
    assert (tmp_path / "straight" / LOSS_CSV).read_text() == (tmp_path / "split" / LOSS_CSV).read_text()


@pytest.mark.parametrize(
    "signum, count",
    [(signal.SIGINT, 1), (signal.SIGINT, 2), (signal.SIGTERM, 1)],  # a second signal: out at once, the checkpoint kept
)
def test_a_stop_signal_on_threads_ends_the_run_after_the_step_with_a_resumable_checkpoint(
    tmp_path, corpus, signum, count
):
    flags = tiny_flags(tmp_path, corpus, "run", steps=100_000) + ["--eval-every", "2", "--save-every", "2"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    command = [sys.executable, "-m", "numforge", "train", *flags, "--threads", "2"]
    job = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (tmp_path / "run" / LOSS_CSV).exists():  # written at the first evaluation, step 2
        assert job.poll() is None and time.monotonic() < deadline, "the job ended or hung before step 2"
        time.sleep(0.1)
    for _ in range(count):
        job.send_signal(signum)
    out, err = job.communicate(timeout=60)
    assert job.returncode == 128 + signum, err.decode()
    step = checkpoint.load_checkpoint(tmp_path / "run").state["step"]
    assert step >= 2
    if count == 1:
        assert f"{interrupts.describe(signum)}: checkpoint at step {step}" in err.decode()
        assert "resume with: numforge train --resume" in out.decode()
    assert cli.main(["train", "--resume", str(tmp_path / "run"), "--max-steps", str(step + 1), "--no-progress"]) == 0


# the README's main command, numforge train on every core against --threads 1: its losses at every step, float32,
# measured on 2 cores over the 600 steps: within 6.4e-4 (train) and 5.3e-4 (validation); 1.0e-4 over the first 100
MAIN_COMMAND_TOLERANCE = 2e-3


def test_the_main_command_on_two_threads_keeps_the_losses_of_one_thread(tmp_path):
    common = ["--max-steps", "100", "--eval-every", "50", "--cache-dir", str(tmp_path), "--no-progress"]
    for threads in ("1", "2"):
        assert cli.main(["train", *common, "--out", str(tmp_path / threads), "--threads", threads]) == 0
    one, two = (read_loss_csv(tmp_path / threads / LOSS_CSV, 100) for threads in ("1", "2"))
    assert len(one) == len(two) == 100
    for a, b in zip(one, two):
        for field in ("train_loss", "val_loss"):
            if a[field]:
                assert abs(float(a[field]) - float(b[field])) < MAIN_COMMAND_TOLERANCE, (a, b)
    assert float(one[-1]["val_loss"]) < 6.5  # it learned: ln 2048 = 7.6 at the start
