"""Data parallelism over MPI: N processes (ranks), one whole model each, the math of one process.

Every rank draws the same global batch of B windows from the same seeded
sampler. Rank r of N takes its B / N rows, in K micro-batches of
m = B / (N K) rows (``--grad-accum K``), each cut into P parts for the
rank's threads (``threads.py``; P = 1 on one thread), and adds up the
gradients of their mean losses. Each rank divides its sum by its N K P
parts, and one all-reduce over a single flat buffer holding every gradient
then gives every rank the gradient of the mean loss over the global batch's
C counted targets (those not ``IGNORE_INDEX``)::

    g = (1 / (N K P)) * sum over ranks r, micro-batches k, parts p of  w_p grad mean_loss(rows of r, k, p)

with ``w_p = N K P c_p / C`` for a part of ``c_p`` counted targets
(``threads.part_weight``): 1, and skipped, when every part counts alike.
Every rank holds the whole global batch, so each counts C itself.
Clipping and AdamW then run identically on every rank, so the
parameters stay identical; a checksum of them is compared across ranks at the
start and at every evaluation.

The model never knows: this module only picks rows and sums buffers. With one
process (no ``mpiexec``) the world is ``SingleProcess``, which does nothing,
and mpi4py is never imported. Under ``mpiexec`` the launcher's environment
(``PMI_SIZE`` from MPICH's and Intel MPI's hydra and Slurm, ``OMPI_COMM_WORLD_SIZE``
from Open MPI) names the number of ranks; ``NUMFORGE_MPI=1`` asks for MPI
even with one rank.

On CuPy (``NUMFORGE_BACKEND=cupy``) each rank uses GPU ``local rank % GPU count``
and the gradient buffer is summed on the GPUs by NCCL (``cupy.cuda.nccl``);
scalars and checksums still travel through MPI.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from collections.abc import Callable, Iterator

import numpy as np

from .. import interrupts
from ..backend import array_module, asarray, backend_name, get_xp, is_cupy_array, to_numpy
from ..blas import numpy_openblas
from ..checks import check_bool, check_positive_int
from ..model import IGNORE_INDEX
from .threads import Threads, part_weight, row_parts

LAUNCHER_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")  # set by mpiexec in every rank
FORCE_MPI_VARIABLE = "NUMFORGE_MPI"
MPI_INSTALL_HINT = 'pip install -e ".[mpi]"'


class MpiUnavailableError(ValueError):
    """The launch names several ranks (or NUMFORGE_MPI=1) but mpi4py cannot be imported."""


class RanksDisagree(RuntimeError):
    """The ranks' parameters differ: the run no longer computes one model."""


def launched_ranks() -> int:
    """The number of ranks the MPI launcher started, from its environment; 1 without a launcher."""
    for name in LAUNCHER_SIZE_VARIABLES:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 1


def connect():
    """The world this process belongs to: ``SingleProcess``, or an ``MpiWorld`` when launched with N > 1 ranks.

    Under MPI, each rank's BLAS is pinned to one thread (the ranks fill the
    cores) unless ``OPENBLAS_NUM_THREADS`` says otherwise.
    """
    size = launched_ranks()
    if size == 1 and os.environ.get(FORCE_MPI_VARIABLE, "") in ("", "0"):
        return SingleProcess()
    try:
        from mpi4py import MPI
    except ImportError as err:
        raise MpiUnavailableError(
            f"this process was launched as one of {size} MPI ranks (or with {FORCE_MPI_VARIABLE}=1), "
            f"but mpi4py is not installed: {MPI_INSTALL_HINT}"
        ) from err
    world = MpiWorld(MPI)
    if size > 1 and world.size != size:  # each process would train alone, all into one run directory
        raise MpiUnavailableError(
            f"the launcher started {size} ranks but MPI sees {world.size}: that mpiexec belongs to another MPI "
            f"library than mpi4py's (use the mpiexec installed by {MPI_INSTALL_HINT})"
        )
    if "OPENBLAS_NUM_THREADS" not in os.environ:
        blas = numpy_openblas()
        if blas is not None:
            blas.set_num_threads(1)
    return world


class SingleProcess:
    """A world of one rank: every collective is the identity."""

    size, rank, is_root = 1, 0, True

    def rows(self, count: int) -> range:
        """This rank's share of ``count`` rows (global indices): all of them."""
        return range(count)

    def sum_in_place(self, flat) -> None:
        """Sum a flat array over the ranks, in place."""

    def sum_floats(self, values: tuple[float, ...]) -> tuple[float, ...]:
        """Sum a few Python floats over the ranks (in float64)."""
        return values

    def broadcast(self, value):
        """Rank 0's ``value``, on every rank (a collective: every rank must call it)."""
        return value

    def check_same_params(self, params: dict, step: int) -> None:
        """Raise ``RanksDisagree`` on every rank if the parameters differ between ranks."""

    def setup_together(self, build: Callable[[], object]) -> object:
        """``build()``; under MPI on every rank in turns, and an error (or a stop signal) on any rank stops every
        rank (printed once)."""
        return build()

    @contextlib.contextmanager
    def ending_the_job_on_error(self, command: str) -> Iterator[None]:
        """Under MPI, an error escaping on one rank prints its message and aborts every rank."""
        yield


class MpiWorld(SingleProcess):
    """``MPI.COMM_WORLD``: N ranks, each with the whole model; rank 0 writes files and prints."""

    def __init__(self, MPI):
        self.MPI, self.comm = MPI, MPI.COMM_WORLD
        self.size, self.rank = self.comm.Get_size(), self.comm.Get_rank()
        self.is_root = self.rank == 0
        self.nccl = _NcclSum(self.comm, MPI) if backend_name() == "cupy" else None

    def rows(self, count: int) -> range:
        """Rows ``[r count / N, (r + 1) count / N)`` of ``count`` (which ``N`` divides)."""
        if count % self.size:
            raise ValueError(f"{count} rows do not split evenly over {self.size} ranks")
        share = count // self.size
        return range(self.rank * share, (self.rank + 1) * share)

    def sum_in_place(self, flat) -> None:
        if is_cupy_array(flat):
            self.nccl.sum_in_place(flat)
        else:
            self.comm.Allreduce(self.MPI.IN_PLACE, flat, op=self.MPI.SUM)

    def sum_floats(self, values: tuple[float, ...]) -> tuple[float, ...]:
        buffer = np.array(values, dtype=np.float64)  # (n,)
        self.comm.Allreduce(self.MPI.IN_PLACE, buffer, op=self.MPI.SUM)
        return tuple(float(v) for v in buffer)

    def broadcast(self, value):
        return self.comm.bcast(value, root=0)

    def check_same_params(self, params: dict, step: int) -> None:
        digest = hashlib.sha256()
        for name, value in params.items():
            digest.update(name.encode())
            digest.update(np.ascontiguousarray(to_numpy(value)).tobytes())
        digests = self.comm.allgather(digest.hexdigest()[:16])
        if len(set(digests)) > 1:
            raise RanksDisagree(
                f"at step {step} the parameters differ across ranks (checksums by rank: {digests}); "
                "the ranks must run identical code on identical data. The last checkpoint is untouched."
            )

    def setup_together(self, build: Callable[[], object]) -> object:
        """``build()`` on every rank in three turns: rank 0, then the first rank of each other machine, then the
        rest, so that a cache (tokenizer, tokens) is written once and read by the later turns, never written by
        two ranks at once. After each turn the ranks compare errors, so none waits forever."""
        local_rank = self.comm.Split_type(self.MPI.COMM_TYPE_SHARED).Get_rank()  # the rank among this machine's
        my_turn = 0 if self.is_root else 1 if local_rank == 0 else 2
        result = None
        for turn in range(3):
            error = None
            if turn == my_turn:
                try:
                    result = build()
                except (Exception, KeyboardInterrupt) as err:  # a stop signal at a safe point of the setup too
                    error = err
            self._stop_if_any_failed(error)
        return result

    def _stop_if_any_failed(self, error: BaseException | None) -> None:
        """A collective: if any rank's ``error`` is set, rank 0 raises it (or names the rank), the others exit
        quietly with the status rank 0 reports (2 bad input; 130 or 143 for a stop signal)."""
        signum = getattr(error, "signum", None)
        report = None if error is None else (str(error) or type(error).__name__, signum)
        failed = [(rank, report) for rank, report in enumerate(self.comm.allgather(report)) if report is not None]
        if not failed:
            return
        rank, (message, signum) = failed[0]
        if not self.is_root:
            raise SystemExit(2 if signum is None else 128 + signum)
        if error is not None:
            raise error
        if signum is not None:
            raise interrupts.Interrupted(signum)
        raise ValueError(f"rank {rank} of {self.size}: {message}")

    @contextlib.contextmanager
    def ending_the_job_on_error(self, command: str) -> Iterator[None]:
        try:
            yield
        except (Exception, KeyboardInterrupt) as error:  # the other ranks may wait in a collective: end them
            if isinstance(error, KeyboardInterrupt):  # a second stop signal, which aborts at once
                message, status = str(error) or "interrupted", getattr(error, "exit_status", 130)
            else:
                message, status = f"{type(error).__name__}: {error}", 1
            print(f"{command} (rank {self.rank} of {self.size}): {message}", file=sys.stderr, flush=True)
            self.comm.Abort(status)


class _NcclSum:
    """Sums a CuPy buffer over the ranks with NCCL; each rank first takes GPU ``local rank % GPU count``."""

    def __init__(self, comm, MPI):
        cupy = array_module()
        from cupy.cuda import nccl

        local_rank = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()  # the rank among this machine's
        cupy.cuda.Device(local_rank % cupy.cuda.runtime.getDeviceCount()).use()
        unique_id = comm.bcast(nccl.get_unique_id() if comm.Get_rank() == 0 else None, root=0)
        self.cupy, self.nccl = cupy, nccl
        self.comm = nccl.NcclCommunicator(comm.Get_size(), unique_id, comm.Get_rank())
        self.dtypes = {np.dtype(np.float32): nccl.NCCL_FLOAT32, np.dtype(np.float64): nccl.NCCL_FLOAT64}

    def sum_in_place(self, flat) -> None:
        stream = self.cupy.cuda.get_current_stream()
        self.comm.allReduce(
            flat.data.ptr, flat.data.ptr, flat.size, self.dtypes[flat.dtype], self.nccl.NCCL_SUM, stream.ptr
        )


# ---------------------------------------------------------------- gradients of the global batch


def micro_batch_size(batch_size: int, ranks: int, grad_accum: int) -> int:
    """``B / (N K)``, or a ``ValueError`` if it is not a whole number."""
    if batch_size % (ranks * grad_accum):
        raise ValueError(
            f"the batch size {batch_size} must divide by ranks x --grad-accum = "
            f"{ranks} x {grad_accum} = {ranks * grad_accum}"
        )
    return batch_size // (ranks * grad_accum)


def micro_batches(rows: range, size: int) -> list[range]:
    """``rows`` cut into consecutive ranges of ``size`` rows (``size`` divides ``len(rows)``)."""
    return [range(start, start + size) for start in range(rows.start, rows.stop, size)]


class DataParallel:
    """The mean loss and gradients of a global batch, from this rank's rows in ``grad_accum`` micro-batches.

    Each micro-batch is cut into one part per thread of ``threads``
    (``threads.py``; one part with one thread). With one rank, one micro-batch
    and one thread this is exactly one forward and one backward on the whole
    batch. Otherwise the parts' gradients add into one flat buffer
    (``GradientSum``), which is divided by the number of parts (``N K P``)
    and summed over the ranks by one all-reduce.
    """

    def __init__(self, world, model, grad_accum: int = 1, threads: Threads | None = None, recompute: bool = False):
        check_positive_int(grad_accum, "grad_accum")
        self.world, self.model, self.grad_accum = world, model, grad_accum
        self.recompute = check_bool(recompute, "recompute")  # the model's forward keeps only each block's input
        self.threads = threads or Threads(1)
        self.gradient_sum = None  # built at the first step that needs it

    def micro_batch_size(self, batch_size: int) -> int:
        return micro_batch_size(batch_size, self.world.size, self.grad_accum)

    def loss_and_gradients(self, x, y, dropout_rng: Callable[[range], object], segments=None):
        """``(loss, grads)`` of the global batch ``x, y (B,T)`` (the same on every rank), identical everywhere.

        ``dropout_rng(rows)`` gives the dropout generator of the global rows
        ``rows`` (or None), so that masks do not depend on how rows are split.
        ``segments (B,T)``: packed rows' segment ids (``model/packing.py``), split with their rows; None: one
        sequence a row.
        """
        B = x.shape[0]
        model = self.model

        def gradients(part: range):
            rows = _slice(part)
            loss, cache = model.forward(
                asarray(x[rows]),
                asarray(y[rows]),
                rng=dropout_rng(part),
                recompute=self.recompute,
                segments=_rows_of(segments, rows),
            )
            return loss, model.backward(cache)

        micro = micro_batches(self.world.rows(B), self.micro_batch_size(B))
        if self.world.size == 1 and len(micro) == 1 and len(row_parts(micro[0], self.threads.count)) == 1:
            loss, grads = gradients(range(B))
            return float(loss), grads  # one process, one batch, one thread

        self.gradient_sum = self.gradient_sum or GradientSum(model.trainable)
        weights = self._part_weights(y, micro)
        loss_sum, parts = 0.0, 0
        for rows in micro:
            for loss, grads in self._on_threads(rows, gradients, weights):
                loss_sum += loss
                self.gradient_sum.add(grads, first=parts == 0)
                parts += 1
        (loss,) = self.world.sum_floats((loss_sum / (parts * self.world.size),))
        return loss, self.gradient_sum.mean(self.world, parts * self.world.size)

    def mean_loss(self, x, y, batch_size: int, segments=None) -> float:
        """The mean loss over every counted target of ``x, y (M,T)`` (packed: ``segments (M,T)``), evaluated
        without update.

        Each rank evaluates its ``M / N`` rows in micro-batches of
        ``batch_size / (N K)``, each cut into parts for the threads and
        weighted as in training (``_part_weights``); the sums of their losses
        are all-reduced.
        """

        def loss(part: range):
            rows = _slice(part)
            packed = _rows_of(segments, rows)
            return self.model.forward(asarray(x[rows]), asarray(y[rows]), for_backward=False, segments=packed)[0], None

        micro = micro_batches(self.world.rows(len(x)), self.micro_batch_size(batch_size))
        weights = self._part_weights(y, micro)
        total, count = 0.0, 0
        for rows in micro:
            losses = self._on_threads(rows, loss, weights)
            total += sum(part_loss for part_loss, _ in losses) / len(losses)
            count += 1
        total, count = self.world.sum_floats((total, float(count)))
        return total / count

    def _part_weights(self, y, micro: list[range]) -> Callable[[range], float | None]:
        """``part -> w_p``, the ``part_weight`` of a thread part of ``micro`` (this rank's micro-batches of the
        global targets ``y (B,T)``) by its counted targets against those of all of ``y``, over every rank's parts."""
        parts = self.world.size * len(micro) * len(row_parts(micro[0], self.threads.count))
        total = counted_targets(y)
        return lambda part: part_weight(counted_targets(y[_slice(part)]), total, parts)

    def _on_threads(
        self, rows: range, compute: Callable[[range], tuple], weights: Callable[[range], float | None]
    ) -> list[tuple[float, dict | None]]:
        """``compute(part) -> (loss, grads or None)`` for each thread part of the micro-batch ``rows``, in order;
        each scaled by its ``weights(part)`` in its thread (none when None), so that they add up as equal ones."""

        def weighted(part: range) -> tuple[float, dict | None]:
            loss, grads = compute(part)
            weight = weights(part)
            if weight is None:
                return float(loss), grads
            for g in (grads or {}).values():
                g *= weight  # the part's own fresh arrays
            return float(loss) * weight, grads

        return self.threads.map(weighted, row_parts(rows, self.threads.count))


def counted_targets(targets) -> int:
    """How many of ``targets`` count in the loss: those not ``IGNORE_INDEX``."""
    return int((targets != IGNORE_INDEX).sum())


def _slice(rows: range) -> slice:
    return slice(rows.start, rows.stop)


def _rows_of(segments, rows: slice):
    """``segments[rows]`` on the backend, or None (rows of one sequence each)."""
    return None if segments is None else asarray(segments[rows])


class GradientSum:
    """One flat buffer holding every gradient, with a view per parameter (the all-reduce sends one buffer)."""

    def __init__(self, params: dict):
        first = next(iter(params.values()))
        xp = get_xp(first)
        self.flat = xp.empty(sum(int(p.size) for p in params.values()), dtype=first.dtype)  # (P,)
        self.views, offset = {}, 0
        for name, p in params.items():
            self.views[name] = self.flat[offset : offset + p.size].reshape(p.shape)  # (P,) -> p's shape
            offset += p.size

    def add(self, grads: dict, first: bool) -> None:
        """Add ``grads`` into the buffer (``first``: replace what it held)."""
        for name, view in self.views.items():
            if first:
                view[...] = grads[name]
            else:
                view += grads[name]

    def mean(self, world, parts: int) -> dict:
        """Divide the buffer by ``parts`` (of every rank), sum it over the ranks; the views by name (valid until the
        next ``add``). Dividing first lets each rank count its own parts."""
        self.flat /= parts
        world.sum_in_place(self.flat)
        return self.views
