"""Stop signals in a job: recorded, raised at its safe points, never lost; workers ignore them and end with
their parent."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import subprocess_env

from numforge import cli, interrupts
from numforge.commands import params
from numforge.data.parallel import ordered_map
from numforge.interrupts import Interrupted

JOB_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


def handlers():
    return {signum: signal.getsignal(signum) for signum in JOB_SIGNALS}


@pytest.mark.parametrize(
    "signum, status, text", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "interrupted (SIGTERM)")]
)
def test_a_stop_is_recorded_where_it_arrives_and_raised_at_the_next_safe_point(signum, status, text):
    before, reached = handlers(), []
    with pytest.raises(Interrupted) as stopped:
        with interrupts.deferred():
            signal.raise_signal(signum)
            reached.append("after the signal")  # not raised where it arrived
            assert interrupts.stop_requested() == signum
            interrupts.check()
            reached.append("after the safe point")
    assert reached == ["after the signal"]
    assert (stopped.value.signum, stopped.value.exit_status) == (signum, status)
    assert str(stopped.value).endswith(text) and isinstance(stopped.value, KeyboardInterrupt)
    assert handlers() == before and interrupts.stop_requested() is None


def test_a_second_stop_signal_raises_at_once():
    reached = []
    with pytest.raises(Interrupted) as stopped:
        with interrupts.deferred():
            signal.raise_signal(signal.SIGINT)
            reached.append(1)
            signal.raise_signal(signal.SIGTERM)
            reached.append(2)
    assert reached == [1] and stopped.value.exit_status == 143


def test_a_stop_after_the_last_safe_point_is_raised_when_the_job_ends_unless_the_job_stopped_for_it():
    with pytest.raises(Interrupted):
        with interrupts.deferred():
            with interrupts.deferred():  # nested: a tokenizer trained for a run
                pass
            signal.raise_signal(signal.SIGTERM)
            with interrupts.deferred():
                pass  # an inner block's end does not raise: the job goes on to its own safe point
    with interrupts.deferred():
        signal.raise_signal(signal.SIGINT)
        interrupts.stopping()  # the job stopped for it and says so itself
    interrupts.check()  # outside a job: never raises


def test_sigusr1_asks_for_a_checkpoint_only_in_a_job_that_takes_them():
    before = handlers()
    with interrupts.deferred():
        assert signal.getsignal(signal.SIGUSR1) == before[signal.SIGUSR1]  # left alone: not a training job
    with interrupts.deferred(checkpoints=True):
        assert not interrupts.take_checkpoint_request()
        signal.raise_signal(signal.SIGUSR1)
        assert interrupts.take_checkpoint_request() and not interrupts.take_checkpoint_request()
        interrupts.check()  # no stop: the job goes on
    assert handlers() == before


def test_outside_the_main_thread_a_job_block_changes_nothing():
    seen = []

    def job():
        with interrupts.deferred(checkpoints=True):
            interrupts.check()
            seen.append(handlers())

    thread = threading.Thread(target=job)
    thread.start()
    thread.join()
    assert seen == [handlers()]


def test_every_command_ends_on_sigterm_as_on_ctrl_c(monkeypatch, capsys):
    before = handlers()
    monkeypatch.setattr(params, "run", lambda args: signal.raise_signal(signal.SIGTERM))
    assert cli.main(["params"]) == 143
    assert capsys.readouterr().err.strip() == "numforge params: interrupted (SIGTERM)"
    assert handlers() == before


class Pid:
    """In a worker: a task -> (the task, this worker's process id)."""

    def __call__(self, task):
        time.sleep(0.02)  # long enough that both workers take tasks
        return task, os.getpid()


def test_the_workers_ignore_the_signals_a_process_group_gets():
    results = []
    for task, pid in ordered_map(Pid, (), range(30), workers=2):
        results.append(task)
        if task == 2:
            for signum in JOB_SIGNALS:  # to a worker, as a signal to the whole process group would
                os.kill(pid, signum)
    assert results == list(range(30))  # a worker dead of a signal would have broken the pool


def test_the_map_stops_at_the_next_result():
    results = []
    with pytest.raises(Interrupted):
        with interrupts.deferred():
            for task, _ in ordered_map(Pid, (), range(30), workers=2):
                results.append(task)
                if task == 5:
                    signal.raise_signal(signal.SIGTERM)
    assert results == [0, 1, 2, 3, 4, 5]


ORPHAN = """
import os, signal, sys
from numforge.data.parallel import ordered_map
sys.path.insert(0, sys.argv[1])
from test_interrupts import Pid

pids = set()
for _, pid in ordered_map(Pid, (), range(8), workers=2):
    pids.add(pid)
    if len(pids) == 2:
        print(*pids, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="looks for the workers in /proc")
def test_workers_end_when_their_parent_is_killed_outright():
    env = subprocess_env()
    job = subprocess.run(
        [sys.executable, "-c", ORPHAN, str(Path(__file__).parent)], env=env, capture_output=True, text=True, timeout=60
    )
    assert job.returncode == -signal.SIGKILL, job.stderr
    workers = [int(pid) for pid in job.stdout.split()]
    assert len(workers) == 2
    deadline = time.monotonic() + 30  # each worker looks for its parent twice a second
    while any(Path(f"/proc/{pid}").exists() for pid in workers):
        assert time.monotonic() < deadline, f"workers {workers} outlived their parent"
        time.sleep(0.05)
