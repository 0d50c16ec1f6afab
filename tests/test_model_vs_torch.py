"""The whole model against a PyTorch autograd re-implementation, in float64.

The loss and every gradient must agree to float64 rounding, under every
option; then a few AdamW steps must follow the same loss trajectory.
Skipped when torch is not installed (it is never a numforge dependency).
"""

import numpy as np
import pytest
from helpers import REGISTERED

torch = pytest.importorskip("torch")

from numforge.backend import asarray, to_numpy  # noqa: E402
from numforge.bench.train_torch import torch_loss, torch_params, torch_tables  # noqa: E402
from numforge.gradcheck.model import OPTIONS, randomized_model, tiny_batch  # noqa: E402
from numforge.optim import AdamW  # noqa: E402

NO_DROPOUT = [option for option, settings in OPTIONS.items() if "drop_prob" not in settings]


def torch_reference(model, ids, targets):
    """(loss, {name: grad}) of the same weights by torch autograd."""
    params = torch_params(model.params)
    ids_t, targets_t = torch.tensor(to_numpy(ids)), torch.tensor(to_numpy(targets))
    loss = torch_loss(params, model.config, ids_t, targets_t, torch_tables(model))
    loss.backward()
    return loss.item(), {name: t.grad.numpy() for name, t in params.items()}


def assert_matches_torch(options: dict):
    """The tiny model of ``options``: its loss and every gradient equal torch autograd's to float64 rounding."""
    model = randomized_model(options, seed=1)
    ids, targets = tiny_batch(model.config.vocab_size, seed=2)
    loss, cache = model.forward(ids, targets)
    grads = model.backward(cache)
    torch_value, torch_grads = torch_reference(model, ids, targets)
    assert float(loss) == pytest.approx(torch_value, rel=1e-13)
    assert set(grads) == set(torch_grads)
    for name, g in grads.items():
        expected = torch_grads[name]
        scale = np.abs(expected).max()
        assert scale > 0, name
        np.testing.assert_allclose(to_numpy(g), expected, rtol=0, atol=1e-12 * scale, err_msg=name)


@pytest.mark.parametrize("option", NO_DROPOUT)
def test_loss_and_every_gradient_match_torch(option):
    assert_matches_torch(OPTIONS[option])


@pytest.mark.parametrize("component", list(REGISTERED))
def test_every_registered_component_matches_its_torch_twin(component):
    """Each norm, activation and position scheme of the registries alone over the defaults: torch_loss reads its
    twin from its registry entry, and autograd through it gives numforge's loss and gradients."""
    assert_matches_torch(REGISTERED[component])


def test_adamw_training_follows_torch():
    model = randomized_model({"activation": "swiglu", "tie_weights": True}, seed=3)
    ids, targets = tiny_batch(model.config.vocab_size, seed=4)
    params = torch_params(model.params)
    decay = [t for t in params.values() if t.ndim >= 2]
    no_decay = [t for t in params.values() if t.ndim < 2]
    torch_opt = torch.optim.AdamW(
        [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-2, weight_decay=0.1
    )
    opt = AdamW(model.params, lr=1e-2, weight_decay=0.1)
    ids_t, targets_t = torch.tensor(to_numpy(ids)), torch.tensor(to_numpy(targets))
    losses, torch_losses = [], []
    for _ in range(5):
        loss, cache = model.forward(ids, targets)
        opt.step(model.backward(cache))
        losses.append(float(loss))
        torch_opt.zero_grad()
        torch_value = torch_loss(params, model.config, ids_t, targets_t)
        torch_value.backward()
        torch_opt.step()
        torch_losses.append(torch_value.item())
    np.testing.assert_allclose(losses, torch_losses, rtol=1e-11)
    assert losses[-1] < losses[0]
    # each step moves a parameter by about lr = 1e-2; Adam's g / sqrt(v) magnifies the last-bit
    # differences of near-zero gradients, so the parameters agree to ~1e-9, not 1e-15
    for name, p in model.params.items():
        np.testing.assert_allclose(to_numpy(p), params[name].detach().numpy(), rtol=0, atol=1e-9, err_msg=name)


def test_larger_float32_model_matches_torch():
    from numforge.model import GPT, GPTConfig

    model = GPT(GPTConfig(vocab_size=97, max_seq_len=40, d_model=48, num_heads=6, num_layers=3), seed=0)
    rng = np.random.default_rng(0)
    ids = asarray(rng.integers(0, 97, size=(3, 40)))
    targets = asarray(rng.integers(0, 97, size=(3, 40)))
    loss, cache = model.forward(ids, targets)
    grads = model.backward(cache)
    torch_value, torch_grads = torch_reference(model, ids, targets)
    assert float(loss) == pytest.approx(torch_value, rel=1e-6)  # measured 1e-7: float32 rounding
    for name, g in grads.items():
        scale = np.abs(torch_grads[name]).max()
        np.testing.assert_allclose(
            to_numpy(g), torch_grads[name], rtol=0, atol=2e-5 * scale, err_msg=name
        )  # measured 6e-7
