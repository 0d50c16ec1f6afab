"""The op contract, checked for every core op in one place:

- every gradient passes its float64 check (the same cases `numforge gradcheck` runs);
- float32 in gives float32 out, forward and backward;
- a backward modifies neither dy nor anything in the cache, and returns new arrays.
"""

import numpy as np
import pytest
from helpers import assert_gradients_pass, randn

from numforge import backend
from numforge.gradcheck.ops import CASES
from numforge.ops.activations import (
    gelu_backward,
    gelu_forward,
    relu_backward,
    relu_forward,
    swiglu_backward,
    swiglu_forward,
)
from numforge.ops.cross_entropy import (
    cross_entropy_backward,
    cross_entropy_forward,
    scale_tied_cross_entropy_grads,
    tied_cross_entropy_backward,
    tied_cross_entropy_forward,
    tied_cross_entropy_with_grads,
)
from numforge.ops.dropout import dropout_backward, dropout_forward
from numforge.ops.embedding import embedding_backward, embedding_forward
from numforge.ops.layernorm import layer_norm_backward, layer_norm_forward
from numforge.ops.linear import linear_backward, linear_forward
from numforge.ops.moe import moe_backward, moe_forward
from numforge.ops.rmsnorm import rms_norm_backward, rms_norm_forward
from numforge.ops.rope import rope_backward, rope_forward, rope_table


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_gradcheck_case_passes(case):
    rows = case.run()
    assert rows, f"{case.name} checked nothing"
    assert_gradients_pass(rows)


def _ids():
    return backend.asarray(np.array([[3, 1, 3], [0, 6, 3]]))


def _targets():
    return backend.asarray(np.array([[3, -1, 2], [0, 6, 6]]))


def _rope_rows(start, length, head_dim, dtype):
    """cos and sin of positions [start, start + length), in the backend and dtype of x."""
    table = rope_table(start + length, head_dim, dtype=dtype)
    return backend.asarray(table.cos[start:]), backend.asarray(table.sin[start:])


def _moe_args(dtype):
    """h (2, 3, 5), W_r (5, 4), 4 experts of width 6."""
    shapes = [(2, 3, 5), (5, 4), (4, 5, 6), (4, 5, 6), (4, 6, 5)]
    return tuple(randn(*shape, dtype=dtype, seed=seed) for seed, shape in enumerate(shapes))


# name -> function(dtype) returning (forward, backward, positional args, keyword args)
OPS = {
    "linear": lambda d: (
        linear_forward,
        linear_backward,
        (randn(2, 3, 5, dtype=d), randn(5, 4, dtype=d, seed=1), randn(4, dtype=d, seed=2)),
        {},
    ),
    "embedding": lambda d: (embedding_forward, embedding_backward, (_ids(), randn(7, 5, dtype=d)), {}),
    "layer_norm": lambda d: (
        layer_norm_forward,
        layer_norm_backward,
        (randn(2, 3, 5, dtype=d), randn(5, dtype=d, seed=1), randn(5, dtype=d, seed=2)),
        {},
    ),
    "rms_norm": lambda d: (
        rms_norm_forward,
        rms_norm_backward,
        (randn(2, 3, 5, dtype=d), randn(5, dtype=d, seed=1)),
        {},
    ),
    "rms_norm[no weight]": lambda d: (rms_norm_forward, rms_norm_backward, (randn(2, 3, 5, dtype=d), None), {}),
    "rope": lambda d: (rope_forward, rope_backward, (randn(2, 3, 4, 6, dtype=d), *_rope_rows(2, 4, 6, d)), {}),
    "relu": lambda d: (relu_forward, relu_backward, (randn(2, 3, 5, dtype=d),), {}),
    "gelu[tanh]": lambda d: (gelu_forward, gelu_backward, (randn(2, 3, 5, dtype=d),), {"approximate": "tanh"}),
    "gelu[none]": lambda d: (gelu_forward, gelu_backward, (randn(2, 3, 5, dtype=d),), {"approximate": "none"}),
    "swiglu": lambda d: (
        swiglu_forward,
        swiglu_backward,
        (randn(2, 3, 5, dtype=d), randn(2, 3, 5, dtype=d, seed=1)),
        {},
    ),
    "dropout": lambda d: (
        dropout_forward,
        dropout_backward,
        (randn(2, 3, 5, dtype=d), 0.4, backend.default_rng(0)),
        {},
    ),
    "dropout[eval]": lambda d: (
        dropout_forward,
        dropout_backward,
        (randn(2, 3, 5, dtype=d), 0.4, backend.default_rng(0)),
        {"training": False},
    ),
    "cross_entropy": lambda d: (
        cross_entropy_forward,
        cross_entropy_backward,
        (randn(2, 3, 7, dtype=d), _targets()),
        {},
    ),
    "tied_cross_entropy": lambda d: (
        tied_cross_entropy_forward,
        tied_cross_entropy_backward,
        (randn(2, 3, 5, dtype=d), randn(7, 5, dtype=d, seed=1), _targets()),
        {"chunk_rows": 4},
    ),
    "tied_cross_entropy_and_grads": lambda d: (
        tied_cross_entropy_with_grads,
        scale_tied_cross_entropy_grads,
        (randn(2, 3, 5, dtype=d), randn(7, 5, dtype=d, seed=1), _targets()),
        {"chunk_rows": 4},
    ),
    "moe": lambda d: (moe_forward, moe_backward, _moe_args(d), {"top_k": 2}),
    "moe[aux]": lambda d: (
        moe_forward,
        moe_backward,
        _moe_args(d),
        {"top_k": 2, "renormalize": False, "balance_coef": 0.5, "z_coef": 0.25},
    ),
}


def _run(name, dtype):
    forward, backward, args, kwargs = OPS[name](dtype)
    y, cache = forward(*args, **kwargs)
    dy = randn(*y.shape, dtype=dtype, seed=9)
    return y, cache, dy, backward


def _arrays_in(cache):
    return [v for v in cache if hasattr(v, "shape") and hasattr(v, "dtype")]


def _grads(result):
    return [g for g in (result if isinstance(result, tuple) else (result,)) if g is not None]


@pytest.mark.parametrize("name", OPS)
def test_float32_stays_float32(name):
    y, cache, dy, backward = _run(name, "float32")
    assert y.dtype == np.float32, f"{name} forward gave {y.dtype}"
    grads = _grads(backward(dy, cache))
    assert grads
    assert [g.dtype for g in grads] == [np.float32] * len(grads)


@pytest.mark.parametrize("name", OPS)
def test_backward_modifies_neither_dy_nor_cache_and_returns_new_arrays(name):
    y, cache, dy, backward = _run(name, "float64")
    dy_before = backend.to_numpy(dy).copy()
    cache_before = [backend.to_numpy(a).copy() for a in _arrays_in(cache)]
    grads = _grads(backward(dy, cache))
    grads_first = [backend.to_numpy(g).copy() for g in grads]
    grads_again = _grads(backward(dy, cache))  # a second backward on the same cache agrees
    np.testing.assert_array_equal(backend.to_numpy(dy), dy_before)
    for before, after in zip(cache_before, _arrays_in(cache)):
        np.testing.assert_array_equal(backend.to_numpy(after), before)
    for first, again in zip(grads_first, grads_again):
        np.testing.assert_array_equal(backend.to_numpy(again), first)
    xp = backend.get_xp(dy)
    for g in grads:
        for other in [dy, *_arrays_in(cache)]:
            assert not xp.shares_memory(g, other), f"{name} returned a gradient that aliases its input"
