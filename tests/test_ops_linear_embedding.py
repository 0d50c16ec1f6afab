"""Linear and embedding: hand-computed values, gradients on drawn shapes, repeated ids, bad input."""

import numpy as np
import pytest
from helpers import assert_gradients_pass, randn
from hypothesis import given
from hypothesis import strategies as st

from numforge import backend
from numforge.gradcheck import check_op
from numforge.ops.embedding import embedding_backward, embedding_forward
from numforge.ops.linear import linear_backward, linear_forward


def test_linear_by_hand():
    x = backend.asarray([[1.0, 2.0]])
    weight = backend.asarray([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
    y, cache = linear_forward(x, weight, backend.asarray([0.0, 0.0, 1.0]))
    np.testing.assert_array_equal(backend.to_numpy(y), [[1.0, 2.0, 4.0]])
    dx, dweight, dbias = linear_backward(backend.asarray([[1.0, 0.0, 2.0]]), cache)
    np.testing.assert_array_equal(backend.to_numpy(dx), [[3.0, 2.0]])  # dy W^T
    np.testing.assert_array_equal(backend.to_numpy(dweight), [[1.0, 0.0, 2.0], [2.0, 0.0, 4.0]])  # x^T dy
    np.testing.assert_array_equal(backend.to_numpy(dbias), [1.0, 0.0, 2.0])


@given(
    lead=st.lists(st.integers(1, 4), min_size=1, max_size=2),  # (N,) or (B, T), T = 1 included
    c_in=st.integers(1, 6),
    c_out=st.integers(1, 5),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_linear_gradient(lead, c_in, c_out, bias, seed):
    inputs = {
        "x": randn(*lead, c_in, seed=seed),
        "weight": randn(c_in, c_out, seed=seed + 1),
        "bias": randn(c_out, seed=seed + 2) if bias else None,
    }
    rows = check_op("linear", linear_forward, linear_backward, inputs)
    assert len(rows) == (3 if bias else 2)
    assert_gradients_pass(rows)
    if not bias:
        _, cache = linear_forward(inputs["x"], inputs["weight"])
        assert linear_backward(randn(*lead, c_out), cache)[2] is None


def test_embedding_by_hand_repeated_ids_accumulate():
    table = backend.asarray([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])
    ids = backend.asarray(np.array([[2, 0, 2]]))
    out, cache = embedding_forward(ids, table)
    np.testing.assert_array_equal(backend.to_numpy(out), [[[2.0, 2.0], [0.0, 0.0], [2.0, 2.0]]])
    dout = backend.asarray([[[1.0, 2.0], [10.0, 20.0], [100.0, 200.0]]])
    dtable = embedding_backward(dout, cache)
    np.testing.assert_array_equal(backend.to_numpy(dtable), [[10.0, 20.0], [0.0, 0.0], [101.0, 202.0]])


@given(
    b=st.integers(1, 3),
    t=st.integers(1, 6),
    vocab=st.integers(1, 5),  # few rows: repeated ids are the rule, not the exception
    width=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_embedding_gradient_and_onehot_oracle(b, t, vocab, width, seed):
    ids = backend.asarray(np.random.default_rng(seed).integers(0, vocab, size=(b, t)))
    table = randn(vocab, width, seed=seed)
    assert_gradients_pass(check_op("embedding", embedding_forward, embedding_backward, {"ids": ids, "table": table}))
    # plain oracle: dtable = onehot(ids)^T @ dout, the lookup written as a matrix product
    _, cache = embedding_forward(ids, table)
    dout = randn(b, t, width, seed=seed + 1)
    onehot = np.eye(vocab)[backend.to_numpy(ids).reshape(-1)]  # (N, V)
    expected = onehot.T @ backend.to_numpy(dout).reshape(-1, width)
    np.testing.assert_allclose(backend.to_numpy(embedding_backward(dout, cache)), expected, rtol=1e-12, atol=1e-12)


def test_linear_bad_input_is_named():
    x = randn(2, 3, 4)
    with pytest.raises(ValueError, match=r"weight must have 2 dimensions, got shape \(4,\)"):
        linear_forward(x, randn(4))
    with pytest.raises(ValueError, match=r"C_in = 5.*x \(2, 3, 4\) and weight \(5, 2\)"):
        linear_forward(x, randn(5, 2))
    with pytest.raises(ValueError, match=r"bias must have shape \(2,\), got \(3,\)"):
        linear_forward(x, randn(4, 2), randn(3))
    with pytest.raises(TypeError, match="weight must have x's dtype float64, got float32"):
        linear_forward(x, randn(4, 2, dtype="float32"))
    with pytest.raises(TypeError, match="x must be float32 or float64, got int"):
        linear_forward(backend.asarray(np.ones((2, 4), dtype=np.int64)), randn(4, 2))


def test_embedding_bad_input_is_named():
    table = randn(5, 3)
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 5\).*got 5"):
        embedding_forward(backend.asarray(np.array([[0, 5]])), table)
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 5\).*got -1"):
        embedding_forward(backend.asarray(np.array([[-1, 2]])), table)
    with pytest.raises(TypeError, match="ids must be an integer array, got dtype float64"):
        embedding_forward(randn(2, 3), table)
    with pytest.raises(ValueError, match=r"table must have 2 dimensions, got shape \(5,\)"):
        embedding_forward(backend.asarray(np.array([1])), randn(5))
    _, cache = embedding_forward(backend.asarray(np.array([[1, 2]])), table)
    with pytest.raises(ValueError, match=r"dout must have shape \(1, 2, 3\), got \(2, 3\)"):
        embedding_backward(randn(2, 3), cache)
