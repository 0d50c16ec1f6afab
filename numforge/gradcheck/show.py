"""``numforge gradcheck --show CASE``: a case's gradients printed beside the true ones, as a notebook would.

For each gradient of the case: the finite-difference gradient (the truth) and
the backward's (numforge's, or with ``--impl`` the learner's), row by row along
the last axis (the first ``MAX_ROWS`` rows); a sampled check (the whole model)
shows its sampled coordinates. Then the values of the case's invariants for
both (``diagnose.Invariant``): LayerNorm's row sums of ``dx``, attention's sums
of ``dk`` over the keys, each zero up to rounding for the true gradient.
"""

from __future__ import annotations

import numpy as np

from .cases import Case

MAX_ROWS = 8
NUMBERS_SHOWN = 4  # invariant values shown per gradient


def _numbers(values) -> str:
    return " ".join(f"{v:10.5f}" for v in values)


def _invariant_values(values: np.ndarray) -> str:
    shown = ", ".join(f"{v:.1e}" for v in values[:NUMBERS_SHOWN])
    return shown + (", ..." if values.size > NUMBERS_SHOWN else "")


def show(case: Case, rows: list, label: str) -> str:
    """The text for ``rows`` (what ``case.run`` returned); ``label`` names the backward's side (``yours``)."""
    inputs = case.inputs() if case.inputs else {}
    out = []
    for row in rows:
        if not hasattr(row, "analytic"):  # an exact comparison (the tokenizer): nothing to put side by side
            out.append(f"{row.op} on {row.argument}: {'equal to the reference' if row.passed else row.detail}")
            continue
        if row.analytic is None or row.problem:
            out.append(f"{row.op}, the gradient of {row.argument!r}: {row.problem or 'nothing to show'}")
            continue
        mine = np.asarray(row.analytic, dtype=np.float64)
        shape = "x".join(map(str, row.shape)) or "scalar"
        if row.coords_checked == mine.size and mine.ndim >= 1:
            truth = np.asarray(row.numeric, dtype=np.float64).reshape(mine.shape)
            lines = _by_rows(truth, mine)
            out.append(
                f"{row.op}, the {row.quantity} of {row.argument!r} ({shape}), row by row: {row.against} | {label}"
            )
        else:
            truth = None
            lines = [
                f"  {tuple(int(i) for i in np.unravel_index(int(c), mine.shape))}: {n:10.5f} | "
                f"{mine.reshape(-1)[int(c)]:10.5f}"
                for c, n in zip(row.coords[:MAX_ROWS], row.numeric)
            ]
            out.append(f"{row.op}, {row.argument!r} ({shape}) at {row.coords_checked} sampled coordinates: "
                       f"finite differences | {label}")  # fmt: skip
        out.extend(lines)
        for invariant in case.invariants:
            if invariant.argument == row.argument and truth is not None:
                out.append(
                    f"  {invariant.statement}: finite differences {_invariant_values(invariant.values(inputs, truth))}"
                    f" | {label} {_invariant_values(invariant.values(inputs, mine))}"
                )
    return "\n".join(out)


def _by_rows(truth: np.ndarray, mine: np.ndarray) -> list[str]:
    width = truth.shape[-1]
    truth_rows, mine_rows = truth.reshape(-1, width), mine.reshape(-1, width)
    lines = []
    for i in range(min(len(truth_rows), MAX_ROWS)):
        index = f"[{', '.join(map(str, np.unravel_index(i, truth.shape[:-1])))}] " if truth.ndim > 1 else ""
        lines.append(f"  {index}{_numbers(truth_rows[i])} | {_numbers(mine_rows[i])}")
    if len(truth_rows) > MAX_ROWS:
        lines.append(f"  ... ({len(truth_rows) - MAX_ROWS} more rows)")
    return lines
