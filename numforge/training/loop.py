"""The training loop: batches -> loss -> hand-written backward -> clipped AdamW step, resumable exactly.

One step, for step s = 0, 1, ...::

    lr      = warmup_cosine_lr(s, max_lr, min_lr, warmup_steps, schedule_steps)
    x, y    = next (B, T) windows from the seeded sampler
    rng     = default_rng((seed, DROPOUT_STREAM, s))   dropout masks (only when drop_prob > 0)
    loss    = model.forward(x, y, rng)     mean cross-entropy of next-token prediction
    grads   = model.backward(cache)
    clip grads to global norm <= grad_clip, then AdamW(lr)

After ``s + 1`` updates the run is "at step s + 1"; checkpoints, the loss log
and validation are labelled with that count.

Exact resume: a checkpoint holds the parameters, the AdamW moments and step,
the sampler's generator state and the settings (the schedule included), so
``k`` steps, stop, resume to ``N`` replays exactly the arithmetic of ``N``
steps straight. The dropout masks of a step come from a generator seeded by
the run's seed and the step alone, so they need no saved state (CuPy's
generators keep theirs on the GPU, with no public way to read it). The cosine
schedule spans ``schedule_steps``, fixed when the run starts, not
``max_steps``: stopping early and resuming later must not change the
learning rate of any step.

Nothing lost: Ctrl-C is deferred to the end of the current step, which is then
checkpointed (a second Ctrl-C aborts at once). A non-finite loss or gradient
norm stops the run with ``TrainingDiverged`` before the bad update; the last
checkpoint on disk is untouched.
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
from tqdm import tqdm

from ..backend import asarray, default_rng
from ..data import windows
from ..model import GPTConfig
from ..optim import clip_grad_norm
from .logs import LOSS_CSV, LOSS_PNG, plot_losses, write_loss_csv
from .run import Run, TrainSettings

# Dropout's seeds are (seed, DROPOUT_STREAM, step): never the bare seed of init and batches, which NumPy's
# SeedSequence would take (seed, 0) for, so without the 1 step 0's masks would reuse the batches' stream.
DROPOUT_STREAM = 1


class TrainingDiverged(RuntimeError):
    """The loss or the gradient norm became NaN or infinite."""


# ---------------------------------------------------------------- evaluation


def evaluation_windows(tokens: np.ndarray, seq_len: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` windows at evenly spaced starts over ``tokens``: the same every evaluation."""
    starts = np.linspace(0, len(tokens) - seq_len - 1, num=count).astype(np.int64)  # (count,)
    return windows(tokens, starts, seq_len)  # (count,T), (count,T)


def evaluate(model, tokens: np.ndarray, settings: TrainSettings) -> float:
    """Mean loss over ``eval_batches`` fixed batches of ``tokens`` (no update)."""
    x, y = evaluation_windows(tokens, settings.seq_len, settings.eval_batches * settings.batch_size)
    losses = []
    for batch in range(settings.eval_batches):
        rows = slice(batch * settings.batch_size, (batch + 1) * settings.batch_size)
        loss, _ = model.forward(asarray(x[rows]), asarray(y[rows]), training=False)
        losses.append(float(loss))
    return sum(losses) / len(losses)


# ---------------------------------------------------------------- the loop


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[Callable[[], bool]]:
    """Turn the first Ctrl-C into a flag (checked between steps); a second one interrupts at once."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    hits = []

    def handler(signum, frame):
        if hits:
            raise KeyboardInterrupt
        hits.append(signum)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield lambda: bool(hits)
    finally:
        signal.signal(signal.SIGINT, previous)


def dropout_rng(config: GPTConfig, seed: int, step: int):
    """The generator of the dropout masks of ``step``, or None when ``config.drop_prob`` is 0.

    ``default_rng((seed, DROPOUT_STREAM, step))``: a fresh generator per step
    (about 30 us on NumPy), a function of the seed and the step alone, so a
    resumed run draws exactly the masks a straight run draws.
    """
    if config.drop_prob == 0:
        return None
    return default_rng((seed, DROPOUT_STREAM, step))


def train_step(run: Run) -> tuple[float, float]:
    """One update; returns (loss, lr). Raises ``TrainingDiverged`` before applying a bad update."""
    lr = run.settings.lr_at(run.step)
    x, y = run.sampler.next_batch()  # (B,T), (B,T)
    rng = dropout_rng(run.model.config, run.settings.seed, run.step)
    loss, cache = run.model.forward(asarray(x), asarray(y), training=True, rng=rng)
    loss = float(loss)
    grads = run.model.backward(cache)
    norm = clip_grad_norm(grads, run.settings.grad_clip)
    if not (math.isfinite(loss) and math.isfinite(norm)):
        where = run.last_checkpoint or "none was written yet"
        raise TrainingDiverged(
            f"training stopped at step {run.step + 1}: the loss is {loss} and the gradient norm {norm} "
            f"(lr {lr:.3g}). The last good checkpoint ({where}) is untouched; try a lower --lr."
        )
    run.optimizer.lr = lr
    run.optimizer.step(grads)
    run.step += 1
    return loss, lr


def train(run: Run, *, progress: bool = True, say: Callable[[str], None] = print) -> str:
    """Train until ``settings.max_steps``; return ``"done"`` or ``"interrupted"`` (checkpointed either way)."""
    settings = run.settings
    tokens_per_step = settings.batch_size * settings.seq_len
    bar = tqdm(total=settings.max_steps, initial=run.step, disable=not progress, unit="step", dynamic_ncols=True)
    started, start_step = time.perf_counter(), run.step
    with deferred_interrupt() as interrupted, bar:
        while run.step < settings.max_steps:
            loss, lr = train_step(run)
            row = {"step": run.step, "train_loss": f"{loss:.6f}", "val_loss": "", "lr": f"{lr:.6g}"}
            run.log.append(row)
            if run.step % settings.eval_every == 0 or run.step == settings.max_steps:
                val_loss = evaluate(run.model, run.val_tokens, settings)
                row["val_loss"] = f"{val_loss:.6f}"
                write_loss_csv(run.run_dir / LOSS_CSV, run.log)
                with tqdm.external_write_mode():  # the message above the bar, not through it
                    say(f"step {run.step}: train loss {loss:.3f}, validation loss {val_loss:.3f}")
            if run.step % settings.save_every == 0 or run.step == settings.max_steps:
                run.save()
            tokens_per_s = (run.step - start_step) * tokens_per_step / (time.perf_counter() - started)
            bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{tokens_per_s:,.0f}", refresh=False)
            bar.update(1)
            if interrupted() and run.step < settings.max_steps:
                break
    if run.saved_step != run.step:  # a step that just saved is not saved twice
        run.save()
    plot_losses(run.run_dir / LOSS_PNG, run.log)
    if run.step < settings.max_steps:
        say(f"interrupted: checkpoint at step {run.step} written to {run.last_checkpoint}")
        return "interrupted"
    return "done"
