"""Damaged and crafted files: every file a run writes is truncated, bit-flipped, swapped in from another run
or given JSON values of other types, and reading it back gives the identical run or one ``ValueError`` that
names the file; never another exception, never a hang.

Two kinds of bad file. *Damaged*: the bytes changed after numforge wrote them (a crash, a bad disk, a
copy from another run); ``checksums.json`` no longer matches, so nothing but an identical load or an
error naming the file is acceptable. *Crafted*: the file was edited and the checksums recomputed
(``helpers.reseal``), as a hostile file would be; the readers' own validation must then refuse it by
name, or load a run that is valid (an edited learning rate is still a learning rate).
"""

import contextlib
import dataclasses
import json
import shutil
import signal
import tempfile
from pathlib import Path

import numpy as np
import pytest
from helpers import make_tiny_run, reseal
from hypothesis import given, settings
from hypothesis import strategies as st

from numforge import checkpoint
from numforge.data import load_documents, load_or_train_tokenizer
from numforge.tokenizer import BPETokenizer
from numforge.training import LOSS_CSV, resume_run
from numforge.training.logs import CSV_FIELDS

CHECKPOINT_FILES = (*checkpoint.FILES, checkpoint.CHECKSUMS)
JSON_FILES = tuple(name for name in checkpoint.FILES if name.endswith(".json"))
# per file, 2/5 of the profile's examples (12 by default; NUMFORGE_HYPOTHESIS_EXAMPLES=1000 gives 400)
FEW = settings(max_examples=max(1, settings().max_examples * 2 // 5))
SECONDS = 20  # far above the ~0.1 s one load takes: only a hang reaches it


class Hung(BaseException):  # a BaseException: no reader's error handling can swallow it
    pass


@contextlib.contextmanager
def time_limit(seconds=SECONDS):
    def stop(signum, frame):
        raise Hung(f"still reading after {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Runs(tuple):
    def __repr__(self):  # hypothesis prints its arguments when an example fails: not the whole snapshot
        return f"Runs({self[0]}, {self[1]})"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two finished runs (seeds 5 and 6) and what a resume and a sampling load read from the first."""
    first = make_tiny_run(tmp_path_factory.mktemp("first"), seed=5)
    second = make_tiny_run(tmp_path_factory.mktemp("second"), seed=6)
    return Runs((first, second, snapshot(first, first.parent / "cache")))


def snapshot(run_dir, cache_dir):
    """Everything ``resume_run`` and ``load_model`` read from a run, comparable with ``==``."""
    with time_limit():
        run = resume_run(run_dir, cache_dir=cache_dir)
        model, tokenizer = checkpoint.load_model(run_dir)
    optimizer = run.optimizer.state_dict()
    return {
        "params": {name: a.tobytes() for name, a in run.model.params.items()},
        "sampled params": {name: a.tobytes() for name, a in model.params.items()},
        "moments": {kind: {n: a.tobytes() for n, a in optimizer[kind].items()} for kind in ("m", "v")},
        "optimizer": (optimizer["step"], optimizer["hyper"]),
        "config": model.config.to_dict(),
        "tokenizers": (run.tokenizer.to_dict(), tokenizer.to_dict()),
        "sampler": json.dumps(run.sampler.state_dict(), sort_keys=True),
        "settings": dataclasses.asdict(run.settings),
        "step": run.step,
        "data": run.data_info,
        "log": run.log,
        "validation tokens": run.val_tokens.tobytes(),
    }


@contextlib.contextmanager
def copy_of(run_dir):
    """A copy of the run directory and of its caches, to damage freely."""
    with tempfile.TemporaryDirectory() as temp:
        shutil.copytree(run_dir, Path(temp) / "run")
        shutil.copytree(run_dir.parent / "cache", Path(temp) / "cache")
        yield Path(temp) / "run", Path(temp) / "cache"


def checkpoint_file(run_dir, name):
    return run_dir / name if name == checkpoint.LATEST else checkpoint.latest_checkpoint_dir(run_dir) / name


# ---------------------------------------------------------------- ways to damage a file


@st.composite
def damage(draw, data: bytes) -> bytes:
    """``data`` truncated at a random offset, or with 1 to 3 random bytes changed."""
    if draw(st.booleans()):
        return data[: draw(st.integers(0, len(data) - 1))]
    changed = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        changed[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
    return bytes(changed)


OTHER_VALUES = st.sampled_from([None, True, -1, 0, 2.5, float("nan"), 10**20, "", "x", [], [1, 2], {}, {"a": 1}])


@st.composite
def retyped_json(draw, data: bytes) -> bytes:
    """The JSON document ``data`` with one value, anywhere in it, replaced by a value of another kind."""
    document = json.loads(data)
    paths = []

    def walk(node, path):
        paths.append(path)
        children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in children:
            walk(child, (*path, key))

    walk(document, ())
    path = draw(st.sampled_from(paths[1:]))  # not the root: a non-object root is tried by damage()
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = draw(OTHER_VALUES)
    return json.dumps(document).encode()


def assert_named_or_identical(run_dir, cache_dir, name, pristine, crafted=False):
    """The run loads as ``pristine`` (any valid run when ``crafted``), or one ValueError names ``name``."""
    try:
        got = snapshot(run_dir, cache_dir)
    except ValueError as err:
        assert name in str(err), f"the error does not name {name}: {err}"
        return
    if not crafted:
        assert got == pristine


# ---------------------------------------------------------------- the checkpoint's files and LATEST


@pytest.mark.parametrize("name", [checkpoint.LATEST, *CHECKPOINT_FILES])
@FEW
@given(data=st.data())
def test_a_damaged_checkpoint_file_loads_identically_or_is_named(runs, name, data):
    first, _, pristine = runs
    with copy_of(first) as (run_dir, cache_dir):
        path = checkpoint_file(run_dir, name)
        raw = path.read_bytes()
        ways = [damage(raw), retyped_json(raw)] if name.endswith(".json") else [damage(raw)]
        path.write_bytes(data.draw(st.one_of(ways)))
        assert_named_or_identical(run_dir, cache_dir, name, pristine)


@pytest.mark.parametrize("name", checkpoint.FILES)
@FEW
@given(data=st.data())
def test_a_crafted_checkpoint_file_loads_or_is_named(runs, name, data):
    first, _, pristine = runs
    with copy_of(first) as (run_dir, cache_dir):
        path = checkpoint_file(run_dir, name)
        strategy = retyped_json(path.read_bytes()) if name.endswith(".json") else damage(path.read_bytes())
        path.write_bytes(data.draw(strategy))
        reseal(path.parent)
        assert_named_or_identical(run_dir, cache_dir, name, pristine, crafted=True)


@pytest.mark.parametrize("name", CHECKPOINT_FILES)
def test_a_file_swapped_in_from_another_run_is_named(runs, name):
    first, second, pristine = runs
    with copy_of(first) as (run_dir, cache_dir):
        shutil.copyfile(checkpoint_file(second, name), checkpoint_file(run_dir, name))
        if checkpoint_file(second, name).read_bytes() == checkpoint_file(first, name).read_bytes():
            assert snapshot(run_dir, cache_dir) == pristine  # optimizer.json: the same step and learning rate
            return
        with pytest.raises(ValueError, match=name.replace(".", r"\.")):
            snapshot(run_dir, cache_dir)


@pytest.mark.parametrize("name", JSON_FILES)
def test_a_crafted_json_file_that_is_not_an_object_is_named(runs, name):
    first, _, pristine = runs
    for value in ([], "text", 3, None):
        with copy_of(first) as (run_dir, cache_dir):
            path = checkpoint_file(run_dir, name)
            path.write_text(json.dumps(value))
            reseal(path.parent)
            with pytest.raises(ValueError, match=f"{name}.*must hold a JSON object"):
                snapshot(run_dir, cache_dir)


# ---------------------------------------------------------------- caches and the loss log


@FEW
@given(data=st.data())
def test_a_damaged_token_cache_is_rebuilt(runs, data):
    first, _, pristine = runs
    with copy_of(first) as (run_dir, cache_dir):
        path = data.draw(st.sampled_from(sorted((cache_dir / "tokens").glob("*/*"))))  # the array or its index
        path.write_bytes(data.draw(damage(path.read_bytes())))
        assert snapshot(run_dir, cache_dir) == pristine


@FEW
@given(data=st.data())
def test_a_damaged_tokenizer_cache_is_trained_again(runs, data):
    first, _, pristine = runs
    documents = load_documents(first.parent / "corpus.txt")
    with copy_of(first) as (run_dir, cache_dir):
        (path,) = (cache_dir / "tokenizers").iterdir()
        path.write_bytes(data.draw(damage(path.read_bytes())))
        with time_limit():
            tokenizer = load_or_train_tokenizer(documents, 270, cache_dir=cache_dir, say=lambda _: None)
        assert tokenizer.to_dict() == pristine["tokenizers"][0]
        assert BPETokenizer.load(path).to_dict() == pristine["tokenizers"][0]  # and the cache is whole again


@FEW
@given(data=st.data())
def test_a_damaged_loss_log_is_named_or_read_as_well_formed_rows(runs, data):
    # The log is a record, not part of the arithmetic: an edit that keeps it well formed is read as it is.
    first, _, pristine = runs
    with copy_of(first) as (run_dir, cache_dir):
        path = run_dir / LOSS_CSV
        path.write_bytes(data.draw(damage(path.read_bytes())))
        try:
            got = snapshot(run_dir, cache_dir)
        except ValueError as err:
            assert LOSS_CSV in str(err)
            return
        assert {k: v for k, v in got.items() if k != "log"} == {k: v for k, v in pristine.items() if k != "log"}
        for row in got["log"]:
            assert tuple(row) == CSV_FIELDS and 0 <= int(row["step"]) <= pristine["step"]
            assert all(isinstance(float(row[f]), float) for f in ("train_loss", "lr"))


# ---------------------------------------------------------------- every writer is read back by its reader


def test_every_file_a_run_writes_is_read_back_and_validated_by_its_reader(runs, tmp_path):
    first, _, pristine = runs
    directory = checkpoint.latest_checkpoint_dir(first)
    assert sorted(p.name for p in directory.iterdir()) == sorted(CHECKPOINT_FILES)
    checkpoint.verify_checksums(directory)  # checksums.json
    loaded = checkpoint.load_checkpoint(first)  # the arrays' headers, then the arrays; optimizer.json
    assert {n: a.tobytes() for n, a in loaded.params.items()} == pristine["params"]
    config = checkpoint.checkpoint_config(loaded)  # config.json
    assert config.to_dict() == pristine["config"]
    assert checkpoint.checkpoint_tokenizer(loaded).to_dict() == pristine["tokenizers"][0]  # tokenizer.json
    from numforge.training.state import check_state  # state.json

    assert dataclasses.asdict(check_state(loaded.state, directory / "state.json", 4)) == pristine["settings"]
    from numforge.data import open_prepared  # the token cache
    from numforge.training.logs import read_loss_csv  # loss.csv

    (tokens_dir,) = (first.parent / "cache" / "tokens").iterdir()
    tokens = open_prepared(tokens_dir, config.vocab_size).tokens
    assert (
        tokens[-len(np.frombuffer(pristine["validation tokens"], tokens.dtype)) :].tobytes()
        == (pristine["validation tokens"])
    )
    assert read_loss_csv(first / LOSS_CSV, 4) == pristine["log"]
    (tokenizer_file,) = (first.parent / "cache" / "tokenizers").iterdir()
    assert BPETokenizer.load(tokenizer_file).to_dict() == pristine["tokenizers"][0]  # the tokenizer cache
    assert (first / checkpoint.LATEST).read_text() == directory.name + "\n"
