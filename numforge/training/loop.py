"""The training loop: batches -> loss -> hand-written backward -> clipped AdamW step, resumable exactly.

One step, for step s = 0, 1, ...::

    lr      = warmup_cosine_lr(s, max_lr, min_lr, warmup_steps, schedule_steps)
    x, y    = next (B, T) windows from the seeded sampler
    loss    = model.forward(x, y, rng)     mean cross-entropy of next-token prediction
    grads   = model.backward(cache)
    clip grads to global norm <= grad_clip, then AdamW(lr)

``rng`` draws the dropout masks (only when drop_prob > 0): each row's from a
generator of the seed, the step and the row's index in the batch
(``dropout.py``). With ``--grad-accum K`` or several MPI ranks, the loss and
gradients are those of the same global batch, summed from its parts
(``parallel.py``); so with several threads, which split each micro-batch's
rows (``threads.py``, every core by default); the model never knows.

After ``s + 1`` updates the run is "at step s + 1"; checkpoints, the loss log
and validation are labelled with that count.

Exact resume: a checkpoint holds the parameters, the AdamW moments and step,
the sampler's generator state and the settings (the schedule included), so
``k`` steps, stop, resume to ``N`` replays exactly the arithmetic of ``N``
steps straight. The dropout masks need no saved state (CuPy's generators keep
theirs on the GPU, with no public way to read it). The cosine
schedule spans ``schedule_steps``, fixed when the run starts, not
``max_steps``: stopping early and resuming later must not change the
learning rate of any step.

Nothing lost: Ctrl-C (SIGINT) or SIGTERM is recorded, not raised
(``interrupts.deferred``); the current step finishes (its evaluation and its
checkpoint included), a checkpoint of it is written and ``train`` returns
``"interrupted"`` (a second signal aborts at once). SIGUSR1 asks for a
checkpoint at the end of the current step and training goes on. Under MPI
the ranks agree before every step on what any of them received (one
all-reduce of three numbers), so all stop, or checkpoint, after the same step.
A non-finite loss or gradient norm (on any rank: both are all-reduced) stops
the run with ``TrainingDiverged`` before the bad update; the last checkpoint
on disk is untouched. Rank 0 alone writes files and prints.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import nullcontext

import numpy as np
from tqdm import tqdm

from .. import interrupts
from ..backend import asarray, to_numpy
from ..blas import one_blas_thread
from ..data import windows
from ..data.chat import ChatRows
from ..optim import clip_grad_norm
from .dropout import dropout_rng
from .logs import LOAD_FIELD, LOSS_CSV, LOSS_PNG, plot_losses, write_loss_csv
from .parallel import DataParallel, SingleProcess
from .run import Run, TrainSettings
from .threads import Threads, thread_count


class TrainingDiverged(RuntimeError):
    """The loss or the gradient norm became NaN or infinite."""


# ---------------------------------------------------------------- evaluation


def evaluation_windows(tokens: np.ndarray | ChatRows, seq_len: int, count: int) -> tuple:
    """``(x, y, segments)``: ``count`` windows at evenly spaced starts over ``tokens``, segments None (chat rows:
    its first ``count`` rows, with their segments when packed): the same every evaluation."""
    if isinstance(tokens, ChatRows):
        return tokens.evaluation_rows(count)
    starts = np.linspace(0, len(tokens) - seq_len - 1, num=count).astype(np.int64)  # (count,)
    return (*windows(tokens, starts, seq_len), None)  # (count,T), (count,T), None


def expert_load(model, tokens: np.ndarray, settings: TrainSettings) -> list[float] | None:
    """The share of the routed (token, choice) pairs each expert received (E,), averaged over the layers, on the
    first evaluation batch of ``tokens``; None for a model without experts. 1/E each when balanced."""
    if not model.config.num_experts:
        return None
    x, y, segments = evaluation_windows(tokens, settings.seq_len, settings.eval_batches * settings.batch_size)
    rows = slice(0, settings.batch_size)
    segments = None if segments is None else asarray(segments[rows])
    _, cache = model.forward(
        asarray(x[rows]), asarray(y[rows]), for_backward=False, keep_caches=True, segments=segments
    )
    loads = np.stack([to_numpy(block.mlp.load) for block in cache.blocks])  # (L, E) rows per expert
    return (loads / loads.sum(axis=1, keepdims=True)).mean(axis=0).tolist()  # (E,)


def evaluate(model, tokens: np.ndarray, settings: TrainSettings, parallel: DataParallel | None = None) -> float:
    """Mean loss over ``eval_batches`` fixed batches of ``tokens`` (no update), split over the ranks."""
    parallel = parallel or DataParallel(SingleProcess(), model, settings.grad_accum)
    x, y, segments = evaluation_windows(tokens, settings.seq_len, settings.eval_batches * settings.batch_size)
    return parallel.mean_loss(x, y, settings.batch_size, segments)


# ---------------------------------------------------------------- the loop


def agreed_requests(world) -> tuple[int | None, bool]:
    """(the stop signal any rank received, or None; whether any rank asked for a checkpoint), the same on every
    rank: a collective, which every rank calls before every step. SIGTERM's status wins over Ctrl-C's."""
    stop = interrupts.stop_requested()
    votes = [float(stop == signum) for signum in interrupts.STOP_SIGNALS]
    *stops, checkpoint = world.sum_floats((*votes, float(interrupts.take_checkpoint_request())))
    received = [signum for signum, count in zip(interrupts.STOP_SIGNALS, stops) if count > 0]
    return (received[-1] if received else None), checkpoint > 0


def train_step(run: Run, parallel: DataParallel) -> tuple[float, float]:
    """One update; returns (loss, lr). Raises ``TrainingDiverged`` before applying a bad update."""
    lr = run.settings.lr_at(run.step)
    x, y, *packed = run.sampler.next_batch()  # (B,T), (B,T): the global batch, the same on every rank
    segments = packed[0] if packed else None  # chat rows: their segments (B,T), None unpacked; windows: none
    step, config, lora, seed = run.step, run.model.config, run.model.lora, run.settings.seed
    dropout = lambda rows: dropout_rng(config, seed, step, rows, lora)  # noqa: E731
    loss, grads = parallel.loss_and_gradients(x, y, dropout, segments)
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


def train(
    run: Run, *, progress: bool = True, say: Callable[[str], None] = print, world=None, threads: int | None = None
) -> str:
    """Train until ``settings.max_steps``; return ``"done"`` or ``"interrupted"`` (checkpointed either way).

    ``world`` (``parallel.connect()``; default one process) is the set of
    ranks taking part; rank 0 alone writes files, shows the bar and speaks.
    When a stop signal ends the run, ``run.stopped_by`` is its number (the same
    on every rank); a run stopped before its first step writes nothing.
    ``threads`` per rank split each micro-batch's rows (``threads.py``;
    default ``thread_count()``: every core, one per rank under MPI); with
    several, NumPy's BLAS runs on one thread until the run ends.
    """
    world = world or SingleProcess()
    threads = thread_count(threads, world.size)
    say = say if world.is_root else _silent
    parallel = _take_part(run, world, threads, say)
    show = progress and world.is_root
    bar = tqdm(total=run.settings.max_steps, initial=run.step, disable=not show, unit="step", dynamic_ncols=True)
    start_step = run.step
    with interrupts.deferred(checkpoints=True), bar, one_blas_thread() if threads > 1 else nullcontext():
        speed = _Speed(run)
        while _may_step(run, world, say):
            loss, lr = _logged_step(run, parallel, world, say)
            bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{speed.tokens_per_s():,.0f}", refresh=False)
            bar.update(1)
        if run.stopped_by is not None and run.step == start_step:
            say(f"{interrupts.describe(run.stopped_by)} before the first step: nothing was written")
            return "interrupted"
        if world.is_root:
            if run.saved_step != run.step:  # a step that just saved is not saved twice
                run.save()
            plot_losses(run.run_dir / LOSS_PNG, run.log)
    if run.stopped_by is not None:
        say(f"{interrupts.describe(run.stopped_by)}: checkpoint at step {run.step} written to {run.last_checkpoint}")
        return "interrupted"
    return "done"


def _take_part(run: Run, world, threads: int, say) -> DataParallel:
    """The ranks' and threads' share of each batch, checked before any step; says when they differ from those
    of the steps so far, and checks that every rank starts from the same parameters."""
    parallel = DataParallel(world, run.model, run.settings.grad_accum, Threads(threads), run.settings.recompute)
    parallel.micro_batch_size(run.settings.batch_size)  # a batch that does not split: an error before any step
    if run.step and (run.world_size, run.threads) != (world.size, threads):
        say(
            f"note: steps 1-{run.step} ran on {run.world_size} rank(s) x {run.threads} thread(s), the rest run on "
            f"{world.size} x {threads} (same batches and masks; the sums round differently)"
        )
    run.world_size, run.threads = world.size, threads
    world.check_same_params(run.model.trainable, run.step)
    return parallel


def _may_step(run: Run, world, say) -> bool:
    """Whether to take another step: not when a stop signal came or ``max_steps`` is reached. Writes the
    checkpoint SIGUSR1 asked for first (every rank agrees on both before every step)."""
    run.stopped_by, checkpoint_now = agreed_requests(world)
    if run.stopped_by is not None:
        interrupts.stopping()  # said by ``train``, and by the command's exit status
        return False
    if checkpoint_now and run.step not in (run.saved_step, 0) and world.is_root:
        written = run.save()
        with tqdm.external_write_mode():
            say(f"checkpoint at step {run.step} written to {written} (asked by SIGUSR1)")
    return run.step < run.settings.max_steps


def _logged_step(run: Run, parallel: DataParallel, world, say) -> tuple[float, float]:
    """``train_step``, its row in the log, the validation loss every ``eval_every`` steps and at the last,
    a checkpoint every ``save_every`` steps and at the last; returns (loss, lr)."""
    settings = run.settings
    loss, lr = train_step(run, parallel)
    row = {"step": run.step, "train_loss": f"{loss:.6f}", "val_loss": "", "lr": f"{lr:.6g}"}
    run.log.append(row)
    last = run.step == settings.max_steps
    if run.step % settings.eval_every == 0 or last:
        val_loss = evaluate(run.model, run.val_tokens, settings, parallel)
        world.check_same_params(run.model.trainable, run.step)
        row["val_loss"] = f"{val_loss:.6f}"
        load = expert_load(run.model, run.val_tokens, settings)
        if load is not None:
            row[LOAD_FIELD] = " ".join(f"{share:.4f}" for share in load)
        if world.is_root:
            write_loss_csv(run.run_dir / LOSS_CSV, run.log)
        with tqdm.external_write_mode():  # the message above the bar, not through it
            say(f"step {run.step}: train loss {loss:.3f}, validation loss {val_loss:.3f}")
            if load is not None:
                say(f"  expert load (share of routed tokens, mean over layers): {row[LOAD_FIELD]}")
    if (run.step % settings.save_every == 0 or last) and world.is_root:
        run.save()
    return loss, lr


class _Speed:
    """Tokens per second since the session began, for the bar."""

    def __init__(self, run: Run):
        self.run, self.start_step, self.started = run, run.step, time.perf_counter()

    def tokens_per_s(self) -> float:
        tokens = (self.run.step - self.start_step) * self.run.settings.batch_size * self.run.settings.seq_len
        return tokens / (time.perf_counter() - self.started)


def _silent(text: str) -> None:
    """The ``say`` of ranks other than 0."""
