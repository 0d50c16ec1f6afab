"""GPT.backward_steps: the backward hands out every gradient it made, and training keeps none of them for long.

Each branch's backward returns its gradients on the way (``MlpBackward``, ``AttentionBackward``) for the
study tools; ``GPT.backward`` must free them as a plain walk would: none of a branch's is alive when the
next branch's backward starts.
"""

import weakref

import numpy as np
import pytest

from numforge.backend import asarray
from numforge.model import GPT, GPTConfig, blocks
from numforge.model.config import ARCHS

SMALL = dict(vocab_size=29, max_seq_len=12, d_model=16, num_heads=4, num_layers=3)
OPTIONS = {
    "gpt2": {},
    "swiglu": {"activation": "swiglu"},
    "qwen3": {**ARCHS["llama"], "num_kv_heads": 2, "qk_norm": True, "qk_norm_order": "before_rope"},
}


def _on_the_way(result) -> list:
    """The arrays a branch's backward made besides its ``dx`` and ``grads``."""
    found = []
    for name, value in result._asdict().items():
        if name in ("dx", "grads"):
            continue
        if hasattr(value, "_asdict"):  # the QK steps' own record
            found += [value.dq, value.dk] + [a for _, dq, dk in value.path for a in (dq, dk)]
        elif isinstance(value, tuple):
            found += list(value)
        else:
            found.append(value)
    return found


@pytest.mark.parametrize("option", list(OPTIONS))
def test_a_branchs_gradients_are_freed_before_the_next_branch_runs(monkeypatch, option):
    model = GPT(GPTConfig(**SMALL, **OPTIONS[option]))
    rng = np.random.default_rng(0)
    ids, targets = (asarray(rng.integers(0, 29, (2, 12))) for _ in range(2))
    _, cache = model.forward(ids, targets)
    previous, calls = [], []

    def watched(real):
        def branch_backward(d, branch_cache, config):
            alive = [ref for ref in previous if ref() is not None]
            assert not alive, f"{len(alive)} arrays of the branch before are alive as {real.__name__} starts"
            result = real(d, branch_cache, config)
            previous[:] = [weakref.ref(a) for a in _on_the_way(result)]
            calls.append(real.__name__)
            return result

        return branch_backward

    monkeypatch.setattr(blocks, "mlp_branch_backward", watched(blocks.mlp_branch_backward))
    monkeypatch.setattr(blocks, "attention_branch_backward", watched(blocks.attention_branch_backward))
    model.backward(cache)
    assert calls == ["mlp_branch_backward", "attention_branch_backward"] * SMALL["num_layers"]
    assert len(previous) >= 7  # the attention's: dmerged, dq, dk, dv, dh, and q, k before each QK step
