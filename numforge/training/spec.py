"""What starts a run, typed once: ``TrainSettings`` (how it trains) and ``RunSpec`` (what it trains, where, on what).

Each field carries its default, its range and its help; from them come the
checks (``TrainSettings.__post_init__``), the settings a resumed run may
change (``RESUMABLE``: the fields marked ``resumable``), and the flags of
``numforge train`` (``commands/train.py`` reads each field's ``flag`` options;
a field with ``group`` None has no flag). The train command parses its flags
into a ``RunSpec``; the default model the study tools train once
(``commands/_default_model.py``) is a ``RunSpec()`` with no flag at all.

    >>> RunSpec(settings={"max_steps": 30}).new_settings().schedule_steps
    600
    >>> RunSpec(settings={"lr": 1e-3}).new_settings().min_lr
    0.0001
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from ..checks import check_int_value, check_number, float_between, int_at_least, path_flag
from ..data import DEFAULT_VOCAB_SIZE, Source, as_source
from ..data.sources import DEFAULT_GLOB, DEFAULT_TEXT_FIELD
from ..model import GPTConfig
from ..model.config import ARCHS
from ..model.lora import TARGETS, LoraConfig
from ..optim import warmup_cosine_lr
from .threads import THREADS_VARIABLE

RUNS_DIR = "runs"  # a new run's default directory: the first free runs/run-N
# the sizes of a new run when nothing gives them (GPTConfig has no default for these); every other field
# left out takes the --arch preset's value, else GPTConfig's default
RUN_DEFAULTS = {"num_layers": 3, "d_model": 96, "num_heads": 4}


def setting(default, minimum, help: str | None = None, group: str | None = None, *, resumable=False, **flag):
    """A ``TrainSettings`` field: its default, its lower bound (``low_open``: excluded), the help of its flag
    (``{default}`` in it reads the default) in ``group`` (None: no flag), and whether a resume may change it."""
    low_open = flag.pop("low_open", False)
    if group is not None and isinstance(default, bool):  # --name / --no-name; not given: None (a resume keeps it)
        flag = {"action": argparse.BooleanOptionalAction, "default": None, "help": help, **flag}
    elif group is not None:
        kind = float_between(minimum, low_open=low_open) if isinstance(default, float) else int_at_least(minimum)
        flag = {"type": kind, "help": help.format(default=default), **flag}
    meta = {"minimum": minimum, "low_open": low_open, "resumable": resumable, "group": group, "flag": flag}
    return field(default=default, metadata=meta)


@dataclass
class TrainSettings:
    """How a run trains (the model's shape lives in GPTConfig). Saved in every checkpoint."""

    max_steps: int = setting(600, 0, "train until this many updates (default {default})", "run", resumable=True)
    batch_size: int = setting(16, 1, "sequences per step B (default {default})", "optimization")
    seq_len: int = setting(64, 1, "context length T (default {default})", "model")
    lr: float = setting(
        3e-3,
        0,
        "peak learning rate (default {default:g}; warmup, then cosine decay to --min-lr)",
        "optimization",
        low_open=True,
    )
    min_lr: float = setting(
        3e-4, 0, "the learning rate the cosine decay ends at, <= --lr (default: a tenth of --lr)", "optimization"
    )
    warmup_steps: int = setting(30, 0, "linear warmup steps (default {default})", "optimization")
    schedule_steps: int = setting(
        600,
        1,
        "length of the cosine decay (default: the larger of --max-steps and "
        "{default}; independent of where a run stops, so a stopped run resumes exactly)",
        "optimization",
    )
    weight_decay: float = setting(0.1, 0)
    grad_clip: float = setting(1.0, 0, low_open=True)
    eval_every: int = setting(100, 1, "validation loss every N steps (default {default})", "run", resumable=True)
    eval_batches: int = setting(4, 1)
    save_every: int = setting(200, 1, "checkpoint every N steps (default {default})", "run", resumable=True)
    seed: int = setting(1, 0, "seed of the initial weights and the batches (default {default})", "run")
    # micro-batches per step: the batch is B = ranks x grad_accum x micro-batch (only regroups one batch's sum)
    grad_accum: int = setting(
        1,
        1,
        "add the gradients of K micro-batches per step (memory of one micro-batch); "
        "the batch stays --batch-size = ranks x K x micro-batch (default {default})",
        "optimization",
        resumable=True,
        metavar="K",
    )
    recompute: bool = setting(
        False,
        None,
        "keep only each block's input in the forward and recompute the block just before its backward: "
        "the same gradients bit for bit, the activations of one block alive instead of every block's, "
        "for about one more forward pass of time (default off)",
        "optimization",
        resumable=True,
    )

    def __post_init__(self) -> None:
        for f in fields(self):  # each field's own range
            low, value = f.metadata["minimum"], getattr(self, f.name)
            if isinstance(f.default, bool):
                if not isinstance(value, bool):
                    raise ValueError(f"{f.name} must be true or false, got {value!r}")
            elif isinstance(f.default, float):
                check_number(value, f.name, low, low_open=f.metadata["low_open"])
            else:
                check_int_value(value, f.name, minimum=low)
        if self.batch_size % self.grad_accum:
            raise ValueError(f"batch_size ({self.batch_size}) must divide by grad_accum ({self.grad_accum})")
        if self.warmup_steps > self.schedule_steps:
            raise ValueError(f"warmup_steps ({self.warmup_steps}) must be <= schedule_steps ({self.schedule_steps})")
        if self.min_lr > self.lr:
            raise ValueError(f"min_lr ({self.min_lr}) must be <= lr ({self.lr}): the decay ends at min_lr")

    @classmethod
    def for_new_run(cls, **given) -> TrainSettings:
        """The settings of a new run: ``given``, the others their defaults; but two defaults follow other fields:
        ``schedule_steps`` is the larger of ``max_steps`` and its default, ``min_lr`` a tenth of ``lr``."""
        given.setdefault("schedule_steps", max(given.get("max_steps", 0), cls.schedule_steps))
        given.setdefault("min_lr", given.get("lr", cls.lr) / 10)
        return cls(**given)

    def lr_at(self, step: int) -> float:
        return warmup_cosine_lr(
            step, max_lr=self.lr, min_lr=self.min_lr, warmup_steps=self.warmup_steps, total_steps=self.schedule_steps
        )


# settings a resume may change: none alters the math (grad_accum only regroups the sum of the same batch's gradients,
# recompute only when the blocks' caches are made)
RESUMABLE = tuple(f.name for f in fields(TrainSettings) if f.metadata["resumable"])


SETTING_AND_CONFIG_FIELDS = {f.name for cls in (TrainSettings, GPTConfig) for f in fields(cls)}


def flag(help: str, group: str, **options):
    """A ``RunSpec`` field set by a train flag (``options``: its argparse options besides the help)."""
    return field(default=options.pop("default", None), metadata={"group": group, "flag": {"help": help, **options}})


@dataclass(frozen=True)
class RunSpec:
    """A run to start: a new one (in ``out``), a resumed one (``resume``) or a fine-tuning one (``init_from``).

    ``settings`` are the ``TrainSettings`` fields given (on ``resume``, only
    ``RESUMABLE`` ones); ``model`` the ``GPTConfig`` fields given, over the
    ``arch`` preset's and ``RUN_DEFAULTS``. Checked when made: what cannot go
    together, what a resume may not change, and a new run's settings and
    model. ``names`` says how messages name a field (the train command: by
    its flag, ``{"num_heads": "--heads"}``); a field not in it is named as it is.
    """

    data: str | None = flag(
        "a text file (one document), a directory (its files matching --glob), a .jsonl or a "
        ".parquet file, tokenized once into the cache (default: the running Python's "
        "pydoc_data.topics, about 0.47 MB of English)",
        "data",
        metavar="PATH",
        type=path_flag,
    )
    tokens: str | None = flag(
        "train on tokens made by 'numforge prepare' (memory-mapped; their tokenizer comes with them)",
        "data",
        metavar="DIR",
        type=path_flag,
    )
    chat: str | None = flag(
        "with --init-from a chat model's directory: fine-tune on a JSONL of conversations, one a line, "
        '{"messages": [{"role": ..., "content": ...}, ...]}, rendered with the directory\'s chat template; the '
        "loss on the assistant's tokens only (a conversation longer than --seq-len truncated to it)",
        "data",
        metavar="FILE",
        type=path_flag,
    )
    pack: bool | None = flag(
        "with --chat: pack several conversations into each row of --seq-len, none attending to another and "
        "each counting its positions from 0 (default), or --no-pack: one a row, padded",
        "data",
        action=argparse.BooleanOptionalAction,
    )
    tokenizer: str | None = flag(
        "a saved numforge tokenizer JSON (default: train a BPE)", "data", metavar="FILE", type=path_flag
    )
    trust_pattern: bool = flag(
        "use the tokenizer file's split pattern even if numforge does not know it (a pattern is code)",
        "data",
        action="store_true",
        default=False,
    )
    vocab_size: int | None = flag(
        f"BPE vocabulary size when training one (default {DEFAULT_VOCAB_SIZE})", "data", type=int_at_least(257)
    )
    cache_dir: str | None = flag(
        "where token arrays and tokenizers are cached (default $NUMFORGE_CACHE, else "
        "$XDG_CACHE_HOME/numforge or ~/.cache/numforge)",
        "data",
        metavar="DIR",
        type=path_flag,
    )
    out: str | None = flag(
        f"run directory for checkpoints and the loss log (default: the first free {RUNS_DIR}/run-1, run-2, ...)",
        "run",
        metavar="DIR",
        type=path_flag,
    )
    resume: str | None = flag("continue the run checkpointed in DIR, in DIR", "run", metavar="DIR", type=path_flag)
    init_from: str | None = flag(
        "start a new run from a pretrained model (fine-tuning): a numforge run or "
        "checkpoint, or a Hugging Face directory (GPT-2, Llama, Mistral, Qwen2, Qwen3); "
        "its tokenizer and shape are kept",
        "run",
        metavar="SRC",
        type=path_flag,
    )
    threads: int | None = flag(
        f"threads that split each batch's rows, one core each (default ${THREADS_VARIABLE}, "
        "else every core this process may use; 1 per rank under mpiexec); 1: the whole batch "
        "on one thread",
        "run",
        type=int_at_least(1),
    )
    lora: str | None = flag(
        f"with --init-from: freeze the pretrained weights and train LoRA adapters on these linear layers, "
        f"comma-separated among {','.join(TARGETS)} (PEFT's target_modules for the Llama family, without "
        "_proj; q, k, v: their columns of numforge's fused projection); checkpoints hold the adapters alone",
        "lora",
        metavar="TARGETS",
    )
    lora_rank: int | None = flag(
        f"the adapters' rank r (default {LoraConfig.rank})", "lora", type=int_at_least(1), metavar="R"
    )
    lora_alpha: float | None = flag(
        f"the adapters' alpha: the update is scaled by alpha / r (default {LoraConfig.alpha:g})",
        "lora",
        type=float_between(0, low_open=True),
    )
    lora_dropout: float | None = flag(
        f"dropout on each adapter's input (default {LoraConfig.dropout:g})",
        "lora",
        type=float_between(0, 1, high_open=True),
        metavar="P",
    )
    glob: str = DEFAULT_GLOB  # how --data is read (commands/_data_flags.py: flags shared with prepare)
    text_field: str = DEFAULT_TEXT_FIELD
    errors: str = "strict"
    arch: str | None = None  # the model family's preset (model/config.py ARCHS); None: gpt2
    model: Mapping[str, object] = field(default_factory=dict)
    settings: Mapping[str, object] = field(default_factory=dict)
    names: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._check_combination()
        if self.resume is None:
            with self.naming():  # the new run's settings and model, checked before any file is read
                self.new_config(self.vocab)

    def lora_config(self) -> LoraConfig | None:
        """The adapters ``lora`` and its options ask for (None: no LoRA, every weight trains)."""
        if self.lora is None:
            return None
        given = {"rank": self.lora_rank, "alpha": self.lora_alpha, "dropout": self.lora_dropout}
        targets = tuple(t.strip() for t in self.lora.split(","))
        return LoraConfig(targets=targets, **{name: value for name, value in given.items() if value is not None})

    def _check_lora(self) -> None:
        """LoRA adapts a pretrained model: ``lora`` needs ``init_from``, its options need ``lora``."""
        n = self.name
        options = [n(f) for f in ("lora_rank", "lora_alpha", "lora_dropout") if getattr(self, f) is not None]
        if self.lora is None and options:
            raise ValueError(f"{', '.join(options)} set LoRA adapters' options: give {n('lora')} too")
        if self.lora is not None and self.init_from is None:
            raise ValueError(f"{n('lora')} adapts a pretrained model: give it with {n('init_from')}")
        self.lora_config()  # a ValueError for a bad target or option

    def _check_combination(self) -> None:
        """What cannot go together: ``resume`` with what it would change, ``tokens`` or ``init_from`` with what
        they bring themselves."""
        n = self.name
        self._check_lora()
        if self.resume is not None:
            if self.init_from is not None:
                raise ValueError(f"{n('init_from')} starts a new run; it cannot be combined with {n('resume')}")
            fixed = ["arch"] if self.arch is not None else []
            fixed += [*self.model, *(s for s in self.settings if s not in RESUMABLE)]
            fixed += [
                name for name in ("vocab_size", "tokenizer", "out", "chat", "pack") if getattr(self, name) is not None
            ]
            if fixed:
                may = [n(name) for name in (*RESUMABLE, "data", "tokens")]
                raise ValueError(
                    f"{', '.join(map(n, fixed))} cannot change when resuming: a resumed run keeps the settings in "
                    f"its checkpoint (only {', '.join(may[:-1])} and {may[-1]} may be given)"
                )
        elif self.pack is not None and self.chat is None:
            raise ValueError(f"{n('pack')} and --no-pack lay out the conversations of {n('chat')}: give {n('chat')}")
        elif self.chat is not None and (self.init_from is None or self.data is not None or self.tokens is not None):
            raise ValueError(
                f"{n('chat')} fine-tunes the chat model of {n('init_from')} (its template renders the conversations); "
                f"give {n('init_from')} DIR and leave out {n('data')} and {n('tokens')}"
            )
        elif self.tokens is not None:
            clashing = [n(f) for f in ("data", "tokenizer", "vocab_size", "init_from") if getattr(self, f) is not None]
            if clashing:
                raise ValueError(
                    f"{', '.join(clashing)} cannot go with {n('tokens')}: prepared tokens come with their text and "
                    "tokenizer"
                )
        elif self.init_from is not None:
            if self.tokenizer is not None or self.vocab_size is not None:
                raise ValueError(
                    f"{n('init_from')} uses the pretrained model's tokenizer; leave out {n('tokenizer')} and "
                    f"{n('vocab_size')}"
                )
            if self.arch is not None:
                raise ValueError(f"{n('init_from')} takes the pretrained model's family; leave out {n('arch')}")

    @property
    def vocab(self) -> int:
        """The vocabulary of the BPE a new run trains (``vocab_size``, else the default)."""
        return DEFAULT_VOCAB_SIZE if self.vocab_size is None else self.vocab_size

    def source(self) -> Source:
        """The documents of ``data`` (None: the embedded corpus), read as ``glob``, ``text_field``, ``errors`` say."""
        return as_source(self.data, glob=self.glob, text_field=self.text_field, errors=self.errors)

    def new_settings(self) -> TrainSettings:
        """A new run's settings: ``TrainSettings.for_new_run`` of those given."""
        return TrainSettings.for_new_run(**self.settings)

    def model_options(self) -> dict:
        """A new run's ``GPTConfig`` fields (but ``vocab_size``, ``max_seq_len``): ``RUN_DEFAULTS``, under the
        ``arch`` preset, under ``model``."""
        return RUN_DEFAULTS | ARCHS[self.arch or "gpt2"] | dict(self.model)

    def new_config(self, vocab_size: int) -> GPTConfig:
        """A new run's model config on a vocabulary of ``vocab_size``, its context the settings' ``seq_len``."""
        seq_len = self.new_settings().seq_len
        return GPTConfig(vocab_size=vocab_size, max_seq_len=seq_len, **self.model_options())

    def name(self, field_name: str) -> str:
        """How messages name a field: ``names``'s word for it, else the field's name."""
        return self.names.get(field_name, field_name)

    @contextlib.contextmanager
    def naming(self):
        """Re-raise a ``ValueError`` of ``TrainSettings`` or ``GPTConfig`` with ``names``'s words for their fields:
        "num_heads" -> "--heads"."""
        try:
            yield
        except ValueError as err:
            named = [name for name in self.names if name in SETTING_AND_CONFIG_FIELDS]
            if not named:
                raise
            words = re.compile(r"\b(" + "|".join(named) + r")\b")
            raise ValueError(words.sub(lambda m: self.names[m.group()], str(err))) from err


def spec_flags(cls) -> list[dataclasses.Field]:
    """The fields of ``cls`` (``RunSpec``, ``TrainSettings``) that a train flag sets."""
    return [f for f in fields(cls) if f.metadata.get("group") is not None]
