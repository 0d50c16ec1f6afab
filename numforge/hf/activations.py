"""Hugging Face's activation names (GPT-2's ``activation_function``, Llama's ``hidden_act``) <-> numforge's.

Each entry of ``ops.activations.ACTIVATIONS`` declares the names transformers gives it (``hf_names``, each
with the options it means), so an activation entered there with its names is read and written with no edit
here. An architecture's MLP fixes the inputs the activation takes: GPT-2's ``c_fc`` feeds one
(``("up",)``), Llama's ``gate_proj`` and ``up_proj`` a gated one (``("gate", "up")``)::

    activation_from_hf("gelu", ("up",))          {"activation": "gelu", "gelu_approximate": "none"}
    activation_from_hf("silu", ("gate", "up"))   {"activation": "swiglu"}
    activation_to_hf(config, ("up",))            "gelu_new" for GELU's tanh form; None for SwiGLU
"""

from __future__ import annotations

from ..model import GPTConfig
from ..model.config import activation_fields
from ..ops.activations import ACTIVATIONS


def hf_activation_names(inputs: tuple[str, ...]) -> list[str]:
    """Every name transformers gives an activation of ``inputs`` that numforge has, sorted."""
    return sorted(hf_name for a in ACTIVATIONS.values() if a.inputs == inputs for hf_name in a.hf_names)


def activation_from_hf(hf_name: str, inputs: tuple[str, ...]) -> dict | None:
    """The ``GPTConfig`` fields of the activation of ``inputs`` that transformers names ``hf_name``, or None."""
    for name, activation in ACTIVATIONS.items():
        if activation.inputs == inputs and hf_name in activation.hf_names:
            return {"activation": name, **activation_fields(activation.hf_names[hf_name])}
    return None


def activation_to_hf(config: GPTConfig, inputs: tuple[str, ...]) -> str | None:
    """transformers' name for ``config``'s activation with its options (the first its entry lists), or None when
    the activation takes other inputs than ``inputs`` or transformers has no name for it."""
    activation = ACTIVATIONS[config.activation]
    if activation.inputs != inputs:
        return None
    options = config.activation_options()
    return next((hf_name for hf_name, meant in activation.hf_names.items() if meant == options), None)
