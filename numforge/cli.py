"""The ``numforge`` command: a table of sub-commands and one error handler.

Each sub-command is a module in ``numforge.commands`` with ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``. A command reports a bad
input by raising ``ValueError`` / ``TypeError`` (or letting an ``OSError``, or a
``MissingDependencyError`` that says what to install, through); ``main``
prints it as ``numforge <command>: <message>`` on stderr.

Exit status: 0 done; 1 the job ran and failed (a gradient check off, a
training run that diverged); 2 bad input (a flag, a file, a path), as
argparse's usage errors; 130 interrupted by Ctrl-C (SIGINT), 143 by SIGTERM
(``interrupts``: every command stops for SIGTERM as for Ctrl-C; the long jobs
stop at a safe point); 141 the reader of the output went away (``numforge
params | head``: stdout's pipe closed), quietly, as a program killed by SIGPIPE
would. A traceback is printed only with ``--debug`` or ``NUMFORGE_DEBUG=1``; a warning is one line,
``numforge <command>: warning: <message>`` (with ``--debug``: Python's, with where it was raised).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from importlib import import_module

from . import interrupts
from .allocator import retain_freed_memory
from .checks import MissingDependencyError, describe_error
from .commands import EXIT_BAD_INPUT, EXIT_CLOSED_PIPE, EXIT_INTERRUPTED

COMMANDS = (
    "prepare",
    "train",
    "sample",
    "chat",
    "tokenizer",
    "trace",
    "convert",
    "attention",
    "inspect",
    "studio",
    "gradcheck",
    "course",
    "params",
    "bench",
)  # modules in numforge.commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="numforge",
        description="A GPT engine from first principles: hand-derived forward and backward passes.",
    )
    parser.add_argument(
        "--debug", action="store_true", help="print the full traceback of an error (also: NUMFORGE_DEBUG=1)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module = import_module(f"numforge.commands.{name}")
        command_parser = sub.add_parser(name, help=module.HELP, description=module.HELP)
        command_parser.set_defaults(run=module.run)
        command_parser.add_argument(  # after the command too; SUPPRESS: absent, it leaves the one before as it is
            "--debug", action="store_true", default=argparse.SUPPRESS, help="print the full traceback of an error"
        )
        module.add_arguments(command_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    if hasattr(sys.stdout, "reconfigure"):  # a path given in non-UTF-8 bytes prints escaped, never fails a job
        sys.stdout.reconfigure(errors="backslashreplace")
    args = build_parser().parse_args(argv)
    debug = args.debug or os.environ.get("NUMFORGE_DEBUG", "") not in ("", "0")
    retain_freed_memory()  # training steps reuse their freed temporaries instead of faulting in new pages
    try:
        with interrupts.raising(), _warnings_as_lines(args.command, debug):
            return args.run(args)
    except BrokenPipeError:
        if debug:
            raise
        _quiet_stdout()  # Python flushes stdout again at exit: let that write go nowhere, not to a second error
        return EXIT_CLOSED_PIPE
    except KeyboardInterrupt as interruption:  # interrupts.Interrupted, or Ctrl-C before the handlers were set
        if debug:
            raise
        print(f"numforge {args.command}: {str(interruption) or 'interrupted'}", file=sys.stderr)
        return getattr(interruption, "exit_status", EXIT_INTERRUPTED)
    except (ValueError, TypeError, OSError, MissingDependencyError) as error:
        if debug:
            raise
        print(f"numforge {args.command}: {describe_error(error)}", file=sys.stderr)
        return EXIT_BAD_INPUT


@contextlib.contextmanager
def _warnings_as_lines(command: str, debug: bool):
    """While a command runs, each warning as one line on stderr naming the command (with ``debug``: Python's)."""
    with warnings.catch_warnings():
        if not debug:
            warnings.showwarning = lambda message, *_, **__: print(
                f"numforge {command}: warning: {message}", file=sys.stderr
            )
        yield


def _quiet_stdout() -> None:
    """Point stdout at the null device (its pipe is closed; what is left in its buffer is dropped)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor (stdout replaced, as under a test's capture)
        pass


if __name__ == "__main__":
    sys.exit(main())
