"""The default model: the run ``numforge train`` makes with no flags, trained once and cached.

``numforge studio`` serves it when no ``--checkpoint`` is given: the main
command's model (the embedded corpus ``pydoc_data.topics``, the default
tokenizer, 600 steps): ``RunSpec()``, started by ``training.start.start_run`` as
the train command starts its own and trained by the same loop, in ``CACHE/models/KEY/``: a run directory (``LATEST``,
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

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path

from .. import interrupts
from ..atomic import atomic_directory, remove_directory, remove_stale_temporaries, write_text_atomic
from ..checkpoint import load_model
from ..checks import describe_error
from ..data import default_cache_dir
from ..data.sources import source_hash
from ..data.tokenizers import tokenizer_hash
from ..locks import DirectoryLock, InUse
from ..resources import check_output_dir
from ..study.prompt import describe_model
from ..training import train
from ..training.spec import RunSpec
from ..training.start import new_run_settings, new_run_tokenizer, start_run
from ..training.threads import thread_count

MODELS = "models"  # the cache's directory of trained default models, one per key
RECIPE = "recipe.json"
FORMAT = 1  # bump when what a cached model directory holds changes
PACKAGE = Path(__file__).resolve().parents[1]
NOT_TRAINING = ("study", "commands", "bench", "gradcheck", "hf")  # parts that show, run, time, check, convert
CORPUS = "pydoc_data.topics"


def default_model(spec: RunSpec | None = None, say: Callable[[str], None] = print):
    """``(model, tokenizer, what it is, its run directory)``: the run of ``spec`` (default ``RunSpec()``: what
    ``numforge train`` runs with no flag), read from the cache, or trained into it first. Another ``spec``
    (a tiny run, another cache directory) is for tests."""
    spec = spec or RunSpec()
    spec = dataclasses.replace(spec, cache_dir=spec.cache_dir or default_cache_dir())
    models = check_output_dir(Path(spec.cache_dir) / MODELS, "the cache directory")
    with cache_lock(models, say):
        remove_stale_temporaries(models)  # what trainers killed outright left
        recipe = model_recipe(spec, say)
        path = models / hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:32]
        loaded = cached(path, say)
        if loaded is None:
            train_into(path, spec, recipe, say)
            loaded = load_model(path)
    model, tokenizer = loaded
    corpus = CORPUS if spec.data is None else spec.data
    steps = recipe["settings"]["max_steps"]
    about = f"the default model: trained once on {corpus}, {steps} steps, cached at {path} ({describe_model(model)})"
    return model, tokenizer, about, path


def cache_lock(models: Path, say) -> DirectoryLock:
    """The lock of the cache's models, waited for (and said so) while another process holds it."""
    what = "the cache of default models"
    try:
        return DirectoryLock(models, what)
    except InUse as busy:
        say(f"{busy}; waiting for it to finish training the default model")
        return DirectoryLock(models, what, wait=True)


def model_recipe(spec: RunSpec, say) -> dict:
    """What makes the weights of the run of ``spec``: the key's parts (the tokenizer trained first if it is not
    cached)."""
    settings = new_run_settings(spec)
    tokenizer = new_run_tokenizer(spec, say)
    return {
        "format": FORMAT,
        "corpus_sha256": source_hash(spec.source()),
        "tokenizer_sha256": tokenizer_hash(tokenizer),
        "config": spec.new_config(tokenizer.vocab_size).to_dict(),  # as new_run makes it
        "settings": dataclasses.asdict(settings),
        "threads": thread_count(spec.threads),
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


def train_into(path: Path, spec: RunSpec, recipe: dict, say) -> None:
    """Train the run of ``spec`` into ``path``, which appears when the run is complete (and only then)."""
    steps = recipe["settings"]["max_steps"]
    say(
        f"the default model is not cached yet: training it once, as `numforge train` does ({steps} steps: "
        f"about a minute on 2 idle cores; the bar shows the time left), into {path}"
    )
    started = time.perf_counter()
    with atomic_directory(path) as temporary:
        run = start_run(dataclasses.replace(spec, out=temporary), say)
        if train(run, say=say, threads=recipe["threads"]) == "interrupted":
            say("the default model was not finished: nothing is cached (the next start trains it again)")
            raise interrupts.Interrupted(run.stopped_by)
        write_text_atomic(temporary / RECIPE, json.dumps(recipe, indent=1, sort_keys=True) + "\n")
    say(f"trained and cached in {time.perf_counter() - started:.0f} s")
