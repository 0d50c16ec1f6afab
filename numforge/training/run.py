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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..atomic import remove_stale_temporaries
from ..backend import backend_name
from ..checkpoint import (
    check_tokenizer_fits,
    checkpoint_config,
    checkpoint_lora,
    checkpoint_step,
    checkpoint_tokenizer,
    latest_checkpoint_dir,
    load_checkpoint,
    restore_model,
    save_checkpoint,
)
from ..checks import describe_error
from ..data import BatchSampler, Source, as_source, open_prepared, prepared_for
from ..data.chat import ChatRows, ChatSampler, chat_rows, rows_sha256
from ..data.tokenizers import tokenizer_hash
from ..locks import DirectoryLock
from ..model import GPT, GPTConfig
from ..model.lora import LoraConfig
from ..optim import AdamW
from ..tokenizer import BPETokenizer
from .logs import LOSS_CSV, read_loss_csv, write_loss_csv
from .memory_plan import check_plan_fits
from .spec import RESUMABLE, TrainSettings
from .state import check_state

BETAS = (0.9, 0.95)  # AdamW moment decay rates (0.95: the usual choice for transformers)


@dataclass
class Run:
    """Everything a training session needs; ``step`` counts completed updates."""

    run_dir: Path
    model: GPT
    optimizer: AdamW
    tokenizer: BPETokenizer
    sampler: BatchSampler | ChatSampler
    val_tokens: np.ndarray | ChatRows  # chat rows for a --chat run
    settings: TrainSettings
    data_info: dict
    step: int = 0
    log: list = dataclasses.field(default_factory=list)  # rows of CSV_FIELDS
    last_checkpoint: Path | None = None
    saved_step: int | None = None
    world_size: int = 1  # MPI ranks that ran the steps so far (recorded in checkpoints)
    threads: int = 1  # threads per rank that ran them (threads.py; recorded too)
    stopped_by: int | None = None  # the signal that stopped the last ``train`` (SIGINT, SIGTERM), if one did
    lora_base: str | None = None  # a LoRA run's pretrained model (its path, resolved): the frozen weights

    def _lora_state(self) -> dict:
        """``{"lora": {rank, alpha, dropout, targets, base}}`` for a LoRA run (its checkpoints hold the adapters
        alone), else nothing."""
        if self.model.lora is None:
            return {}
        return {"lora": {**self.model.lora.to_dict(), "base": self.lora_base}}

    def save(self) -> Path:
        """Checkpoint the run at its current step (atomically), and write the loss log."""
        self.last_checkpoint = save_checkpoint(
            self.run_dir,
            step=self.step,
            params=self.model.trainable,
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
                **self._lora_state(),
            },
        )
        self.saved_step = self.step
        write_loss_csv(self.run_dir / LOSS_CSV, self.log)
        return self.last_checkpoint


# ---------------------------------------------------------------- before starting: memory and the state file


def check_run_fits(config: GPTConfig, settings: TrainSettings, lora: LoraConfig | None = None) -> None:
    """``ValueError`` with the memory plan's table and the machine's limit when a training step cannot fit in
    memory (``memory_plan.py``), or when ``--recompute`` could not draw a block's dropout masks again: it copies
    the generators (``blocks.rng_copy``), and CuPy's hold a lock and their state on the device (read in CuPy's
    source; not run on a GPU here)."""
    if settings.recompute and config.drop_prob > 0 and backend_name() == "cupy":
        raise ValueError(
            "--recompute with --dropout runs on NumPy only: CuPy's random generators cannot be copied to draw a "
            "block's masks again; leave out one of them"
        )
    check_plan_fits(
        config,
        settings,
        f"training this model ({config.num_layers} layers, width {config.d_model}, vocabulary "
        f"{config.vocab_size}) on batches of {settings.batch_size} x {settings.seq_len} tokens",
        lora,
    )


# ---------------------------------------------------------------- starting and resuming


def _open_chat(tokenizer, settings: TrainSettings, chat: tuple):
    """(train rows, validation rows, data info) of ``chat``: (a chat JSONL file, the directory of its template,
    whether to pack its examples)."""
    path, directory, pack = chat
    train_rows, val_rows = chat_rows(path, directory, tokenizer, settings.seq_len, pack=pack)
    info = {
        "source": str(path),
        "num_tokens": train_rows.inputs.size + val_rows.inputs.size,
        "tokens_sha256": rows_sha256(train_rows, val_rows),
        "chat_template_dir": str(directory),
        "chat_packed": pack,
    }
    return train_rows, val_rows, info


def _open_tokens(tokenizer, settings: TrainSettings, *, data=None, tokens=None, cache_dir=None, chat=None):
    """(train tokens, validation tokens, data info): memory-mapped views of prepared tokens.

    ``chat`` (a chat JSONL file, its template's directory, whether to pack): the rows of ``data/chat.py`` instead.
    ``tokens`` is a prepared directory (``numforge prepare``); otherwise ``data``
    (a path, a list of documents, None for the embedded corpus) is prepared into the
    cache first, once. The info is what a checkpoint records to know the tokens again.
    """
    if chat is not None:
        return _open_chat(tokenizer, settings, chat)
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
    lora_base: str | None = None,
    chat: tuple | None = None,
) -> Run:
    """A fresh run in ``run_dir`` (which must not hold a checkpoint yet), on ``tokens`` or the text of ``data``.

    ``model_options`` are GPTConfig fields besides ``vocab_size`` and
    ``max_seq_len``, which come from the tokenizer and ``settings.seq_len``.
    ``model``, when given, is the model to start from (``--init-from``,
    ``init_from.start_from``) instead of a fresh one of ``model_options``; with LoRA adapters, ``lora_base``
    is the path it was read from (a resume reads the frozen weights there again). ``chat``: (a chat JSONL file,
    its template's directory, whether to pack its examples) to train on instead (``data/chat.py``).
    """
    run_dir = check_new_run_dir(run_dir)
    if model is None:
        config = GPTConfig(vocab_size=tokenizer.vocab_size, max_seq_len=settings.seq_len, **model_options)
    else:
        config = model.config
    check_run_fits(config, settings, None if model is None else model.lora)
    opened = _open_tokens(tokenizer, settings, data=data, tokens=tokens, cache_dir=cache_dir, chat=chat)
    train_tokens, val_tokens, info = opened
    if model is None:
        model = GPT(config, seed=settings.seed)
    optimizer = AdamW(model.trainable, lr=settings.lr, betas=BETAS, weight_decay=settings.weight_decay)
    sampler = _new_sampler(train_tokens, settings)
    return Run(run_dir, model, optimizer, tokenizer, sampler, val_tokens, settings, info, lora_base=lora_base)


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
    (``RESUMABLE``: ``max_steps``, ``eval_every``, ``save_every``, ``grad_accum``). The tokens are those the
    checkpoint records (a prepared directory, or the corpus prepared into the
    cache), or ``tokens`` / ``data`` when given (moved files, say): either way
    they must be the very token files the run trained on, else a ``ValueError``.
    Every file of the checkpoint is validated (``state.json`` field by field, the
    steps of its files against each other, the tokenizer against the model) and
    ``loss.csv`` too, before training resumes. Restored in turn: the settings,
    the model and its tokenizer, AdamW, the tokens and the sampler's position in them.
    """
    checkpoint = load_checkpoint(path)
    state = checkpoint.state
    settings = _restore_settings(checkpoint, overrides or {})
    model, tokenizer = _restore_model(checkpoint, settings, trust_pattern)
    optimizer = _restore_optimizer(checkpoint, model, settings)
    opened = _reopen_tokens(checkpoint, tokenizer, settings, data=data, tokens=tokens, cache_dir=cache_dir)
    train_tokens, val_tokens, info = opened
    sampler = _restore_sampler(checkpoint, train_tokens, settings)
    run_dir, step = checkpoint.path.parent, state["step"]
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
        lora_base=state["lora"]["base"] if "lora" in state else None,
    )


def _restore_settings(checkpoint, overrides: dict) -> TrainSettings:
    """The settings of ``state.json`` (checked whole, its step against the directory's and optimizer.json's),
    with ``overrides`` of ``RESUMABLE`` settings."""
    if set(overrides) - set(RESUMABLE):
        raise ValueError(
            f"a resumed run keeps its settings; only {sorted(RESUMABLE)} can change, "
            f"got {sorted(set(overrides) - set(RESUMABLE))}"
        )
    state, state_file = checkpoint.state, checkpoint.path / "state.json"
    if isinstance(state, dict) and "converted_from" in state:
        raise ValueError(
            f"{checkpoint.path} holds a converted model, not a training run: start a run from it with --init-from"
        )
    check_state(state, state_file, checkpoint_step(checkpoint.path))
    if checkpoint.optimizer_state["step"] != state["step"]:
        raise ValueError(
            f"{checkpoint.path / 'optimizer.json'}: 'step' is {checkpoint.optimizer_state['step']}, but the "
            f"checkpoint is at step {state['step']} (files from different runs or steps?)"
        )
    return TrainSettings(**{**state["settings"], **overrides})


def _restore_model(checkpoint, settings: TrainSettings, trust_pattern: bool) -> tuple[GPT, BPETokenizer]:
    """The model and tokenizer of the checkpoint, checked against the settings and the machine's memory first."""
    tokenizer = checkpoint_tokenizer(checkpoint, trust_pattern)
    config = checkpoint_config(checkpoint)
    if config.max_seq_len < settings.seq_len:
        raise ValueError(
            f"{checkpoint.path / 'state.json'}: 'settings.seq_len' is {settings.seq_len}, longer than config.json's "
            f"max_seq_len {config.max_seq_len}"
        )
    try:
        check_run_fits(config, settings, checkpoint_lora(checkpoint))
    except ValueError as err:
        raise ValueError(f"checkpoint {checkpoint.path} (config.json, state.json 'settings'): {err}") from err
    model = restore_model(checkpoint)
    check_tokenizer_fits(tokenizer, model.config, checkpoint.path)
    return model, tokenizer


def _restore_optimizer(checkpoint, model: GPT, settings: TrainSettings) -> AdamW:
    """AdamW over the model's parameters, its moments and step those of ``optimizer.json`` and ``optimizer.npz``."""
    optimizer = AdamW(model.trainable, lr=settings.lr, betas=BETAS, weight_decay=settings.weight_decay)
    try:
        optimizer.load_state_dict(checkpoint.optimizer_state)
    except (ValueError, TypeError) as err:
        raise ValueError(f"{checkpoint.path / 'optimizer.json'}: {err}") from err
    return optimizer


def _reopen_tokens(checkpoint, tokenizer, settings: TrainSettings, *, data, tokens, cache_dir):
    """``_open_tokens`` of the tokens the checkpoint records (or of ``data`` / ``tokens`` when given), which must
    be the very tokens the run trained on: their count and SHA-256 are compared with the record."""
    recorded, state_file = checkpoint.state["data"], checkpoint.path / "state.json"
    chat = None
    if recorded.get("chat_template_dir"):  # a --chat run: its file, rendered by its template's directory
        if data is not None or tokens is not None:
            raise ValueError(f"{state_file}: a --chat run resumes on the chat file it records, {recorded['source']}")
        # packed or not as it trained (a run from before packing: one example a row)
        chat = (recorded["source"], recorded["chat_template_dir"], recorded.get("chat_packed", False))
    elif tokens is None and data is None and recorded.get("tokens_dir"):
        tokens = recorded["tokens_dir"]
    elif tokens is None and data is None:
        data = as_source(recorded["source"], **recorded.get("source_options", {}))
    try:
        train_tokens, val_tokens, info = _open_tokens(
            tokenizer, settings, data=data, tokens=tokens, cache_dir=cache_dir, chat=chat
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
    return train_tokens, val_tokens, {**info, "source": recorded["source"]}


def _new_sampler(train_tokens, settings: TrainSettings) -> BatchSampler | ChatSampler:
    """The seeded sampler of a run's batches: random windows of tokens, or random rows of chat rows."""
    if isinstance(train_tokens, ChatRows):
        return ChatSampler(train_tokens, settings.batch_size, settings.seed)
    return BatchSampler(train_tokens, settings.batch_size, settings.seq_len, settings.seed)


def _restore_sampler(checkpoint, train_tokens, settings: TrainSettings) -> BatchSampler | ChatSampler:
    """The batch sampler where the run left it: its generator's state and the count of batches drawn."""
    sampler = _new_sampler(train_tokens, settings)
    try:
        sampler.load_state_dict(checkpoint.state["sampler"])
    except (ValueError, TypeError, KeyError, OverflowError) as err:
        raise ValueError(
            f"{checkpoint.path / 'state.json'}: 'sampler.bit_generator' is not a generator state: {err}"
        ) from err
    return sampler
