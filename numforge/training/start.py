"""Starting the run a ``RunSpec`` describes: a new one, a resumed one or a fine-tuning one, paths and memory
checked before any work. ``numforge train`` and the study tools' default model start theirs here."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

from ..data import default_cache_dir, load_or_train_tokenizer, open_prepared
from ..resources import check_input_file, check_output_dir
from .init_from import start_from
from .run import Run, TrainSettings, check_new_run_dir, check_run_fits, hold_run, new_run, resume_run, run_directory
from .spec import RESUMABLE, RUNS_DIR, RunSpec


def next_free_run_dir() -> Path:
    """``runs/run-N`` for the smallest N >= 1 that does not exist yet."""
    number = 1
    while (Path(RUNS_DIR) / f"run-{number}").exists():
        number += 1
    return Path(RUNS_DIR) / f"run-{number}"


def start_run(spec: RunSpec, say, held: contextlib.ExitStack | None = None) -> Run:
    """The run of ``spec``. Paths and memory are checked before any work.

    With ``held`` (rank 0), the run directory is taken for this process first (``hold_run``), into ``held``.
    """
    n = spec.name
    check_output_dir(spec.cache_dir or default_cache_dir(), n("cache_dir") if spec.cache_dir else "the cache directory")
    if spec.resume is not None:
        check_output_dir(spec.resume, n("resume"))
        if held is not None:
            held.enter_context(hold_run(run_directory(spec.resume), say))
        return resume_run(
            spec.resume,
            {name: value for name, value in spec.settings.items() if name in RESUMABLE},
            data=None if spec.data is None else spec.source(),
            tokens=spec.tokens,
            cache_dir=spec.cache_dir,
            trust_pattern=spec.trust_pattern,
        )
    out = spec.out or next_free_run_dir()
    check_output_dir(out, n("out"))
    if held is not None:
        held.enter_context(hold_run(out, say))
    check_new_run_dir(out)
    if spec.tokenizer is not None:
        check_input_file(spec.tokenizer, n("tokenizer"))
    settings = new_run_settings(spec)
    if spec.tokens is not None:
        tokenizer = open_prepared(spec.tokens).tokenizer()
        return new_run(out, settings, spec.model_options(), tokenizer, tokens=spec.tokens)
    if spec.init_from is not None:
        return _fine_tune(spec, out, settings)
    tokenizer = new_run_tokenizer(spec, say)
    return new_run(out, settings, spec.model_options(), tokenizer, data=spec.source(), cache_dir=spec.cache_dir)


def new_run_settings(spec: RunSpec) -> TrainSettings:
    """A new run's settings, its model and memory checked before the corpus is read (with ``tokenizer``: its
    size is checked again once it is read). A fine-tuning run's model is the pretrained one: ``new_run`` checks
    its plan (with its adapters) once it is read, never the default model's."""
    settings = spec.new_settings()
    if spec.init_from is None:
        check_run_fits(spec.new_config(spec.vocab), settings)
    return settings


def new_run_tokenizer(spec: RunSpec, say):
    """A new run's tokenizer on its text: ``spec.tokenizer``, else a BPE of ``spec.vocab`` (trained once, cached)."""
    return load_or_train_tokenizer(
        spec.source(), spec.vocab, spec.tokenizer, spec.cache_dir, say=say, trust_pattern=spec.trust_pattern
    )


def _fine_tune(spec: RunSpec, out, settings: TrainSettings) -> Run:
    """A new run from the pretrained model in ``spec.init_from``, with its tokenizer and shape."""
    flags = {spec.name(field): (field, value) for field, value in spec.model.items()}
    model, tokenizer = start_from(spec.init_from, spec.settings.get("seq_len"), flags, spec.trust_pattern)
    settings = dataclasses.replace(settings, seq_len=min(settings.seq_len, model.config.max_seq_len))
    lora = spec.lora_config()
    if lora is not None:
        model.add_lora(lora, seed=settings.seed)
    base = None if lora is None else str(Path(spec.init_from).resolve())
    if spec.chat is not None:
        chat = (spec.chat, spec.init_from, spec.pack is not False)  # packed unless --no-pack
        return new_run(out, settings, {}, tokenizer, model=model, lora_base=base, chat=chat)
    return new_run(
        out, settings, {}, tokenizer, data=spec.source(), cache_dir=spec.cache_dir, model=model, lora_base=base
    )
