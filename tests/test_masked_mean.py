"""The loss over masked targets is the mean over every counted target of the batch, whatever splits it.

Threads, gradient accumulation and MPI ranks cut a batch into parts; each
part's mean is weighted by its share of the batch's counted targets
(``threads.part_weight``), so the split batch's loss is PyTorch's
``cross_entropy(..., ignore_index=...)`` mean and its gradients are the
unsplit batch's, to float64 rounding. Parts that count alike are added as
before, bit for bit.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from masked_batch import ROWS, SEGMENTS, masked_batch, split_loss_and_gradients
from test_parallel import mpi_env, mpiexec_path

from numforge.model import IGNORE_INDEX
from numforge.training.parallel import DataParallel, SingleProcess, counted_targets
from numforge.training.threads import Threads, part_weight, row_parts

MASKED_SCRIPT = Path(__file__).resolve().parent / "masked_batch.py"
# float64: a split batch's loss and gradients against the unsplit batch's and torch's, measured: at most 4e-16
FLOAT64_TOLERANCE = 1e-12


def torch_mean_loss(model, x, y) -> float:
    """PyTorch's ignore_index mean of the model's logits: the reference the splits must reach."""
    torch = pytest.importorskip("torch")
    _, cache = model.forward(x, y, keep_caches=True)
    logits = np.asarray(cache.loss.rows) @ np.asarray(model.params["token_embedding"]).T  # (N,C) @ (C,V) -> (N,V)
    targets = torch.tensor(y.reshape(-1))
    return torch.nn.functional.cross_entropy(torch.tensor(logits), targets, ignore_index=IGNORE_INDEX).item()


def largest_difference(grads: dict, reference: dict) -> float:
    """``max|a - b| / max|b|`` over every parameter's gradient."""
    return max(float(np.abs(grads[n] - g).max() / np.abs(g).max()) for n, g in reference.items())


@pytest.fixture(scope="module")
def unsplit():
    model, x, y = masked_batch()
    return split_loss_and_gradients(model, x, y, SingleProcess(), threads=1, grad_accum=1)


def test_the_batch_counts_unevenly_and_one_row_not_at_all():
    _, _, y = masked_batch()
    assert [counted_targets(row) for row in y] == [5, 0, 8, 8, 3, 8]


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("grad_accum", [1, 2, 3])
def test_every_split_has_torchs_mean_and_the_unsplit_gradients(unsplit, threads, grad_accum):
    model, x, y = masked_batch()
    loss, grads = split_loss_and_gradients(model, x, y, SingleProcess(), threads, grad_accum)
    assert loss == pytest.approx(torch_mean_loss(model, x, y), rel=FLOAT64_TOLERANCE, abs=0)
    assert loss == pytest.approx(unsplit[0], rel=FLOAT64_TOLERANCE, abs=0)
    assert largest_difference(grads, unsplit[1]) < FLOAT64_TOLERANCE


@pytest.fixture(scope="module")
def packed():
    """The batch's rows as packed sequences (``SEGMENTS``), unsplit: ``(segments, loss, grads)``."""
    model, x, y = masked_batch()
    segments = np.array(SEGMENTS)  # (6,8)
    return (segments, *split_loss_and_gradients(model, x, y, SingleProcess(), 1, 1, segments))


def test_the_packed_batch_is_not_the_unpacked_one(unsplit, packed):
    assert packed[1] != pytest.approx(unsplit[0], rel=1e-6)  # the segments change the batch: the checks below bite


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("grad_accum", [1, 2, 3])
def test_every_split_of_packed_rows_has_the_unsplit_loss_and_gradients(packed, threads, grad_accum):
    model, x, y = masked_batch()
    loss, grads = split_loss_and_gradients(model, x, y, SingleProcess(), threads, grad_accum, packed[0])
    assert loss == pytest.approx(packed[1], rel=FLOAT64_TOLERANCE, abs=0)
    assert largest_difference(grads, packed[2]) < FLOAT64_TOLERANCE


@pytest.mark.parametrize("threads", [2, 3])
def test_the_evaluation_mean_is_torchs_mean_over_every_batch(threads):
    model, x, y = masked_batch()
    parallel = DataParallel(SingleProcess(), model, threads=Threads(threads))
    evaluated = parallel.mean_loss(x, y, batch_size=ROWS // 2)  # two batches of 3 rows, counting 13 and 19
    assert evaluated == pytest.approx(torch_mean_loss(model, x, y), rel=FLOAT64_TOLERANCE, abs=0)


@pytest.mark.parametrize("threads, grad_accum", [(1, 1), (3, 2)])
def test_a_batch_with_no_counted_target_has_loss_zero_and_zero_gradients(threads, grad_accum):
    model, x, y = masked_batch({row: 8 for row in range(ROWS)})
    loss, grads = split_loss_and_gradients(model, x, y, SingleProcess(), threads, grad_accum)
    assert loss == 0.0
    assert all(not g.any() for g in grads.values())  # zeros, no NaN


@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 12), st.integers(1, 5), st.integers(1, 16))
def test_full_rows_weigh_as_before_bit_for_bit(ranks, grad_accum, rows, threads, length):
    """No ignored target: each part's weight is exactly the row weight ``P n_p / m`` it had, None for equal parts."""
    micro = range(0, rows)
    parts = row_parts(micro, threads)
    for part in parts:
        before = None if len({len(p) for p in parts}) == 1 else len(parts) * len(part) / len(micro)
        total, count = ranks * grad_accum * rows * length, ranks * grad_accum * len(parts)
        assert part_weight(len(part) * length, total, count) == before


def test_part_weights_count_each_part_by_its_targets():
    assert part_weight(0, 32, 4) == 0.0  # a part with no counted target adds nothing
    assert part_weight(8, 32, 4) is None  # its fair share: added as it is
    assert part_weight(13, 32, 4) == 13 * 4 / 32
    assert part_weight(0, 0, 4) is None  # nothing counted anywhere: every part's loss is 0 already


def two_ranks(tmp_path, threads: int, grad_accum: int, *flags) -> dict:
    """The arrays ``masked_batch.py`` writes from two ranks: ``loss`` and the gradients."""
    out = tmp_path / "two_ranks.npz"
    command = [mpiexec_path(), "-n", "2", sys.executable, str(MASKED_SCRIPT), str(out)]
    command += ["--threads", str(threads), "--grad-accum", str(grad_accum), *flags]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=mpi_env())
    assert result.returncode == 0, result.stderr
    return dict(np.load(out))


@pytest.mark.parametrize("threads, grad_accum", [(1, 1), (2, 1), (1, 3)])  # each rank's 3 rows: 3; 2 + 1; 1, 1, 1
def test_two_ranks_have_torchs_mean_and_the_unsplit_gradients(tmp_path, unsplit, threads, grad_accum):
    saved = two_ranks(tmp_path, threads, grad_accum)
    assert float(saved["loss"]) == pytest.approx(torch_mean_loss(*masked_batch()), rel=FLOAT64_TOLERANCE, abs=0)
    assert largest_difference({n: saved[n] for n in unsplit[1]}, unsplit[1]) < FLOAT64_TOLERANCE


@pytest.mark.parametrize("threads, grad_accum", [(2, 1), (1, 3)])
def test_two_ranks_of_packed_rows_have_the_unsplit_loss_and_gradients(tmp_path, packed, threads, grad_accum):
    saved = two_ranks(tmp_path, threads, grad_accum, "--packed")
    assert float(saved["loss"]) == pytest.approx(packed[1], rel=FLOAT64_TOLERANCE, abs=0)
    assert largest_difference({n: saved[n] for n in packed[2]}, packed[2]) < FLOAT64_TOLERANCE
