"""What clusters and people do to a training run: SIGTERM, SIGUSR1, kill -9 at any moment, a second trainer on
the same run, a reader of a live run, and a stop signal in each phase of the job.

The subprocess tests synchronise on the run's own progress (a line on stderr, a file written, a call reached:
``phase_hook.py``), never on a sleep; ``kill_runs.py`` picks its kill moments the same way, with a seeded
generator.
"""

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import make_tiny_run, processes_mentioning, signal_at, subprocess_env, tiny_run
from kill_runs import KEPT, check_directory, flags, kill_and_resume, numforge, write_corpus

from numforge import backend, checkpoint, cli, interrupts, locks
from numforge.checkpoint import load_checkpoint
from numforge.training import LOSS_CSV

pytestmark = pytest.mark.skipif(locks.fcntl is None, reason="no flock on this system: runs are not locked")
PHASE_HOOK = str(Path(__file__).resolve().parent / "phase_hook.py")


@pytest.fixture
def root(tmp_path):
    write_corpus(tmp_path)
    return tmp_path


def assert_same_run(a: Path, b: Path) -> None:
    """The parameters, AdamW moments and loss logs of two runs are equal bit for bit."""
    first, second = load_checkpoint(a), load_checkpoint(b)
    assert first.state["step"] == second.state["step"]
    for name in first.params:
        assert np.array_equal(first.params[name], second.params[name]), f"{name} differs"
        assert np.array_equal(first.optimizer_state["m"][name], second.optimizer_state["m"][name])
    assert (a / LOSS_CSV).read_text() == (b / LOSS_CSV).read_text()


def read_until(stream, text: str, job: subprocess.Popen) -> str:
    """The lines of ``stream`` up to the first that holds ``text`` (the job's own progress)."""
    seen = []
    for line in stream:
        seen.append(line)
        if text in line:
            return line
    raise AssertionError(f"the job ended (status {job.wait()}) without printing {text!r}:\n{''.join(seen)}")


def test_sigusr1_checkpoints_and_goes_on_sigterm_checkpoints_and_exits_143_and_the_resume_is_exact(root, capsys):
    long = [*flags(root, 100_000), "--schedule-steps", "1000", "--save-every", "100000"]
    job = subprocess.Popen(
        numforge("train", *long, "--out", root / "run"), env=subprocess_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    read_until(job.stderr, "step 3: train loss", job)
    job.send_signal(signal.SIGUSR1)
    asked = read_until(job.stderr, "(asked by SIGUSR1)", job)
    assert asked.startswith("checkpoint at step ") and checkpoint.latest_checkpoint_dir(root / "run") is not None
    job.send_signal(signal.SIGTERM)
    out, err = job.communicate(timeout=120)
    assert job.returncode == 143, err
    step = load_checkpoint(root / "run").state["step"]
    assert f"interrupted (SIGTERM): checkpoint at step {step} written to" in err
    assert out.rstrip().endswith(f"resume with: numforge train --resume {root / 'run'}")
    check_directory(root / "run", after_kill=False)  # nothing half-written, no lock left

    resume = ["train", "--resume", str(root / "run"), "--max-steps", str(step + 3), "--no-progress"]
    assert cli.main(resume) == 0
    straight = [*long, "--out", str(root / "straight"), "--max-steps", str(step + 3)]
    assert cli.main(["train", *straight]) == 0
    assert_same_run(root / "run", root / "straight")


def test_a_second_trainer_is_refused_while_the_first_runs_and_readers_are_not(root, capsys):
    run = root / "run"
    job = subprocess.Popen(
        numforge("train", *flags(root, 100_000), "--save-every", "2", "--out", run), env=subprocess_env(),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        read_until(job.stderr, "step 3: train loss", job)  # printed once checkpoint 2 is written, not before
        in_use = f"numforge train: run {run} is in use by process {job.pid} (started "
        for second in (["--resume", str(run)], [*flags(root, 10), "--out", str(run)]):
            assert cli.main(["train", *second]) == 2
            assert capsys.readouterr().err.startswith(in_use)
        sample = ["sample", "--checkpoint", str(run), "--max-new-tokens", "3", "--temperature", "0"]
        assert cli.main(sample) == 0  # reads the live run's complete checkpoint, without waiting
    finally:
        job.kill()
        job.wait()
    step = load_checkpoint(run).state["step"]
    assert cli.main(["train", "--resume", str(run), "--max-steps", str(step + 1), "--no-progress"]) == 0  # killed
    assert cli.main(["train", "--resume", str(run), "--max-steps", str(step + 2), "--no-progress"]) == 0  # ended
    check_directory(run, after_kill=False)


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="looks for left-over processes in /proc")
def test_kill_9_while_preparing_the_cache_or_writing_a_checkpoint_leaves_only_what_the_next_start_removes(root, capsys):
    run, marker = root / "run", root / "reached"
    kill_in_prepare = [sys.executable, PHASE_HOOK, "kill", "numforge.data.tokens:TokenWriter.write", "1", marker]
    job = subprocess.run([*kill_in_prepare, "train", *flags(root, 6), "--out", run], env=subprocess_env())
    assert job.returncode == -signal.SIGKILL and marker.exists()
    assert [p.name for p in (root / "cache" / "tokens").iterdir()][0].endswith(".tmp")  # the tokens half-written
    deadline = time.monotonic() + 30  # the encoding workers see their parent gone, and end
    while processes_mentioning(str(run)):
        assert time.monotonic() < deadline, "the killed trainer's workers are still running"
        time.sleep(0.05)

    marker.unlink()
    kill_in_checkpoint = [sys.executable, PHASE_HOOK, "kill", "numforge.checkpoint:_save_arrays", "6", marker]
    job = subprocess.run([*kill_in_checkpoint, "train", *flags(root, 6), "--out", run], env=subprocess_env())
    assert job.returncode == -signal.SIGKILL and marker.exists()  # in checkpoint 3, after its params.npz
    assert [p.name for p in (root / "cache" / "tokens").iterdir() if p.name.endswith(".tmp")] == []
    (debris,) = check_directory(run, after_kill=True)
    assert debris.startswith(".ckpt-00000003.") and (run / debris / "params.npz").exists()
    assert load_checkpoint(run).state["step"] == 2  # the half-written one is never taken for a checkpoint

    assert cli.main(["train", "--resume", str(run), "--no-progress"]) == 0
    assert f"note: removed what a killed run left half-written in {run}: {debris}" in capsys.readouterr().err
    assert cli.main(["train", *flags(root, 6), "--out", str(root / "straight")]) == 0
    assert_same_run(run, root / "straight")
    assert {p.name for p in run.iterdir()} <= KEPT | {"ckpt-00000006"}


def test_random_kill_9s_leave_only_complete_checkpoints_and_the_run_ends_as_if_never_killed(tmp_path):
    seen = kill_and_resume(tmp_path, kills=3, seed=0, steps=12, say=lambda _: None)
    assert seen["kills"] == 3 and seen["temporaries left"] == seen["temporaries removed at the next start"]


# ---------------------------------------------------------------- a stop signal in each phase, in this process


def phases():
    from numforge.data import tokens
    from numforge.tokenizer import _train
    from numforge.training import loop

    return {
        "training the tokenizer": (_train, "_merge_everywhere", 2),
        "preparing the tokens": (tokens.TokenWriter, "write", 1),
        "evaluating step 3": (loop, "evaluate", 3),
        "writing checkpoint 2": (checkpoint, "_write_checkpoint_files", 2),
    }


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("phase", phases())
def test_a_stop_signal_in_each_phase_ends_the_job_as_documented(root, monkeypatch, capsys, phase, signum):
    owner, name, call = phases()[phase]
    signal_at(monkeypatch, owner, name, call, signum)
    run = root / "run"
    assert cli.main(["train", *flags(root, 6), "--out", str(run)]) == 128 + signum
    err = capsys.readouterr().err
    leftovers = [p for p in root.rglob("*") if p.name.endswith(".tmp") or p.name == locks.LOCK_FILE]
    assert leftovers == []  # nothing half-written, no lock held
    tokenizers = list((root / "cache" / "tokenizers").glob("*.json"))
    tokens = list((root / "cache" / "tokens").iterdir()) if (root / "cache" / "tokens").exists() else []
    if phase == "training the tokenizer":  # before the first step: nothing kept, nothing taken for complete
        assert (tokenizers, tokens, run.exists()) == ([], [], False)
    elif phase == "preparing the tokens":
        assert (len(tokenizers), tokens, run.exists()) == (1, [], False)
    else:  # the step finishes and is checkpointed
        step = 3 if phase.startswith("evaluating") else 2
        assert load_checkpoint(run).state["step"] == step
        assert f"{interrupts.describe(signum)}: checkpoint at step {step} written to" in err
        check_directory(run, after_kill=False)
    if not run.exists():
        assert err.rstrip().endswith(f"numforge train: {interrupts.describe(signum)}")


def test_a_second_signal_in_a_checkpoint_write_aborts_at_once_and_keeps_the_previous_checkpoint(root, monkeypatch):
    signal_at(monkeypatch, checkpoint, "_write_checkpoint_files", 2, signal.SIGTERM, signal.SIGINT)
    assert cli.main(["train", *flags(root, 6), "--out", str(root / "run")]) == 130
    assert load_checkpoint(root / "run").state["step"] == 1
    check_directory(root / "run", after_kill=False)
    monkeypatch.undo()
    assert cli.main(["train", "--resume", str(root / "run"), "--no-progress"]) == 0


# ---------------------------------------------------------------- readers, fine-tuning


def a_trainer_saving_at(monkeypatch, run: Path, owner, name: str, saves: int, after: bool) -> list[int]:
    """Make ``owner.name`` save a new checkpoint of ``run`` at each of its first ``saves`` calls (after the call,
    or before it), as a trainer saving meanwhile would: ``LATEST`` switches to it and the one before is removed.
    Checkpoint ``k`` holds the parameters and moments of the run's last checkpoint plus ``k``; returns the steps
    saved so far."""
    now, original, saved, saving = load_checkpoint(run), getattr(owner, name), [], []

    def save():
        if len(saved) < saves and not saving:  # not in the calls that saving itself makes
            saving.append(True)
            step = now.state["step"] + 1 + len(saved)
            shifted = {kind: {k: a + step for k, a in now.optimizer_state[kind].items()} for kind in ("m", "v")}
            checkpoint.save_checkpoint(
                run, step=step, params={k: a + step for k, a in now.params.items()}, config=now.config,
                optimizer_state={**now.optimizer_state, **shifted}, tokenizer=now.tokenizer,
                state={**now.state, "step": step},
            )  # fmt: skip
            saved.append(step)
            saving.clear()

    def meanwhile(*args, **kwargs):
        if not after:
            save()
        result = original(*args, **kwargs)
        if after:
            save()
        return result

    monkeypatch.setattr(owner, name, meanwhile)
    return saved


def assert_whole(read, first, step: int) -> None:
    """``read`` is checkpoint ``step`` of ``a_trainer_saving_at`` (or the run's own, step ``first``), whole."""
    shift = 0 if step == first.state["step"] else step
    assert read.path.name == f"ckpt-{step:08d}" and read.state["step"] == step
    assert read.params.keys() == first.params.keys()
    for name, array in first.params.items():
        assert np.array_equal(read.params[name], array + shift), name
        for kind in ("m", "v"):
            assert np.array_equal(read.optimizer_state[kind][name], first.optimizer_state[kind][name] + shift)


def test_a_reader_of_a_live_run_reads_its_checkpoint_whole_while_the_trainer_removes_it(tmp_path, monkeypatch):
    run = make_tiny_run(tmp_path)
    first = load_checkpoint(run)
    # the trainer writes a checkpoint and removes the one before as the reader reads each archive's arrays: the
    # reader reads on through the files it has open (an earlier reader, reading by name, tried again 5 times)
    saved = a_trainer_saving_at(monkeypatch, run, checkpoint, "array_headers", saves=8, after=False)
    read = load_checkpoint(run)
    assert first.state["step"] == 4 and saved == [5, 6] and not (run / "ckpt-00000004").exists()
    assert_whole(read, first, 4)


def test_a_reader_of_a_live_run_opens_the_newer_checkpoint_as_long_as_latest_moves(tmp_path, monkeypatch):
    run = make_tiny_run(tmp_path)
    first = load_checkpoint(run)
    # each time the reader has read LATEST, the trainer replaces the checkpoint it names before the reader opens
    # it, 12 times (an earlier reader gave up after 5 tries): each try that fails so saw LATEST move
    saved = a_trainer_saving_at(monkeypatch, run, checkpoint, "latest_checkpoint_dir", saves=12, after=True)
    read = load_checkpoint(run)
    assert saved == list(range(5, 17))
    assert_whole(read, first, 16)
    monkeypatch.undo()  # the trainer goes on: 12 more checkpoints while ``sample``'s loader reads LATEST
    saved = a_trainer_saving_at(monkeypatch, run, checkpoint, "latest_checkpoint_dir", saves=12, after=True)
    model, _ = checkpoint.load_model(run)
    assert saved == list(range(17, 29))
    for name, array in read.params.items():  # checkpoint 28 holds checkpoint 16's parameters plus 28
        assert np.array_equal(backend.to_numpy(model.params[name]), array + 28), name


def test_a_reader_of_a_live_run_looks_again_when_the_checkpoint_latest_names_is_gone_when_it_looks(
    tmp_path, monkeypatch
):
    run = make_tiny_run(tmp_path)
    first = load_checkpoint(run)

    class Name:  # the reader checks the name LATEST holds, then looks for that directory: removed meanwhile
        fullmatch = staticmethod(checkpoint._NAME.fullmatch)

    monkeypatch.setattr(checkpoint, "_NAME", Name)
    saved = a_trainer_saving_at(monkeypatch, run, Name, "fullmatch", saves=3, after=True)
    assert_whole(load_checkpoint(run), first, 7)
    assert saved == [5, 6, 7]


def test_init_from_a_small_model_takes_its_context_as_the_default_sequence_length(tmp_path, capsys):
    source = tiny_run(tmp_path)  # a model of 8 positions
    common = ["--data", str(tmp_path / "corpus.txt"), "--cache-dir", str(tmp_path / "cache"), "--max-steps", "1"]
    common += ["--batch-size", "2", "--no-progress", "--init-from", str(source)]
    assert cli.main(["train", *common, "--out", str(tmp_path / "tuned")]) == 0
    assert load_checkpoint(tmp_path / "tuned").state["settings"]["seq_len"] == 8
    assert cli.main(["train", *common, "--out", str(tmp_path / "short"), "--seq-len", "4"]) == 0
    assert load_checkpoint(tmp_path / "short").state["settings"]["seq_len"] == 4
    capsys.readouterr()
    assert cli.main(["train", *common, "--out", str(tmp_path / "long"), "--seq-len", "16"]) == 2
    assert f"--seq-len 16 exceeds the 8 positions of {source}" in capsys.readouterr().err
    assert not (tmp_path / "long").exists()
