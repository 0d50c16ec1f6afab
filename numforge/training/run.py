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
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..atomic import remove_stale_temporaries
from ..checkpoint import (
    check_tokenizer_fits,
    checkpoint_config,
    checkpoint_step,
    checkpoint_tokenizer,
    latest_checkpoint_dir,
    load_checkpoint,
    restore_model,
    save_checkpoint,
)
from ..checks import check_positive_int, describe_error
from ..data import BatchSampler, Source, as_source, open_prepared, prepared_for
from ..data.sources import ERRORS
from ..data.tokenizers import tokenizer_hash
from ..data.tokens import TOKENS_FILE
from ..locks import DirectoryLock
from ..model import GPT, POSITIONS, GPTConfig, parameter_shapes
from ..optim import AdamW, warmup_cosine_lr
from ..resources import check_fits
from ..tokenizer import BPETokenizer
from .logs import LOSS_CSV, read_loss_csv, write_loss_csv

# settings a resume may change: none alters the math (grad_accum only regroups the sum of the same batch's gradients)
RESUMABLE = ("max_steps", "eval_every", "save_every", "grad_accum")
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
    grad_accum: int = 1  # micro-batches per step: the batch is B = ranks x grad_accum x micro-batch

    def __post_init__(self) -> None:
        for name in ("max_steps", "warmup_steps", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {getattr(self, name)!r}")
        positive = ("batch_size", "seq_len", "schedule_steps", "eval_every", "eval_batches", "save_every", "grad_accum")
        for name in positive:
            check_positive_int(getattr(self, name), name)
        if self.batch_size % self.grad_accum:
            raise ValueError(f"batch_size ({self.batch_size}) must divide by grad_accum ({self.grad_accum})")
        if self.warmup_steps > self.schedule_steps:
            raise ValueError(f"warmup_steps ({self.warmup_steps}) must be <= schedule_steps ({self.schedule_steps})")
        for name in ("lr", "min_lr", "weight_decay", "grad_clip"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        if not 0 <= self.min_lr <= self.lr:
            raise ValueError(f"need 0 <= min_lr <= lr, got min_lr={self.min_lr}, lr={self.lr}")
        if not self.grad_clip > 0:
            raise ValueError(f"grad_clip must be > 0, got {self.grad_clip}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")

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
    world_size: int = 1  # MPI ranks that ran the steps so far (recorded in checkpoints)
    threads: int = 1  # threads per rank that ran them (threads.py; recorded too)
    stopped_by: int | None = None  # the signal that stopped the last ``train`` (SIGINT, SIGTERM), if one did

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
                "world_size": self.world_size,
                "threads": self.threads,
            },
        )
        self.saved_step = self.step
        write_loss_csv(self.run_dir / LOSS_CSV, self.log)
        return self.last_checkpoint


# ---------------------------------------------------------------- before starting: memory and the state file


def training_bytes(config: GPTConfig, settings: TrainSettings) -> int:
    """A rough estimate of the memory one training step needs, in bytes (float32).

    Parameters, gradients and AdamW's two moments: ``4 P``; activations kept
    for the backward pass, per layer about ``B T (7 C + (H + 2 H_kv) D + 3 F)``
    values (``10 C + 3 F`` for GPT-2's shapes), ``(H + H_kv) D`` more per
    transform of q and k (QK-norm, the rotation), plus the ``(B, H, T, T)``
    attention probabilities; the loss works in row chunks; validation draws
    all its ``eval_batches x B`` windows at once (int64). Under the truth,
    never over by much: enough to refuse a run that cannot fit before it
    allocates anything.
    """
    B, T, C, F, L = settings.batch_size, settings.seq_len, config.d_model, config.d_ff, config.num_layers
    H, H_kv, D = config.num_heads, config.num_kv_heads, config.head_dim
    params = _count_params(config)
    qk_transforms = config.qk_norm + (POSITIONS[config.position].rotation is not None)
    per_token = 7 * C + (H + 2 * H_kv) * D + 3 * F + qk_transforms * (H + H_kv) * D
    activations = L * (B * T * per_token + B * H * T * T) + 4 * B * T * C
    evaluation = 8 * settings.eval_batches * B * (T + 1)
    return 4 * (4 * params + activations) + evaluation


def _count_params(config: GPTConfig) -> int:
    """The number of parameters, counted without listing ``num_layers`` layers (a file may claim 10**20)."""
    one, two = (
        sum(math.prod(shape) for shape in parameter_shapes(dataclasses.replace(config, num_layers=n)).values())
        for n in (1, 2)
    )
    return one + (config.num_layers - 1) * (two - one)


def check_run_fits(config: GPTConfig, settings: TrainSettings) -> None:
    """``ValueError`` with the estimate and the machine's limit when a training step cannot fit in memory."""
    check_fits(
        training_bytes(config, settings),
        f"training this model ({config.num_layers} layers, width {config.d_model}, vocabulary "
        f"{config.vocab_size}) on batches of {settings.batch_size} x {settings.seq_len} tokens",
    )


_SHA256 = re.compile(r"[0-9a-f]{64}")
DATA_FIELDS = {"source", "num_tokens", "tokens_sha256"}  # what a checkpoint records of its tokens
DATA_FIELDS_SINCE_PREPARE = {"tokens_dir", "files", "source_options"}  # and where they are read (absent before)


def check_state(state: dict, path: Path, step_in_name: int | None) -> TrainSettings:
    """The settings of a checkpoint's ``state.json``, every field of it checked; errors name the file and field."""

    def bad(field: str, expected: str):
        return ValueError(f"{path}: {field!r} must be {expected}, got {_get(state, field)!r}")

    expected, optional = {"step", "sampler", "settings", "data"}, {"world_size", "threads"}  # older ones lack these
    if not expected <= set(state) <= expected | optional:
        raise ValueError(
            f"{path}: expected the fields {sorted(expected)} and optionally {sorted(optional)}, got {sorted(state)}"
        )
    for field in ("world_size", "threads"):
        count = state.get(field, 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise bad(field, "an integer >= 1")
    step = state["step"]
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise bad("step", "an integer >= 0")
    if step_in_name is not None and step != step_in_name:
        raise ValueError(f"{path}: 'step' is {step} but its directory is named for step {step_in_name}")
    sampler = state["sampler"]
    if not isinstance(sampler, dict) or set(sampler) != {"bit_generator", "batches_drawn"}:
        raise bad("sampler", "an object with 'bit_generator' and 'batches_drawn'")
    drawn = sampler["batches_drawn"]
    if isinstance(drawn, bool) or not isinstance(drawn, int) or drawn < 0:
        raise bad("sampler.batches_drawn", "an integer >= 0")
    if not isinstance(sampler["bit_generator"], dict):
        raise bad("sampler.bit_generator", "an object (the generator's state)")
    data = state["data"]
    if not isinstance(data, dict) or not DATA_FIELDS <= set(data) <= DATA_FIELDS | DATA_FIELDS_SINCE_PREPARE:
        raise bad("data", "an object with 'source', 'num_tokens' and 'tokens_sha256' (and where they are read)")
    if not (data["source"] is None or isinstance(data["source"], str) and data["source"]):
        raise bad("data.source", "a path or null (the default corpus)")
    if isinstance(data["num_tokens"], bool) or not isinstance(data["num_tokens"], int) or data["num_tokens"] < 1:
        raise bad("data.num_tokens", "an integer >= 1")
    if not isinstance(data["tokens_sha256"], str) or not _SHA256.fullmatch(data["tokens_sha256"]):
        raise bad("data.tokens_sha256", "64 lowercase hex digits")
    if not (data.get("tokens_dir") is None or isinstance(data["tokens_dir"], str) and data["tokens_dir"]):
        raise bad("data.tokens_dir", "a directory or null (the cache)")
    if "files" in data and data["files"] != [TOKENS_FILE]:
        raise bad("data.files", f"[{TOKENS_FILE!r}]")
    options = data.get("source_options", {})
    if not isinstance(options, dict) or set(options) - {"glob", "text_field", "errors"}:
        raise bad("data.source_options", "an object with 'glob', 'text_field' and 'errors'")
    if not all(isinstance(value, str) and value for value in options.values()) or (
        options.get("errors", "strict") not in ERRORS
    ):
        raise bad("data.source_options", f"non-empty strings, 'errors' one of {ERRORS}")
    if not isinstance(state["settings"], dict):
        raise bad("settings", "an object")
    known = {f.name for f in dataclasses.fields(TrainSettings)}
    if not known - {"grad_accum"} <= set(state["settings"]) <= known:  # older checkpoints lack grad_accum (1)
        raise bad("settings", f"an object with the fields {sorted(known)}")
    try:
        return TrainSettings(**state["settings"])
    except (ValueError, TypeError) as err:
        raise ValueError(f"{path}: 'settings': {err}") from err


def _get(data: dict, dotted: str):
    for key in dotted.split("."):
        data = data.get(key) if isinstance(data, dict) else None
    return data


# ---------------------------------------------------------------- starting and resuming


def _open_tokens(tokenizer, settings: TrainSettings, *, data=None, tokens=None, cache_dir=None):
    """(train tokens, validation tokens, data info): memory-mapped views of prepared tokens.

    ``tokens`` is a prepared directory (``numforge prepare``); otherwise ``data``
    (a path, a list of documents, None for the embedded corpus) is prepared into the
    cache first, once. The info is what a checkpoint records to know the tokens again.
    """
    if tokens is not None:
        prepared = open_prepared(tokens, tokenizer.vocab_size)
        if prepared.index["tokenizer_sha256"] != tokenizer_hash(tokenizer):
            raise ValueError(f"the tokens in {tokens} were made by another tokenizer than this run's")
        info = {"source": prepared.index["source"]}
    else:
        source = as_source(data)
        prepared = open_prepared(prepared_for(source, tokenizer, cache_dir))  # its ids checked there
        info = {
            "source": None if source == Source() else source.describe(),
            "source_options": {"glob": source.glob, "text_field": source.text_field, "errors": source.errors},
        }
    train_tokens, val_tokens = prepared.split(settings.seq_len)
    record = prepared.record()
    if tokens is None:
        record["tokens_dir"] = None  # a cache directory: the corpus and how it is read name these tokens
    return train_tokens, val_tokens, {**record, **info}


def run_directory(path) -> Path:
    """The run directory of ``path``: ``path`` itself, or its parent when it is one checkpoint of a run."""
    path = Path(path)
    return path.parent if (path / "params.npz").is_file() else path


def hold_run(run_dir, say: Callable[[str], None] = print) -> DirectoryLock:
    """Take ``run_dir`` for this process, then remove what killed runs left in it; release it when done.

    One trainer per run: the lock (``locks.DirectoryLock``, created with the
    directory if missing) dies with its process, so a run killed outright is
    never left locked, and a second trainer is refused at once with ``InUse``:
    "run DIR is in use by process N (started ...)". Readers (``sample``,
    ``trace``, the study tools) take no lock: they read the complete checkpoint
    ``LATEST`` names. The temporaries removed are those no live process holds
    (``atomic.remove_stale_temporaries``): half-written checkpoints and logs.
    """
    lock = DirectoryLock(run_dir, "run")
    removed = remove_stale_temporaries(run_dir)
    if removed:
        say(f"note: removed what a killed run left half-written in {run_dir}: {', '.join(p.name for p in removed)}")
    return lock


def check_new_run_dir(run_dir) -> Path:
    """``run_dir`` if it holds no checkpoint yet; a fresh run never writes over another."""
    run_dir = Path(run_dir)
    if latest_checkpoint_dir(run_dir) is not None:
        raise ValueError(
            f"{run_dir} already holds a checkpoint: continue it with --resume {run_dir}, or choose another --out"
        )
    return run_dir


def new_run(
    run_dir,
    settings: TrainSettings,
    model_options: dict,
    tokenizer,
    *,
    data=None,
    tokens=None,
    cache_dir=None,
    model: GPT | None = None,
) -> Run:
    """A fresh run in ``run_dir`` (which must not hold a checkpoint yet), on ``tokens`` or the text of ``data``.

    ``model_options`` are GPTConfig fields besides ``vocab_size`` and
    ``max_seq_len``, which come from the tokenizer and ``settings.seq_len``.
    ``model``, when given, is the model to start from (``--init-from``,
    ``init_from.start_from``) instead of a fresh one of ``model_options``.
    """
    run_dir = check_new_run_dir(run_dir)
    if model is None:
        config = GPTConfig(vocab_size=tokenizer.vocab_size, max_seq_len=settings.seq_len, **model_options)
    else:
        config = model.config
    check_run_fits(config, settings)
    train_tokens, val_tokens, info = _open_tokens(tokenizer, settings, data=data, tokens=tokens, cache_dir=cache_dir)
    if model is None:
        model = GPT(config, seed=settings.seed)
    optimizer = AdamW(model.params, lr=settings.lr, betas=BETAS, weight_decay=settings.weight_decay)
    sampler = BatchSampler(train_tokens, settings.batch_size, settings.seq_len, settings.seed)
    return Run(run_dir, model, optimizer, tokenizer, sampler, val_tokens, settings, info)


def resume_run(
    path,
    overrides: dict | None = None,
    *,
    data=None,
    tokens=None,
    cache_dir=None,
    trust_pattern: bool = False,
) -> Run:
    """The run checkpointed in ``path``, ready to continue exactly where it stopped.

    ``overrides`` may change settings that do not alter the math
    (``max_steps``, ``eval_every``, ``save_every``, ``grad_accum``). The tokens are those the
    checkpoint records (a prepared directory, or the corpus prepared into the
    cache), or ``tokens`` / ``data`` when given (moved files, say): either way
    they must be the very token files the run trained on, else a ``ValueError``.
    Every file of the checkpoint is validated (``state.json`` field by field, the
    steps of its files against each other, the tokenizer against the model) and
    ``loss.csv`` too, before training resumes.
    """
    overrides = overrides or {}
    if set(overrides) - set(RESUMABLE):
        raise ValueError(
            f"a resumed run keeps its settings; only {sorted(RESUMABLE)} can change, "
            f"got {sorted(set(overrides) - set(RESUMABLE))}"
        )
    checkpoint = load_checkpoint(path)
    state, state_file = checkpoint.state, checkpoint.path / "state.json"
    if isinstance(state, dict) and "converted_from" in state:
        raise ValueError(
            f"{checkpoint.path} holds a converted model, not a training run: start a run from it with --init-from"
        )
    check_state(state, state_file, checkpoint_step(checkpoint.path))
    step = state["step"]
    if checkpoint.optimizer_state["step"] != step:
        raise ValueError(
            f"{checkpoint.path / 'optimizer.json'}: 'step' is {checkpoint.optimizer_state['step']}, but the "
            f"checkpoint is at step {step} (files from different runs or steps?)"
        )
    settings = TrainSettings(**{**state["settings"], **overrides})
    tokenizer = checkpoint_tokenizer(checkpoint, trust_pattern)
    config = checkpoint_config(checkpoint)
    if config.max_seq_len < settings.seq_len:
        raise ValueError(
            f"{state_file}: 'settings.seq_len' is {settings.seq_len}, longer than config.json's max_seq_len "
            f"{config.max_seq_len}"
        )
    try:
        check_run_fits(config, settings)
    except ValueError as err:
        raise ValueError(f"checkpoint {checkpoint.path} (config.json, state.json 'settings'): {err}") from err
    model = restore_model(checkpoint)
    check_tokenizer_fits(tokenizer, model.config, checkpoint.path)
    optimizer = AdamW(model.params, lr=settings.lr, betas=BETAS, weight_decay=settings.weight_decay)
    try:
        optimizer.load_state_dict(checkpoint.optimizer_state)
    except (ValueError, TypeError) as err:
        raise ValueError(f"{checkpoint.path / 'optimizer.json'}: {err}") from err
    recorded = state["data"]
    if tokens is None and data is None and recorded.get("tokens_dir"):
        tokens = recorded["tokens_dir"]
    elif tokens is None and data is None:
        data = as_source(recorded["source"], **recorded.get("source_options", {}))
    try:
        train_tokens, val_tokens, info = _open_tokens(
            tokenizer, settings, data=data, tokens=tokens, cache_dir=cache_dir
        )
    except (OSError, ValueError) as err:
        raise ValueError(
            f"{state_file}: the tokens this run trained on ({tokens or recorded['source'] or 'python-docs'}) "
            f"cannot be read: {describe_error(err)}"
        ) from err
    if (info["num_tokens"], info["tokens_sha256"]) != (recorded["num_tokens"], recorded["tokens_sha256"]):
        name = tokens or info["source"] or "python-docs"
        raise ValueError(
            f"{state_file}: the tokens of {name} changed since {checkpoint.path} was written "
            f"({info['num_tokens']:,} tokens now, {recorded['num_tokens']:,} then, and their hashes differ): "
            "a resumed run reads the token files it trained on; start a new run to train on other text"
        )
    info = {**info, "source": recorded["source"]}
    sampler = BatchSampler(train_tokens, settings.batch_size, settings.seq_len, settings.seed)
    try:
        sampler.load_state_dict(state["sampler"])
    except (ValueError, TypeError, KeyError, OverflowError) as err:
        raise ValueError(f"{state_file}: 'sampler.bit_generator' is not a generator state: {err}") from err
    run_dir = checkpoint.path.parent
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
        world_size=int(state.get("world_size", 1)),
        threads=int(state.get("threads", 1)),
    )
