"""AdamW, clipping and the LR schedule against the formulas computed by hand."""

import math

import numpy as np
import pytest
from helpers import randn

from numforge.backend import to_numpy
from numforge.optim import AdamW, clip_grad_norm, warmup_cosine_lr


def make_params(dtype="float64"):
    return {
        "matrix": randn(3, 4, dtype=dtype, seed=1),
        "bias": randn(4, dtype=dtype, seed=2),
        "table": randn(5, 2, dtype=dtype, seed=3),
    }


def make_grads(step, dtype="float64"):
    return {name: randn(*p.shape, dtype=dtype, seed=10 * step + i) for i, (name, p) in enumerate(make_params().items())}


def adamw_by_hand(p, grads_per_step, lr, beta1, beta2, eps, wd, decays):
    """The AdamW formulas, element by element in Python floats."""
    p = [float(x) for x in p.reshape(-1)]
    m = [0.0] * len(p)
    v = [0.0] * len(p)
    for t, g in enumerate(grads_per_step, start=1):
        g = [float(x) for x in g.reshape(-1)]
        for i in range(len(p)):
            if decays:
                p[i] = p[i] - lr * wd * p[i]
            m[i] = beta1 * m[i] + (1 - beta1) * g[i]
            v[i] = beta2 * v[i] + (1 - beta2) * g[i] ** 2
            m_hat = m[i] / (1 - beta1**t)
            v_hat = v[i] / (1 - beta2**t)
            p[i] = p[i] - lr * m_hat / (math.sqrt(v_hat) + eps)
    return np.array(p)


@pytest.mark.parametrize("num_steps", [1, 2])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_steps_match_the_formulas(num_steps, weight_decay):
    params = make_params()
    start = {name: to_numpy(p).copy() for name, p in params.items()}
    lr, betas, eps = 0.01, (0.8, 0.95), 1e-6
    opt = AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    grads = [make_grads(step) for step in range(num_steps)]
    for g in grads:
        opt.step(g)
    assert opt.step_count == num_steps
    for name, p in params.items():
        expected = adamw_by_hand(
            start[name], [to_numpy(g[name]) for g in grads], lr, *betas, eps, weight_decay, decays=start[name].ndim >= 2
        )
        np.testing.assert_allclose(to_numpy(p).reshape(-1), expected, rtol=1e-13, atol=1e-15)
        assert not np.allclose(to_numpy(p), start[name])


def test_decay_applies_to_matrices_only():
    params = make_params()
    start = {name: to_numpy(p).copy() for name, p in params.items()}
    opt = AdamW(params, lr=0.1, weight_decay=0.5)
    opt.step({name: p * 0 for name, p in params.items()})  # zero gradient: only decay moves p
    np.testing.assert_allclose(to_numpy(params["matrix"]), start["matrix"] * 0.95, rtol=1e-14)
    np.testing.assert_allclose(to_numpy(params["table"]), start["table"] * 0.95, rtol=1e-14)
    np.testing.assert_array_equal(to_numpy(params["bias"]), start["bias"])


def test_float32_stays_float32_and_in_place():
    params = make_params("float32")
    ids = {name: id(p) for name, p in params.items()}
    opt = AdamW(params, lr=1e-3, weight_decay=0.1)
    opt.step(make_grads(0, "float32"))
    for name, p in params.items():
        assert p.dtype == np.float32 and id(params[name]) == ids[name]
        assert opt.m[name].dtype == np.float32 and opt.v[name].dtype == np.float32


def test_matches_torch_adamw():
    torch = pytest.importorskip("torch")
    params = make_params()
    tensors = {n: torch.tensor(to_numpy(p).copy(), requires_grad=True) for n, p in params.items()}
    opt = AdamW(params, lr=0.02, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
    # torch decays every tensor it is given; give it the bias in a no-decay group
    torch_opt = torch.optim.AdamW(
        [{"params": [tensors["matrix"], tensors["table"]]}, {"params": [tensors["bias"]], "weight_decay": 0.0}],
        lr=0.02,
        betas=(0.9, 0.99),
        eps=1e-8,
        weight_decay=0.1,
    )
    for step in range(3):
        grads = make_grads(step)
        opt.step(grads)
        for n, t in tensors.items():
            t.grad = torch.tensor(to_numpy(grads[n]).copy())
        torch_opt.step()
    for n, p in params.items():
        np.testing.assert_allclose(to_numpy(p), tensors[n].detach().numpy(), rtol=1e-12, atol=1e-14)


def test_state_dict_round_trip_continues_identically():
    params_a = make_params()
    opt_a = AdamW(params_a, lr=0.01, weight_decay=0.1)
    for step in range(2):
        opt_a.step(make_grads(step))
    state = opt_a.state_dict()
    assert state["step"] == 2 and state["hyper"] == {
        "lr": 0.01,
        "betas": [0.9, 0.999],
        "eps": 1e-8,
        "weight_decay": 0.1,
    }
    params_b = {name: p.copy() for name, p in params_a.items()}
    opt_b = AdamW(params_b, lr=0.5)
    opt_b.load_state_dict(state)
    assert opt_b.lr == 0.01 and opt_b.step_count == 2
    opt_a.step(make_grads(2))
    opt_b.step(make_grads(2))
    for name in params_a:
        np.testing.assert_array_equal(to_numpy(params_a[name]), to_numpy(params_b[name]))


def test_state_dict_is_a_copy():
    params = make_params()
    opt = AdamW(params, lr=0.01)
    opt.step(make_grads(0))
    state = opt.state_dict()
    saved = to_numpy(state["m"]["matrix"]).copy()
    opt.step(make_grads(1))
    np.testing.assert_array_equal(to_numpy(state["m"]["matrix"]), saved)


def test_load_state_dict_rejects_mismatches():
    params = make_params()
    opt = AdamW(params, lr=0.01)
    state = opt.state_dict()
    bad = {**state, "m": {k: v for k, v in state["m"].items() if k != "bias"}}
    with pytest.raises(ValueError, match="bias"):
        opt.load_state_dict(bad)
    bad = {**state, "v": {**state["v"], "table": state["v"]["table"][:2]}}
    with pytest.raises(ValueError, match="table"):
        opt.load_state_dict(bad)
    with pytest.raises(ValueError, match="step"):
        opt.load_state_dict({**state, "step": -1})


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"lr": -1.0}, "lr"),
        ({"lr": 1e-3, "betas": (0.9, 1.0)}, "betas"),
        ({"lr": 1e-3, "eps": 0.0}, "eps"),
        ({"lr": 1e-3, "weight_decay": -0.1}, "weight_decay"),
    ],
)
def test_bad_hyper_parameters_are_named(kwargs, field):
    with pytest.raises(ValueError, match=field):
        AdamW(make_params(), **kwargs)


def test_step_rejects_wrong_grads():
    opt = AdamW(make_params(), lr=0.01)
    grads = make_grads(0)
    del grads["bias"]
    with pytest.raises(ValueError, match="bias"):
        opt.step(grads)
    grads = make_grads(0)
    grads["matrix"] = grads["matrix"][:, :2].copy()
    with pytest.raises(ValueError, match="matrix"):
        opt.step(grads)
    grads = make_grads(0)
    grads[list(grads)[-1]] = [0.0]  # not an array, and the last one checked
    before = {name: to_numpy(p).copy() for name, p in opt.params.items()}
    with pytest.raises(ValueError, match="list"):
        opt.step(grads)
    assert opt.step_count == 0  # a rejected step changes nothing
    for name, p in opt.params.items():
        np.testing.assert_array_equal(to_numpy(p), before[name])


def test_clip_grad_norm_scales_to_max_norm():
    grads = make_grads(0)
    flat = np.concatenate([to_numpy(g).reshape(-1) for g in grads.values()])
    expected_norm = float(np.sqrt(np.sum(flat**2)))
    before = {n: to_numpy(g).copy() for n, g in grads.items()}
    norm = clip_grad_norm(grads, max_norm=1.0)
    assert norm == pytest.approx(expected_norm, rel=1e-12)
    assert expected_norm > 1.0
    after = np.concatenate([to_numpy(g).reshape(-1) for g in grads.values()])
    assert float(np.sqrt(np.sum(after**2))) == pytest.approx(1.0, rel=1e-12)
    for n in grads:  # same direction
        np.testing.assert_allclose(to_numpy(grads[n]), before[n] / expected_norm, rtol=1e-12)


def test_clip_grad_norm_leaves_small_gradients_alone():
    grads = make_grads(0)
    before = {n: to_numpy(g).copy() for n, g in grads.items()}
    norm = clip_grad_norm(grads, max_norm=1e6)
    assert 0 < norm < 1e6
    for n in grads:
        np.testing.assert_array_equal(to_numpy(grads[n]), before[n])
    with pytest.raises(ValueError, match="max_norm"):
        clip_grad_norm(grads, 0.0)


def test_clip_grad_norm_float32_stays_float32():
    grads = make_grads(0, "float32")
    clip_grad_norm(grads, 0.5)
    assert all(g.dtype == np.float32 for g in grads.values())


def test_warmup_cosine_schedule_values():
    lrs = [warmup_cosine_lr(s, max_lr=1.0, min_lr=0.0, warmup_steps=2, total_steps=6) for s in range(8)]
    c = math.cos(math.pi / 4)
    expected = [0.5, 1.0, 1.0, (1 + c) / 2, 0.5, (1 - c) / 2, 0.0, 0.0]
    np.testing.assert_allclose(lrs, expected, atol=1e-15)
    mid = warmup_cosine_lr(5, max_lr=3e-4, min_lr=3e-5, warmup_steps=0, total_steps=10)
    assert mid == pytest.approx(3e-5 + (3e-4 - 3e-5) * 0.5)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(step=-1), "step"),
        (dict(warmup_steps=20), "warmup_steps"),
        (dict(min_lr=2.0), "min_lr"),
        (dict(total_steps=1.5), "total_steps"),
    ],
)
def test_schedule_rejects_bad_arguments(kwargs, field):
    args = dict(step=0, max_lr=1.0, min_lr=0.1, warmup_steps=2, total_steps=10)
    with pytest.raises(ValueError, match=field):
        warmup_cosine_lr(**{**args, **kwargs})
