"""The studio's trainer: ``numforge train --resume RUN`` as a child process the Training view starts and stops.

``start`` runs ``python -m numforge train --resume RUN --max-steps N --no-progress`` (its output in
``RUN/studio-train.log``); ``stop`` sends SIGTERM, which the training loop records rather than raises: it
finishes the step, writes a checkpoint and exits (``training/loop.py``); resuming is starting again, from that
checkpoint. The run's lock (``training.run.hold_run``) keeps two trainers apart: a trainer started elsewhere
makes the child stop at once, and the log's last lines say by whom.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from ..checks import check_positive_int

TRAIN_LOG = "studio-train.log"
LOG_LINES = 5  # the log's last lines the Training view shows


class Trainer:
    """At most one ``numforge train`` child for ``run_dir``; ``state()`` says what it is doing."""

    def __init__(self, run_dir: Path):
        self.run_dir, self.process, self.stopping = Path(run_dir), None, False

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, max_steps: int) -> dict:
        """Train the run on to ``max_steps`` updates (resumed from its latest checkpoint)."""
        check_positive_int(max_steps, "max_steps")
        if self.running():
            raise ValueError("the run is already training here: stop it first")
        command = [sys.executable, "-m", "numforge", "train", "--resume", str(self.run_dir)]
        command += ["--max-steps", str(max_steps), "--no-progress"]
        with open(self.run_dir / TRAIN_LOG, "wb") as log:  # the child keeps its own copy of the file
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.stopping = False
        return self.state()

    def stop(self) -> dict:
        """SIGTERM: the loop checkpoints after its step, then exits."""
        if not self.running():
            raise ValueError("the run is not training here: nothing to stop")
        self.process.send_signal(signal.SIGTERM)
        self.stopping = True
        return self.state()

    def state(self) -> dict:
        """``{"state": "idle" | "running" | "stopping" | "stopped", "exit": code or None, "log": last lines}``."""
        if self.process is None:
            return {"state": "idle", "exit": None, "log": []}
        code = self.process.poll()
        state = ("stopping" if self.stopping else "running") if code is None else "stopped"
        return {"state": state, "exit": code, "log": self.log_tail()}

    def log_tail(self) -> list[str]:
        path = self.run_dir / TRAIN_LOG
        if not path.exists():
            return []
        return path.read_text(encoding="utf-8", errors="replace").splitlines()[-LOG_LINES:]
