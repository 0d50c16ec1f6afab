"""``numforge train``: train a GPT on the embedded Python docs (or ``--data``), resumably."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import re
import sys
import time
from pathlib import Path

from .. import interrupts
from ..checks import float_between, int_at_least, path_flag
from ..data import DEFAULT_CORPUS, DEFAULT_VOCAB_SIZE, default_cache_dir, load_or_train_tokenizer, open_prepared
from ..generate import RUN_SAMPLE, generate
from ..model import GPTConfig
from ..resources import check_input_file, check_output_dir
from ..training import LOSS_CSV, LOSS_PNG, RESUMABLE, TrainingDiverged, TrainSettings, new_run, resume_run, train
from ..training.init_from import start_from
from ..training.parallel import RanksDisagree, connect, micro_batch_size
from ..training.run import check_new_run_dir, check_run_fits, hold_run, run_directory
from ..training.threads import THREADS_VARIABLE, set_blas_threads, thread_count
from . import EXIT_FAILED
from ._data_flags import add_reading_flags, source_from
from .model_flags import MODEL_FLAG_DESTS, MODEL_FLAGS, add_model_flags, model_options

HELP = "train a GPT on text (default: this Python's own documentation), with checkpoints and exact resume"

RUNS_DIR = "runs"  # default --out: the first free runs/run-N
EVALUATIONS_SHOWN = 10  # the last validation losses the closing summary lists
# TrainSettings fields a flag sets; on --resume only RESUMABLE ones may be given
SETTINGS_FLAGS = (
    "max_steps",
    "batch_size",
    "seq_len",
    "lr",
    "warmup_steps",
    "schedule_steps",
    "seed",
    "eval_every",
    "save_every",
    "grad_accum",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = TrainSettings()
    data = parser.add_argument_group("data")
    data.add_argument(
        "--data",
        metavar="PATH",
        type=path_flag,
        help="a text file (one document), a directory (its files matching --glob), a .jsonl or a .parquet file, "
        "tokenized once into the cache (default: the running Python's pydoc_data.topics, about 0.47 MB of English)",
    )
    data.add_argument(
        "--tokens",
        metavar="DIR",
        type=path_flag,
        help="train on tokens made by 'numforge prepare' (memory-mapped; their tokenizer comes with them)",
    )
    add_reading_flags(data)
    data.add_argument(
        "--tokenizer", metavar="FILE", type=path_flag, help="a saved numforge tokenizer JSON (default: train a BPE)"
    )
    data.add_argument(
        "--trust-pattern",
        action="store_true",
        help="use the tokenizer file's split pattern even if numforge does not know it (a pattern is code)",
    )
    data.add_argument(
        "--vocab-size",
        type=int_at_least(257),
        help=f"BPE vocabulary size when training one (default {DEFAULT_VOCAB_SIZE})",
    )
    data.add_argument(
        "--cache-dir",
        metavar="DIR",
        type=path_flag,
        help="where token arrays and tokenizers are cached "
        "(default $NUMFORGE_CACHE, else $XDG_CACHE_HOME/numforge or ~/.cache/numforge)",
    )
    run = parser.add_argument_group("run")
    run.add_argument(
        "--out",
        metavar="DIR",
        type=path_flag,
        help=f"run directory for checkpoints and the loss log (default: the first free {RUNS_DIR}/run-1, run-2, ...)",
    )
    run.add_argument("--resume", metavar="DIR", type=path_flag, help="continue the run checkpointed in DIR, in DIR")
    run.add_argument(
        "--init-from",
        metavar="SRC",
        type=path_flag,
        help="start a new run from a pretrained model (fine-tuning): a numforge run or checkpoint, or a "
        "Hugging Face directory (GPT-2, Llama, Mistral, Qwen2, Qwen3); its tokenizer and shape are kept",
    )
    run.add_argument(
        "--max-steps", type=int_at_least(0), help=f"train until this many updates (default {defaults.max_steps})"
    )
    run.add_argument(
        "--eval-every", type=int_at_least(1), help=f"validation loss every N steps (default {defaults.eval_every})"
    )
    run.add_argument(
        "--save-every", type=int_at_least(1), help=f"checkpoint every N steps (default {defaults.save_every})"
    )
    run.add_argument(
        "--seed", type=int_at_least(0), help=f"seed of the initial weights and the batches (default {defaults.seed})"
    )
    run.add_argument(
        "--threads",
        type=int_at_least(1),
        help=f"threads that split each batch's rows, one core each (default ${THREADS_VARIABLE}, else every core "
        "this process may use; 1 per rank under mpiexec); 1: the whole batch on one thread",
    )
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    model = parser.add_argument_group("model (fixed when a run starts)")
    add_model_flags(model)
    model.add_argument("--seq-len", type=int_at_least(1), help=f"context length T (default {defaults.seq_len})")
    optim = parser.add_argument_group("optimization (fixed when a run starts)")
    optim.add_argument(
        "--batch-size", type=int_at_least(1), help=f"sequences per step B (default {defaults.batch_size})"
    )
    optim.add_argument(
        "--lr",
        type=float_between(0, low_open=True),
        help=f"peak learning rate (default {defaults.lr:g}; warmup then cosine decay to a tenth of it)",
    )
    optim.add_argument(
        "--grad-accum",
        type=int_at_least(1),
        metavar="K",
        help="add the gradients of K micro-batches per step (memory of one micro-batch); the batch stays "
        f"--batch-size = ranks x K x micro-batch (default {defaults.grad_accum})",
    )
    optim.add_argument(
        "--warmup-steps", type=int_at_least(0), help=f"linear warmup steps (default {defaults.warmup_steps})"
    )
    optim.add_argument(
        "--schedule-steps",
        type=int_at_least(1),
        help="length of the cosine decay (default: the larger of "
        f"--max-steps and {defaults.schedule_steps}; independent of where a run stops, so a "
        "stopped run resumes exactly)",
    )


def next_free_run_dir() -> Path:
    """``runs/run-N`` for the smallest N >= 1 that does not exist yet."""
    number = 1
    while (Path(RUNS_DIR) / f"run-{number}").exists():
        number += 1
    return Path(RUNS_DIR) / f"run-{number}"


def _given(args: argparse.Namespace, names) -> dict:
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def start_run(args: argparse.Namespace, say, held: contextlib.ExitStack | None = None):
    """A new run or a resumed one, from the flags. Paths and memory are checked before any work.

    With ``held`` (rank 0), the run directory is taken for this process first (``hold_run``), into ``held``.
    """
    check_output_dir(args.cache_dir or default_cache_dir(), "--cache-dir" if args.cache_dir else "the cache directory")
    if args.resume is not None:
        if args.init_from is not None:
            raise ValueError("--init-from starts a new run; it cannot be combined with --resume")
        fixed = {
            **_given(args, MODEL_FLAG_DESTS),
            **_given(args, SETTINGS_FLAGS),
            **_given(args, ("vocab_size", "tokenizer", "out")),
        }
        fixed = {k: v for k, v in fixed.items() if k not in RESUMABLE}
        if fixed:
            flags = ", ".join("--" + k.replace("_", "-") for k in fixed)
            raise ValueError(
                f"{flags} cannot change when resuming: a resumed run keeps the settings in its "
                f"checkpoint (only --max-steps, --eval-every, --save-every, --grad-accum, --data and --tokens "
                "may be given)"
            )
        check_output_dir(args.resume, "--resume")
        if held is not None:
            held.enter_context(hold_run(run_directory(args.resume), say))
        return resume_run(
            args.resume,
            _given(args, RESUMABLE),
            data=None if args.data is None else source_from(args, args.data),
            tokens=args.tokens,
            cache_dir=args.cache_dir,
            trust_pattern=args.trust_pattern,
        )
    out = args.out or next_free_run_dir()
    check_output_dir(out, "--out")
    if held is not None:
        held.enter_context(hold_run(out, say))
    check_new_run_dir(out)
    if args.tokenizer is not None:
        check_input_file(args.tokenizer, "--tokenizer")
    settings, options = new_run_settings(args)
    if args.tokens is not None:
        clashing = [f for f in ("data", "tokenizer", "vocab_size", "init_from") if getattr(args, f) is not None]
        if clashing:
            flags = ", ".join("--" + k.replace("_", "-") for k in clashing)
            raise ValueError(f"{flags} cannot go with --tokens: prepared tokens come with their text and tokenizer")
        tokenizer = open_prepared(args.tokens).tokenizer()
        return new_run(out, settings, options, tokenizer, tokens=args.tokens)
    source = source_from(args, args.data)
    if args.init_from is not None:
        return _fine_tune(args, out, settings, source)
    return new_run(out, settings, options, new_run_tokenizer(args, say), data=source, cache_dir=args.cache_dir)


def new_run_settings(args: argparse.Namespace) -> tuple[TrainSettings, dict]:
    """A new run's settings and model options (``GPTConfig`` fields) from the flags, each default where no flag
    is given; the model and its memory are checked before the corpus is read (with --tokenizer: its size is
    checked again)."""
    with _flag_names():
        settings = _given(args, SETTINGS_FLAGS)
        settings.setdefault("schedule_steps", max(settings.get("max_steps", 0), TrainSettings.schedule_steps))
        settings["min_lr"] = settings.get("lr", TrainSettings.lr) / 10
        settings = TrainSettings(**settings)
        options = model_options(args)
        check_run_fits(GPTConfig(vocab_size=_vocab_size(args), max_seq_len=settings.seq_len, **options), settings)
    return settings, options


def new_run_tokenizer(args: argparse.Namespace, say):
    """A new run's tokenizer on its text: ``--tokenizer``, else a BPE of ``--vocab-size`` (trained once, cached)."""
    source = source_from(args, args.data)
    return load_or_train_tokenizer(
        source, _vocab_size(args), args.tokenizer, args.cache_dir, say=say, trust_pattern=args.trust_pattern
    )


def _vocab_size(args: argparse.Namespace) -> int:
    return DEFAULT_VOCAB_SIZE if args.vocab_size is None else args.vocab_size


# the settings' and config's field names as the flags that set them, for messages
FLAG_OF_FIELD = {
    **{name: "--" + name.replace("_", "-") for name in SETTINGS_FLAGS},
    **{field: "--" + dest.replace("_", "-") for dest, (field, _) in MODEL_FLAGS.items()},
    "max_seq_len": "--seq-len",
    "vocab_size": "--vocab-size",
}


@contextlib.contextmanager
def _flag_names():
    """Re-raise a ``ValueError`` about settings with the flags' names: "num_heads" -> "--heads"."""
    try:
        yield
    except ValueError as err:
        words = re.compile(r"\b(" + "|".join(FLAG_OF_FIELD) + r")\b")
        raise ValueError(words.sub(lambda m: FLAG_OF_FIELD[m.group()], str(err))) from err


def _fine_tune(args: argparse.Namespace, out, settings: TrainSettings, source):
    """A new run from the pretrained model in ``--init-from``, with its tokenizer and shape."""
    if args.tokenizer is not None or args.vocab_size is not None:
        raise ValueError("--init-from uses the pretrained model's tokenizer; leave out --tokenizer and --vocab-size")
    if args.arch is not None:
        raise ValueError("--init-from takes the pretrained model's family; leave out --arch")
    flags = {flag: (MODEL_FLAGS[flag][0], value) for flag, value in _given(args, MODEL_FLAGS).items()}
    model, tokenizer = start_from(args.init_from, args.seq_len, flags, args.trust_pattern)
    settings = dataclasses.replace(settings, seq_len=min(settings.seq_len, model.config.max_seq_len))
    return new_run(out, settings, {}, tokenizer, data=source, cache_dir=args.cache_dir, model=model)


def _start_on(world, args: argparse.Namespace, say, held: contextlib.ExitStack):
    """``start_run`` (rank 0 takes the run directory into ``held``), then check that the batch splits over the ranks
    and micro-batches (before any step)."""
    session = start_run(args, say, held if world.is_root else None)
    micro_batch_size(session.settings.batch_size, world.size, session.settings.grad_accum)
    return session


def run(args: argparse.Namespace) -> int:
    with interrupts.deferred(checkpoints=True):  # Ctrl-C, SIGTERM, SIGUSR1: see training/loop.py
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    world = connect()  # one process, or one rank of `mpiexec -n N numforge train`: rank 0 alone speaks

    def say(text: str) -> None:  # progress: stderr
        if world.is_root:
            print(text, file=sys.stderr, flush=True)

    def report(text: str) -> None:  # results: stdout, so that `numforge train > log` keeps them
        if world.is_root:
            print(text, flush=True)

    started = time.perf_counter()
    threads = thread_count(args.threads, world.size)
    set_blas_threads(1)  # numforge's threads fill the cores (training/threads.py), never BLAS's besides them
    if args.resume is None and args.out is None:  # one name for every rank, found before rank 0 creates it
        args.out = world.broadcast(next_free_run_dir() if world.is_root else None)
    with contextlib.ExitStack() as held:  # the run directory's lock, for as long as this process trains in it
        session = world.setup_together(lambda: _start_on(world, args, say, held))
        with world.ending_the_job_on_error("numforge train"):
            return _train(args, session, world, threads, say, report, started)


def _train(args: argparse.Namespace, session, world, threads: int, say, report, started: float) -> int:
    model, settings = session.model, session.settings
    report(
        f"corpus: {session.data_info['source'] or DEFAULT_CORPUS}, {session.data_info['num_tokens']:,} tokens "
        f"(vocabulary {session.tokenizer.vocab_size}); model: {model.num_params():,} parameters, "
        f"{model.config.num_layers} layers, d_model {model.config.d_model}; "
        f"steps {session.step} -> {settings.max_steps}, batch {settings.batch_size} x {settings.seq_len} tokens"
        + (f" on {world.size} ranks" if world.size > 1 else "")
        + (f" in {settings.grad_accum} micro-batches" if settings.grad_accum > 1 else "")
        + (f", {threads} threads" + (" per rank" if world.size > 1 else "") if threads > 1 else "")
    )
    first_step = session.step
    try:
        outcome = train(session, progress=not args.no_progress, say=say, world=world, threads=threads)
    except (TrainingDiverged, RanksDisagree) as err:  # raised on every rank alike
        say(f"numforge train: {err}")
        return EXIT_FAILED
    if outcome == "interrupted" and session.step == first_step:  # stopped before its first step: the loop said so
        return 128 + session.stopped_by
    minutes = (time.perf_counter() - started) / 60
    evaluations = [r for r in session.log if r["val_loss"]]
    if evaluations:
        last_val = evaluations[-1]
        report(
            "validation loss by step: "
            + ", ".join(f"{r['step']} {float(r['val_loss']):.3f}" for r in evaluations[-EVALUATIONS_SHOWN:])
        )
        report(
            f"after {minutes:.1f} min, at step {last_val['step']}: train loss {float(last_val['train_loss']):.3f}, "
            f"validation loss {float(last_val['val_loss']):.3f}"
        )
    report(
        f"checkpoint: {session.last_checkpoint}; loss log: {session.run_dir / LOSS_CSV}"
        + (f", {session.run_dir / LOSS_PNG}" if (session.run_dir / LOSS_PNG).is_file() else "")
    )
    if outcome == "interrupted":
        report(f"resume with: numforge train --resume {session.run_dir}")
        return 128 + session.stopped_by  # 130 Ctrl-C, 143 SIGTERM
    if not world.is_root:
        return 0
    sample = generate(model, session.tokenizer, **RUN_SAMPLE)
    report(
        f"a sample (temperature {RUN_SAMPLE['temperature']}):\n{sample.text}\n"
        f'more with: numforge sample --checkpoint {session.run_dir} --prompt "The"'
    )
    return 0
