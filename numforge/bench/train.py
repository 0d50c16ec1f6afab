"""``numforge bench train``: training-step speed (forward, backward, AdamW) vs PyTorch eager.

For each config it times numforge's step and, when torch is installed, the
same model in PyTorch eager (``bench/train_torch.py``) on identical weights,
the two alternating step by step so that a busy machine slows both alike.
It reports tokens/s and the model FLOPs utilisation (MFU): model FLOPs per
second over a float32 matmul rate measured in the same run on as many BLAS
threads as numforge's side has, the FLOPs per token counted by
``model/flops.py`` (``numforge params`` prints them).

numforge's step is the one ``numforge train`` takes (``DataParallel``): on N
threads the batch's rows are split into N parts, one BLAS thread each
(``training/threads.py``). ``--threads N`` gives both sides N threads (torch
``set_num_threads(N)``); ``--threads default`` runs each as a user would:
numforge at its default (every core) and torch at its own. The header says
where it ran (``measure.where_it_runs``). Before importing torch the bench
sets ``OMP_WAIT_POLICY=PASSIVE`` (unless set): torch's OpenMP threads
otherwise spin on the cores after each call and slow the numforge step that
follows (``bench/attention.py``); measured here, torch's own step did not move.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import time
from dataclasses import replace

import numpy as np

from ..blas import blas_threads, blas_threads_set, one_blas_thread
from ..model import ATTENTION_KINDS, GPT
from ..model.flops import flops_per_token
from ..optim import AdamW
from ..training.dropout import dropout_rng
from ..training.parallel import DataParallel, SingleProcess
from ..training.threads import Threads, set_blas_threads, thread_count
from . import train_ranks
from .measure import cpu_description, free_cores, non_negative_int, optional_torch, positive_int, verdict, where_it_runs
from .train_models import ARCH_FIELDS, CONFIGS, LR, WEIGHT_DECAY, build, describe, torch_step

# issue 27's targets: numforge / torch tokens per second, each config; with experts, issue 32's (default threads)
TARGETS = {"default": {"small": 1.0, "medium": 0.9}, "AVX-512, one thread": 0.9, "AVX2, one thread": 1.05}
MOE_TARGETS = {"default": {"small": 1.0}}


def threads_flag(text: str) -> int | str:
    """``--threads``: a positive int, or ``default``."""
    return text if text == "default" else positive_int(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", choices=[*CONFIGS, "all"], default="all")
    parser.add_argument(
        "--steps", type=positive_int, default=8, help="timed steps per implementation (median reported)"
    )
    parser.add_argument("--warmup", type=non_negative_int, default=2, help="untimed steps first")
    parser.add_argument(
        "--threads",
        type=threads_flag,
        default=1,
        metavar="N|default",
        help="N threads for each side (numforge's row parts with one BLAS thread each, torch's set_num_threads; "
        "default 1); 'default': each side as a user runs it, numforge on every core and torch at its own default",
    )
    parser.add_argument(
        "--arch",
        choices=tuple(ARCH_FIELDS),
        default="gpt2",
        help="the model family: GPT-2 (default), Llama-style (RMSNorm, rotary positions, SwiGLU, "
        "grouped-query attention, no biases, untied), or moe: a small Mixtral (Llama's layer with 8 SwiGLU "
        "experts of width 128, top-2; torch's experts dispatched by sorting as numforge's)",
    )
    parser.add_argument(
        "--attention",
        choices=ATTENTION_KINDS,
        default="tiled",
        help="numforge's attention kernel (same math; the config default, tiled, is faster here)",
    )
    parser.add_argument(
        "--ranks",
        type=positive_int,
        help="instead: data-parallel steps under mpiexec, 1 rank vs this many (one BLAS thread each), "
        "and PyTorch at its default threads (bench/train_ranks.py)",
    )
    parser.add_argument(
        "--rounds", type=positive_int, default=3, help="with --ranks: launches per side, taking turns (best kept)"
    )
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch side even if installed")
    parser.add_argument(
        "--dropout",
        type=float,
        default=0.0,
        metavar="P",
        help="also time numforge's step with dropout P, with and without attention-weight dropout "
        "(the steps alternate with the others): the cost of dropout",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also profile numforge's step: the functions where the time goes, and the share "
        "of matrix products against everything else",
    )


def run(args: argparse.Namespace) -> int:
    if args.ranks is not None:
        return train_ranks.run(args)
    if not args.no_torch:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # module docstring: torch's threads stop spinning
    torch = None if args.no_torch else optional_torch()
    threads = thread_count() if args.threads == "default" else args.threads
    saved_blas_threads = blas_threads()
    set_blas_threads(1)  # as numforge train: its own threads fill the cores
    if torch is not None and args.threads != "default":
        torch.set_num_threads(args.threads)
    try:
        return _run(args, torch, threads)
    finally:
        set_blas_threads(saved_blas_threads)


def _run(args: argparse.Namespace, torch, threads: int) -> int:
    print(where_it_runs(torch))
    how = "its default" if args.threads == "default" else "--threads"
    print(
        f"threads: numforge {threads} ({how}; the batch's rows in {threads} part(s), one BLAS thread each), "
        f"torch {f'{torch.get_num_threads()} ({how})' if torch else '-'}"
    )
    names = list(CONFIGS) if args.config == "all" else [args.config]
    for name in names:
        print(f"{name}: {describe(build(name, args.attention, args.arch)[0])}")
    # the matmul rate is taken before and after the configs and the best kept: one reading on a busy
    # machine can come out low, and an MFU above 100% would follow
    rate_before, free_before = matmul_rate(threads), free_cores(threads) if threads > 1 else None
    results = {name: bench_config(name, args, torch, threads) for name in names}
    rate = max(rate_before, matmul_rate(threads))
    print(
        f"float32 matmul rate (1024^3 on {threads} BLAS thread(s), best of 5, before and after the configs): "
        f"{rate / 1e9:.1f} GFLOP/s"
    )
    if threads > 1:  # measure.free_cores: what any code on these threads could gain just now
        print(
            f"cores free for this process: products on {threads} threads ran {free_before:.2f}x and "
            f"{free_cores(threads):.2f}x one thread, before and after the configs ({threads:.2f}x on idle cores)"
        )
    ratios = _results_table(results, rate, args, threads)
    print(
        "\nratio = numforge tokens/s / PyTorch eager tokens/s (median wall-clock step times, alternating steps);"
        "\nCPU-time ratio = torch's process CPU time per step / numforge's (all threads): the work each side spends"
    )
    for line in _target_lines(args.threads, ratios, MOE_TARGETS if args.arch == "moe" else TARGETS):
        print(line)
    return 0


def _results_table(results: dict, rate: float, args: argparse.Namespace, threads: int) -> dict:
    """Print each config's tokens/s and MFU beside torch's (and its dropout, thread and profile lines);
    return numforge / torch tokens/s by config (those torch ran)."""
    print()
    header = (
        f"{'config':8s} {'params':>9s} {'numforge tok/s':>15s} {'MFU':>6s} "
        f"{'torch tok/s':>12s} {'MFU':>6s} {'ratio':>6s} {'CPU-time ratio':>15s}"
    )
    print(header)
    print("-" * len(header))
    ratios = {}
    for name, result in results.items():
        tokens = result["tokens"]
        ours = tokens / result["numforge_s"]
        line = f"{name:8s} {result['params']:9d} {ours:15.0f} {ours * result['flops_per_token'] / rate:6.1%}"
        if "torch_s" in result:
            theirs = tokens / result["torch_s"]
            ratios[name] = ours / theirs
            line += (
                f" {theirs:12.0f} {theirs * result['flops_per_token'] / rate:6.1%} {ours / theirs:5.2f}x"
                f" {result['torch_cpu_s'] / result['numforge_cpu_s']:14.2f}x"
            )
        print(line)
        if "dropout_s" in result:
            print(
                f"{'':8s} with dropout {args.dropout:g}: step {result['dropout_s'] / result['numforge_s']:.2f}x "
                f"the step without; without attention-weight dropout "
                f"{result['dropout_no_attention_s'] / result['numforge_s']:.2f}x"
            )
        if "one_thread_s" in result:
            gain = result["one_thread_s"] / result["numforge_s"]
            print(f"{'':8s} numforge on {threads} threads: {gain:.2f}x its speed on one thread (steps taking turns)")
        if args.profile:
            print(result["profile"])
    return ratios


def _target_lines(threads, ratios: dict, targets: dict) -> list[str]:
    """The targets (issue 27's ``TARGETS``, or with experts issue 32's) that apply to this run, with verdicts."""
    if threads == "default":
        goals = targets["default"]
        label = "default threads"
    elif threads == 1:
        label = "AVX-512, one thread" if "avx512f" in cpu_description() else "AVX2, one thread"
        goals = dict.fromkeys(CONFIGS, targets[label]) if label in targets else {}
    else:
        return []
    return [
        f"target ({label}): {name} ratio >= {goal:.2f}x: {ratios[name]:.2f}x, {verdict(ratios[name] >= goal)}"
        for name, goal in goals.items()
        if name in ratios
    ]


def bench_config(name: str, args, torch, threads: int) -> dict:
    config, ids, targets = build(name, args.attention, args.arch)
    model = GPT(config, seed=0)
    numforge_step = _numforge_step(model, ids, targets, threads)
    steps = [numforge_step]
    if torch is not None:
        steps.append(torch_step(torch, config, model, ids, targets))
    dropout_names = ["dropout", "dropout_no_attention"] if args.dropout > 0 else []
    for attention_dropout in (True, False)[: len(dropout_names)]:
        dropout_config = replace(config, drop_prob=args.dropout, attention_dropout=attention_dropout)
        steps.append(_numforge_step(GPT(dropout_config, seed=0), ids, targets, threads))
    if threads > 1:  # the same step on one thread, taking turns with the others: what the threads gain
        steps.append(_numforge_step(GPT(config, seed=0), ids, targets, 1))
    times = [[] for _ in steps]  # per implementation: (wall seconds, CPU seconds) per step
    for i in range(args.warmup + args.steps):
        for step, record in zip(steps, times):
            start, start_cpu = time.perf_counter(), time.process_time()
            step()
            if i >= args.warmup:
                record.append((time.perf_counter() - start, time.process_time() - start_cpu))
    result = {
        "params": model.num_params(),
        "tokens": ids.size,
        "flops_per_token": flops_per_token(config),
        "numforge_s": statistics.median(t[0] for t in times[0]),
        "numforge_cpu_s": statistics.median(t[1] for t in times[0]),
    }
    if torch is not None:
        result["torch_s"] = statistics.median(t[0] for t in times[1])
        result["torch_cpu_s"] = statistics.median(t[1] for t in times[1])
    for name, record in zip(dropout_names, times[len(steps) - len(dropout_names) - (threads > 1) :]):
        result[f"{name}_s"] = statistics.median(t[0] for t in record)
    if threads > 1:
        result["one_thread_s"] = statistics.median(t[0] for t in times[-1])
    if args.profile:  # cProfile sees one thread: the profile is of the step on one thread
        one_thread = numforge_step if threads == 1 else _numforge_step(model, ids, targets, 1)
        with one_blas_thread():
            result["profile"] = profile(one_thread, args.steps) + "\n" + matmul_share(one_thread, args.steps)
    return result


def _numforge_step(model: GPT, ids, targets, threads: int):
    """The step of ``numforge train`` on ``threads`` threads: loss and gradients of the batch, AdamW.

    With dropout on, each step draws its masks as training does (row by row, ``training/dropout.py``).
    """
    opt = AdamW(model.params, lr=LR, weight_decay=WEIGHT_DECAY)
    parallel = DataParallel(SingleProcess(), model, threads=Threads(threads))
    step_count = iter(range(10**9))

    def step():
        s = next(step_count)
        _, grads = parallel.loss_and_gradients(ids, targets, lambda rows: dropout_rng(model.config, 0, s, rows))
        opt.step(grads)

    return step


def profile(step, num_steps: int, top: int = 14) -> str:
    """The functions with the most own time over ``num_steps`` steps, as a share of the total.

    A NumPy matmul is not a Python call, so its time shows as the own time
    of the op that calls it (``linear_*``, the attention and loss ops).
    """
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(num_steps):
        step()
    profiler.disable()
    stats = pstats.Stats(profiler).stats
    total = sum(row[2] for row in stats.values())
    rows = sorted(stats.items(), key=lambda item: -item[1][2])[:top]
    lines = [f"  profile of {num_steps} numforge steps on one thread ({total / num_steps * 1e3:.0f} ms/step):"]
    for (filename, _line, function), (_, calls, own, _, _) in rows:
        where = f"{os.path.basename(filename)}:{function}" if filename != "~" else function
        lines.append(
            f"    {own / total:6.1%}  {own / num_steps * 1e3:7.1f} ms/step  {calls // num_steps:5d} calls  {where}"
        )
    return "\n".join(lines)


def matmul_share(step, num_steps: int) -> str:
    """The share of the step spent inside ``numpy.matmul``: matrix products against everything else.

    Every product of a training step goes through ``xp.matmul``; for these steps
    ``numpy.matmul`` is swapped for a timing wrapper. (The BLAS matrix-vector
    sums of ``ops/_sums.py`` use ``@`` and count as everything else.)
    """
    real_matmul, inside = np.matmul, [0.0]

    def timed_matmul(*args, **kwargs):
        start = time.perf_counter()
        result = real_matmul(*args, **kwargs)
        inside[0] += time.perf_counter() - start
        return result

    np.matmul = timed_matmul
    try:
        start = time.perf_counter()
        for _ in range(num_steps):
            step()
        total = time.perf_counter() - start
    finally:
        np.matmul = real_matmul
    return (
        f"  matrix products (numpy.matmul): {inside[0] / total:.1%} of {total / num_steps * 1e3:.0f} ms/step, "
        f"everything else {1 - inside[0] / total:.1%}"
    )


def matmul_rate(threads: int, size: int = 1024, repeats: int = 5) -> float:
    """Best float32 ``(size x size) @ (size x size)`` rate, FLOP/s, on ``threads`` BLAS threads."""
    with blas_threads_set(threads):
        return _matmul_rate(size, repeats)


def _matmul_rate(size: int, repeats: int) -> float:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    out = np.empty_like(a)
    np.matmul(a, b, out=out)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.matmul(a, b, out=out)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best
