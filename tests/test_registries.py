"""Every registered component is whole: its checks are gradient-check cases, a whole-model case selects it, and
its textbook formula and torch twin agree with its fast op pair and are the ones the textbook model and the torch
twin of the model call. A new norm, activation or position scheme is tested here by its entry alone."""

import numpy as np
import pytest
from helpers import REGISTERED, REGISTRIES

from numforge.backend import default_rng, to_numpy
from numforge.gradcheck import all_cases
from numforge.gradcheck.model import OPTIONS, TINY, randomized_model, tiny_batch
from numforge.model import GPTConfig
from numforge.model.config import activation_fields
from numforge.model.reference import reference_backward, reference_forward
from numforge.ops.activations import ACTIVATIONS

TOL = 1e-12
# every op pair a registry holds, by "field=name": a norm, an activation, a position scheme's rotation
OP_PAIRS = {
    label: entry.rotation if field == "position" else entry
    for label, (field, entry) in {
        f"{field}={name}": (field, entry) for field, registry in REGISTRIES.items() for name, entry in registry.items()
    }.items()
    if field != "position" or entry.rotation is not None
}
CASES = {case.name: case for case in all_cases()}


def as_tuple(grads) -> tuple:
    return grads if isinstance(grads, tuple) else (grads,)


def differences(pair) -> list[str]:
    """Where an entry's textbook formula and torch twin part from its fast op pair, on each of its checks' inputs
    (a missing one is a difference too): the forward's output, then each input's gradient for a random ``dy``."""
    found = []
    for check in pair.checks:
        arrays, options = check.inputs(), check.options()
        y, cache = pair.forward(*arrays.values(), **options)
        dy = np.random.default_rng(1).standard_normal(y.shape)
        grads = as_tuple(pair.backward(dy, cache))
        forms = {"textbook": _textbook} if _torch() is None else {"textbook": _textbook, "torch": _torch_twin}
        for form, run in forms.items():
            try:
                y_form, grads_form = run(pair, arrays, options, dy)
            except TypeError as error:  # absent (None), or not of the entry's signature
                found.append(f"{check.name}: the {form} form fails: {error}")
                continue
            if _far(y_form, y):
                found.append(f"{check.name}: the {form} output differs from the fast forward's")
            for name, g, g_form in zip(arrays, grads, grads_form, strict=True):
                if (g is None) != (g_form is None) or (g is not None and _far(g_form, g)):
                    found.append(f"{check.name}: the {form} gradient of {name!r} differs from the fast backward's")
    return found


def _textbook(pair, arrays, options, dy):
    y = pair.textbook(*arrays.values(), **options)
    return y, as_tuple(pair.textbook_backward(dy, *arrays.values(), **options))


def _torch_twin(pair, arrays, options, dy):
    torch = _torch()
    tensors = [None if a is None else torch.tensor(to_numpy(a), requires_grad=True) for a in arrays.values()]
    fixed = {k: torch.tensor(to_numpy(v)) if hasattr(v, "shape") else v for k, v in options.items()}
    y = pair.torch(*tensors, **fixed)
    (y * torch.tensor(dy)).sum().backward()
    return y.detach().numpy(), tuple(None if t is None else t.grad.numpy() for t in tensors)


def _torch():
    try:
        import torch
    except ModuleNotFoundError:
        return None
    return torch


def _far(a, b) -> bool:
    a, b = to_numpy(a), to_numpy(b)
    return a.shape != b.shape or float(np.max(np.abs(a - b))) > TOL * max(float(np.max(np.abs(b))), 1.0)


@pytest.mark.parametrize("pair", list(OP_PAIRS))
def test_every_check_of_a_component_is_a_gradient_check_case_of_its_op_pair(pair):
    entry = OP_PAIRS[pair]
    assert entry.checks, pair
    for check in entry.checks:
        assert check.name in CASES, check.name
        assert CASES[check.name].learner == (entry.backward.__name__,)
        assert CASES[check.name].module == entry.backward.__module__


@pytest.mark.parametrize("component", list(REGISTERED))
def test_every_component_has_a_whole_model_gradient_check(component):
    ((field, name),) = REGISTERED[component].items()
    selecting = [
        option for option, settings in OPTIONS.items() if getattr(GPTConfig(**{**TINY, **settings}), field) == name
    ]
    assert selecting and all(f"model[{option}]" in CASES for option in selecting), component


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_an_activations_forms_and_hf_names_set_every_option_it_takes(name):
    activation = ACTIVATIONS[name]
    for options in (*activation.forms.values(), *activation.hf_names.values()):
        assert set(options) == set(activation.options), options
        config = GPTConfig(**TINY, activation=name, **activation_fields(options))
        assert config.activation_options() == options


@pytest.mark.parametrize("pair", list(OP_PAIRS))
def test_the_textbook_formula_and_the_torch_twin_equal_the_fast_op(pair):
    assert differences(OP_PAIRS[pair]) == []


@pytest.mark.parametrize("missing", ["textbook", "textbook_backward", "torch"])
def test_an_entry_without_a_twin_or_with_a_wrong_one_is_found(missing):
    relu = ACTIVATIONS["relu"]
    if missing == "torch" and _torch() is None:
        pytest.skip("the torch twin is compared only where torch is installed")
    assert differences(relu._replace(**{missing: None}))
    wrong = {"textbook": ACTIVATIONS["gelu"].textbook, "textbook_backward": ACTIVATIONS["gelu"].textbook_backward}
    assert differences(relu._replace(**{missing: wrong.get(missing, ACTIVATIONS["gelu"].torch)}))


@pytest.mark.parametrize("component", list(OP_PAIRS))
def test_the_textbook_model_and_the_models_torch_twin_call_the_entry(component, monkeypatch):
    """The textbook model and ``bench/train_torch.py`` read each component's formulas from its registry entry
    (a position scheme that adds a table to the embeddings has none: both read its table, as the fast model)."""
    ((field, name),), entry = REGISTERED[component].items(), OP_PAIRS[component]
    calls = []

    def spy(form):
        def called(*args, **kwargs):
            calls.append(form)
            return getattr(entry, form)(*args, **kwargs)

        return called

    spied = entry._replace(**{form: spy(form) for form in ("textbook", "textbook_backward", "torch")})
    registry = REGISTRIES[field]
    monkeypatch.setitem(registry, name, registry[name]._replace(rotation=spied) if field == "position" else spied)
    model = randomized_model({field: name})
    ids, targets = tiny_batch(model.config.vocab_size)
    _, _, cache = reference_forward(model.params, model.config, ids, targets, rng=default_rng(0))
    reference_backward(model.params, model.config, cache)
    assert {"textbook", "textbook_backward"} <= set(calls)
    if _torch() is not None:
        from numforge.bench.train_torch import torch_loss, torch_params, torch_tables

        ids_t, targets_t = (_torch().tensor(to_numpy(a)) for a in (ids, targets))
        torch_loss(torch_params(model.params), model.config, ids_t, targets_t, torch_tables(model))
        assert "torch" in calls
