"""``format_table(header, rows)``: plain-text columns under a header and a rule, for commands and benches.

Example::

    format_table(("T", "ms"), [("512", "1.2"), ("1024", "4.8")], align="right")
    #    T   ms
    # ----  ---
    #  512  1.2
    # 1024  4.8
"""

from __future__ import annotations


def format_table(header: tuple[str, ...], rows: list[tuple[str, ...]], align: str = "right") -> str:
    """Columns as wide as their widest cell, two spaces apart; ``align`` is ``"left"`` or ``"right"``."""
    if align not in ("left", "right"):
        raise ValueError(f"align must be 'left' or 'right', got {align!r}")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    pad = str.ljust if align == "left" else str.rjust
    lines = ["  ".join(pad(cell, width) for cell, width in zip(row, widths)) for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
