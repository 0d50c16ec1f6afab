"""``numforge bench train``: training-step speed (forward, backward, AdamW) vs PyTorch eager.

For each config it times numforge's step and, when torch is installed, the
same model in PyTorch eager (``bench/train_torch.py``) on identical weights,
the two alternating step by step so that a busy machine slows both alike.
It reports tokens/s and the model FLOPs utilisation (MFU): model FLOPs per
second over a float32 matmul rate measured in the same run, the FLOPs per
token counted by ``model/flops.py`` (``numforge params`` prints them).
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

from ..backend import asarray, default_rng
from ..blas import numpy_openblas
from ..model import ATTENTION_KINDS, GPT
from ..model.flops import flops_per_token
from ..optim import AdamW
from . import train_ranks
from .measure import cpu_description, non_negative_int, optional_torch, positive_int
from .train_models import ARCH_FIELDS, CONFIGS, LR, WEIGHT_DECAY, build, describe, torch_step


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", choices=[*CONFIGS, "all"], default="all")
    parser.add_argument(
        "--steps", type=positive_int, default=8, help="timed steps per implementation (median reported)"
    )
    parser.add_argument("--warmup", type=non_negative_int, default=2, help="untimed steps first")
    parser.add_argument(
        "--threads",
        type=positive_int,
        default=1,
        help="BLAS threads for NumPy's OpenBLAS and for torch alike (default 1)",
    )
    parser.add_argument(
        "--arch",
        choices=tuple(ARCH_FIELDS),
        default="gpt2",
        help="the model family: GPT-2 (default), or Llama-style (RMSNorm, rotary positions, SwiGLU, "
        "grouped-query attention, no biases, untied)",
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
    torch = None if args.no_torch else optional_torch()
    blas = numpy_openblas()
    if blas is not None:
        blas.set_num_threads(args.threads)
    if torch is not None:
        torch.set_num_threads(args.threads)
    print(f"CPU: {cpu_description()}; load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"numpy {np.__version__}, OpenBLAS kernel {_corename(blas)}, "
        f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, "
        f"BLAS threads {_blas_threads(blas)}; "
        + (f"torch {torch.__version__}, threads {torch.get_num_threads()}" if torch else "torch: not run")
    )
    names = list(CONFIGS) if args.config == "all" else [args.config]
    for name in names:
        print(f"{name}: {describe(build(name, args.attention, args.arch)[0])}")
    # the matmul rate is taken before and after the configs and the best kept: one reading on a busy
    # machine can come out low, and an MFU above 100% would follow
    rate_before = matmul_rate()
    results = {name: bench_config(name, args, torch) for name in names}
    rate = max(rate_before, matmul_rate())
    print(f"float32 matmul rate (1024^3, best of 5, before and after the configs): {rate / 1e9:.1f} GFLOP/s\n")
    header = (
        f"{'config':8s} {'params':>9s} {'numforge tok/s':>15s} {'MFU':>6s} "
        f"{'torch tok/s':>12s} {'MFU':>6s} {'ratio':>6s} {'CPU-time ratio':>15s}"
    )
    print(header)
    print("-" * len(header))
    for name, result in results.items():
        tokens = result["tokens"]
        ours = tokens / result["numforge_s"]
        line = f"{name:8s} {result['params']:9d} {ours:15.0f} {ours * result['flops_per_token'] / rate:6.1%}"
        if "torch_s" in result:
            theirs = tokens / result["torch_s"]
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
        if args.profile:
            print(result["profile"])
    print(
        "\nratio = numforge tokens/s / PyTorch eager tokens/s (median wall-clock step times, alternating steps);"
        "\nCPU-time ratio = the same from the process CPU time per step, which a busy machine disturbs less"
    )
    return 0


def bench_config(name: str, args, torch) -> dict:
    config, ids, targets = build(name, args.attention, args.arch)
    model = GPT(config, seed=0)
    opt = AdamW(model.params, lr=LR, weight_decay=WEIGHT_DECAY)
    ids_nf, targets_nf = asarray(ids), asarray(targets)

    def numforge_step():
        _, cache = model.forward(ids_nf, targets_nf)
        opt.step(model.backward(cache))

    steps = [numforge_step]
    if torch is not None:
        steps.append(torch_step(torch, config, model, ids, targets))
    dropout_names = ["dropout", "dropout_no_attention"] if args.dropout > 0 else []
    for attention_dropout in (True, False)[: len(dropout_names)]:
        steps.append(_dropout_step(config, args.dropout, attention_dropout, ids_nf, targets_nf))
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
    for name, record in zip(dropout_names, times[len(times) - len(dropout_names) :]):
        result[f"{name}_s"] = statistics.median(t[0] for t in record)
    if args.profile:
        result["profile"] = profile(numforge_step, args.steps) + "\n" + matmul_share(numforge_step, args.steps)
    return result


def _dropout_step(config, drop_prob: float, attention_dropout: bool, ids, targets):
    """numforge's step on the same model with dropout on (a fresh mask generator each step, as in training)."""
    config = replace(config, drop_prob=drop_prob, attention_dropout=attention_dropout)
    model = GPT(config, seed=0)
    opt = AdamW(model.params, lr=LR, weight_decay=WEIGHT_DECAY)
    step_count = iter(range(10**9))

    def step():
        _, cache = model.forward(ids, targets, rng=default_rng((0, next(step_count))))
        opt.step(model.backward(cache))

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
    lines = [f"  profile of {num_steps} numforge steps ({total / num_steps * 1e3:.0f} ms/step):"]
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


def matmul_rate(size: int = 1024, repeats: int = 5) -> float:
    """Best float32 ``(size x size) @ (size x size)`` rate, FLOP/s, with the current BLAS threads."""
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


def _corename(blas) -> str:
    return "unknown" if blas is None else blas.corename()


def _blas_threads(blas) -> str:
    return "unknown (not NumPy's bundled OpenBLAS)" if blas is None else str(blas.num_threads())
