"""numforge studio's default model: the run ``numforge train`` makes, trained once into the cache and read from
it after; a change to anything that makes its weights trains another; Ctrl-C, a kill -9 and a second studio
starting at once never get a half-trained model served. Every run here is a tiny one (``FLAGS``): the same code
path as the default's 600 steps, in a second."""

import json
import signal
import subprocess
import sys

import numpy as np
import pytest
from helpers import STUDY_TEXT, signal_at, subprocess_env

from numforge import locks
from numforge.checkpoint import latest_checkpoint_dir, load_model
from numforge.cli import main
from numforge.commands import _default_model, studio
from numforge.commands._default_model import MODELS, RECIPE, default_model, training_code_sha256
from numforge.training import RunSpec, loop
from numforge.training.threads import usable_cores

pytestmark = pytest.mark.skipif(locks.fcntl is None, reason="no flock on this system: nothing is locked")
STEPS = 3


# a 1-layer model of width 8, ``STEPS`` steps, a checkpoint a step: as ``RunSpec`` fields, and as the train flags
TINY_MODEL = {"num_layers": 1, "d_model": 8, "num_heads": 2}
TINY_SETTINGS = {"seq_len": 8, "batch_size": 2, "max_steps": STEPS, "eval_every": 2, "save_every": 1}


def tiny_fields(corpus, cache, model=(), settings=(), **more) -> dict:
    """The ``RunSpec`` fields of the tiny run on ``corpus`` with the cache ``cache`` (JSON: a subprocess takes them)."""
    return {
        "data": str(corpus),
        "cache_dir": str(cache),
        "vocab_size": 270,
        "model": TINY_MODEL | dict(model),
        "settings": TINY_SETTINGS | dict(settings),
        **more,
    }


def tiny_spec(corpus, cache, **changes) -> RunSpec:
    return RunSpec(**tiny_fields(corpus, cache, **changes))


def tiny_flags(corpus) -> list[str]:
    """The same run as ``numforge train`` flags."""
    flags = {
        "--data": corpus, "--vocab-size": 270, "--layers": 1, "--d-model": 8, "--heads": 2, "--seq-len": 8,
        "--batch-size": 2, "--max-steps": STEPS, "--eval-every": 2, "--save-every": 1,
    }  # fmt: skip
    return [str(x) for pair in flags.items() for x in pair]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(STUDY_TEXT * 4, encoding="utf-8")
    return path


def trained(said) -> bool:
    return any("not cached yet: training it once" in line for line in said)


def params_of(model) -> dict:
    return {name: np.asarray(value) for name, value in model.params.items()}


def test_trained_once_as_numforge_train_trains_it_then_read_from_the_cache(tmp_path, corpus, monkeypatch):
    cache, said = tmp_path / "cache", []
    model, _, about, path = default_model(tiny_spec(corpus, cache), said.append)
    assert trained(said) and path.parent == cache / MODELS and latest_checkpoint_dir(path).name == f"ckpt-{STEPS:08d}"
    assert about.startswith(f"the default model: trained once on {corpus}, {STEPS} steps, cached at {path} (1 layers")
    assert json.loads((path / RECIPE).read_text())["settings"]["max_steps"] == STEPS
    assert sorted(p.name for p in (cache / MODELS).iterdir()) == [path.name]  # no lock, no temporary left
    command = ["train", "--no-progress", *tiny_flags(corpus), "--cache-dir", str(cache), "--out", str(tmp_path / "run")]
    assert main(command) == 0
    by_the_command = params_of(load_model(tmp_path / "run")[0])
    assert by_the_command.keys() == params_of(model).keys()
    for name, value in params_of(model).items():
        np.testing.assert_array_equal(value, by_the_command[name], err_msg=name)  # bit for bit the same run

    monkeypatch.setattr(_default_model, "train", lambda *args, **kwargs: pytest.fail("trained again"))
    said.clear()
    again, _, about_again, path_again = default_model(tiny_spec(corpus, cache), said.append)
    assert (path_again, about_again, said) == (path, about, [])
    for name, value in params_of(again).items():
        np.testing.assert_array_equal(value, params_of(model)[name])


def test_a_damaged_cached_model_is_trained_again(tmp_path, corpus):
    cache = tmp_path / "cache"
    path = default_model(tiny_spec(corpus, cache), lambda _: None)[3]
    (latest_checkpoint_dir(path) / "params.npz").write_bytes(b"not a zip")
    said = []
    model, _, _, again = default_model(tiny_spec(corpus, cache), said.append)
    assert again == path and trained(said) and any("does not load" in line and "params.npz" in line for line in said)
    assert latest_checkpoint_dir(path).name == f"ckpt-{STEPS:08d}"


def test_a_change_to_anything_that_makes_the_weights_trains_another_model(tmp_path, corpus, monkeypatch):
    cache = tmp_path / "cache"
    first = default_model(tiny_spec(corpus, cache), lambda _: None)[3]
    paths = {first}
    changes = {  # what changes: on disk or in the code (a function that makes the change), or in the RunSpec
        "the corpus's bytes": (lambda: corpus.write_text(STUDY_TEXT * 4 + "!", encoding="utf-8"), {}),
        "the tokenizer": (None, {"vocab_size": 271}),
        "the config": (None, {"model": {"activation": "relu"}}),
        "the training settings": (None, {"settings": {"lr": 0.002}}),
        "the thread count": (None, {"threads": usable_cores() + 1}),
        "numforge's code": (lambda: monkeypatch.setattr(_default_model, "training_code_sha256", lambda: "0" * 64), {}),
    }
    for change, (make, fields) in changes.items():
        if make is not None:
            make()
        said = []
        path = default_model(tiny_spec(corpus, cache, **fields), said.append)[3]
        assert trained(said) and path not in paths, change
        paths.add(path)
    assert {p.name for p in (cache / MODELS).iterdir()} == {p.name for p in paths}  # each cached whole, none replaced


def test_the_code_hash_covers_the_version_and_the_training_code_not_the_study_tools(tmp_path):
    for name, text in {
        "__init__.py": '__version__ = "0.1.0"\n',
        "ops/a.py": "x = 1\n",
        "study/b.py": "y = 1\n",
    }.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    before = training_code_sha256(tmp_path)
    (tmp_path / "study" / "b.py").write_text("y = 2\n")
    assert training_code_sha256(tmp_path) == before
    (tmp_path / "__init__.py").write_text('__version__ = "0.1.1"\n')
    bumped = training_code_sha256(tmp_path)
    (tmp_path / "ops" / "a.py").write_text("x = 2\n")
    assert len({before, bumped, training_code_sha256(tmp_path)}) == 3


def test_ctrl_c_while_it_trains_caches_nothing(tmp_path, corpus, monkeypatch):
    cache, said = tmp_path / "cache", []
    signal_at(monkeypatch, loop, "train_step", 2, signal.SIGINT)  # Ctrl-C during the second step
    with pytest.raises(KeyboardInterrupt) as stopped:
        default_model(tiny_spec(corpus, cache), said.append)
    assert stopped.value.exit_status == 130 and "nothing is cached" in said[-1]
    assert not (cache / MODELS).exists()  # neither the model, nor its temporary, nor the lock (nor the directory)
    monkeypatch.undo()
    said.clear()
    path = default_model(tiny_spec(corpus, cache), said.append)[3]
    assert trained(said) and latest_checkpoint_dir(path).name == f"ckpt-{STEPS:08d}"


STARTER = """
import json, os, signal, sys
from numforge.commands._default_model import default_model
from numforge.training import RunSpec
from numforge.training import loop
if sys.argv[2] == "kill":  # killed outright in its second step, after the first step's checkpoint
    step = loop.train_step
    def killed_in_step_2(run, parallel):
        if run.step == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return step(run, parallel)
    loop.train_step = killed_in_step_2
spec = RunSpec(**json.loads(sys.argv[3]))
print("served", default_model(spec, lambda text: print(text, flush=True))[3], flush=True)
"""


def start(cache, how, corpus) -> subprocess.Popen:
    argv = [sys.executable, "-c", STARTER, str(cache), how, json.dumps(tiny_fields(corpus, cache))]
    return subprocess.Popen(argv, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_trainer_killed_outright_leaves_nothing_that_is_served(tmp_path, corpus):
    cache = tmp_path / "cache"
    killed = start(cache, "kill", corpus)
    assert killed.wait(timeout=120) == -signal.SIGKILL
    (left,) = (p for p in (cache / MODELS).iterdir() if p.name != locks.LOCK_FILE)  # the lock file stays, unlocked
    # a hidden temporary holding a complete-looking run at step 1
    assert left.name.startswith(".") and left.name.endswith(".tmp") and (left / "ckpt-00000001").is_dir()
    said = []
    path = default_model(tiny_spec(corpus, cache), said.append)[3]
    assert trained(said) and latest_checkpoint_dir(path).name == f"ckpt-{STEPS:08d}"
    assert sorted(p.name for p in (cache / MODELS).iterdir()) == [path.name]  # the temporary removed


def test_two_starts_at_once_train_once_and_serve_the_same_model(tmp_path, corpus):
    cache = tmp_path / "cache"
    held = locks.DirectoryLock(cache / MODELS, "the cache of default models")  # both find it busy, then race
    starters = [start(cache, "wait", corpus) for _ in range(2)]
    try:
        for starter in starters:
            line = starter.stdout.readline()
            assert "in use by process" in line and "waiting for it" in line, line + starter.stderr.read()
        held.release()
        outputs = [starter.communicate(timeout=120)[0] for starter in starters]
    finally:
        held.release()
        for starter in starters:
            if starter.poll() is None:
                starter.kill()
    assert [starter.returncode for starter in starters] == [0, 0]
    assert sum("not cached yet" in out for out in outputs) == 1, outputs
    served = {out.splitlines()[-1] for out in outputs}
    assert len(served) == 1 and served.pop().startswith(f"served {cache / MODELS}")


def test_the_studio_without_checkpoint_serves_the_default_model_and_follows_its_run(
    tmp_path, corpus, monkeypatch, capsys
):
    cache, served = tmp_path / "cache", []
    monkeypatch.setattr(studio, "default_model", lambda say: default_model(tiny_spec(corpus, cache), say))

    def stop_at_once(server):  # Ctrl-C as soon as it serves
        served.append(server.studio)
        raise KeyboardInterrupt

    monkeypatch.setattr(studio.StudioServer, "serve_forever", stop_at_once)
    for _ in range(2):
        assert main(["studio", "--port", "0", "--no-browser"]) == 0
    printed = capsys.readouterr()
    (path,) = (cache / MODELS).iterdir()
    line = f"numforge studio: the default model: trained once on {corpus}, {STEPS} steps, cached at {path} (1 layers"
    assert printed.out.count(line) == 2 and printed.err.count("not cached yet") == 1  # trained by the first only
    assert f"the Training view follows {path / 'loss.csv'}" in printed.out
    assert [s.run_dir for s in served] == [path, path] and served[0].source == served[1].source
