"""Runs the documents' commands for ``tests/test_course.py``, each in a process forked from this one.

The documents quote about a hundred commands, ``numforge ...`` and ``python
demos/...``. Started afresh, each spends most of its time importing NumPy and
numforge again (half a second on a loaded machine, more than most commands
take to run). This process imports them once; for each request, a JSON line on
stdin with the interpreter's arguments::

    {"argv": ["-m", "numforge", "gradcheck", "--only", "linear*"], "cwd": "...", "env": {...},
     "stdout": "FILE", "stderr": "FILE", "timeout": 300}

it forks a child that takes the request's working directory and environment,
points its standard streams at the two files (stdin at the null device), and
runs the module (``-m MODULE ...``, its ``__main__``, the working directory
first on ``sys.path``) or the script (``SCRIPT ...``, its folder first on
``sys.path``) as ``python`` would; the reply is a JSON line,
``{"returncode": N}``, negative for a signal as ``subprocess`` reports it. A
child still running after ``timeout`` seconds is killed by its own SIGALRM.
So each command still runs in a process of its own, which no other command
ran in, and exits through the interpreter's own shutdown (``atexit``, flushed
streams).

The first line it writes says whether it can: ``{"ready": true}``, or
``{"ready": false, "why": "..."}`` where forking is unsafe (no ``os.fork``, a
thread already running, a GPU backend: a forked CUDA context is unusable);
then the test starts each command as a process of its own instead.
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import threading
import traceback

WRITE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC


def unsafe() -> str | None:
    """Why forking this process could run a command differently from a fresh ``python -m numforge``, or None."""
    if not hasattr(os, "fork") or not sys.platform.startswith("linux"):
        return f"no fork on {sys.platform}"
    if os.environ.get("NUMFORGE_BACKEND", "numpy") != "numpy":
        return f"NUMFORGE_BACKEND={os.environ['NUMFORGE_BACKEND']}: a forked GPU context is unusable"
    if threading.active_count() > 1:
        return f"{threading.active_count()} threads running after the imports"
    return None


def run_child(request: dict) -> int:
    """In the forked child: the request's directory, environment and streams, then ``python ARGV``."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], WRITE), (2, request["stderr"], WRITE)):
        target = os.open(path, flags, 0o644)
        os.dup2(target, fd)
        os.close(target)
    signal.alarm(request["timeout"])  # SIGALRM's default action ends the process
    argv = request["argv"]
    try:
        if argv[0] == "-m":
            sys.path[0] = os.getcwd()  # as ``python -m`` puts it
            sys.argv = ["-m", *argv[2:]]  # run_module sets argv[0] to the module's file, as ``python -m`` does
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))  # as ``python SCRIPT`` puts it
            sys.argv = list(argv)
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exit:
        if exit.code is None or isinstance(exit.code, int):
            return exit.code or 0
        print(exit.code, file=sys.stderr)
        return 1
    except BaseException:  # what the interpreter would print for an uncaught error, and its exit status
        traceback.print_exc()
        return 1
    return 0


def main() -> None:
    import numpy  # noqa: F401  (imported once, here: what every command's start would cost)

    from numforge import cli

    cli.build_parser()  # imports every command's module
    why = unsafe()
    print(json.dumps({"ready": why is None, **({"why": why} if why else {})}), flush=True)
    if why:
        return
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            sys.exit(run_child(request))  # the child leaves this loop and exits as the interpreter does
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
