"""``GPTConfig``: the shape and options of a GPT, validated, with a JSON round trip.

Example::

    config = GPTConfig(vocab_size=256, max_seq_len=64, d_model=32, num_heads=4, num_layers=2)
    config.d_ff, config.head_dim, config.num_kv_heads    # 128 = 4 * d_model, 8 = d_model / num_heads, 4
    GPTConfig.from_dict(config.to_dict()) == config      # True

The defaults are GPT-2's: LayerNorm, learned positions, GELU (tanh), biases
everywhere, tied unembedding. The components come from registries (the
config validates against them): ``norm`` from ``ops.norms.NORMS``,
``position`` from ``model.positions.POSITIONS``, ``activation`` from
``ops.activations.ACTIVATIONS``, ``attention`` from ``model.attention_branch.KERNELS``. The modern decoder's options:

- ``num_kv_heads`` (default ``num_heads``): grouped-query attention, each
  key/value head shared by ``num_heads / num_kv_heads`` query heads (1: MQA);
- ``head_dim`` (default ``d_model / num_heads``): with it given, ``d_model``
  need not divide by ``num_heads`` (Qwen3); ``qkv_proj`` is ``(C, (H + 2 H_kv) D)``
  and ``out_proj`` ``(H D, C)``;
- ``qk_norm``: the norm over each head's q and k, with a ``(D,)`` weight
  (``attn.q_norm.weight``, ``attn.k_norm.weight``) unless ``norm_weight`` is
  False; ``qk_norm_order`` puts it before the rotation (Qwen3) or after it (nanochat);
  ``qk_norm_extent`` ``"projection"`` normalizes each position's whole q projection (``H D`` values, an
  ``(H D,)`` weight) and k projection (``H_kv D``) instead of each head (OLMoE; ``model/qk_norm.py``);
- ``norm_weight``: False gives every norm no parameters (nanochat);
- ``sliding_window`` W: the attention of a windowed layer sees only the W latest positions (query ``i``,
  keys ``i - W < j <= i``; ``ops/scores.py``'s ``window``); ``window_layers``, the 0-based layers with the
  window, sorted (None: every layer, as Mistral; ``[0, 2, 4]`` of 6: alternating local and global, as
  Gemma 2 and gpt-oss);
- ``num_experts`` E (0: a dense MLP): the MLP of every layer is a mixture of E SwiGLU experts of width
  ``d_ff`` each (``ops/moe.py``), each token routed to ``experts_top_k`` of them by ``mlp.router``, the kept
  gates renormalised (``experts_renormalize``: Mixtral, Qwen3-MoE) or not (OLMoE); the model's loss adds each
  layer's load-balancing loss ``E sum_e f_e P_e`` times ``router_aux_loss_coef`` and its router z-loss times
  ``router_z_loss_coef``. The experts have no biases;
- Gemma 2 / 3's options: ``post_norms``, a norm on each branch's output before it joins the residual
  (``post_attn_norm`` and ``post_mlp_norm``: the sandwich of norms, pre and post);
  ``query_pre_attn_scalar`` Q, the scores scaled by ``Q^-1/2`` instead of ``D^-1/2``; ``attn_softcap`` c, every
  attention score capped ``c tanh(S / c)`` (the ``softcap`` score modifier, before the masks);
  ``logit_softcap`` c, the final logits capped likewise (``ops/softcap.py``, in the loss head and in
  ``GPT.logits``); ``rope_local_theta``, the rotation's base on the windowed layers (Gemma 3's local layers:
  a second pair of tables, unscaled), None: ``rope_theta`` everywhere;
- the bias switches ``qkv_bias`` (the fused q|k|v projection), ``out_bias``
  (attention's output projection), ``mlp_bias`` and ``norm_bias``: each left
  None follows ``use_bias``, the one switch that sets them all (a norm with no
  bias option has none); ``has_bias(switch)`` says what a model has. Qwen2 is
  ``use_bias=False, qkv_bias=True``.

``d_ff=None`` picks the usual width: ``4 * d_model``, or for a gated
activation (SwiGLU, whose two input projections would otherwise cost 1.5x the
parameters) ``8/3 * d_model`` rounded up to a multiple of 64. Every invalid
value or combination is a ``ValueError`` (a wrong type: ``TypeError``) that
names the fields.

Older checkpoints wrote ``ffn`` for ``activation``, ``ln_eps`` for
``norm_eps`` and ``"naive"`` for the ``"plain"`` attention; ``from_dict``
still reads them. A dict written before attention dropout existed (no
``attention_dropout`` key) reads as ``attention_dropout=False``: its model was
trained without it, and a resumed run goes on as it began. Every field added
since reads as its default, which is what those models were.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from ..checks import check_bool, check_index, check_int_value, check_number, check_positive_int, is_real
from ..ops.activations import ACTIVATIONS, GELU_APPROXIMATIONS
from ..ops.moe import EXPERT_ACTIVATIONS
from ..ops.norms import NORMS
from ..ops.rope import check_rope_scaling
from .attention_branch import KERNELS
from .positions import POSITIONS
from .qk_norm import QK_NORM_EXTENTS

ATTENTION_KINDS = tuple(KERNELS)  # the tiled kernel, or the plain one that holds (B,H,T,T): the oracle
QK_NORM_ORDERS = ("before_rope", "after_rope")  # QK-norm then the rotation (Qwen3), or the reverse (nanochat)
BIAS_SWITCHES = ("qkv_bias", "out_bias", "mlp_bias", "norm_bias")
ACTIVATION_OPTION_FIELDS = {"approximate": "gelu_approximate"}  # an activation's option -> the field that holds it
EXPERT_FIELDS = ("experts_top_k", "experts_renormalize", "router_aux_loss_coef", "router_z_loss_coef")
# the families a preset (``numforge train --arch NAME``) names: the fields each sets over GPTConfig's defaults.
# gpt2: the defaults themselves. llama: RMSNorm, rotary positions of base 10,000, SwiGLU, no biases, an untied
# head. Grouped-query attention is a size, like the number of heads (Llama 2 7B has none, 70B has 8 key/value
# heads for 64), so num_kv_heads is left to the caller.
LLAMA = {
    "norm": "rmsnorm",
    "position": "rope",
    "rope_theta": 10000.0,
    "activation": "swiglu",
    "use_bias": False,
    "tie_weights": False,
}
# moe: a small Mixtral: Llama's layer with a mixture of 8 SwiGLU experts of width 128 in place of the MLP, top-2,
# the kept gates renormalised; a load-balancing coefficient of 0.01 (OLMoE's; transformers' loss is top_k times
# this one, ops/moe.py) and a small router z-loss (0.001).
MOE = {
    **LLAMA,
    "num_experts": 8,
    "experts_top_k": 2,
    "experts_renormalize": True,
    "d_ff": 128,
    "router_aux_loss_coef": 0.01,
    "router_z_loss_coef": 0.001,
}
ARCHS = {"gpt2": {}, "llama": LLAMA, "moe": MOE}
GATED_MULTIPLE = 64
LEGACY_NAMES = {"ffn": "activation", "ln_eps": "norm_eps"}  # field names of older checkpoints -> today's
LEGACY_VALUES = {("attention", "naive"): "plain"}
LEGACY_DEFAULTS = {"attention_dropout": False}  # fields older checkpoints lack -> what those models were trained with


def default_d_ff(d_model: int, activation: str) -> int:
    """``4 * d_model``; for a gated activation (two inputs, two projections) ``ceil(8/3 * d_model / 64) * 64``
    (e.g. 96 -> 256)."""
    if len(ACTIVATIONS[activation].inputs) > 1:
        return -(-8 * d_model // (3 * GATED_MULTIPLE)) * GATED_MULTIPLE
    return 4 * d_model


@dataclass
class GPTConfig:
    """Hyper-parameters of a decoder-only transformer (pre-norm blocks; module docstring)."""

    vocab_size: int
    max_seq_len: int
    d_model: int
    num_heads: int
    num_layers: int
    d_ff: int | None = None
    activation: str = "gelu"  # the feed-forward sub-layer's activation: a name in ops.activations.ACTIVATIONS
    gelu_approximate: str = "tanh"
    norm: str = "layernorm"  # every norm of the model: a name in ops.norms.NORMS
    norm_eps: float = 1e-5
    norm_weight: bool = True  # the norms' learned weight (False: parameter-free norms)
    position: str = "learned"  # a name in model.positions.POSITIONS
    rope_theta: float = 10000.0  # the rotation's base (position="rope")
    rope_scaling: dict | None = None  # the rotation's frequency scaling (linear, llama3), or None
    num_kv_heads: int | None = None  # key/value heads H_kv (None: num_heads)
    head_dim: int | None = None  # each head's width D (None: d_model / num_heads)
    qk_norm: bool = False  # a norm over each head's q and k
    qk_norm_order: str = "before_rope"
    qk_norm_extent: str = "head"  # what one QK-norm covers: a name in model.qk_norm.QK_NORM_EXTENTS
    use_bias: bool = True  # the biases of every switch below left None
    qkv_bias: bool | None = None
    out_bias: bool | None = None
    mlp_bias: bool | None = None
    norm_bias: bool | None = None
    tie_weights: bool = True
    drop_prob: float = 0.0  # dropout on the embeddings, each residual branch and (attention_dropout) attention weights
    attention_dropout: bool = True  # drop_prob applies to the attention weights too
    scale_embeddings: bool = False
    attention: str = "tiled"
    sliding_window: int | None = None  # W: a windowed layer's query i sees keys i - W < j <= i (None: no window)
    window_layers: tuple[int, ...] | None = None  # the layers with the window (None: every layer)
    num_experts: int = 0  # E: a mixture of E experts in place of each MLP (0: a dense MLP)
    experts_top_k: int = 2  # the experts each token is routed to
    experts_renormalize: bool = True  # the kept gates divided by their sum (Mixtral) or not (OLMoE)
    router_aux_loss_coef: float = 0.0  # times each layer's load-balancing loss, added to the model's loss
    router_z_loss_coef: float = 0.0  # times each layer's router z-loss, added to the model's loss
    post_norms: bool = False  # a norm on each branch's output (post_attn_norm, post_mlp_norm): Gemma 2/3's sandwich
    query_pre_attn_scalar: float | None = None  # Q: scores scaled by Q^-1/2 (None: head_dim^-1/2)
    attn_softcap: float | None = None  # c: every attention score capped, c tanh(S / c) (None: no cap)
    logit_softcap: float | None = None  # c: the final logits capped, c tanh(z / c) (None: no cap)
    rope_local_theta: float | None = None  # the rotation's base on windowed layers (None: rope_theta)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "max_seq_len", "d_model", "num_heads", "num_layers"):
            check_positive_int(getattr(self, name), name)
        _check_choice("activation", self.activation, tuple(ACTIVATIONS))
        _check_choice("gelu_approximate", self.gelu_approximate, GELU_APPROXIMATIONS)
        _check_choice("norm", self.norm, tuple(NORMS))
        _check_choice("position", self.position, tuple(POSITIONS))
        _check_choice("qk_norm_order", self.qk_norm_order, QK_NORM_ORDERS)
        _check_choice("qk_norm_extent", self.qk_norm_extent, tuple(QK_NORM_EXTENTS))
        _check_choice("attention", self.attention, ATTENTION_KINDS)
        for name in ("norm_weight", "qk_norm", "use_bias", "tie_weights", "scale_embeddings", "attention_dropout"):
            check_bool(getattr(self, name), name)
        self._resolve_heads()
        if not self.qk_norm and self.qk_norm_extent != _DEFAULTS["qk_norm_extent"]:
            raise ValueError(f"qk_norm_extent={self.qk_norm_extent!r} set, but qk_norm is False (no QK-norm)")
        if self.d_ff is None:
            self.d_ff = default_d_ff(self.d_model, self.activation)
        check_positive_int(self.d_ff, "d_ff")
        if not is_real(self.drop_prob) or not 0.0 <= self.drop_prob < 1.0:
            raise ValueError(f"drop_prob must be a number in [0, 1), got {self.drop_prob!r}")
        self.drop_prob = float(self.drop_prob)
        self.norm_eps = _positive_finite("norm_eps", self.norm_eps)
        self.rope_theta = _positive_finite("rope_theta", self.rope_theta)
        self._check_norms()
        self._check_positions()
        self._check_biases()
        self._check_window()
        self._check_experts()
        self._check_gemma()

    def _resolve_heads(self) -> None:
        if self.num_kv_heads is None:
            self.num_kv_heads = self.num_heads
        check_positive_int(self.num_kv_heads, "num_kv_heads")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_kv_heads ({self.num_kv_heads}) must divide num_heads ({self.num_heads}): "
                "each key/value head serves a whole group of query heads"
            )
        if self.head_dim is None:
            if self.d_model % self.num_heads:
                raise ValueError(
                    f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads}), "
                    "or head_dim must be given"
                )
            self.head_dim = self.d_model // self.num_heads
        check_positive_int(self.head_dim, "head_dim")

    def _check_norms(self) -> None:
        optional = NORMS[self.norm].optional
        if not self.norm_weight and "weight" not in optional:
            raise ValueError(f"norm_weight=False: norm {self.norm!r} has no form without a weight")
        if self.norm_bias and "bias" not in NORMS[self.norm].parameters:  # explicitly asked for
            raise ValueError(f"norm_bias=True: norm {self.norm!r} has no bias")

    def _check_positions(self) -> None:
        rotation = POSITIONS[self.position].rotation
        if rotation is None:
            if self.rope_scaling is not None:
                raise ValueError(f"rope_scaling is set, but position={self.position!r} rotates nothing")
            if self.qk_norm_order == "after_rope":
                raise ValueError(f"qk_norm_order='after_rope' needs a rotary position, got position={self.position!r}")
            return
        self.rope_scaling = check_rope_scaling(self.rope_scaling)
        if self.head_dim % 2:
            raise ValueError(
                f"position={self.position!r} rotates pairs of coordinates: head_dim ({self.head_dim}) must be even"
            )

    def _check_biases(self) -> None:
        for name in BIAS_SWITCHES:
            if getattr(self, name) is not None:
                check_bool(getattr(self, name), name)

    def _check_window(self) -> None:
        if self.sliding_window is None:
            if self.window_layers is not None:
                raise ValueError(
                    f"window_layers={self.window_layers!r} names windowed layers, but sliding_window is None"
                )
            return
        check_positive_int(self.sliding_window, "sliding_window")
        if self.window_layers is None:
            return
        if isinstance(self.window_layers, (str, bytes)) or not isinstance(self.window_layers, (list, tuple)):
            raise TypeError(f"window_layers must be a list of layer indices, got {self.window_layers!r}")
        for layer in self.window_layers:
            check_index(layer, self.num_layers, "each of window_layers")
        if not self.window_layers or len(set(self.window_layers)) < len(self.window_layers):
            raise ValueError(f"window_layers must name distinct layers, at least one, got {list(self.window_layers)}")
        self.window_layers = tuple(sorted(self.window_layers))

    def _check_experts(self) -> None:
        check_int_value(self.num_experts, "num_experts", 0)
        check_bool(self.experts_renormalize, "experts_renormalize")
        for name in ("router_aux_loss_coef", "router_z_loss_coef"):
            setattr(self, name, float(check_number(getattr(self, name), name, 0.0)))
        if not self.num_experts:
            changed = [name for name in EXPERT_FIELDS if getattr(self, name) != _DEFAULTS[name]]
            if changed:
                raise ValueError(f"{', '.join(changed)} set, but num_experts is 0 (a dense MLP has no experts)")
            return
        check_int_value(self.experts_top_k, "experts_top_k", 1, self.num_experts)
        if self.activation not in EXPERT_ACTIVATIONS:
            raise ValueError(
                f"num_experts={self.num_experts}: the experts are {'/'.join(EXPERT_ACTIVATIONS)} MLPs, "
                f"got activation={self.activation!r}"
            )
        if self.has_bias("mlp_bias"):
            raise ValueError("num_experts > 0: the experts have no biases; set mlp_bias=False (or use_bias=False)")

    def _check_gemma(self) -> None:
        check_bool(self.post_norms, "post_norms")
        for name in ("query_pre_attn_scalar", "attn_softcap", "logit_softcap", "rope_local_theta"):
            if getattr(self, name) is not None:
                setattr(self, name, _positive_finite(name, getattr(self, name)))
        if self.post_norms and self.num_experts:
            raise ValueError("post_norms=True: the sandwich of norms is built for a dense MLP, got num_experts > 0")
        if self.rope_local_theta is not None and (POSITIONS[self.position].rotation is None or not self.window_layers):
            raise ValueError(
                "rope_local_theta is the rotation's base on the windowed layers: it needs a rotary position and "
                f"window_layers (some layers local, others global), got position={self.position!r}, "
                f"window_layers={self.window_layers!r}"
            )

    def attention_scale(self) -> float:
        """The scale ``s`` of the scores ``s Q K^T``: ``query_pre_attn_scalar^-1/2``, else ``head_dim^-1/2``."""
        return 1.0 / math.sqrt(self.query_pre_attn_scalar or self.head_dim)  # the kernels' own default, bit for bit

    def local_rotation(self, layer: int) -> bool:
        """Whether layer ``layer`` rotates q and k by the local tables (``rope_local_theta``: a windowed layer)."""
        return self.rope_local_theta is not None and self.layer_window(layer) is not None

    @property
    def mlp_kind(self) -> str:
        """The MLP of every layer: ``"experts"`` (a mixture, ``num_experts > 0``) or ``"dense"``; the key of
        ``names.MLP_LAYOUTS`` and ``mlp_branch.MLP_KINDS``."""
        return "experts" if self.num_experts else "dense"

    def experts_options(self) -> dict:
        """The keyword options of ``ops.moe.moe_forward``, read from their fields."""
        return {
            "top_k": self.experts_top_k,
            "renormalize": self.experts_renormalize,
            "balance_coef": self.router_aux_loss_coef,
            "z_coef": self.router_z_loss_coef,
        }

    def layer_window(self, layer: int) -> int | None:
        """The window ``W`` of layer ``layer`` (0-based), or None when it attends to every earlier position."""
        if self.sliding_window is None or (self.window_layers is not None and layer not in self.window_layers):
            return None
        return self.sliding_window

    def about_experts(self) -> str:
        """``"8 experts of width 128, top-2, renormalised"`` (a model with experts)."""
        kept = "renormalised" if self.experts_renormalize else "not renormalised"
        return f"{self.num_experts} experts of width {self.d_ff}, top-{self.experts_top_k}, {kept}"

    def about_window(self) -> str:
        """``"sliding window 512 on layers 0, 2"`` or ``"... on every layer"`` (a model with a window)."""
        layers = "every layer" if self.window_layers is None else "layers " + ", ".join(map(str, self.window_layers))
        return f"sliding window {self.sliding_window} on {layers}"

    def keys_seen(self, seq_len: int) -> list[int]:
        """Per layer, the most positions a query attends to, and so the positions its KV cache keeps:
        ``min(seq_len, W)`` on a layer with a sliding window ``W``, else ``seq_len``."""
        windows = (self.layer_window(layer) for layer in range(self.num_layers))
        return [seq_len if window is None else min(seq_len, window) for window in windows]

    def has_bias(self, switch: str) -> bool:
        """Whether the layers of ``switch`` (``"qkv_bias"``, ``"out_bias"``, ``"mlp_bias"``, ``"norm_bias"``)
        have biases: the switch, or ``use_bias`` where it is None; never for a norm with no bias option."""
        if switch == "norm_bias" and "bias" not in NORMS[self.norm].parameters:
            return False
        value = getattr(self, switch)
        return self.use_bias if value is None else value

    def score_modifiers(self, layer: int) -> tuple:
        """What the attention of layer ``layer`` does to its scores (``ops/scores.py``): the soft cap
        (``("softcap", c)``, applied first), the causal mask, or on a windowed layer the window (``("window", W)``,
        causal itself), then the position scheme's (ALiBi)."""
        window = self.layer_window(layer)
        mask = "causal" if window is None else ("window", window)
        added = POSITIONS[self.position].score_modifier
        capped = () if self.attn_softcap is None else (("softcap", self.attn_softcap),)
        return (*capped, mask) if added is None else (*capped, mask, added)

    def activation_options(self) -> dict:
        """The keyword options of the activation's forward, read from their fields (``ACTIVATION_OPTION_FIELDS``):
        ``{"approximate": ...}`` for GELU, else none."""
        return {name: getattr(self, ACTIVATION_OPTION_FIELDS[name]) for name in ACTIVATIONS[self.activation].options}

    def to_dict(self) -> dict:
        """A JSON-able dict of every field (``d_ff``, ``num_kv_heads`` and ``head_dim`` resolved; ``window_layers``
        a list, as JSON reads it back)."""
        d = asdict(self)
        if self.window_layers is not None:
            d["window_layers"] = list(self.window_layers)
        return d

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


def activation_fields(options: dict) -> dict:
    """The fields that give an activation its ``options``: ``{"approximate": "none"}`` -> ``{"gelu_approximate":
    "none"}`` (the inverse of ``GPTConfig.activation_options``)."""
    return {ACTIVATION_OPTION_FIELDS[name]: value for name, value in options.items()}


_DEFAULTS = {f.name: f.default for f in fields(GPTConfig)}


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def _positive_finite(name: str, value: object) -> float:
    if not is_real(value) or not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)
