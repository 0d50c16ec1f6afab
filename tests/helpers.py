"""Helpers the tests share: arrays of the selected backend, a gradient-check assertion, tiny models and runs."""

import contextlib
import json
import os
import signal
import threading
from pathlib import Path

import numpy as np

from numforge import backend
from numforge.gradcheck import format_results
from numforge.model.positions import POSITIONS
from numforge.ops.activations import ACTIVATIONS
from numforge.ops.norms import NORMS

REGISTRIES = {"norm": NORMS, "activation": ACTIVATIONS, "position": POSITIONS}  # GPTConfig field -> its registry
# every registered component, "field=name" -> the GPTConfig options that select it: the tests that compare the
# textbook model, the fast model and the torch twin run each, so a new entry is compared as soon as it is entered
REGISTERED = {f"{field}={name}": {field: name} for field, registry in REGISTRIES.items() for name in registry}


def randn(*shape, dtype="float64", seed=0):
    """A standard-normal array of the selected backend (drawn with NumPy, so identical on both)."""
    values = np.random.default_rng(seed).standard_normal(shape)
    return backend.asarray(values, dtype=dtype)


def assert_gradients_pass(rows):
    """Every gradient-check row passed; on failure the message is the whole table."""
    assert all(r.passed for r in rows), format_results(rows)


# ---------------------------------------------------------------- the study tools' tests

STUDY_TEXT = "the cat sat on the mat. the dog sat on the log. " * 5
STUDY_PROMPT = "the cat sat on"


def tiny_model(tokenizer, dtype="float32", **overrides):
    """A 2-layer GPT of width 8 on ``tokenizer`` (seed 0); ``overrides`` change its GPTConfig."""
    from numforge.model import GPT, GPTConfig

    settings = dict(vocab_size=tokenizer.vocab_size, max_seq_len=16, d_model=8, num_heads=2, num_layers=2)
    return GPT(GPTConfig(**{**settings, **overrides}), seed=0, dtype=dtype)


IDS = [3, 17, 5, 5, 28, 11, 2]  # a prompt for the models below
GPT2_TINY = dict(vocab_size=30, max_seq_len=16, d_model=16, num_heads=2, num_layers=2, attention="plain")  # P kept
LLAMA_TINY = dict(  # 4 query heads over 2 key/value heads, a window of 3
    vocab_size=30, max_seq_len=16, d_model=16, num_heads=4, num_kv_heads=2, num_layers=2, norm="rmsnorm",
    position="rope", activation="swiglu", use_bias=False, tie_weights=False, sliding_window=3,
)  # fmt: skip


class Letters:
    """A tokenizer of 30 one-letter tokens (the study views only label the prompt's tokens with it)."""

    def has_token(self, i):
        return True

    def token_bytes(self, i):
        return bytes([97 + i % 26])


def sharp_model(options, seed=0):
    """A float64 model of ``options`` whose parameters are drawn large enough that its attention is far from
    uniform (the study tests compare it with ``tests/numpy_forward.py``)."""
    from numforge.model import GPT, GPTConfig

    model = GPT(GPTConfig(**options), seed=seed, dtype="float64")
    rng = np.random.default_rng(seed)
    for name, p in model.params.items():
        p[...] = 1 + 0.1 * rng.normal(size=p.shape) if "norm" in name else rng.normal(0, 0.6, p.shape)
    return model


def tiny_run(tmp_path, *model_flags: str):
    """Train a 1-layer model for 2 steps with ``numforge train`` into ``tmp_path / "run"``; return that path.
    ``model_flags`` are more flags of its model (``"--arch", "llama"``)."""
    from numforge.cli import main

    data = tmp_path / "corpus.txt"
    data.write_text(STUDY_TEXT * 4, encoding="utf-8")
    run = tmp_path / "run"
    flags = {
        "--data": data, "--vocab-size": 270, "--cache-dir": tmp_path / "cache", "--out": run, "--max-steps": 2,
        "--save-every": 2, "--eval-every": 2, "--layers": 1, "--d-model": 8, "--heads": 2, "--seq-len": 8,
        "--batch-size": 2,
    }  # fmt: skip
    assert main(["train", "--no-progress"] + [str(x) for pair in flags.items() for x in pair] + list(model_flags)) == 0
    return run


def reseal(checkpoint_dir):
    """Record the files of a checkpoint directory edited by a test in its checksums.json, as a crafted
    (not damaged) checkpoint would: what is loaded next is then checked by the readers themselves."""
    from numforge import checkpoint

    sums = {name: checkpoint.file_sha256(checkpoint_dir / name) for name in checkpoint.FILES}
    (checkpoint_dir / checkpoint.CHECKSUMS).write_text(json.dumps(sums))


WORDS = "the cat sat on a mat while one dog ran to the old red barn and back".split()


def make_tiny_run(root, seed=5, steps=4, seq_len=8, words=600):
    """A finished run in ``root/run`` (a 1-layer, d_model 8 model of context ``seq_len``, 4 steps on 3 KB of
    words), its corpus ``root/corpus.txt`` and its caches in ``root/cache``: every file a run writes, in a
    fraction of a second."""
    from numforge.data import load_or_train_tokenizer
    from numforge.training import TrainSettings, new_run, train

    corpus = root / "corpus.txt"
    rng = np.random.default_rng(seed)
    corpus.write_text(" ".join(WORDS[i] for i in rng.integers(0, len(WORDS), words)), encoding="utf-8")
    tokenizer = load_or_train_tokenizer(corpus, 270, cache_dir=root / "cache", say=lambda _: None)
    settings = TrainSettings(
        max_steps=steps, batch_size=2, seq_len=seq_len, warmup_steps=1, schedule_steps=8, eval_every=2,
        eval_batches=1, save_every=2, seed=seed,
    )  # fmt: skip
    model = {"num_layers": 1, "d_model": 8, "num_heads": 2}
    run = new_run(root / "run", settings, model, tokenizer, data=corpus, cache_dir=root / "cache")
    train(run, progress=False, say=lambda _: None)
    return root / "run"


def signal_at(monkeypatch, owner, name: str, call: int, *signals) -> None:
    """At the ``call``-th call of ``owner.name``, raise ``signals`` in this process, then make the call: a stop
    signal that arrives in that phase of a job, deterministically."""
    original, calls = getattr(owner, name), []

    def hooked(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            for signum in signals:
                signal.raise_signal(signum)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, hooked)


def subprocess_env() -> dict:
    """The environment of a ``python -m numforge`` child: this checkout first on its path, one BLAS thread."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return env


def processes_mentioning(text: str) -> list[int]:
    """The ids of the running processes whose command line holds ``text`` (Linux's /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(entry.name))
        except OSError:  # it ended while we looked
            pass
    return found


def gated(new_chat, gate: threading.Event):
    """``new_chat``'s sessions, each reply waiting after its third piece until the test opens ``gate`` (so the test
    hangs up while the server is under way, and no sleep decides what it sampled)."""

    def new_gated(model, tokenizer, **settings):
        session = new_chat(model, tokenizer, **settings)
        send = session.send

        def gated_send(text):
            with contextlib.closing(send(text)) as reply:
                for n, piece in enumerate(reply):
                    if n == 3:
                        assert gate.wait(60), "the test never opened the gate"
                    yield piece

        session.send = gated_send
        return session

    return new_gated


def chat_reference(loaded, system=None):
    """The oracle of the studio's chat: a ``ChatSession`` made as the studio makes its own (its seed and reply
    length), driven directly, and the notices it gave. ``loaded``: ``(model, tokenizer, new_chat)``."""
    from numforge.study.studio import CHAT_SEED, MAX_CHAT_TOKENS

    model, tokenizer, new_chat = loaded
    notices = []
    session = new_chat(
        model, tokenizer, system=system, seed=CHAT_SEED, max_new_tokens=MAX_CHAT_TOKENS, on_notice=notices.append
    )
    return session, notices
