"""Kill a training run with SIGKILL again and again, resume it each time, and check what it leaves.

    python tests/kill_runs.py ROOT --kills 20 --seed 0

A tiny model trains with ``--save-every 1`` in ``ROOT/run``. A seeded generator
picks each kill's moment as a point of the run's own progress (the checkpoint
``LATEST`` names reaching step k, or the loss log reaching row k), never a
wall-clock time: the trainer is killed as soon as it is seen there, somewhere
in the next step's work or writes. After each kill the run directory must hold
only complete checkpoints (each one loads, its checksums verified), ``LATEST``,
``loss.csv``, ``loss.png``, the dead trainer's unlocked ``.lock`` and hidden
temporaries; the next start must remove those temporaries and resume. At the
end the directory holds only complete checkpoints, ``LATEST``, ``loss.csv``
and ``loss.png``, and its parameters and loss log are those of the same run
trained without a kill, bit for bit. ``tests/test_hostile_runs.py`` runs it
with three kills.
"""

import argparse
import contextlib
import csv
import io
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from helpers import subprocess_env

from numforge import checkpoint, cli

WORDS = "the cat sat on a mat while one dog ran to the old red barn and back".split()
KEPT = {"LATEST", "loss.csv", "loss.png"}  # besides complete checkpoints


def write_corpus(root: Path, seed: int = 0) -> Path:
    """About 5 KB of word salad in ``root/corpus.txt``, where ``flags`` reads it."""
    rng = np.random.default_rng(seed)
    corpus = root / "corpus.txt"
    corpus.write_text(" ".join(WORDS[i] for i in rng.integers(0, len(WORDS), 1200)), encoding="utf-8")
    return corpus


def flags(root: Path, steps: int) -> list[str]:
    """A tiny model on ``root/corpus.txt``, every step evaluated and checkpointed, the cache in ``root/cache``."""
    model = ["--layers", "1", "--d-model", "16", "--heads", "2", "--seq-len", "16", "--batch-size", "4"]
    data = ["--data", str(root / "corpus.txt"), "--vocab-size", "280", "--cache-dir", str(root / "cache")]
    run = ["--max-steps", str(steps), "--schedule-steps", str(steps), "--warmup-steps", "2", "--seed", "3"]
    return [*data, *model, *run, "--eval-every", "1", "--save-every", "1", "--no-progress"]


def numforge(*args) -> list[str]:
    return [sys.executable, "-m", "numforge", *map(str, args)]


def quietly(argv: list[str]) -> int:
    """``numforge ARGV`` in this process, its output kept out of sight (shown only if it fails)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main(argv)
    if status:
        print(out.getvalue(), err.getvalue(), file=sys.stderr)
    return status


def latest_step(run: Path) -> int:
    try:
        return int((run / checkpoint.LATEST).read_text().strip()[len(checkpoint.PREFIX) :][:8])
    except (OSError, ValueError):
        return 0


def last_logged_step(run: Path) -> int:
    try:
        with open(run / "loss.csv", newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        return int(rows[-1]["step"]) if rows else 0
    except (OSError, ValueError, KeyError):
        return 0


def wait_for(progress, at_least: int, job: subprocess.Popen, what: str, timeout: float = 120) -> None:
    """Poll the run's own files until ``progress()`` reaches ``at_least``; fail if the trainer ended or took too
    long."""
    deadline = time.monotonic() + timeout
    while progress() < at_least:
        if job.poll() is not None:
            raise AssertionError(f"the trainer ended (status {job.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {timeout} s")
        time.sleep(0.005)


def check_directory(run: Path, after_kill: bool) -> list[str]:
    """Every checkpoint complete and LATEST one of them; the names of the hidden temporaries found."""
    checkpoints = [p for p in run.iterdir() if p.name.startswith(checkpoint.PREFIX)]
    for path in checkpoints:
        checkpoint.load_checkpoint(path)  # complete: every file there, every checksum right
    assert checkpoint.latest_checkpoint_dir(run) in checkpoints
    debris = sorted(p.name for p in run.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp"))
    others = {p.name for p in run.iterdir()} - {p.name for p in checkpoints} - set(debris) - KEPT
    allowed = {".lock"} if after_kill else set()  # left by the dead trainer, unlocked: the next one takes it
    assert others <= allowed, f"unexpected files in {run}: {sorted(others - allowed)}"
    assert after_kill or not debris, f"temporaries left in {run}: {debris}"
    return debris


def kill_and_resume(root: Path, kills: int, seed: int, steps: int = 60, say=print) -> dict:
    """``kills`` SIGKILLs at seeded progress points, each followed by a resume; the run then trained to the end
    and compared with one trained straight. Returns counts of what was seen."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    write_corpus(root, seed)
    run, straight = root / "run", root / "straight"
    env = subprocess_env()
    assert quietly(["train", *flags(root, steps), "--out", str(straight)]) == 0
    seen = {"kills": 0, "temporaries left": 0, "temporaries removed at the next start": 0}
    debris: list[str] = []
    for kill in range(kills + 1):
        start = ["--out", run] if kill == 0 else ["--resume", run]
        job = subprocess.Popen(
            numforge("train", *flags(root, steps), *start) if kill == 0 else numforge("train", *start, "--no-progress"),
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        if debris:  # removed when the trainer started: check once it has made progress
            wait_for(lambda: latest_step(run), latest_step(run) + 1, job, "a checkpoint after the restart")
            assert not [name for name in debris if (run / name).exists()], f"kept: {debris}"
            seen["temporaries removed at the next start"] += len(debris)
        if kill == kills:
            assert job.wait(timeout=300) == 0
            break
        target = min(latest_step(run) + int(rng.integers(1, 4)), steps - 1)
        if rng.random() < 0.5:
            wait_for(lambda: latest_step(run), target, job, f"checkpoint {target}")
            point = f"checkpoint {target} appeared"
        else:
            wait_for(lambda: last_logged_step(run), target, job, f"loss.csv row {target}")
            point = f"loss.csv reached step {target}"
        job.send_signal(signal.SIGKILL)
        job.wait()
        debris = check_directory(run, after_kill=True)
        seen["kills"] += 1
        seen["temporaries left"] += len(debris)
        say(f"kill {kill + 1}: after {point}; LATEST at step {latest_step(run)}; temporaries left: {debris or 'none'}")
    check_directory(run, after_kill=False)
    killed, whole = checkpoint.load_checkpoint(run), checkpoint.load_checkpoint(straight)
    assert killed.state["step"] == whole.state["step"] == steps
    for name in whole.params:
        assert np.array_equal(killed.params[name], whole.params[name]), f"{name} differs from the straight run"
    assert (run / "loss.csv").read_text() == (straight / "loss.csv").read_text()
    assert quietly(["sample", "--checkpoint", str(run), "--max-new-tokens", "5"]) == 0
    say(f"after {seen['kills']} kills: {sorted(p.name for p in run.iterdir())}; equal to the straight run bit for bit")
    return seen


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="a directory for the corpus, the runs and the cache")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=60)
    arguments = parser.parse_args()
    print(kill_and_resume(arguments.root, arguments.kills, arguments.seed, arguments.steps))
