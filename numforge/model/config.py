"""``GPTConfig``: the shape and options of a GPT, validated, with a JSON round trip.

Example::

    config = GPTConfig(vocab_size=256, max_seq_len=64, d_model=32, num_heads=4, num_layers=2)
    config.d_ff                                   # 128 = 4 * d_model
    GPTConfig.from_dict(config.to_dict()) == config   # True

``d_ff=None`` picks the usual width: ``4 * d_model``, or for a gated
activation (SwiGLU, whose two input projections would otherwise cost 1.5x the
parameters) ``8/3 * d_model`` rounded up to a multiple of 64. Every invalid
value or combination is a ``ValueError`` (a wrong type: ``TypeError``) that
names the field.

Older checkpoints wrote ``ffn`` for ``activation`` and ``"naive"`` for the
``"plain"`` attention; ``from_dict`` still reads them. A dict written before
attention dropout existed (no ``attention_dropout`` key) reads as
``attention_dropout=False``: its model was trained without it, and a resumed
run goes on as it began.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from ..checks import check_bool, check_positive_int, is_real
from ..ops.activations import ACTIVATIONS, GELU_APPROXIMATIONS

POSITION_KINDS = ("learned", "sinusoidal")
ATTENTION_KINDS = ("tiled", "plain")  # the tiled kernel, or the plain one that holds (B,H,T,T): the oracle
GATED_MULTIPLE = 64
LEGACY_NAMES = {"ffn": "activation"}  # field names of older checkpoints -> today's
LEGACY_VALUES = {("attention", "naive"): "plain"}
LEGACY_DEFAULTS = {"attention_dropout": False}  # fields older checkpoints lack -> what those models were trained with


def default_d_ff(d_model: int, activation: str) -> int:
    """``4 * d_model``; for a gated activation ``ceil(8/3 * d_model / 64) * 64`` (e.g. 96 -> 256)."""
    if ACTIVATIONS[activation].gated:
        return -(-8 * d_model // (3 * GATED_MULTIPLE)) * GATED_MULTIPLE
    return 4 * d_model


@dataclass
class GPTConfig:
    """Hyper-parameters of a decoder-only transformer (pre-norm blocks, GPT-2 style)."""

    vocab_size: int
    max_seq_len: int
    d_model: int
    num_heads: int
    num_layers: int
    d_ff: int | None = None
    activation: str = "gelu"  # the feed-forward sub-layer's activation: a name in ops.activations.ACTIVATIONS
    gelu_approximate: str = "tanh"
    use_bias: bool = True
    tie_weights: bool = True
    drop_prob: float = 0.0  # dropout on the embeddings, each residual branch and (attention_dropout) attention weights
    attention_dropout: bool = True  # drop_prob applies to the attention weights too
    position: str = "learned"
    scale_embeddings: bool = False
    attention: str = "tiled"
    ln_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("vocab_size", "max_seq_len", "d_model", "num_heads", "num_layers"):
            check_positive_int(getattr(self, name), name)
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})")
        _check_choice("activation", self.activation, tuple(ACTIVATIONS))
        _check_choice("gelu_approximate", self.gelu_approximate, GELU_APPROXIMATIONS)
        _check_choice("position", self.position, POSITION_KINDS)
        _check_choice("attention", self.attention, ATTENTION_KINDS)
        if self.d_ff is None:
            self.d_ff = default_d_ff(self.d_model, self.activation)
        check_positive_int(self.d_ff, "d_ff")
        for name in ("use_bias", "tie_weights", "scale_embeddings", "attention_dropout"):
            check_bool(getattr(self, name), name)
        if not is_real(self.drop_prob) or not 0.0 <= self.drop_prob < 1.0:
            raise ValueError(f"drop_prob must be a number in [0, 1), got {self.drop_prob!r}")
        if not is_real(self.ln_eps) or not (self.ln_eps > 0 and math.isfinite(self.ln_eps)):
            raise ValueError(f"ln_eps must be a positive finite number, got {self.ln_eps!r}")
        self.drop_prob = float(self.drop_prob)
        self.ln_eps = float(self.ln_eps)

    @property
    def head_dim(self) -> int:
        """``D = d_model / num_heads``."""
        return self.d_model // self.num_heads

    @property
    def gated(self) -> bool:
        """Whether the activation takes two projections (gate and up), as SwiGLU does."""
        return ACTIVATIONS[self.activation].gated

    def activation_options(self) -> dict:
        """The keyword options of the activation's forward: ``{"approximate": ...}`` for GELU, else none."""
        options = {"approximate": self.gelu_approximate}
        return {name: options[name] for name in ACTIVATIONS[self.activation].options}

    def to_dict(self) -> dict:
        """A JSON-able dict of every field (``d_ff`` resolved)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> GPTConfig:
        """The inverse of ``to_dict`` (older names read too); unknown or missing keys are a ``ValueError``."""
        if not isinstance(d, dict):
            raise TypeError(f"a GPTConfig dict must be a dict, got {type(d).__name__}")
        d = {**LEGACY_DEFAULTS, **{LEGACY_NAMES.get(key, key): value for key, value in d.items()}}
        d = {
            key: LEGACY_VALUES.get((key, value), value) if isinstance(value, str) else value for key, value in d.items()
        }
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown GPTConfig keys {unknown}; known keys are {sorted(known)}")
        try:
            return cls(**d)
        except TypeError as err:  # a required field is missing
            raise ValueError(f"incomplete GPTConfig dict: {err}") from err


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
