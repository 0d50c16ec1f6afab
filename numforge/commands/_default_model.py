"""The default model: the run ``numforge train`` makes with no flags, trained once and cached.

``numforge studio`` serves it when no ``--checkpoint`` is given: the main
command's model (the embedded corpus ``pydoc_data.topics``, the default
tokenizer, 600 steps), made by the train command's own ``start_run`` and the
training loop, in ``CACHE/models/KEY/``: a run directory (``LATEST``,
``ckpt-00000600/``, ``loss.csv``, and ``recipe.json``, what made it) that
``--checkpoint`` takes like any other.

KEY is a hash of everything that makes the weights (``model_recipe``): the
corpus's bytes, the tokenizer, the model's config, the training settings, the
thread count (whose sums round differently: ``training/threads.py``), and the
source of numforge's code that trains (``__init__.py``, which holds the
version, included: the version alone reads the same in every checkout). A
change to any of them names another directory, so a stale model is never
served.

- One trainer: a process holds the lock of ``CACHE/models``
  (``locks.DirectoryLock``) while it looks for the model and trains it; a
  second start waits for it, then reads what the first cached.
- Whole or absent: the run trains in a hidden temporary directory, renamed
  to KEY when complete (``atomic.atomic_directory``). Ctrl-C or SIGTERM ends
  the training after the current step and removes it; a process killed
  outright leaves the temporary, which nothing reads and the next start removes.
- A cached run that does not load (a damaged file) is derived data: it is trained again.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .. import interrupts
from ..atomic import atomic_directory, remove_directory, remove_stale_temporaries, write_text_atomic
from ..checkpoint import load_model
from ..checks import describe_error
from ..data import default_cache_dir
from ..data.sources import source_hash
from ..data.tokenizers import tokenizer_hash
from ..locks import DirectoryLock, InUse
from ..model import GPTConfig
from ..resources import check_output_dir
from ..study.prompt import describe_model
from ..training import train
from ..training.threads import thread_count
from . import train as train_command
from ._data_flags import source_from

MODELS = "models"  # the cache's directory of trained default models, one per key
RECIPE = "recipe.json"
FORMAT = 1  # bump when what a cached model directory holds changes
PACKAGE = Path(__file__).resolve().parents[1]
NOT_TRAINING = ("study", "commands", "bench", "gradcheck", "hf")  # parts that show, run, time, check, convert
CORPUS = "pydoc_data.topics"


def default_model(flags: Sequence[str] = (), cache_dir=None, say: Callable[[str], None] = print):
    """``(model, tokenizer, what it is, its run directory)``: the run of ``numforge train FLAGS`` (no flags: the
    main command's), read from the cache, or trained into it first. ``flags`` and ``cache_dir`` are for tests."""
    args = train_args(flags, cache_dir)
    models = check_output_dir(Path(args.cache_dir) / MODELS, "the cache directory")
    with cache_lock(models, say):
        remove_stale_temporaries(models)  # what trainers killed outright left
        recipe = model_recipe(args, say)
        path = models / hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:32]
        loaded = cached(path, say)
        if loaded is None:
            train_into(path, args, recipe, say)
            loaded = load_model(path)
    model, tokenizer = loaded
    corpus = CORPUS if args.data is None else args.data
    steps = recipe["settings"]["max_steps"]
    about = f"the default model: trained once on {corpus}, {steps} steps, cached at {path} ({describe_model(model)})"
    return model, tokenizer, about, path


def train_args(flags: Sequence[str], cache_dir) -> argparse.Namespace:
    """``numforge train FLAGS --cache-dir CACHE``, parsed by the train command's own parser."""
    parser = argparse.ArgumentParser(prog="numforge train")
    train_command.add_arguments(parser)
    return parser.parse_args([*map(str, flags), "--cache-dir", str(cache_dir or default_cache_dir())])


def cache_lock(models: Path, say) -> DirectoryLock:
    """The lock of the cache's models, waited for (and said so) while another process holds it."""
    what = "the cache of default models"
    try:
        return DirectoryLock(models, what)
    except InUse as busy:
        say(f"{busy}; waiting for it to finish training the default model")
        return DirectoryLock(models, what, wait=True)


def model_recipe(args: argparse.Namespace, say) -> dict:
    """What makes the weights of ``numforge train``'s run of ``args``: the key's parts (the tokenizer trained
    first if it is not cached)."""
    settings, options = train_command.new_run_settings(args)
    tokenizer = train_command.new_run_tokenizer(args, say)
    config = GPTConfig(vocab_size=tokenizer.vocab_size, max_seq_len=settings.seq_len, **options)  # as new_run's
    return {
        "format": FORMAT,
        "corpus_sha256": source_hash(source_from(args, args.data)),
        "tokenizer_sha256": tokenizer_hash(tokenizer),
        "config": config.to_dict(),
        "settings": dataclasses.asdict(settings),
        "threads": thread_count(args.threads),
        "code_sha256": training_code_sha256(),
    }


def training_code_sha256(root: Path = PACKAGE) -> str:
    """A SHA-256 of numforge's Python files in ``root``, each with its path, but for the parts in ``NOT_TRAINING``."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name.split("/")[0] not in NOT_TRAINING:
            source = path.read_bytes()
            digest.update(f"{name}\0{len(source)}\0".encode() + source)
    return digest.hexdigest()


def cached(path: Path, say):
    """``(model, tokenizer)`` of the cached run in ``path``; None if there is none, or if it is damaged (removed)."""
    if not path.is_dir():
        return None
    try:
        return load_model(path)
    except (OSError, ValueError) as err:
        say(f"note: the cached default model in {path} does not load ({describe_error(err)}); training it again")
        remove_directory(path)
        return None


def train_into(path: Path, args: argparse.Namespace, recipe: dict, say) -> None:
    """Train the run of ``args`` into ``path``, which appears when the run is complete (and only then)."""
    steps = recipe["settings"]["max_steps"]
    say(
        f"the default model is not cached yet: training it once, as `numforge train` does ({steps} steps: "
        f"about a minute on 2 idle cores; the bar shows the time left), into {path}"
    )
    started = time.perf_counter()
    with atomic_directory(path) as temporary:
        args.out = temporary
        run = train_command.start_run(args, say)
        if train(run, say=say, threads=recipe["threads"]) == "interrupted":
            say("the default model was not finished: nothing is cached (the next start trains it again)")
            raise interrupts.Interrupted(run.stopped_by)
        write_text_atomic(temporary / RECIPE, json.dumps(recipe, indent=1, sort_keys=True) + "\n")
    say(f"trained and cached in {time.perf_counter() - started:.0f} s")
