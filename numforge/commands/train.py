"""``numforge train``: train a GPT on the embedded Python docs (or ``--data``), resumably."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time

from .. import interrupts
from ..data import DEFAULT_CORPUS
from ..data.chat import ChatSampler
from ..generate import RUN_SAMPLE, generate
from ..training import LOSS_CSV, LOSS_PNG, TrainingDiverged, TrainSettings, train
from ..training.memory_plan import chosen_plan, plan_table, run_plans
from ..training.parallel import RanksDisagree, connect, micro_batch_size
from ..training.spec import RunSpec, spec_flags
from ..training.start import next_free_run_dir, start_run
from ..training.threads import set_blas_threads, thread_count
from . import EXIT_FAILED
from ._data_flags import add_reading_flags
from .model_flags import MODEL_FLAGS, add_model_flags

HELP = "train a GPT on text (default: this Python's own documentation), with checkpoints and exact resume"

EVALUATIONS_SHOWN = 10  # the last validation losses the closing summary lists
GROUPS = {  # the help's sections: RunSpec's and TrainSettings' fields say which they are in
    "data": "data",
    "run": "run",
    "model": "model (fixed when a run starts)",
    "optimization": "optimization (fixed when a run starts)",
    "lora": "LoRA adapters (with --init-from; fixed when a run starts)",
}
SPEC_FLAGS = [*spec_flags(RunSpec), *spec_flags(TrainSettings)]  # the fields a flag of their name sets
# how messages name the run's fields: by the flags that set them ("num_heads" -> "--heads")
FLAG_OF_FIELD = {
    **{f.name: "--" + f.name.replace("_", "-") for f in SPEC_FLAGS},
    **{field: "--" + dest.replace("_", "-") for dest, (field, _) in MODEL_FLAGS.items()},
    "arch": "--arch",
    "max_seq_len": "--seq-len",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``RunSpec``'s and ``TrainSettings``' fields (each field's own help and type), the model's
    (``model_flags.py``), how the corpus is read (``_data_flags.py``) and ``--no-progress``."""
    groups = {name: parser.add_argument_group(title) for name, title in GROUPS.items()}
    add_model_flags(groups["model"])
    for spec_field in SPEC_FLAGS:
        group = groups[spec_field.metadata["group"]]
        group.add_argument(FLAG_OF_FIELD[spec_field.name], dest=spec_field.name, **spec_field.metadata["flag"])
    add_reading_flags(groups["data"])
    groups["run"].add_argument("--no-progress", action="store_true", help="no progress bar")


def run_spec(args: argparse.Namespace) -> RunSpec:
    """The run the flags ask for; a flag not given leaves its field at its default (a new run's) or, on
    ``--resume``, at the checkpoint's. Checked here: errors name the flags."""
    model = {field: getattr(args, dest) for dest, (field, _) in MODEL_FLAGS.items() if getattr(args, dest) is not None}
    settings = {f.name: getattr(args, f.name) for f in spec_flags(TrainSettings) if getattr(args, f.name) is not None}
    return RunSpec(
        **{f.name: getattr(args, f.name) for f in spec_flags(RunSpec)},
        glob=args.glob,
        text_field=args.text_field,
        errors=args.errors,
        arch=args.arch,
        model=model,
        settings=settings,
        names=FLAG_OF_FIELD,
    )


def _start_on(world, args: argparse.Namespace, say, held: contextlib.ExitStack):
    """``start_run`` (rank 0 takes the run directory into ``held``), then check that the batch splits over the ranks
    and micro-batches (before any step)."""
    session = start_run(run_spec(args), say, held if world.is_root else None)
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
    if isinstance(session.sampler, ChatSampler):
        report(f"chat: {session.sampler.rows.layout()}")  # the training rows
    plans = run_plans(model.config, settings, model.lora)
    report(plan_table(plans, chosen_plan(settings, model.lora)))  # checked when the run started
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
