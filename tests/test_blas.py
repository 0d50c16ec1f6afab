"""NumPy's BLAS threads: read, limited to one inside a block, restored after (nested and threaded blocks)."""

import threading

import pytest

from numforge.blas import blas_threads, numpy_openblas, one_blas_thread


def test_one_blas_thread_limits_and_restores():
    blas = numpy_openblas()
    if blas is None:
        pytest.skip("NumPy does not bundle OpenBLAS here")
    before = blas_threads()
    blas.set_num_threads(2)  # a count to restore even on a 1-core machine
    try:
        with one_blas_thread():
            assert blas_threads() == 1
            with one_blas_thread():  # nested: still 1, and the outer block still restores
                assert blas_threads() == 1
            assert blas_threads() == 1
            inner = []
            worker = threading.Thread(target=lambda: inner.append(_count_inside()))
            worker.start()
            worker.join()
            assert inner == [1] and blas_threads() == 1  # a block closing in a thread keeps the outer one
        assert blas_threads() == 2
    finally:
        blas.set_num_threads(before)


def _count_inside() -> int:
    with one_blas_thread():
        return blas_threads()


def test_blas_threads_is_a_positive_count():
    assert blas_threads() >= 1
