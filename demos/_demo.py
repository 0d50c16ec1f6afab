"""What every demo shares: its command line. Not a demo itself (the leading underscore).

A demo calls ``command_line(__doc__)`` before it computes anything: ``-h``
prints the demo's docstring (what it shows, what to expect) and exits;
``--quick``, or ``NUMFORGE_DEMO_QUICK=1`` (how the tests run every demo),
asks a slow demo for its short version. Arguments it does not know are left
alone, so the same cells also run in a notebook kernel (which passes its own).
"""

import argparse
import os


def command_line(doc: str, *positional: tuple[str, type, object, str], quick: bool = False) -> argparse.Namespace:
    """The demo's arguments: each ``(name, type, default, help)`` of ``positional`` (optional), and with
    ``quick`` the flag ``--quick`` (``args.quick`` is also true under ``NUMFORGE_DEMO_QUICK=1``)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if quick:
        parser.add_argument("--quick", action="store_true", help="the short version (also: NUMFORGE_DEMO_QUICK=1)")
    for name, kind, default, text in positional:
        parser.add_argument(name, type=kind, nargs="?", default=default, help=f"{text} (default {default})")
    args, _ = parser.parse_known_args()
    args.quick = getattr(args, "quick", False) or os.environ.get("NUMFORGE_DEMO_QUICK") == "1"
    return args
