"""How a model knows where a token is: the position schemes, by name, and the fixed sinusoidal table.

A scheme acts at one of three places of the model:

- ``added``: rows ``[start, start + T)`` of a ``(T_max, C)`` array are added to
  the token embeddings. The array is a trained parameter (``learned``:
  ``position_embedding``, whose gradient is ``dx`` summed over the batch) or a
  fixed table built once per model (``sinusoidal``).
- ``rotation``: every attention layer rotates ``q`` and ``k`` by their
  absolute positions, an op pair ``forward(x, *tables[start:start+T])`` and
  ``backward(dy, cache)`` reading the fixed tables named in ``tables``, with
  its textbook twin (``model/reference.py``), its PyTorch twin
  (``bench/train_torch.py``), its gradient checks and its ``variants`` (the
  scaled rotations), each one whole-model gradient check.
- ``score_modifier``: every attention layer adds a term to its scores
  (``ops/scores.py``; ``alibi``: ``-m_h (i - j)``), after the causal mask.

``POSITIONS`` is the one list the config, the model, the reference model, the
study tools, ``numforge params`` and the CLI read: a new scheme is its op file
and one entry here. The schemes' sizes read the config's fields
(``max_seq_len``, ``d_model``, ``head_dim``, ...), so they live in the model,
not among the ops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ..backend import asarray
from ..ops import B, OpCheck, T, normal
from ..ops.rope import rope_backward, rope_forward, rope_table, rope_textbook, rope_textbook_backward, rope_torch

H, D = 3, 8  # heads and head width of the rotation's checks (D even: D/2 rotated pairs)
# Llama 3 scaling that sorts D = 8's wavelengths 2 pi / inv_freq = 6.3, 63, 628, 6283 into all three bands:
# below 64 / 4 kept, above 64 / 1 divided by the factor, 63 between (smoothed)
LLAMA3_SCALING = {
    "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}  # fmt: skip


def sinusoidal_positions(max_seq_len: int, d_model: int, dtype) -> np.ndarray:
    """The fixed table of the original Transformer, ``(T_max, C)``, as a NumPy array.

    ``PE[t, 2i] = sin(t / 10000^(2i/C))``, ``PE[t, 2i+1] = cos(t / 10000^(2i/C))``.
    """
    position = np.arange(max_seq_len, dtype=np.float64)[:, None]  # (T_max, 1)
    frequency = 10000.0 ** (-np.arange(0, d_model, 2, dtype=np.float64) / d_model)  # (ceil(C/2),)
    angle = position * frequency  # (T_max, 1) * (ceil(C/2),) -> (T_max, ceil(C/2))
    table = np.empty((max_seq_len, d_model), dtype=np.float64)
    table[:, 0::2] = np.sin(angle)
    table[:, 1::2] = np.cos(angle[:, : d_model // 2])
    return table.astype(dtype)


class Rotation(NamedTuple):
    """``y, cache = forward(x, *rows)``, ``dx = backward(dy, cache)``, ``rows = [table[start:start+T] for table in
    tables]``; ``y = textbook(x, *rows)`` and ``(dx,) = textbook_backward(dy, x, *rows)`` as the textbook writes them;
    ``y = torch(x, *rows)`` on torch tensors; ``checks``: the float64 gradient checks of the op pair."""

    forward: Callable
    backward: Callable
    tables: tuple[str, ...]  # the fixed tables it reads, by name
    textbook: Callable
    textbook_backward: Callable
    torch: Callable
    checks: tuple[OpCheck, ...]


def rope_rows(start: int, length: int, scaling: dict | None = None) -> dict:
    """The checks' cos and sin (width ``D``) of positions [start, start + length), as a decoding step at an offset
    slices them."""
    table = rope_table(start + length, D, scaling=scaling, dtype="float64")
    return {"cos": asarray(table.cos[start:]), "sin": asarray(table.sin[start:])}  # (length, D) each


def _rope_check(name: str, shape: tuple[int, ...], start: int, scaling: dict | None = None) -> OpCheck:
    return OpCheck(name, lambda: {"x": normal(*shape)}, lambda: rope_rows(start, shape[-2], scaling))


def packed_rope_rows() -> dict:
    """The checks' cos and sin ``(2, 1, 5, D)`` of two rows of positions of their own, as a packed batch has them
    (each sequence counted from 0): ``[0 1 2 0 1]`` and ``[0 1 2 3 4]``."""
    table = rope_table(5, D, dtype="float64")
    positions = np.array([[0, 1, 2, 0, 1], [0, 1, 2, 3, 4]])  # (2,5)
    return {name: asarray(rows[positions][:, None]) for name, rows in zip(("cos", "sin"), table)}  # (2,1,5,D) each


class PositionScheme(NamedTuple):
    """One way of telling the model each token's position (module docstring)."""

    about: str  # what ``numforge params`` says of it
    parameter_shapes: Callable[..., dict]  # config -> {name: shape} of its trained arrays
    table_shapes: Callable[..., dict]  # config -> {name: shape} of its fixed tables (for memory estimates)
    tables: Callable[..., dict]  # (config, dtype) -> {name: NumPy array}, built once per model
    added: str | None  # the (T_max, C) parameter or table added to the token embeddings, if any
    rotation: Rotation | None = None  # the rotation of q and k, if any
    score_modifier: str | None = None  # a name in ops.scores.SCORE_MODIFIERS every attention layer adds, if any
    # name -> the GPTConfig fields of a form worth a whole-model gradient check of its own (model[rope_linear]),
    # sized for gradcheck's tiny model (a context of 8)
    variants: dict[str, dict] = {}


def _none(*_) -> dict:
    return {}


LOCAL = "_local"  # the suffix of the local layers' tables (GPTConfig.rope_local_theta: Gemma 3)


def _rope_tables(config, dtype) -> dict:
    """RoPE's cos and sin ``(T_max, D)``; with ``rope_local_theta`` also the local layers' pair, of that base and
    unscaled (Gemma 3: ``rope_local_base_freq``, its sliding layers' default rope type)."""
    T, D = config.max_seq_len, config.head_dim
    tables = dict(zip(("rope_cos", "rope_sin"), rope_table(T, D, config.rope_theta, config.rope_scaling, dtype)))
    if config.rope_local_theta is not None:
        local = rope_table(T, D, config.rope_local_theta, None, dtype)
        tables |= dict(zip(("rope_cos" + LOCAL, "rope_sin" + LOCAL), local))
    return tables


def layer_tables(config, layer: int, names: tuple[str, ...]) -> tuple[str, ...]:
    """The names of the tables layer ``layer``'s rotation reads: ``names``, or their local pair on a local layer
    (``config.local_rotation``)."""
    return tuple(name + LOCAL for name in names) if config.local_rotation(layer) else names


POSITIONS = {  # name -> PositionScheme
    "learned": PositionScheme(
        "learned: a trained T x C table",
        parameter_shapes=lambda c: {"position_embedding": (c.max_seq_len, c.d_model)},
        table_shapes=_none,
        tables=_none,
        added="position_embedding",
    ),
    "sinusoidal": PositionScheme(
        "sinusoidal: a fixed T x C table, no parameters",
        parameter_shapes=_none,
        table_shapes=lambda c: {"sinusoidal": (c.max_seq_len, c.d_model)},
        tables=lambda c, dtype: {"sinusoidal": sinusoidal_positions(c.max_seq_len, c.d_model, dtype)},
        added="sinusoidal",
    ),
    "rope": PositionScheme(
        "rope: q and k rotated by their positions, no parameters",
        parameter_shapes=_none,
        table_shapes=lambda c: {name: (c.max_seq_len, c.head_dim) for name in _rope_tables(c, "float32")},
        tables=_rope_tables,
        added=None,
        rotation=Rotation(
            rope_forward, rope_backward, ("rope_cos", "rope_sin"),
            textbook=rope_textbook, textbook_backward=rope_textbook_backward, torch=rope_torch,
            checks=(
                _rope_check("rope", (B, T, D), start=0),
                _rope_check("rope[4-D, start 5]", (B, H, 5, D), start=5),
                _rope_check("rope[linear]", (B, H, 5, D), start=3, scaling={"rope_type": "linear", "factor": 4.0}),
                _rope_check("rope[llama3]", (B, H, 5, D), start=3, scaling=LLAMA3_SCALING),
                OpCheck("rope[packed positions]", lambda: {"x": normal(2, H, 5, D)}, packed_rope_rows),
            ),
        ),
        variants={
            "linear": {"rope_scaling": {"rope_type": "linear", "factor": 2.0}, "rope_theta": 500.0},
            "llama3": {"rope_scaling": {**LLAMA3_SCALING, "original_max_position_embeddings": 4}},
        },
    ),
    "alibi": PositionScheme(
        "alibi: a bias -m_h (i - j) on every attention score, no parameters",
        parameter_shapes=_none,
        table_shapes=_none,
        tables=_none,
        added=None,
        score_modifier="alibi",
    ),
}  # fmt: skip
