"""The training loop: it learns, resumes bit-exactly, survives Ctrl-C and stops on a non-finite loss."""

import signal

import numpy as np
import pytest

from numforge import checkpoint, cli
from numforge.backend import to_numpy
from numforge.data import load_or_train_tokenizer
from numforge.model import GPTConfig
from numforge.training import LOSS_CSV, TrainingDiverged, TrainSettings, dropout_rng, new_run, resume_run, train
from numforge.training.logs import read_loss_csv

MODEL = {"num_layers": 1, "d_model": 16, "num_heads": 2, "activation": "gelu"}
VOCAB = 280  # 256 bytes + <|endoftext|> + 23 merges
WORDS = "the cat sat on a mat while one dog ran to the old red barn and back".split()


@pytest.fixture
def corpus(tmp_path):
    """About 5 KB of word salad: enough for 16-token windows, learnable in a few dozen steps."""
    rng = np.random.default_rng(0)
    path = tmp_path / "corpus.txt"
    path.write_text(" ".join(WORDS[i] for i in rng.integers(0, len(WORDS), 1200)), encoding="utf-8")
    return path


def settings(**changes):
    base = dict(
        max_steps=6,
        batch_size=4,
        seq_len=16,
        lr=1e-2,
        min_lr=1e-3,
        warmup_steps=2,
        schedule_steps=12,
        eval_every=3,
        eval_batches=2,
        save_every=3,
        seed=5,
    )
    return TrainSettings(**{**base, **changes})


def start(run_dir, corpus, cache, drop_prob=0.0, **changes):
    tokenizer = load_or_train_tokenizer(corpus, VOCAB, cache_dir=cache, say=lambda _: None)
    return new_run(
        run_dir, settings(**changes), {**MODEL, "drop_prob": drop_prob}, tokenizer, data=corpus, cache_dir=cache
    )


def params_of(run_dir):
    return checkpoint.load_checkpoint(run_dir).params


def assert_same_arrays(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert np.array_equal(a[name], b[name]), f"{name} differs"


def test_resume_is_bit_identical_to_training_straight(tmp_path, corpus):
    straight = start(tmp_path / "straight", corpus, tmp_path)
    assert train(straight, progress=False) == "done"

    first = start(tmp_path / "split", corpus, tmp_path, max_steps=3)
    train(first, progress=False)
    resumed = resume_run(tmp_path / "split", {"max_steps": 6}, cache_dir=tmp_path)
    assert resumed.step == 3
    train(resumed, progress=False)

    a, b = checkpoint.load_checkpoint(tmp_path / "straight"), checkpoint.load_checkpoint(tmp_path / "split")
    assert_same_arrays(a.params, b.params)
    assert_same_arrays(a.optimizer_state["m"], b.optimizer_state["m"])
    assert a.optimizer_state["step"] == b.optimizer_state["step"] == 6
    assert a.state["sampler"] == b.state["sampler"]
    assert (tmp_path / "straight" / LOSS_CSV).read_text() == (tmp_path / "split" / LOSS_CSV).read_text()
    assert not np.array_equal(
        a.params["token_embedding"], start(tmp_path / "fresh", corpus, tmp_path).model.params["token_embedding"]
    )


def test_resume_with_dropout_is_bit_identical_to_training_straight(tmp_path, corpus):
    lengths = dict(schedule_steps=40, eval_every=20, save_every=20)
    train(start(tmp_path / "straight", corpus, tmp_path, drop_prob=0.1, max_steps=40, **lengths), progress=False)
    train(start(tmp_path / "split", corpus, tmp_path, drop_prob=0.1, max_steps=20, **lengths), progress=False)
    resumed = resume_run(tmp_path / "split", {"max_steps": 40}, cache_dir=tmp_path)
    assert resumed.model.config.drop_prob == 0.1
    train(resumed, progress=False)
    assert_same_arrays(params_of(tmp_path / "straight"), params_of(tmp_path / "split"))
    assert (tmp_path / "straight" / LOSS_CSV).read_text() == (tmp_path / "split" / LOSS_CSV).read_text()

    train(start(tmp_path / "no-dropout", corpus, tmp_path, max_steps=40, **lengths), progress=False)
    embedding = params_of(tmp_path / "no-dropout")["token_embedding"]
    assert not np.array_equal(embedding, params_of(tmp_path / "straight")["token_embedding"])  # dropout was on


def test_dropout_masks_depend_on_the_seed_the_step_and_the_row_only():
    on, off = (
        GPTConfig(vocab_size=8, max_seq_len=4, d_model=4, num_heads=1, num_layers=1, drop_prob=p) for p in (0.1, 0.0)
    )
    assert dropout_rng(off, seed=5, step=3, rows=range(4)) is None
    whole, part = dropout_rng(on, 5, 1, range(4)), dropout_rng(on, 5, 1, range(2, 4))
    for whole_shape, part_shape in (((4, 3, 2), (2, 3, 2)), ((12, 2), (6, 2))):  # (B,T,C), then (B*T,C): layer 2
        rows_of_whole = to_numpy(whole.random(whole_shape, np.float64)).reshape(4, 6)
        rows_of_part = to_numpy(part.random(part_shape, np.float64)).reshape(2, 6)
        assert np.array_equal(rows_of_whole[2:], rows_of_part)  # rows 2, 3: the same masks however split
    draws = {
        (seed, step): to_numpy(dropout_rng(on, seed, step, range(2)).random((2, 2), np.float64)).tolist()
        for seed in (5, 6)
        for step in (0, 1)
    }
    assert to_numpy(dropout_rng(on, 5, 1, range(2)).random((2, 2), np.float64)).tolist() == draws[5, 1]
    assert len({str(d) for d in draws.values()}) == 4
    assert np.random.default_rng(5).random(2).tolist() not in (row for d in draws.values() for row in d)
    with pytest.raises(ValueError, match=r"a draw of shape \(3, 2\) does not hold the 2 rows range\(0, 2\)"):
        dropout_rng(on, 5, 1, range(2)).random((3, 2), np.float64)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"batch_size": 0}, "batch_size must be a positive integer, got 0"),
        ({"save_every": True}, "save_every must be a positive integer, got True"),
        ({"warmup_steps": -1}, "warmup_steps must be an integer >= 0, got -1"),
    ],
)
def test_settings_name_a_bad_value(change, message):
    with pytest.raises(ValueError, match=message):
        settings(**change)


def test_loss_log_has_a_row_per_step_and_validation_every_eval(tmp_path, corpus):
    run = start(tmp_path / "run", corpus, tmp_path)
    train(run, progress=False)
    rows = read_loss_csv(tmp_path / "run" / LOSS_CSV, up_to_step=10**9)
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r["val_loss"] != "" for r in rows] == [False, False, True, False, False, True]
    assert float(rows[0]["lr"]) == pytest.approx(5e-3)  # warmup: lr * 1/2 at step 0
    pytest.importorskip("matplotlib")
    assert (tmp_path / "run" / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_it_learns(tmp_path, corpus):
    run = start(tmp_path / "run", corpus, tmp_path, max_steps=40, schedule_steps=40, eval_every=40)
    train(run, progress=False)
    rows = read_loss_csv(tmp_path / "run" / LOSS_CSV, up_to_step=40)
    first, last_val = float(rows[0]["train_loss"]), float(rows[-1]["val_loss"])
    assert first == pytest.approx(np.log(VOCAB), abs=0.3)  # an untrained model is near uniform
    assert last_val < first - 1.5, f"validation loss {last_val} after 40 steps; it started at {first}"


@pytest.mark.parametrize("save_every", [100, 4])  # 4: the interrupted step is also a save step
def test_ctrl_c_checkpoints_the_finished_step_and_resumes_exactly(tmp_path, corpus, save_every):
    straight = start(tmp_path / "straight", corpus, tmp_path)
    train(straight, progress=False)

    run = start(tmp_path / "run", corpus, tmp_path, save_every=save_every)
    draw = run.sampler.next_batch

    def interrupt_during_step_4():
        if run.sampler.batches_drawn == 3:
            signal.raise_signal(signal.SIGINT)  # arrives mid-step; the step still completes
        return draw()

    run.sampler.next_batch = interrupt_during_step_4
    messages = []
    assert train(run, progress=False, say=messages.append) == "interrupted"
    assert checkpoint.load_checkpoint(tmp_path / "run").state["step"] == 4
    assert "checkpoint at step 4" in messages[-1]
    checkpoints = sorted(p.name for p in (tmp_path / "run").iterdir() if p.name.startswith("ckpt-"))
    assert checkpoints[-1] == "ckpt-00000004"  # written once, not a second time beside itself
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler restored

    train(resume_run(tmp_path / "run", {"save_every": 100}, cache_dir=tmp_path), progress=False)
    assert_same_arrays(params_of(tmp_path / "straight"), params_of(tmp_path / "run"))


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, corpus):
    run = start(tmp_path / "run", corpus, tmp_path, save_every=2)
    forward = run.model.forward
    on_disk = {}

    def nan_at_step_4(x, y, *, rng=None, for_backward=True, recompute=False, segments=None):
        loss, cache = forward(x, y, rng=rng, for_backward=for_backward, recompute=recompute, segments=segments)
        if for_backward and run.step == 3:
            on_disk.update({p.name: p.read_bytes() for p in (tmp_path / "run" / "ckpt-00000002").iterdir()})
            loss = float("nan")
        return loss, cache

    run.model.forward = nan_at_step_4
    with pytest.raises(TrainingDiverged, match=r"step 4: the loss is nan .*ckpt-00000002\) is untouched"):
        train(run, progress=False)
    assert checkpoint.latest_checkpoint_dir(tmp_path / "run").name == "ckpt-00000002"
    assert on_disk and on_disk == {p.name: p.read_bytes() for p in (tmp_path / "run" / "ckpt-00000002").iterdir()}


def test_resume_refuses_a_changed_corpus(tmp_path, corpus):
    train(start(tmp_path / "run", corpus, tmp_path, max_steps=1), progress=False)
    corpus.write_text(corpus.read_text() + " more words", encoding="utf-8")
    with pytest.raises(ValueError, match="changed since .* was written"):
        resume_run(tmp_path / "run", cache_dir=tmp_path)


def test_tokenizer_is_cached_by_corpus_and_vocab_size(tmp_path, corpus, monkeypatch):
    first = load_or_train_tokenizer(corpus, VOCAB, cache_dir=tmp_path, say=lambda _: None)
    from numforge.tokenizer import BPETokenizer

    monkeypatch.setattr(
        BPETokenizer, "train_from_chunk_counts", lambda *a, **k: pytest.fail("trained again despite the cache")
    )
    assert load_or_train_tokenizer(corpus, VOCAB, cache_dir=tmp_path).to_dict() == first.to_dict()


def test_command_line_train_resume_and_sample(tmp_path, corpus, capsys):
    common = [
        "--data",
        str(corpus),
        "--cache-dir",
        str(tmp_path),
        "--vocab-size",
        str(VOCAB),
        "--layers",
        "1",
        "--d-model",
        "16",
        "--heads",
        "2",
        "--seq-len",
        "16",
        "--batch-size",
        "4",
        "--no-progress",
    ]
    out = str(tmp_path / "run")
    assert (
        cli.main(
            [
                "train",
                *common,
                "--out",
                out,
                "--max-steps",
                "2",
                "--eval-every",
                "2",
                "--lr",
                "1e-4",
                "--dropout",
                "0.1",
            ]
        )
        == 0
    )
    assert checkpoint.load_checkpoint(out).state["settings"]["min_lr"] == pytest.approx(1e-5)
    assert checkpoint.load_checkpoint(out).config["drop_prob"] == 0.1
    assert cli.main(["train", *common, "--out", out, "--max-steps", "3"]) == 2
    assert "already holds a checkpoint" in capsys.readouterr().err
    assert cli.main(["train", "--resume", out, "--max-steps", "4", "--d-model", "32"]) == 2
    assert "--d-model cannot change when resuming" in capsys.readouterr().err
    assert cli.main(["train", "--resume", out, "--max-steps", "4", "--dropout", "0.2"]) == 2
    assert "--dropout cannot change when resuming" in capsys.readouterr().err
    assert cli.main(["train", "--resume", out, "--max-steps", "4", "--no-progress", "--cache-dir", str(tmp_path)]) == 0
    assert checkpoint.load_checkpoint(out).state["step"] == 4
    capsys.readouterr()
    assert (
        cli.main(["sample", "--checkpoint", out, "--prompt", "the cat", "--max-new-tokens", "5", "--temperature", "0"])
        == 0
    )
    assert capsys.readouterr().out.startswith("the cat")


@pytest.mark.parametrize("value", ["1", "-0.1", "nan", "half"])
def test_command_line_rejects_a_bad_dropout(capsys, value):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", "--dropout", value])
    assert exit_info.value.code == 2
    assert f"argument --dropout: expected a finite number in [0, 1), got '{value}'" in capsys.readouterr().err


def test_min_lr_is_the_floor_of_the_schedule_a_tenth_of_lr_by_default_and_fixed_on_resume(tmp_path, corpus, capsys):
    common = ["--data", str(corpus), "--cache-dir", str(tmp_path), "--vocab-size", str(VOCAB), "--layers", "1",
              "--d-model", "16", "--heads", "2", "--seq-len", "16", "--batch-size", "4", "--no-progress",
              "--warmup-steps", "1", "--schedule-steps", "3", "--eval-every", "5"]  # fmt: skip
    out = str(tmp_path / "run")
    assert cli.main(["train", *common, "--out", out, "--max-steps", "5", "--lr", "0.01", "--min-lr", "0.002"]) == 0
    assert checkpoint.load_checkpoint(out).state["settings"]["min_lr"] == 0.002
    lrs = [float(row["lr"]) for row in read_loss_csv(tmp_path / "run" / LOSS_CSV, 5)]
    assert lrs[0] == 0.01 and lrs[1] == 0.01 and lrs[3:] == [0.002, 0.002]  # warmup, peak, cosine, then the floor
    assert 0.002 < lrs[2] < 0.01
    assert cli.main(["train", "--resume", out, "--max-steps", "6", "--min-lr", "0.001"]) == 2
    assert "--min-lr cannot change when resuming" in capsys.readouterr().err

    default = str(tmp_path / "default")
    assert cli.main(["train", *common, "--out", default, "--max-steps", "1", "--lr", "0.02"]) == 0
    assert checkpoint.load_checkpoint(default).state["settings"]["min_lr"] == 0.02 / 10
    assert TrainSettings.for_new_run().min_lr == TrainSettings.lr / 10  # the floor of the runs made before --min-lr


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--min-lr", "0.01"], "--min-lr (0.01) must be <= --lr (0.003)"),
        (["--lr", "0.001", "--min-lr", "0.002"], "--min-lr (0.002) must be <= --lr (0.001)"),
        (["--min-lr", "-0.1"], "argument --min-lr: expected a finite number >= 0, got '-0.1'"),
        (["--min-lr", "nan"], "argument --min-lr: expected a finite number >= 0, got 'nan'"),
    ],
)
def test_a_bad_min_lr_is_refused_naming_it(tmp_path, capsys, argv, message):
    argv = ["train", "--out", str(tmp_path / "run"), "--cache-dir", str(tmp_path), *argv]
    try:
        status = cli.main(argv)
    except SystemExit as exit_info:  # a flag argparse refuses
        status = exit_info.code
    assert status == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # refused before anything is written


@pytest.mark.parametrize(
    "change, message",
    [
        ({"min_lr": -1e-3}, r"min_lr must be a finite number >= 0, got -0.001"),
        ({"min_lr": 0.1}, r"min_lr \(0.1\) must be <= lr \(0.01\)"),
        ({"lr": 0.0}, r"lr must be a finite number > 0, got 0.0"),
        ({"grad_clip": float("inf")}, r"grad_clip must be a finite number > 0, got inf"),
    ],
)
def test_settings_name_a_bad_rate(change, message):
    with pytest.raises(ValueError, match=message):
        settings(**change)


def test_default_run_directory_is_the_first_free_one(tmp_path, monkeypatch):
    from numforge.commands.train import next_free_run_dir

    monkeypatch.chdir(tmp_path)
    assert str(next_free_run_dir()) == "runs/run-1"
    (tmp_path / "runs" / "run-1").mkdir(parents=True)
    assert str(next_free_run_dir()) == "runs/run-2"


@pytest.mark.parametrize(
    "content, message", [(b"\xff\xfe text", "is not UTF-8 text"), (b"too short", "the corpus is too short")]
)
def test_command_line_rejects_unusable_text(tmp_path, capsys, content, message):
    path = tmp_path / "data.txt"
    path.write_bytes(content)
    argv = [
        "train",
        "--data",
        str(path),
        "--cache-dir",
        str(tmp_path),
        "--vocab-size",
        "257",
        "--out",
        str(tmp_path / "run"),
        "--no-progress",
    ]
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err
