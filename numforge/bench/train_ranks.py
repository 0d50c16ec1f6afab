"""``numforge bench train --ranks N``: data-parallel training steps over MPI, 1 rank vs N ranks (vs PyTorch).

For each config of ``numforge bench train`` it launches, in turn, ``--rounds`` times::

    mpiexec -n 1 python -m numforge.bench.train_ranks --config NAME ...
    mpiexec -n N python -m numforge.bench.train_ranks --config NAME ...

each rank with one BLAS thread (``OPENBLAS_NUM_THREADS=1``), every rank
running the step of ``numforge train``: forward and backward on its B / N rows
of the global batch, one all-reduce of the flat gradient buffer
(``training/parallel.py``), AdamW. Then, when torch is installed, PyTorch
eager on the same model and weights at its default threads, in this process;
each side keeps its best round. Rank 0 reports the median step time; every rank reports how long it computed
and how long it waited in the all-reduce, which shows where the time beyond
a perfect N-fold speed-up goes: the all-reduce itself (the shortest wait,
that of the last rank to arrive) and imbalance (the spread of compute times).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ..backend import asarray
from ..model import GPT
from ..optim import AdamW
from ..table import format_table
from ..training.parallel import MPI_INSTALL_HINT, DataParallel, connect
from .measure import optional_torch, where_it_runs
from .train_models import ARCH_FIELDS, CONFIGS, LR, WEIGHT_DECAY, build, torch_step

LEGEND = """\
median step times, the best of the rounds; ranks with one BLAS thread each;
on free cores: the speed-up from CPU time, which other work on the machine disturbs less: per step, the
  busiest rank's CPU seconds outside the all-reduce plus the all-reduce's transfer time (the wall time
  N ranks would take on N otherwise idle cores; MPI's busy-waiting for a late rank is left out);
all-reduce ms: the shortest wait in the all-reduce of any rank (the last to arrive: the transfer itself);
AdamW ms: the update, which every rank repeats in full;
imbalance: the longest forward + backward time of the ranks over the shortest"""


def mpiexec_path() -> str:
    """The ``mpiexec`` beside this Python (the mpich wheel's), else the first on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None:
        raise ValueError(f"--ranks needs mpiexec, which was not found: {MPI_INSTALL_HINT}")
    return found


def run(args: argparse.Namespace) -> int:
    torch = None if args.no_torch else optional_torch()
    names = list(CONFIGS) if args.config == "all" else [args.config]
    print(where_it_runs(torch))
    rows = []
    for name in names:
        reports = {1: [], args.ranks: []}
        torch_times = []
        for _ in range(args.rounds):  # taking turns, so that a change of load hits every side alike
            for ranks, found in reports.items():
                found.append(_launch(ranks, name, args))
            if torch is not None:
                torch_times.append(_torch_step_time(torch, name, args))
        one, many = (min(found, key=lambda report: report["step_s"]) for found in reports.values())
        one_free, many_free = (min(r["free_cores_step_s"] for r in found) for found in reports.values())
        tokens = one["tokens"]
        row = [
            name,
            f"{tokens / one['step_s']:,.0f}",
            f"{tokens / many['step_s']:,.0f}",
            f"{one['step_s'] / many['step_s']:.2f}x",
            f"{one_free / many_free:.2f}x",
            f"{many['allreduce_ms']:.1f}",
            f"{many['adamw_ms']:.1f}",
            f"{many['imbalance']:.2f}",
        ]
        if torch is not None:
            torch_s = min(torch_times)
            row += [f"{tokens / torch_s:,.0f}", f"{torch_s / many['step_s']:.2f}x"]
        rows.append(tuple(row))
    header = ["config", "1 rank tok/s", f"{args.ranks} ranks tok/s", "speed-up", "on free cores"]
    header += ["all-reduce ms", "AdamW ms", "imbalance"]
    if torch is not None:
        header += [f"torch ({torch.get_num_threads()} threads) tok/s", f"{args.ranks} ranks / torch"]
    print(format_table(tuple(header), rows))
    print(f"load average after: {_load()}")
    print(LEGEND)
    return 0


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _launch(ranks: int, name: str, args) -> dict:
    """Run the worker under ``mpiexec -n ranks``; its JSON report."""
    command = [mpiexec_path(), "-n", str(ranks), sys.executable, "-m", "numforge.bench.train_ranks"]
    command += ["--config", name, "--steps", str(args.steps), "--warmup", str(args.warmup)]
    command += ["--attention", args.attention, "--arch", args.arch]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    here = Path(__file__).resolve().parents[2]  # `-m` looks in the working directory first: run where this numforge is
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=here)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _torch_step_time(torch, name: str, args) -> float:
    config, ids, targets = build(name, args.attention, args.arch)
    step = torch_step(torch, config, GPT(config, seed=0), ids, targets)
    times = []
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        step()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


# ---------------------------------------------------------------- the worker, one per rank


def worker(args: argparse.Namespace) -> None:
    """Time the data-parallel step on this rank; rank 0 prints the summary of all ranks as one JSON line."""
    world = connect()
    config, ids, targets = build(args.config, args.attention, args.arch)
    model = GPT(config, seed=0)
    optimizer = AdamW(model.params, lr=LR, weight_decay=WEIGHT_DECAY)
    parallel = DataParallel(world, model)
    waits = []  # per step: [wall seconds, CPU seconds] inside the all-reduce
    sum_in_place = world.sum_in_place

    def timed_sum(flat) -> None:
        start, start_cpu = time.perf_counter(), time.process_time()
        sum_in_place(flat)
        waits[-1][0] += time.perf_counter() - start
        waits[-1][1] += time.process_time() - start_cpu

    world.sum_in_place = timed_sum
    ids, targets = asarray(ids), asarray(targets)
    steps = []  # per timed step: (wall, CPU outside the all-reduce, all-reduce wall, AdamW wall) seconds
    for i in range(args.warmup + args.steps):
        waits.append([0.0, 0.0])
        start, start_cpu = time.perf_counter(), time.process_time()
        _, grads = parallel.loss_and_gradients(ids, targets, lambda rows: None)
        update_start = time.perf_counter()
        optimizer.step(grads)
        end, end_cpu = time.perf_counter(), time.process_time()
        if i >= args.warmup:
            steps.append((end - start, end_cpu - start_cpu - waits[-1][1], waits[-1][0], end - update_start))
    step_s, cpu_s, wait_s, update_s = (statistics.median(column) for column in zip(*steps))
    compute = _by_rank(world, step_s - wait_s - update_s)  # forward and backward of the rank's rows
    transfer_s = min(_by_rank(world, wait_s))  # the last rank to arrive waits only for the transfer
    report = {
        "tokens": int(ids.size),
        "step_s": step_s,
        "free_cores_step_s": max(_by_rank(world, cpu_s)) + transfer_s,
        "allreduce_ms": transfer_s * 1e3,
        "adamw_ms": update_s * 1e3,
        "imbalance": max(compute) / min(compute),
    }
    if world.is_root:
        print(json.dumps(report), flush=True)


def _by_rank(world, value: float) -> list[float]:
    """Every rank's ``value``, on every rank."""
    slots = [0.0] * world.size
    slots[world.rank] = value
    return list(world.sum_floats(tuple(slots)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m numforge.bench.train_ranks")
    parser.add_argument("--config", choices=list(CONFIGS), required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--warmup", type=int, required=True)
    parser.add_argument("--attention", required=True)
    parser.add_argument("--arch", choices=list(ARCH_FIELDS), required=True)
    worker(parser.parse_args())
