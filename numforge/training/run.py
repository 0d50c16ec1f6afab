"""A training run: its settings, its state, and how it starts or resumes exactly.

A run is a directory (``loss.csv``, ``ckpt-NNNNNNNN/``, ``LATEST``) and, in
memory, a ``Run``: the model, AdamW, the tokenizer, the seeded batch sampler,
the validation tokens and the settings. ``new_run`` builds one from scratch;
``resume_run`` rebuilds one from its last checkpoint, so that ``k`` steps,
stop, resume to ``N`` replays exactly the arithmetic of ``N`` steps straight:
a checkpoint holds the parameters, the AdamW moments and step, the sampler's
generator state and the settings (the schedule included). The cosine schedule
spans ``schedule_steps``, fixed when the run starts, not ``max_steps``:
stopping early and resuming later must not change the learning rate of any
step.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..checkpoint import latest_checkpoint_dir, load_checkpoint, restore_model, save_checkpoint
from ..checks import check_positive_int
from ..data import BatchSampler, load_documents, load_tokens, split_tokens
from ..model import GPT, GPTConfig
from ..optim import AdamW, warmup_cosine_lr
from ..tokenizer import BPETokenizer
from .logs import LOSS_CSV, read_loss_csv, write_loss_csv

RESUMABLE = ("max_steps", "eval_every", "save_every")  # settings a resume may change: none alters the arithmetic
BETAS = (0.9, 0.95)  # AdamW moment decay rates (0.95: the usual choice for transformers)


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
        return warmup_cosine_lr(
            step, max_lr=self.lr, min_lr=self.min_lr, warmup_steps=self.warmup_steps, total_steps=self.schedule_steps
        )


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


def new_run(
    run_dir, settings: TrainSettings, model_options: dict, tokenizer, *, data=None, documents=None, cache_dir=None
) -> Run:
    """A fresh run in ``run_dir`` (which must not hold a checkpoint yet), on the text of ``data``.

    ``model_options`` are GPTConfig fields besides ``vocab_size`` and
    ``max_seq_len``, which come from the tokenizer and ``settings.seq_len``.
    ``documents`` are ``load_documents(data)`` when the caller has read them
    already (to train the tokenizer); otherwise they are read here.
    """
    run_dir = Path(run_dir)
    if latest_checkpoint_dir(run_dir) is not None:
        raise ValueError(
            f"{run_dir} already holds a checkpoint: continue it with --resume {run_dir}, or choose another --out"
        )
    if documents is None:
        documents = load_documents(data)
    train_tokens, val_tokens, info = _data_for(tokenizer, documents, data, settings, cache_dir)
    config = GPTConfig(vocab_size=tokenizer.vocab_size, max_seq_len=settings.seq_len, **model_options)
    model = GPT(config, seed=settings.seed)
    optimizer = AdamW(model.params, lr=settings.lr, betas=BETAS, weight_decay=settings.weight_decay)
    sampler = BatchSampler(train_tokens, settings.batch_size, settings.seq_len, settings.seed)
    return Run(run_dir, model, optimizer, tokenizer, sampler, val_tokens, settings, info)


def resume_run(
    path, overrides: dict | None = None, *, data=None, cache_dir=None, say: Callable[[str], None] = print
) -> Run:
    """The run checkpointed in ``path``, ready to continue exactly where it stopped.

    ``overrides`` may change settings that do not alter the arithmetic
    (``max_steps``, ``eval_every``, ``save_every``). ``data`` replaces the
    recorded corpus; if the corpus's tokens changed, the resume is not exact
    and this is said.
    """
    overrides = overrides or {}
    if set(overrides) - set(RESUMABLE):
        raise ValueError(
            f"a resumed run keeps its settings; only {sorted(RESUMABLE)} can change, "
            f"got {sorted(set(overrides) - set(RESUMABLE))}"
        )
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
            raise ValueError(
                f"the corpus {source or 'python-docs'} changed since {checkpoint.path} was written "
                f"(its tokens differ); pass --data to continue on different text"
            )
        say(f"note: {data} is not the text this run started on; the run continues on it (not an exact resume)")
    sampler = BatchSampler(train_tokens, settings.batch_size, settings.seq_len, settings.seed)
    sampler.load_state_dict(state["sampler"])
    run_dir = checkpoint.path.parent
    step = int(state["step"])
    return Run(
        run_dir,
        model,
        optimizer,
        tokenizer,
        sampler,
        val_tokens,
        settings,
        info,
        step=step,
        log=read_loss_csv(run_dir / LOSS_CSV, step),
        last_checkpoint=checkpoint.path,
        saved_step=step,
    )
