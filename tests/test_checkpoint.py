"""Checkpoints: round trip, atomic replacement, no pickles, clear errors."""

import json

import numpy as np
import pytest
from helpers import randn, reseal

from numforge import atomic, backend, checkpoint


def fake_run_state(seed=0):
    params = {
        "token_embedding": randn(5, 3, dtype="float32", seed=seed),
        "final_norm.weight": randn(3, dtype="float32", seed=seed + 1),
    }
    optimizer_state = {
        "step": 4,
        "hyper": {"lr": 0.001, "betas": [0.9, 0.999]},
        "m": {k: a * 0.5 for k, a in params.items()},
        "v": {k: a * a for k, a in params.items()},
    }
    return dict(
        params=params,
        optimizer_state=optimizer_state,
        config={"d_model": 3},
        tokenizer={"kind": "test"},
        state={"step": 4, "sampler": {"batches_drawn": 4}},
    )


def test_round_trip_is_exact(tmp_path):
    saved = fake_run_state()
    where = checkpoint.save_checkpoint(tmp_path, step=4, **saved)
    loaded = checkpoint.load_checkpoint(tmp_path)
    assert loaded.path == where == tmp_path / "ckpt-00000004"
    for name, a in saved["params"].items():
        assert loaded.params[name].dtype == np.float32
        np.testing.assert_array_equal(loaded.params[name], backend.to_numpy(a))
        np.testing.assert_array_equal(
            loaded.optimizer_state["m"][name], backend.to_numpy(saved["optimizer_state"]["m"][name])
        )
        np.testing.assert_array_equal(
            loaded.optimizer_state["v"][name], backend.to_numpy(saved["optimizer_state"]["v"][name])
        )
    assert loaded.optimizer_state["step"] == 4 and loaded.optimizer_state["hyper"]["lr"] == 0.001
    assert loaded.config == {"d_model": 3} and loaded.tokenizer == {"kind": "test"}
    assert loaded.state == saved["state"]
    assert checkpoint.load_checkpoint(where).path == where  # a checkpoint directory works too


def test_newer_checkpoint_replaces_older(tmp_path):
    checkpoint.save_checkpoint(tmp_path, step=1, **fake_run_state(0))
    checkpoint.save_checkpoint(tmp_path, step=2, **fake_run_state(5))
    assert (tmp_path / "LATEST").read_text().strip() == "ckpt-00000002"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LATEST", "ckpt-00000002"]
    loaded = checkpoint.load_checkpoint(tmp_path)
    np.testing.assert_array_equal(
        loaded.params["token_embedding"], backend.to_numpy(fake_run_state(5)["params"]["token_embedding"])
    )


def test_saving_the_same_step_twice_keeps_a_valid_checkpoint(tmp_path):
    checkpoint.save_checkpoint(tmp_path, step=3, **fake_run_state(0))
    checkpoint.save_checkpoint(tmp_path, step=3, **fake_run_state(9))
    loaded = checkpoint.load_checkpoint(tmp_path)
    np.testing.assert_array_equal(
        loaded.params["token_embedding"], backend.to_numpy(fake_run_state(9)["params"]["token_embedding"])
    )
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("ckpt-")]) == 1


def test_crash_mid_write_leaves_previous_checkpoint_intact(tmp_path, monkeypatch):
    checkpoint.save_checkpoint(tmp_path, step=1, **fake_run_state(0))
    before = {p.name: p.read_bytes() for p in (tmp_path / "ckpt-00000001").iterdir()}

    real_write_files = checkpoint._write_checkpoint_files

    def crash_after_params(directory, *args):
        real_write_files(directory, *args)
        (directory / "state.json").write_text('{"half": ', encoding="utf-8")
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(checkpoint, "_write_checkpoint_files", crash_after_params)
    with pytest.raises(OSError, match="simulated"):
        checkpoint.save_checkpoint(tmp_path, step=2, **fake_run_state(5))

    assert sorted(p.name for p in tmp_path.iterdir()) == ["LATEST", "ckpt-00000001"]  # temp dir removed
    after = {p.name: p.read_bytes() for p in (tmp_path / "ckpt-00000001").iterdir()}
    assert after == before
    loaded = checkpoint.load_checkpoint(tmp_path)
    np.testing.assert_array_equal(
        loaded.params["token_embedding"], backend.to_numpy(fake_run_state(0)["params"]["token_embedding"])
    )


def test_pickled_arrays_are_refused(tmp_path):
    where = checkpoint.save_checkpoint(tmp_path, step=1, **fake_run_state())
    np.savez(where / "params.npz", token_embedding=np.array([{"evil": 1}], dtype=object))
    reseal(where)
    with pytest.raises(ValueError, match=r"params.npz: .*holds Python objects \(a pickle\)"):
        checkpoint.load_checkpoint(tmp_path)


def test_optimizer_moments_that_disagree_with_params_are_named(tmp_path):
    where = checkpoint.save_checkpoint(tmp_path, step=1, **fake_run_state())
    np.savez(
        where / "optimizer.npz",
        **{
            "m/token_embedding": np.zeros((5, 4)),
            "m/final_norm.weight": np.zeros(3),
            "v/token_embedding": np.zeros((5, 3)),
            "v/final_norm.weight": np.zeros(3),
        },
    )
    reseal(where)
    with pytest.raises(
        ValueError, match=r"optimizer.npz 'm'\['token_embedding'\] has shape \(5, 4\), the parameter has \(5, 3\)"
    ):
        checkpoint.load_checkpoint(tmp_path)


def test_missing_and_incomplete_checkpoints_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint in"):
        checkpoint.load_checkpoint(tmp_path)
    where = checkpoint.save_checkpoint(tmp_path, step=1, **fake_run_state())
    (where / "config.json").unlink()
    with pytest.raises(ValueError, match="incomplete: missing config.json"):
        checkpoint.load_checkpoint(tmp_path)


def test_atomic_path_leaves_old_file_when_the_write_fails(tmp_path):
    path = tmp_path / "f.json"
    checkpoint.write_json_atomic(path, {"a": 1})
    with pytest.raises(RuntimeError, match="crash"):
        with atomic.atomic_path(path) as temp:
            temp.write_text('{"a": 2, "b"', encoding="utf-8")
            raise RuntimeError("crash")
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_restore_model_round_trip_and_config_mismatch(tmp_path):
    from numforge.model import GPT, GPTConfig

    config = GPTConfig(vocab_size=50, max_seq_len=8, d_model=8, num_heads=2, num_layers=1)
    model = GPT(config, seed=4)
    state = fake_run_state()
    state.update(params=model.params, config=config.to_dict())
    state["optimizer_state"].update(m=model.params, v=model.params)
    checkpoint.save_checkpoint(tmp_path, step=1, **state)
    restored = checkpoint.restore_model(checkpoint.load_checkpoint(tmp_path))
    for name, a in model.params.items():
        np.testing.assert_array_equal(backend.to_numpy(restored.params[name]), backend.to_numpy(a))

    loaded = checkpoint.load_checkpoint(tmp_path)
    loaded.config["d_model"] = 16
    with pytest.raises(ValueError, match=r"config.json and params.npz disagree: .*token_embedding"):
        checkpoint.restore_model(loaded)


def test_a_checkpoint_from_before_checksums_still_loads(tmp_path):
    """numforge 0.1.0 wrote no checksums.json: its checkpoints load, with every other check in place."""
    where = checkpoint.save_checkpoint(tmp_path, step=2, **fake_run_state())
    with_sums = checkpoint.load_checkpoint(tmp_path)
    (where / checkpoint.CHECKSUMS).unlink()
    without = checkpoint.load_checkpoint(tmp_path)
    assert without.state == with_sums.state and without.config == with_sums.config
    for name, array in with_sums.params.items():
        np.testing.assert_array_equal(without.params[name], array)
