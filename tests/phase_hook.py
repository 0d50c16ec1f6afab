"""Run a numforge command with a hook at the N-th call of one function: how the tests reach a phase of a job.

    python tests/phase_hook.py ACTION MODULE:ATTRIBUTE[.ATTRIBUTE] N MARKER [numforge arguments...]

At the N-th call of the function, the hook creates the file MARKER, then

- ``wait``: waits until the job has recorded a stop signal (at most a minute), then
  makes the call. The test sends its signal once MARKER exists, so the signal
  arrives in that phase however loaded the machine is, and the phase then runs
  on with the signal recorded, as it would have had it come a moment later.
- ``kill``: kills this process with SIGKILL, in that phase (a crash).
"""

import importlib
import os
import signal
import sys
import time
from pathlib import Path


def hook(action: str, target: str, call: int, marker: Path) -> None:
    from numforge import interrupts

    module_name, _, attributes = target.partition(":")
    *path, name = attributes.split(".")
    owner = importlib.import_module(module_name)
    for attribute in path:
        owner = getattr(owner, attribute)
    original, calls = getattr(owner, name), []

    def hooked(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            marker.write_text("reached\n")
            if action == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            deadline = time.monotonic() + 60
            while interrupts.stop_requested() is None:
                if time.monotonic() > deadline:
                    print(f"phase_hook: no stop signal came at {target}", file=sys.stderr, flush=True)
                    os._exit(99)
                time.sleep(0.005)
        return original(*args, **kwargs)

    setattr(owner, name, hooked)


if __name__ == "__main__":
    action, target, call, marker, *arguments = sys.argv[1:]
    assert action in ("wait", "kill"), action
    hook(action, target, int(call), Path(marker))
    from numforge.cli import main

    sys.exit(main(arguments))
