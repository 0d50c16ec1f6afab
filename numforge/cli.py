"""The ``numforge`` command. Each sub-command is a module in ``numforge.commands``."""

from __future__ import annotations

import argparse
import sys
from importlib import import_module

from .allocator import retain_freed_memory

# sub-command name -> module in numforge.commands (each has HELP, add_arguments, run)
COMMANDS = {
    "train": "train",
    "sample": "sample",
    "tokenize": "tokenize",
    "tokenizer": "tokenizer",
    "trace": "trace",
    "gradcheck": "gradcheck",
    "bench": "bench",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="numforge",
        description="A GPT engine from first principles: hand-derived forward and backward passes.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in COMMANDS.items():
        module = import_module(f"numforge.commands.{module_name}")
        command_parser = sub.add_parser(name, help=module.HELP, description=module.HELP)
        command_parser.set_defaults(run=module.run)
        module.add_arguments(command_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    retain_freed_memory()  # training steps reuse their freed temporaries instead of faulting in new pages
    try:
        return args.run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
