"""``numforge bench prepare``: ``numforge prepare`` at 1 and N workers, its peak memory, and tiktoken's batch.

Corpus: the running Python's standard-library ``.py`` sources (``tokenizer.stdlib_corpus``),
``--megabytes / 8`` MB of them written as one text file, copied 8 times into a
directory (8 documents, each cut into pieces as a long file is). Each measurement
runs in a fresh process (``python -c ...``), so that its peak resident memory
(``VmHWM`` of the process itself, ``getrusage`` of the largest of its workers) is its own:

1. tokenizer training on the whole corpus by streamed chunk counts on N workers:
   time and peak memory;
2. ``prepare_tokens`` at 1 worker and at N, taking turns, ``--repeats`` times;
   the best time of each gives MB/s, with the CPU seconds it took (the process
   itself, its workers): on a busy machine they show the work, wall time the share
   of cores it got; the files must be identical;
3. when ``tiktoken`` is importable: ``encode_ordinary_batch`` with its default
   threads on the same pieces of text, with an encoding built from the trained
   vocabulary (``tokenizer.tiktoken_encoding``), timed in this process, its ids
   checked equal to the prepared file;
4. peak memory of ``prepare_tokens`` on N workers at a quarter of the corpus and
   at all of it: it should not grow with the corpus.

Targets (issue 13), on 2 cores: N workers >= 1.7x one; N workers >= 0.8x tiktoken's batch.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ..data import as_source, open_prepared, prepare_tokens, read_pieces, train_tokenizer
from ..data.parallel import default_workers
from ..tokenizer import EOT, BPETokenizer
from ..tokenizer.pretokenize import last_safe_cut
from .measure import MIB, positive_float, positive_int, where_it_runs
from .tokenizer import stdlib_corpus, tiktoken_encoding

COPIES = 8
SPEEDUP_TARGET = 1.7
TIKTOKEN_RATIO_TARGET = 0.8


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--megabytes", type=positive_float, default=100.0, help="corpus size in MB (default 100)")
    parser.add_argument("--workers", type=positive_int, default=default_workers(), help="N (default: the cores)")
    parser.add_argument("--vocab-size", type=positive_int, default=8192)
    parser.add_argument("--repeats", type=positive_int, default=3, help="runs per timing, taking turns; best kept")
    parser.add_argument("--no-peers", action="store_true", help="skip tiktoken even if importable")


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="numforge-bench-prepare-") as scratch:
        scratch = Path(scratch)
        corpus, quarter, megabytes = _write_corpus(scratch, args.megabytes)
        print(
            f"corpus: {megabytes:.1f} MB ({COPIES} copies of {megabytes / COPIES:.1f} MB of Python standard-library "
            f"source); vocabulary {args.vocab_size}\n{where_it_runs()}"
        )
        tokenizer_path = scratch / "tok.json"
        trained = _child("tokenizer", corpus, tokenizer_path, args.workers, args.vocab_size)
        print(
            f"tokenizer training, streamed chunk counts on {args.workers} workers: {trained['seconds']:.1f} s, "
            f"peak RSS {_rss(trained)}"
        )
        best, tiktoken_best = _prepare_section(scratch, corpus, tokenizer_path, megabytes, args)
        print(f"\npeak memory of prepare on {args.workers} workers (RSS: the process itself; the largest worker)")
        for name, path, size in (("a quarter", quarter, megabytes / 4), ("all", corpus, megabytes)):
            measured = _child("prepare", path, tokenizer_path, args.workers, args.vocab_size, scratch / f"m-{name}")
            print(f"  {name + ' of the corpus':<20} {size:6.1f} MB: {_rss(measured)}")
        _targets_section(best, tiktoken_best, args.workers)
    return 0


def _prepare_section(scratch: Path, corpus: Path, tokenizer_path: Path, megabytes: float, args: argparse.Namespace):
    """``prepare_tokens`` at 1 and N workers and tiktoken's batch, taking turns, printed: ``(best seconds by
    worker count, tiktoken's best or None)``. Returning frees tiktoken's texts and ids (gigabytes of Python
    lists), so that they do not weigh on the memory measured next."""
    times = {1: [], args.workers: []}
    encoding = None if args.no_peers else tiktoken_encoding(BPETokenizer.load(tokenizer_path))
    texts = None if encoding is None else _pieces(corpus, tokenizer_path)  # tiktoken's input, in memory
    tiktoken_s = []
    for repeat in range(args.repeats):
        for workers in times:
            out = scratch / f"p-{workers}-{repeat}"
            times[workers].append(_child("prepare", corpus, tokenizer_path, workers, args.vocab_size, out))
        if encoding is not None:
            start, start_cpu = time.perf_counter(), time.process_time()  # process time: all its threads
            tiktoken_ids = encoding.encode_ordinary_batch([text for text, _ in texts])
            tiktoken_s.append((time.perf_counter() - start, time.process_time() - start_cpu))
    files = {(scratch / f"p-{w}-{r}" / "tokens.npy").read_bytes() for w in times for r in range(args.repeats)}
    print(f"\nprepare (best of {args.repeats}, taking turns; load average {_load()} now)")
    best = {w: min(t["seconds"] for t in runs) for w, runs in times.items()}
    for workers, runs in times.items():
        each = ", ".join(f"{run['seconds']:.2f}" for run in runs)
        cpu = min(runs, key=lambda run: run["seconds"])
        print(
            f"  numforge, {workers} worker{'s' if workers > 1 else ' '}    {best[workers]:7.2f} s "
            f"{megabytes / best[workers]:7.2f} MB/s   (runs: {each} s; CPU s of the best: process "
            f"{cpu['cpu']:.1f}, workers {cpu['worker_cpu']:.1f})"
        )
    print(f"  identical token files from every run: {'yes' if len(files) == 1 else 'NO'}")
    if encoding is None:
        return best, None
    fastest, cpu = min(tiktoken_s)
    print(
        f"  tiktoken encode_ordinary_batch    {fastest:7.2f} s {megabytes / fastest:7.2f} MB/s"
        f"   (runs: {', '.join(f'{s:.2f}' for s, _ in tiktoken_s)} s; CPU s of the best {cpu:.1f};"
        " Rust, default threads)"
    )
    same = _same_ids(tiktoken_ids, texts, scratch / f"p-{args.workers}-0")
    print(f"  same ids as tiktoken: {'yes' if same else 'NO'}")
    return best, fastest


def _targets_section(best: dict, tiktoken_best: float | None, workers: int) -> None:
    """The issue's targets against the best seconds by worker count (and tiktoken's, None when not run)."""
    speedup = best[1] / best[workers]
    print(
        f"\ntargets\n  {workers} workers / 1 worker = {speedup:.2f}x (target >= {SPEEDUP_TARGET}): "
        f"{_verdict(speedup >= SPEEDUP_TARGET)}"
    )
    if tiktoken_best is not None:
        ratio = tiktoken_best / best[workers]
        print(
            f"  numforge {workers} workers / tiktoken batch = {ratio:.2f}x "
            f"(target >= {TIKTOKEN_RATIO_TARGET}): {_verdict(ratio >= TIKTOKEN_RATIO_TARGET)}"
        )


def _write_corpus(scratch: Path, megabytes: float) -> tuple[Path, Path, float]:
    """(the corpus directory, one with a quarter of its copies, its size in MB)."""
    text = "\n".join(stdlib_corpus(megabytes / COPIES))
    corpus, quarter = scratch / "corpus", scratch / "quarter"
    for directory, copies in ((corpus, COPIES), (quarter, COPIES // 4)):
        directory.mkdir()
        for copy in range(copies):
            (directory / f"copy-{copy}.txt").write_text(text, encoding="utf-8")
    return corpus, quarter, COPIES * len(text.encode("utf-8")) / 1e6


def _pieces(corpus: Path, tokenizer_path: Path) -> list[tuple[str, bool]]:
    """The pieces prepare encodes, in memory, for tiktoken: (text, ends a document)."""
    pattern = BPETokenizer.load(tokenizer_path).pattern
    return [(p.text, p.ends_document) for p in read_pieces(as_source(corpus), cut=lambda t: last_safe_cut(t, pattern))]


def _same_ids(batches: list[list[int]], texts: list[tuple[str, bool]], prepared: Path) -> bool:
    tokens = open_prepared(prepared)
    end = tokens.tokenizer().special_tokens[EOT]
    digest = hashlib.sha256()
    for ids, (_, ends_document) in zip(batches, texts):
        digest.update(np.array(ids + [end] * ends_document, dtype=tokens.tokens.dtype).tobytes())
    return digest.hexdigest() == tokens.index["tokens_sha256"]


def _child(what: str, corpus: Path, tokenizer_path: Path, workers: int, vocab_size: int, out: Path | None = None):
    """Run one measurement in a fresh process; its JSON report."""
    job = json.dumps([what, str(corpus), str(tokenizer_path), workers, vocab_size, str(out)])
    code = f"from numforge.bench.prepare import child_main; child_main({job!r})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the {what} measurement failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def child_main(job: str) -> None:
    """In the measuring process: train a tokenizer or prepare tokens; print seconds and peak RSS as JSON."""
    what, corpus, tokenizer_path, workers, vocab_size, out = json.loads(job)
    imports = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    if what == "tokenizer":
        train_tokenizer(corpus, vocab_size, workers=workers).save(tokenizer_path)
    else:
        prepare_tokens(corpus, BPETokenizer.load(tokenizer_path), out, workers=workers)
    seconds = time.perf_counter() - start
    # VmHWM starts afresh at exec (getrusage's ru_maxrss would keep the forking parent's peak); the workers,
    # forked from here, are reaped by the pool, so RUSAGE_CHILDREN holds the largest one's peak (Linux: KiB).
    own = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    me = resource.getrusage(resource.RUSAGE_SELF)
    cpu = {
        "cpu": me.ru_utime + me.ru_stime - imports.ru_utime - imports.ru_stime,  # the work, not the imports
        "worker_cpu": workers.ru_utime + workers.ru_stime,
    }
    print(json.dumps({"seconds": seconds, "rss": own, "worker_rss": workers.ru_maxrss * 1024, **cpu}))


def _rss(report: dict) -> str:
    worker = f", largest worker {report['worker_rss'] / MIB:.0f} MiB" if report["worker_rss"] else ""
    return f"process {report['rss'] / MIB:.0f} MiB{worker}"


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def _verdict(holds: bool) -> str:
    return "holds" if holds else "DOES NOT HOLD"
