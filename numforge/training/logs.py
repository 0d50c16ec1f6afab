"""The loss log of a run: ``loss.csv`` (step, train loss, validation loss, learning rate) and ``loss.png``.

A model with experts logs one more column, ``expert_load``, at each evaluation: the share of the routed tokens
each expert received on the first validation batch, averaged over the layers, the E shares separated by spaces
(``0.1250 0.1302 ...``; 1/E each when the load is balanced).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from ..atomic import atomic_path, write_text_atomic

LOSS_CSV = "loss.csv"
LOSS_PNG = "loss.png"
CSV_FIELDS = ("step", "train_loss", "val_loss", "lr")
LOAD_FIELD = "expert_load"  # the extra column of a model with experts
HEADERS = (CSV_FIELDS, (*CSV_FIELDS, LOAD_FIELD))


def read_loss_csv(path: Path, up_to_step: int) -> list[dict]:
    """The rows of an existing loss log with step <= ``up_to_step`` (later rows were never checkpointed).

    A log that is not numforge's (a wrong header, a row whose step is not an
    integer or whose losses are not numbers) is a ``ValueError`` naming the
    file and the line.
    """
    if not path.is_file():
        return []
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if tuple(reader.fieldnames or ()) not in HEADERS:
                expected = " or ".join(str(list(header)) for header in HEADERS)
                raise ValueError(f"its header is {reader.fieldnames}, expected {expected}")
            rows = []
            for row in reader:
                _check_row(row, reader.line_num, len(reader.fieldnames))
                if int(row["step"]) <= up_to_step:
                    rows.append(row)
            return rows
    except (ValueError, csv.Error) as err:  # UnicodeDecodeError is a ValueError
        raise ValueError(f"loss log {path} is damaged: {err}; move it away to resume without it") from err


def _check_row(row: dict, line: int, width: int) -> None:
    if None in row or None in row.values():
        raise ValueError(f"line {line} has {len(row) - (None in row)} fields, expected {width}")
    if not (row["step"].isascii() and row["step"].isdigit()):
        raise ValueError(f"line {line}: step {row['step']!r} is not a non-negative integer")
    for name in ("train_loss", "lr") + (("val_loss",) if row["val_loss"] else ()):
        try:
            float(row[name])
        except ValueError:
            raise ValueError(f"line {line}: {name} {row[name]!r} is not a number") from None
    try:
        [float(share) for share in row.get(LOAD_FIELD, "").split()]
    except ValueError:
        raise ValueError(f"line {line}: {LOAD_FIELD} {row[LOAD_FIELD]!r} is not numbers separated by spaces") from None


def write_loss_csv(path: Path, rows: list[dict]) -> None:
    """The rows as ``loss.csv``; with the ``expert_load`` column when a row has one."""
    buffer = io.StringIO()
    fields = HEADERS[any(row.get(LOAD_FIELD) for row in rows)]
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomic(path, buffer.getvalue())


def plot_losses(path: Path, rows: list[dict]) -> bool:
    """Write the loss curves as a PNG if matplotlib is installed; return whether it was written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    steps = [int(r["step"]) for r in rows]
    train = [float(r["train_loss"]) for r in rows]
    val = [(int(r["step"]), float(r["val_loss"])) for r in rows if r["val_loss"] not in ("", None)]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, train, lw=0.8, alpha=0.7, label="train (per step)")
    if val:
        ax.plot(*zip(*val), "o-", label="validation")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy loss (nats/token)")
    ax.grid(alpha=0.3)
    ax.legend()
    with atomic_path(path) as temp:
        fig.savefig(temp, format="png", dpi=100)
    plt.close(fig)
    return True
