"""Fixed sinusoidal positions (the original Transformer's), for ``position="sinusoidal"``."""

from __future__ import annotations

import numpy as np


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
