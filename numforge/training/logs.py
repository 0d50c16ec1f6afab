"""The loss log of a run: ``loss.csv`` (step, train loss, validation loss, learning rate) and ``loss.png``."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from ..atomic import atomic_path, write_text_atomic

LOSS_CSV = "loss.csv"
LOSS_PNG = "loss.png"
CSV_FIELDS = ("step", "train_loss", "val_loss", "lr")


def read_loss_csv(path: Path, up_to_step: int) -> list[dict]:
    """The rows of an existing loss log with step <= ``up_to_step`` (later rows were never checkpointed)."""
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return [row for row in csv.DictReader(f) if int(row["step"]) <= up_to_step]


def write_loss_csv(path: Path, rows: list[dict]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, lineterminator="\n")
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
