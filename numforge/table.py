"""``format_table(header, rows)``: plain-text columns under a header and a rule, for commands and benches.

Example::

    format_table(("T", "ms"), [("512", "1.2"), ("1024", "4.8")], align="right")
    #    T   ms
    # ----  ---
    #  512  1.2
    # 1024  4.8
"""

from __future__ import annotations


def format_table(header: tuple[str, ...], rows: list[tuple[str, ...]], align: str | tuple[str, ...] = "right") -> str:
    """Columns as wide as their widest cell, two spaces apart; ``align`` is ``"left"`` or ``"right"``,
    or one of them per column (text left, numbers right)."""
    aligns = (align,) * len(header) if isinstance(align, str) else tuple(align)
    if len(aligns) != len(header) or any(a not in ("left", "right") for a in aligns):
        raise ValueError(f"align must be 'left' or 'right', or one of them per column, got {align!r}")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    pads = [str.ljust if a == "left" else str.rjust for a in aligns]
    lines = [
        "  ".join(pad(cell, width) for cell, width, pad in zip(row, widths, pads)).rstrip() for row in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
