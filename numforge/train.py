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
import csv
import dataclasses
import hashlib
import io
import json
import math
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
from tqdm import tqdm

from .backend import asarray, check_positive_int, default_rng
from .atomic import atomic_path, write_text_atomic
from .checkpoint import latest_checkpoint_dir, load_checkpoint, restore_model, save_checkpoint, write_json_atomic
from .config import GPTConfig
from .data import EOT, BatchSampler, default_cache_dir, documents_hash, load_documents, load_tokens, split_tokens, windows
from .model import GPT
from .optim import AdamW, clip_grad_norm, warmup_cosine_lr
from .tokenizer import BPETokenizer

LOSS_CSV = "loss.csv"
RESUMABLE = ("max_steps", "eval_every", "save_every")  # settings a resume may change: none alters the arithmetic
LOSS_PNG = "loss.png"
CSV_FIELDS = ("step", "train_loss", "val_loss", "lr")
BETAS = (0.9, 0.95)  # AdamW moment decay rates (0.95: the usual choice for transformers)
# Dropout's seeds are (seed, DROPOUT_STREAM, step): never the bare seed of init and batches, which NumPy's
# SeedSequence would take (seed, 0) for, so without the 1 step 0's masks would reuse the batches' stream.
DROPOUT_STREAM = 1


class TrainingDiverged(RuntimeError):
    """The loss or the gradient norm became NaN or infinite."""


@dataclass
class TrainSettings:
    """How a run trains (the model's shape lives in GPTConfig). Saved in every checkpoint."""

    max_steps: int = 600
    batch_size: int = 16
    seq_len: int = 64
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 30
    schedule_steps: int = 600
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 100
    eval_batches: int = 4
    save_every: int = 200
    seed: int = 1

    def __post_init__(self) -> None:
        for name in ("max_steps", "warmup_steps"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise ValueError(f"{name} must be an int >= 0, got {getattr(self, name)!r}")
        for name in ("batch_size", "seq_len", "schedule_steps", "eval_every", "eval_batches", "save_every"):
            check_positive_int(getattr(self, name), name)
        if self.warmup_steps > self.schedule_steps:
            raise ValueError(f"warmup_steps ({self.warmup_steps}) must be <= schedule_steps ({self.schedule_steps})")
        if not 0 <= self.min_lr <= self.lr:
            raise ValueError(f"need 0 <= min_lr <= lr, got min_lr={self.min_lr}, lr={self.lr}")
        if not self.grad_clip > 0:
            raise ValueError(f"grad_clip must be > 0, got {self.grad_clip}")

    def lr_at(self, step: int) -> float:
        return warmup_cosine_lr(step, max_lr=self.lr, min_lr=self.min_lr,
                                warmup_steps=self.warmup_steps, total_steps=self.schedule_steps)


@dataclass
class Run:
    """Everything a training session needs; ``step`` counts completed updates."""

    run_dir: Path
    model: GPT
    optimizer: AdamW
    tokenizer: BPETokenizer
    sampler: BatchSampler
    val_tokens: np.ndarray
    settings: TrainSettings
    data_info: dict
    step: int = 0
    log: list = dataclasses.field(default_factory=list)  # rows of CSV_FIELDS
    last_checkpoint: Path | None = None
    saved_step: int | None = None

    def save(self) -> Path:
        """Checkpoint the run at its current step (atomically), and write the loss log."""
        self.last_checkpoint = save_checkpoint(
            self.run_dir,
            step=self.step,
            params=self.model.params,
            optimizer_state=self.optimizer.state_dict(),
            config=self.model.config.to_dict(),
            tokenizer=self.tokenizer.to_dict(),
            state={
                "step": self.step,
                "sampler": self.sampler.state_dict(),
                "settings": dataclasses.asdict(self.settings),
                "data": self.data_info,
            },
        )
        self.saved_step = self.step
        write_loss_csv(self.run_dir / LOSS_CSV, self.log)
        return self.last_checkpoint


# ---------------------------------------------------------------- starting and resuming


def load_or_train_tokenizer(documents, vocab_size: int, tokenizer_path=None, cache_dir=None,
                            say: Callable[[str], None] = print):
    """The tokenizer in ``tokenizer_path``, or a BPE of ``vocab_size`` trained on the documents.

    A trained tokenizer is cached under a hash of the documents and the
    vocabulary size, so the next run on the same text skips training.
    """
    if tokenizer_path is not None:
        return BPETokenizer.load(tokenizer_path)
    key = hashlib.sha256(f"{documents_hash(documents)}:{vocab_size}:{EOT}".encode()).hexdigest()
    cached = Path(cache_dir or default_cache_dir()) / "tokenizers" / f"{key[:32]}.json"
    if cached.is_file():
        return BPETokenizer.from_dict(json.loads(cached.read_text(encoding="utf-8")))
    say(f"training a BPE tokenizer with {vocab_size} tokens on {sum(map(len, documents)):,} characters")
    tokenizer = BPETokenizer.train(documents, vocab_size, special_tokens=(EOT,))
    write_json_atomic(cached, tokenizer.to_dict())
    return tokenizer


def _data_for(tokenizer, documents, source, settings: TrainSettings, cache_dir):
    """(train tokens, validation tokens, data info) for a run on ``documents``, read from ``source``."""
    tokens = load_tokens(documents, tokenizer, cache_dir)
    train_tokens, val_tokens = split_tokens(tokens, settings.seq_len)
    info = {
        "source": None if source is None else str(Path(source).resolve()),
        "num_tokens": int(len(tokens)),
        "tokens_sha256": hashlib.sha256(tokens.tobytes()).hexdigest(),
    }
    return train_tokens, val_tokens, info


def new_run(run_dir, settings: TrainSettings, model_options: dict, tokenizer, *, data=None,
            documents=None, cache_dir=None) -> Run:
    """A fresh run in ``run_dir`` (which must not hold a checkpoint yet), on the text of ``data``.

    ``model_options`` are GPTConfig fields besides ``vocab_size`` and
    ``max_seq_len``, which come from the tokenizer and ``settings.seq_len``.
    ``documents`` are ``load_documents(data)`` when the caller has read them
    already (to train the tokenizer); otherwise they are read here.
    """
    run_dir = Path(run_dir)
    if latest_checkpoint_dir(run_dir) is not None:
        raise ValueError(f"{run_dir} already holds a checkpoint: continue it with --resume {run_dir}, "
                         f"or choose another --out")
    if documents is None:
        documents = load_documents(data)
    train_tokens, val_tokens, info = _data_for(tokenizer, documents, data, settings, cache_dir)
    config = GPTConfig(vocab_size=tokenizer.vocab_size, max_seq_len=settings.seq_len, **model_options)
    model = GPT(config, seed=settings.seed)
    optimizer = AdamW(model.params, lr=settings.lr, betas=BETAS, weight_decay=settings.weight_decay)
    sampler = BatchSampler(train_tokens, settings.batch_size, settings.seq_len, settings.seed)
    return Run(run_dir, model, optimizer, tokenizer, sampler, val_tokens, settings, info)


def resume_run(path, overrides: dict | None = None, *, data=None, cache_dir=None,
               say: Callable[[str], None] = print) -> Run:
    """The run checkpointed in ``path``, ready to continue exactly where it stopped.

    ``overrides`` may change settings that do not alter the arithmetic
    (``max_steps``, ``eval_every``, ``save_every``). ``data`` replaces the
    recorded corpus; if the corpus's tokens changed, the resume is not exact
    and this is said.
    """
    overrides = overrides or {}
    if set(overrides) - set(RESUMABLE):
        raise ValueError(f"a resumed run keeps its settings; only {sorted(RESUMABLE)} can change, "
                         f"got {sorted(set(overrides) - set(RESUMABLE))}")
    checkpoint = load_checkpoint(path)
    state = checkpoint.state
    settings = TrainSettings(**{**state["settings"], **overrides})
    model = restore_model(checkpoint)
    tokenizer = BPETokenizer.from_dict(checkpoint.tokenizer)
    optimizer = AdamW(model.params, lr=settings.lr, betas=BETAS, weight_decay=settings.weight_decay)
    optimizer.load_state_dict(checkpoint.optimizer_state)
    source = data if data is not None else state["data"]["source"]
    train_tokens, val_tokens, info = _data_for(tokenizer, load_documents(source), source, settings, cache_dir)
    if info["tokens_sha256"] != state["data"]["tokens_sha256"]:
        if data is None:
            raise ValueError(f"the corpus {source or 'python-docs'} changed since {checkpoint.path} was written "
                             f"(its tokens differ); pass --data to continue on different text")
        say(f"note: {data} is not the text this run started on; the run continues on it (not an exact resume)")
    sampler = BatchSampler(train_tokens, settings.batch_size, settings.seq_len, settings.seed)
    sampler.load_state_dict(state["sampler"])
    run_dir = checkpoint.path.parent
    step = int(state["step"])
    return Run(run_dir, model, optimizer, tokenizer, sampler, val_tokens, settings, info, step=step,
               log=read_loss_csv(run_dir / LOSS_CSV, step), last_checkpoint=checkpoint.path, saved_step=step)


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


# ---------------------------------------------------------------- loss log


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
