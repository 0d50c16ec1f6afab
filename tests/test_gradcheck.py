"""The checker itself must pass correct gradients and catch wrong ones."""

from typing import NamedTuple

import numpy as np
import pytest
from helpers import randn

from numforge.gradcheck import check_op, format_results, numeric_gradient, relative_error


class CubeCache(NamedTuple):
    x: object
    w: object


def cube_forward(x, w):
    """y = x**3 * w (elementwise), a non-linear op with two inputs."""
    return x**3 * w, CubeCache(x, w)


def cube_backward(dy, cache):
    return 3 * cache.x**2 * cache.w * dy, cache.x**3 * dy


def wrong_cube_backward(dy, cache):
    dx, dw = cube_backward(dy, cache)
    return dx * 1.001, dw  # a 0.1% error must be caught


def test_correct_gradients_pass():
    rows = check_op("cube", cube_forward, cube_backward, {"x": randn(3, 4, 5), "w": randn(3, 4, 5, seed=1)})
    assert [r.argument for r in rows] == ["x", "w"]
    assert all(r.passed for r in rows), format_results(rows)
    assert max(r.max_rel_error for r in rows) < 1e-8


def test_wrong_gradient_fails():
    rows = check_op("cube", cube_forward, wrong_cube_backward, {"x": randn(3, 4), "w": randn(3, 4, seed=1)})
    by_arg = {r.argument: r for r in rows}
    assert not by_arg["x"].passed
    assert by_arg["x"].max_rel_error > 1e-4
    assert by_arg["w"].passed
    assert "FAIL" in format_results(rows)


def test_sparse_mode_checks_only_the_sampled_coordinates():
    rows = check_op(
        "cube", cube_forward, cube_backward, {"x": randn(50, 40), "w": randn(50, 40, seed=1)}, max_coords=25
    )
    assert [r.coords_checked for r in rows] == [25, 25]
    assert all(r.passed for r in rows)


def test_float32_inputs_are_refused():
    with pytest.raises(TypeError, match="float64"):
        check_op("cube", cube_forward, cube_backward, {"x": randn(3, dtype="float32"), "w": randn(3, dtype="float32")})


def test_relative_error_definition():
    a = np.array([1.0, -2.0, 0.0])
    n = np.array([1.0, -2.5, 0.0])
    # max|a-n| = 0.5 ; max(|a|+|n|) = 4.5
    assert relative_error(a, n) == pytest.approx(0.5 / 4.5, rel=1e-15)
    assert relative_error(np.zeros(3), np.zeros(3)) == 0.0


def test_missing_gradient_slot_is_reported():
    def forward(x, w):
        return cube_forward(x, w)

    def backward(dy, cache):
        return cube_backward(dy, cache)[0]

    with pytest.raises(ValueError, match="returned 1 gradients for the 2 float inputs"):
        check_op("cube", forward, backward, {"x": randn(2), "w": randn(2)})


def test_a_strided_input_is_refused_rather_than_silently_unperturbed():
    x = randn(4, 6)[:, ::2]  # a strided view: reshape(-1) would be a copy
    with pytest.raises(ValueError, match="C-contiguous"):
        numeric_gradient(lambda: 0.0, x, np.arange(3))


def test_only_takes_an_exact_case_name_or_a_shell_pattern(capsys):
    from numforge.cli import main

    assert main(["gradcheck", "--list", "--only", "model[gelu]"]) == 0  # brackets: an exact name, not a class
    assert capsys.readouterr().out.split() == ["model[gelu]"]
    assert main(["gradcheck", "--list", "--only", "layer_norm*"]) == 0
    assert capsys.readouterr().out.split("\n")[:2] == ["layer_norm", "layer_norm[no bias]"]
