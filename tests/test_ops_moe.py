"""The mixture-of-experts layer (ops/moe.py): the sorted dispatch equals the dense textbook layer, the forward and
every gradient equal torch autograd's in float64 (auxiliary losses included), the tie rule, an idle expert, the
gradient checks' inputs keep clear of the choice's jumps, bad input is named."""

import numpy as np
import pytest

from numforge.gradcheck.moe import SETTINGS, cut_gaps, moe_inputs
from numforge.ops.moe import (
    _router_backward,
    moe_backward,
    moe_forward,
    moe_textbook,
    moe_textbook_backward,
    moe_torch,
)

ARGUMENTS = ("h", "w_router", "w_gate", "w_up", "w_down")
OPTIONS = [
    {"top_k": 1, "renormalize": False},
    {"top_k": 2, "renormalize": True},
    {"top_k": 3, "renormalize": False, "balance_coef": 0.5, "z_coef": 0.25},
    {"top_k": 2, "renormalize": True, "balance_coef": 0.01, "z_coef": 0.001},
]


def _inputs(n=9, c=6, f=5, e=5, seed=0, dtype="float64"):
    rng = np.random.default_rng(seed)
    shapes = {"h": (3, n // 3, c), "w_router": (c, e), "w_gate": (e, c, f), "w_up": (e, c, f), "w_down": (e, f, c)}
    return {name: rng.standard_normal(shape).astype(dtype) for name, shape in shapes.items()}


def _relative(a, b):
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-300))


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("layout", ["random", "idle", "ties"])
def test_the_sorted_dispatch_equals_the_dense_textbook_layer(options, layout):
    inputs = _inputs() if layout == "random" else moe_inputs(layout)
    y, cache = moe_forward(*inputs.values(), **options)
    y_dense, aux_dense, load_dense = moe_textbook(*inputs.values(), **options)
    assert _relative(y, y_dense) < 1e-13
    assert abs(float(cache.aux_loss) - float(aux_dense)) <= 1e-14 * max(abs(float(aux_dense)), 1.0)
    np.testing.assert_array_equal(cache.load, load_dense)
    n, k = cache.chosen.shape
    assert cache.act.shape == (n * k, inputs["w_gate"].shape[2])  # N k F, never N E F
    assert cache.load.sum() == n * k


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("layout", ["random", "idle", "ties"])
def test_the_backward_equals_the_dense_textbook_backward(options, layout):
    """The textbook model's backward (every expert on every row, the zero gates masking the rest)."""
    inputs = _inputs() if layout == "random" else moe_inputs(layout)
    y, cache = moe_forward(*inputs.values(), **options)
    dy = np.random.default_rng(4).standard_normal(y.shape)
    fast = moe_backward(dy, cache, daux=0.7)
    dense = moe_textbook_backward(dy, *inputs.values(), **options, daux=0.7)
    for name, a, b in zip(ARGUMENTS, fast, dense, strict=True):
        assert a.shape == b.shape and _relative(a, b) < 1e-13, name
    assert float(np.abs(dense[1]).max()) > 0.1  # the router's gradient is there to compare


@pytest.mark.parametrize("options", OPTIONS)
def test_float32_is_within_rounding_of_the_float64_textbook(options):
    inputs = _inputs()
    y32, cache = moe_forward(*_inputs(dtype="float32").values(), **options)
    y64, aux64, _ = moe_textbook(*inputs.values(), **options)
    assert y32.dtype == np.float32 and cache.aux_loss.dtype == np.float32
    assert _relative(y32.astype(np.float64), y64) < 1e-5
    assert abs(float(cache.aux_loss) - float(aux64)) < 1e-5 * max(abs(float(aux64)), 1.0)


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("layout", ["random", "idle", "ties"])
def test_forward_and_every_gradient_equal_torch_autograd_in_float64(options, layout):
    torch = pytest.importorskip("torch")
    inputs = _inputs() if layout == "random" else moe_inputs(layout)
    y, cache = moe_forward(*inputs.values(), **options)
    dy = np.random.default_rng(5).standard_normal(y.shape)
    daux = 0.7
    grads = moe_backward(dy, cache, daux=daux)

    tensors = [torch.tensor(a, requires_grad=True) for a in inputs.values()]
    y_torch, aux_torch, load_torch = moe_torch(*tensors, **options)
    ((y_torch * torch.tensor(dy)).sum() + daux * aux_torch).backward()
    assert _relative(y, y_torch.detach().numpy()) < 1e-13
    assert abs(float(cache.aux_loss) - float(aux_torch.detach())) <= 1e-14 * max(abs(float(aux_torch.detach())), 1.0)
    np.testing.assert_array_equal(cache.load, load_torch.numpy())
    for name, mine, tensor in zip(ARGUMENTS, grads, tensors):
        assert mine.shape == tuple(tensor.shape), name
        assert _relative(mine, tensor.grad.numpy()) < 1e-12, name


def test_the_balance_loss_is_transformers_mixtral_loss_over_k():
    """transformers divides the load by N, not N k: for one layer its loss is k times numforge's (to float32
    rounding: its softmax runs in float32)."""
    torch = pytest.importorskip("torch")
    mixtral = pytest.importorskip("transformers.models.mixtral.modeling_mixtral")
    inputs = _inputs(n=12, e=6)
    for top_k in (1, 2, 3):
        _, cache = moe_forward(*inputs.values(), top_k=top_k, balance_coef=1.0)
        logits = torch.tensor(inputs["h"].reshape(-1, 6) @ inputs["w_router"])
        theirs = mixtral.load_balancing_loss_func((logits,), num_experts=6, top_k=top_k)
        assert abs(top_k * float(cache.balance_loss) - float(theirs)) < 1e-6 * float(theirs)


def test_ties_go_to_the_lower_expert_index():
    """W_r = 0: every expert has p = 1/E, and the k chosen are experts 0 .. k-1, in that order (a stable sort)."""
    inputs = _inputs(e=8)
    inputs["w_router"][:] = 0.0
    for top_k in (1, 3, 8):
        _, cache = moe_forward(*inputs.values(), top_k=top_k)
        assert (cache.chosen == np.arange(top_k)).all()
        np.testing.assert_array_equal(cache.load, [len(cache.chosen)] * top_k + [0] * (8 - top_k))


def test_without_ties_the_choice_is_torch_topk():
    torch = pytest.importorskip("torch")
    inputs = _inputs(n=30, e=8)
    _, cache = moe_forward(*inputs.values(), top_k=3)
    top = torch.topk(torch.tensor(cache.probs), 3, dim=-1).indices.numpy()
    np.testing.assert_array_equal(cache.chosen, top)


def test_an_expert_that_receives_no_row_gets_zero_gradients_and_the_others_do_not():
    inputs = moe_inputs("idle")
    y, cache = moe_forward(*inputs.values(), top_k=2)
    assert cache.load[3] == 0 and (cache.load[:3] > 0).all()
    _, _, dw_gate, dw_up, dw_down = moe_backward(np.ones_like(y), cache)
    for grad in (dw_gate, dw_up, dw_down):
        assert not grad[3].any() and all(grad[e].any() for e in range(3))


def test_with_renormalised_gates_only_the_chosen_logits_get_a_gradient():
    """g_j = exp(z_{c_j}) / sum_i exp(z_{c_i}): the softmax's denominator cancels, the others' logits are absent
    (the backward computes p (dp - sum p dp) all the same: sum p dp = 0 but for rounding)."""
    inputs = _inputs()
    inputs["h"] = inputs["h"].reshape(-1, 6)  # (N, C) rows
    y, cache = moe_forward(*inputs.values(), top_k=2, renormalize=True)
    dy = np.random.default_rng(1).standard_normal(y.shape)
    out = np.empty_like(cache.out)
    out[cache.order] = cache.out  # each (row, choice) pair's expert output, unsorted: (N k, C)
    dgates = (out.reshape(len(y), 2, -1) * dy[:, None, :]).sum(axis=2)  # (N, k)
    dz = _router_backward(dgates, cache, daux=0.0)  # (N, E)
    not_chosen = np.ones_like(dz, dtype=bool)
    np.put_along_axis(not_chosen, cache.chosen, False, axis=1)
    assert np.abs(dz[not_chosen]).max() < 1e-14 * np.abs(dz[~not_chosen]).max()  # zero but for rounding


@pytest.mark.parametrize("name", SETTINGS)
def test_the_gradient_checks_finite_differences_cannot_cross_the_choice(name):
    """The gap at each row's cut (k-th vs (k+1)-th logit) is far above what one step of 1e-6 on one coordinate of
    h or W_r can close (it moves a logit by at most 1e-6 max(|h|, |W_r|), and the gap by twice that); the ties
    layout's tied logits are exactly equal, on every row."""
    layout, options = SETTINGS[name]
    inputs = moe_inputs(layout)
    step = 1e-6 * max(np.abs(inputs["h"]).max(), np.abs(inputs["w_router"]).max())
    assert cut_gaps(inputs, options["top_k"]).min() > 100 * 2 * step
    z = inputs["h"].reshape(-1, inputs["h"].shape[-1]) @ inputs["w_router"]
    if layout == "ties":
        assert (z[:, 0] == z[:, 1]).all() and (z[:, 2] == z[:, 3]).all()
    _, cache = moe_forward(*inputs.values(), top_k=options["top_k"])
    if layout == "idle":
        assert cache.load[3] == 0


def test_the_aux_loss_is_zero_without_coefficients_and_the_backward_then_ignores_daux():
    inputs = _inputs()
    y, cache = moe_forward(*inputs.values(), top_k=2)
    assert float(cache.aux_loss) == 0.0 and float(cache.balance_loss) > 0.0 and float(cache.z_loss) > 0.0
    for a, b in zip(moe_backward(y, cache, daux=0.0), moe_backward(y, cache, daux=5.0)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "change, error, words",
    [
        ({"top_k": 6}, ValueError, "top_k"),
        ({"top_k": 0}, ValueError, "top_k"),
        ({"top_k": 1.5}, ValueError, "top_k"),
        ({"balance_coef": -1.0}, ValueError, "balance_coef"),
        ({"z_coef": float("nan")}, ValueError, "z_coef"),
        ({"h": np.zeros((4, 7))}, ValueError, "h's last axis"),
        ({"w_up": np.zeros((5, 6, 4))}, ValueError, "w_up must have shape"),
        ({"w_down": np.zeros((4, 5, 6))}, ValueError, "w_down must have shape"),
        ({"w_gate": np.zeros((5, 6))}, ValueError, "w_gate must have 3 dimensions"),
        ({"w_router": np.zeros((6, 5), dtype=np.float32)}, TypeError, "w_router must have h's dtype"),
        ({"h": np.zeros((2, 6), dtype=np.int64)}, TypeError, "h must be float32 or float64"),
        ({"w_router": [[0.0] * 5] * 6}, TypeError, "w_router must be a numpy or cupy array"),
    ],
)
def test_bad_input_is_named(change, error, words):
    inputs = _inputs()
    options = {"top_k": 2}
    for key, value in change.items():
        (inputs if key in ARGUMENTS else options)[key] = value
    with pytest.raises(error, match=words):
        moe_forward(*inputs.values(), **options)
