"""The flags that say how a corpus is read, shared by ``prepare``, ``train`` and ``tokenizer train``."""

from __future__ import annotations

import argparse

from ..data.parallel import default_workers
from ..data.sources import DEFAULT_GLOB, DEFAULT_TEXT_FIELD, ERRORS, Source, as_source


def add_reading_flags(group) -> None:
    """``--glob``, ``--text-field``, ``--errors`` (``--data`` itself differs from command to command)."""
    group.add_argument(
        "--glob",
        default=DEFAULT_GLOB,
        help=f"with --data DIR: the files to read, in sorted order (default {DEFAULT_GLOB})",
    )
    group.add_argument(
        "--text-field",
        default=DEFAULT_TEXT_FIELD,
        metavar="NAME",
        help=f"the text of each .jsonl record or .parquet row (default {DEFAULT_TEXT_FIELD!r})",
    )
    group.add_argument(
        "--errors",
        choices=ERRORS,
        default="strict",
        help="bytes that are not UTF-8: stop with the file and byte offset (strict, the default), "
        "or replace each bad sequence by U+FFFD and count them",
    )


def add_workers_flag(group) -> None:
    group.add_argument(
        "--workers", type=int, help=f"processes that read and encode (default: the cores here, {default_workers()})"
    )


def source_from(args: argparse.Namespace, data) -> Source:
    """``data`` (a path or None) read as the flags say."""
    return as_source(data, glob=args.glob, text_field=args.text_field, errors=args.errors)
