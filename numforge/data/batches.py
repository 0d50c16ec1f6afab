"""Random training windows from a token array (in memory or memory-mapped).

The first ``1 - val_fraction`` of the tokens train, the rest validate. A batch
is ``B`` windows of ``T + 1`` consecutive tokens at uniformly random starts,
drawn by a seeded NumPy generator whose state is part of the checkpoint;
inputs are ``window[:, :-1]``, targets ``window[:, 1:]``. Only the windows
drawn are read, so a memory-mapped array costs the pages they touch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..checks import check_positive_int


def split_tokens(tokens: np.ndarray, seq_len: int, val_fraction: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """The first ``round(N * (1 - val_fraction))`` of ``tokens`` for training, the rest for validation (views).

    Each part must hold at least one window of ``seq_len + 1`` tokens.
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    split = int(round(len(tokens) * (1.0 - val_fraction)))
    train, val = tokens[:split], tokens[split:]  # (N,) -> (N_train,), (N_val,)
    for name, part in (("training", train), ("validation", val)):
        if len(part) < seq_len + 1:
            raise ValueError(
                f"the corpus is too short: {len(tokens)} tokens give {len(part)} {name} tokens, "
                f"fewer than seq_len + 1 = {seq_len + 1}; use more text or a shorter --seq-len"
            )
    return train, val


def windows(tokens: np.ndarray, starts: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """``(inputs, targets)``, int64 ``(n, T)``: the ``T + 1`` tokens from each start, targets shifted by one."""
    window = np.asarray(tokens[starts[:, None] + np.arange(seq_len + 1)], dtype=np.int64)  # (n,1)+(T+1,) -> (n,T+1)
    return window[:, :-1], window[:, 1:]  # (n,T+1) -> (n,T), (n,T)


class BatchSampler:
    """Random ``(B, T)`` input/target windows from a token array, reproducible and resumable.

    ``state_dict()`` is JSON-serializable; ``load_state_dict`` continues the
    exact sequence of batches.
    """

    def __init__(self, tokens: np.ndarray, batch_size: int, seq_len: int, seed: int):
        check_positive_int(batch_size, "batch_size")
        check_positive_int(seq_len, "seq_len")
        if tokens.ndim != 1 or len(tokens) < seq_len + 1:
            raise ValueError(
                f"tokens must be a 1-D array of at least seq_len + 1 = {seq_len + 1} ids, got shape {tokens.shape}"
            )
        self.tokens = tokens
        self.batch_size = batch_size
        self.seq_len = seq_len
        self.rng = np.random.default_rng(seed)
        self.batches_drawn = 0

    def next_batch(self) -> tuple[np.ndarray, np.ndarray]:
        """``(inputs, targets)``, both int64 ``(B, T)``; targets are inputs shifted by one."""
        last_start = len(self.tokens) - (self.seq_len + 1)
        starts = self.rng.integers(0, last_start + 1, size=self.batch_size)  # (B,)
        self.batches_drawn += 1
        return windows(self.tokens, starts, self.seq_len)

    def state_dict(self) -> dict[str, Any]:
        return {"bit_generator": self.rng.bit_generator.state, "batches_drawn": self.batches_drawn}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["bit_generator"]
        self.batches_drawn = int(state["batches_drawn"])
