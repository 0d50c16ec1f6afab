import subprocess
import sys

import numpy as np
import pytest

from numforge import backend


def test_import_does_not_import_cupy():
    code = "import numforge, numforge.cli, sys; assert 'cupy' not in sys.modules"
    env = {"PATH": "", "NUMFORGE_BACKEND": "numpy"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_get_xp_follows_numpy_inputs():
    assert backend.get_xp(np.zeros(2), None, 3.0) is np
    assert backend.get_xp() is np


def test_get_xp_rejects_mixed_backends():
    cupy = pytest.importorskip("cupy")
    try:
        on_gpu = cupy.zeros(2)
    except Exception:
        pytest.skip("no usable CUDA device")
    with pytest.raises(TypeError, match="argument 0 is a numpy.ndarray and argument 1 is a cupy"):
        backend.get_xp(np.zeros(2), on_gpu)


def test_unknown_backend_names_the_choices():
    with pytest.raises(ValueError, match=r"one of \('numpy', 'cupy'\), got 'torch'"):
        backend.set_backend("torch")


def test_cupy_backend_without_cupy_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` fail
    with pytest.raises(backend.BackendUnavailableError, match=r'pip install "numforge\[cuda\]"'):
        backend.set_backend("cupy")


def test_use_backend_restores_the_previous_choice():
    before = backend.backend_name()
    with backend.use_backend("numpy") as xp:
        assert xp is np
        assert backend.backend_name() == "numpy"
    assert backend.backend_name() == before


def test_scatter_add_accumulates_repeated_indices(xp):
    target = xp.zeros(3)
    backend.scatter_add(target, xp.asarray([2, 0, 2]), xp.asarray([1.0, 10.0, 100.0]))
    np.testing.assert_array_equal(backend.to_numpy(target), [10.0, 0.0, 101.0])


def test_scatter_add_rows_of_a_table(xp):
    table = xp.zeros((4, 2), dtype=xp.float32)
    ids = xp.asarray([1, 1, 3])
    rows = xp.asarray([[1, 2], [3, 4], [5, 6]], dtype=xp.float32)
    backend.scatter_add(table, ids, rows)
    np.testing.assert_array_equal(backend.to_numpy(table), [[0, 0], [4, 6], [0, 0], [5, 6]])
    assert table.dtype == xp.float32


def test_scatter_add_into_a_strided_table_updates_the_table_itself(xp):
    table = xp.zeros((4, 6), dtype=xp.float64)
    columns = table[:, ::2]  # (4, 3), not contiguous: there is no flat view to update through
    backend.scatter_add(columns, xp.asarray([0, 0, 2]), xp.ones((3, 3)))
    np.testing.assert_array_equal(backend.to_numpy(table)[:, ::2], [[2, 2, 2], [0, 0, 0], [1, 1, 1], [0, 0, 0]])
    assert float(table[:, 1::2].sum()) == 0.0


def test_scatter_add_matches_a_loop_on_many_repeats():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 5, size=200)
    rows = rng.standard_normal((200, 3, 2))
    table = np.zeros((5, 3, 2))
    backend.scatter_add(table, ids, rows)
    expected = np.zeros((5, 3, 2))
    for i, row in zip(ids, rows):
        expected[i] += row
    np.testing.assert_array_equal(table, expected)  # same order of additions: bit for bit


def test_default_rng_is_seeded(xp):
    a = backend.to_numpy(backend.default_rng(7).random(5))
    b = backend.to_numpy(backend.default_rng(7).random(5))
    c = backend.to_numpy(backend.default_rng(8).random(5))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("bad", ["float16", "int32", "banana", None])
def test_resolve_dtype_accepts_only_float32_and_float64(bad):
    with pytest.raises(ValueError, match="dtype must be one of"):
        backend.resolve_dtype(bad)
    assert backend.resolve_dtype("float32") == np.float32
    assert backend.resolve_dtype(np.float64) == np.float64


def test_scatter_add_broadcasts_values_over_rows_and_takes_int32_ids():
    table = np.zeros((4, 3))
    backend.scatter_add(table, np.array([1, 3, 1], dtype=np.int32), np.ones((3, 1)))  # values broadcast on a row
    np.testing.assert_array_equal(table, [[0, 0, 0], [2, 2, 2], [0, 0, 0], [1, 1, 1]])
