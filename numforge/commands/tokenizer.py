"""``numforge tokenizer show|explain|stats|train``: see how text becomes tokens, or learn a tokenizer of your own.

- ``numforge tokenizer show "some text" [--tokenizer PATH]``: the text cut into
  tokens, each with its id and bytes (default: the cached tokenizer of the
  default corpus, trained once). PATH is numforge's tokenizer file, a Hugging
  Face tokenizer.json, or a directory holding either (a model directory, with
  its tokenizer_config.json and generation_config.json; a checkpoint); the ids
  are what ``tokenizer(text)`` gives, the BOS of Llama 3's included.
- ``numforge tokenizer explain "some text" [--tokenizer PATH]``: how: each
  step of a Hugging Face pipeline (NFC, Split, Digits, ByteLevel), the chunks,
  each chunk's merges in the order they apply (with their ranks), a chunk kept
  whole by ``ignore_merges``, then the ids (``tokenizer/explain.py``).
- ``numforge tokenizer stats [--data PATH] [--vocab-sizes 512,1024,...]``:
  characters per token of a corpus at several vocabulary sizes (each
  tokenizer trained once, then cached).
- ``numforge tokenizer train --data PATH --vocab-size N --out FILE [--max-bytes N]``: the
  corpus is streamed, its chunks counted on every core, so memory grows with the
  number of distinct chunks, not with the corpus.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from .. import interrupts
from ..checks import int_at_least, path_flag, text_flag
from ..data import (
    DEFAULT_CORPUS,
    DEFAULT_VOCAB_SIZE,
    default_tokenizer,
    load_documents,
    load_or_train_tokenizer,
    train_tokenizer,
)
from ..data.sources import ReadStats
from ..resources import check_input_file, check_output_file
from ..table import format_table
from ..tokenizer import EOT, BPETokenizer
from ..tokenizer.explain import explain as explain_text
from ..tokenizer.explain import pipeline_steps, token_text
from ..tokenizer.hf_dir import load_tokenizer
from ..tokenizer.pretokenize import KNOWN_PATTERNS
from ._data_flags import add_reading_flags, add_workers_flag, source_from

HELP = "show text cut into BPE tokens, explain the merges step by step, measure, or train a byte-level BPE tokenizer"
STATS_VOCAB_SIZES = (512, 1024, 2048, 4096)

# background colours that alternate from token to token on a terminal
_COLOURS = ("\x1b[48;5;153m", "\x1b[48;5;223m", "\x1b[48;5;194m", "\x1b[48;5;225m")
_RESET = "\x1b[0m"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = sub.add_parser("show", help="show text split into its tokens, with each token's id and bytes")
    explain = sub.add_parser("explain", help="the regex chunks, each chunk's merges in order (with ranks), the ids")
    for action in (show, explain):
        _add_text_flags(action)
    show.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour token boundaries (auto: on a terminal, unless NO_COLOR is set); otherwise [brackets]",
    )
    _add_stats_flags(sub.add_parser("stats", help="characters per token of a corpus at several vocabulary sizes"))
    _add_train_flags(sub.add_parser("train", help="learn merges from text files and save the tokenizer"))


def _add_text_flags(action: argparse.ArgumentParser) -> None:
    """``show`` and ``explain``: the text, and the tokenizer that cuts it."""
    action.add_argument("text", type=text_flag, help="the text to tokenize")
    action.add_argument(
        "--tokenizer",
        metavar="PATH",
        type=path_flag,
        help="a numforge tokenizer file (numforge tokenizer train ...), a Hugging Face tokenizer.json, or a "
        "directory holding either (a model directory: Llama 3, Qwen2, SmolLM2, GPT-2; a checkpoint); "
        f"default: the {DEFAULT_VOCAB_SIZE}-token one of the default corpus (trained once, then cached)",
    )
    action.add_argument(
        "--trust-pattern",
        action="store_true",
        help="use the tokenizer file's split pattern even if numforge does not know it (a pattern is code)",
    )


def _add_stats_flags(stats: argparse.ArgumentParser) -> None:
    """``stats``: the corpus and the vocabulary sizes to measure."""
    stats.add_argument(
        "--data",
        metavar="PATH",
        type=path_flag,
        help="a UTF-8 text file or a directory of .txt files (default: the embedded corpus)",
    )
    stats.add_argument(
        "--vocab-sizes",
        metavar="N,N,...",
        default=",".join(map(str, STATS_VOCAB_SIZES)),
        help="the vocabulary sizes to train and measure (default %(default)s)",
    )
    stats.add_argument("--cache-dir", metavar="DIR", type=path_flag, help="where the trained tokenizers are cached")


def _add_train_flags(train: argparse.ArgumentParser) -> None:
    """``train``: the corpus, the vocabulary, where the tokenizer goes, and how the corpus is read."""
    train.add_argument(
        "--data",
        metavar="PATH",
        type=path_flag,
        required=True,
        help="a text file (one document), a directory (its files matching --glob), a .jsonl or a .parquet file",
    )
    train.add_argument(
        "--vocab-size", type=int_at_least(256), required=True, help="256 bytes + merges + special tokens"
    )
    train.add_argument(
        "--out", metavar="FILE", type=path_flag, required=True, help="where to write the tokenizer (JSON)"
    )
    train.add_argument(
        "--special-token",
        metavar="TEXT",
        type=text_flag,
        action="append",
        help=f"a special token (repeat for several); default: {EOT}",
    )
    train.add_argument(
        "--max-bytes",
        type=int_at_least(1),
        metavar="N",
        help="learn from the first N bytes of text only (default: all)",
    )
    add_workers_flag(train)
    add_reading_flags(train)


def run(args: argparse.Namespace) -> int:
    return {"show": show, "explain": explain, "stats": stats, "train": train}[args.action](args)


def _tokenizer(args: argparse.Namespace) -> BPETokenizer:
    """``--tokenizer PATH`` (its patterns trusted only with ``--trust-pattern``), or the default one."""
    if args.tokenizer is None:
        return default_tokenizer(say=_to_stderr)
    path = Path(args.tokenizer)
    if not path.is_dir():
        check_input_file(path, "--tokenizer")
    elif not (path / "tokenizer.json").is_file() and not (path / "vocab.json").is_file():
        raise ValueError(f"--tokenizer {path} is a directory without a tokenizer.json (nor vocab.json + merges.txt)")
    tok = load_tokenizer(path, trust_pattern=args.trust_pattern)
    if not isinstance(tok, BPETokenizer):
        raise ValueError(
            f"--tokenizer {path} is SentencePiece-style; `numforge tokenizer` shows byte-level BPE only (from "
            "Python, numforge.tokenizer.load_tokenizer(path) encodes and decodes it)"
        )
    return tok


def show(args: argparse.Namespace) -> int:
    tok = _tokenizer(args)
    ids = tok.encode_prompt(args.text)
    pieces = [tok.token_bytes(i).decode("utf-8", errors="backslashreplace") for i in ids]
    colour = args.color == "always" or (args.color == "auto" and sys.stdout.isatty() and "NO_COLOR" not in os.environ)
    if colour:
        print("".join(f"{_COLOURS[n % len(_COLOURS)]}{piece}{_RESET}" for n, piece in enumerate(pieces)))
    else:
        print("".join(f"[{piece}]" for piece in pieces))
    print(f"{len(args.text)} characters, {len(args.text.encode('utf-8'))} bytes -> {len(ids)} tokens")
    _say_prompt(tok)
    print(f"{'id':>7}  bytes")
    for token in ids:
        print(f"{token:>7}  {tok.token_bytes(token)!r}")
    return 0


def explain(args: argparse.Namespace) -> int:
    tok = _tokenizer(args)
    chunks = explain_text(tok, args.text)
    show = lambda ids: "".join(f"[{token_text(tok.token_bytes(i))}]" for i in ids)  # noqa: E731
    if tok.pipeline is not None:
        names = ["NFC"] * tok.pipeline.nfc + [step.name for step in tok.pipeline.steps]
        print(f"pipeline: {', '.join(names)} (each step cuts the pieces the step before left)")
        for n, (name, pieces) in enumerate(pipeline_steps(tok, args.text), 1):
            print(f"  step {n}, {name}: {' '.join(repr(piece) for piece in pieces)}")
    else:
        print(f"split pattern: {KNOWN_PATTERNS.get(tok.pattern, 'a trusted one')} {tok.pattern!r}")
    if tok.ignore_merges:
        print("ignore_merges: a chunk that is itself a token of the vocabulary is that token, whatever its merges")
    print(f"{len(chunks)} chunks (merges never cross a chunk's edge)")
    for n, chunk in enumerate(chunks, 1):
        if chunk.special:
            print(f"\nchunk {n}: {chunk.text!r} is a special token: id {chunk.start_ids[0]}")
            continue
        count = len(chunk.start_ids)
        print(f"\nchunk {n}: {chunk.text!r}, {count} byte{'s' * (count != 1)}: {show(chunk.start_ids)}")
        if chunk.whole_id is not None:
            merged = chunk.merges[-1].ids if chunk.merges else chunk.start_ids
            differs = f"; merging by rank would give {show(merged)} {merged}" if merged != chunk.ids else ""
            print(f"  ignore_merges: the chunk is itself a token, id {chunk.whole_id}{differs}")
        else:
            for merge in chunk.merges:
                left, right = (token_text(tok.token_bytes(i)) for i in merge.pair)
                print(f"  rank {merge.rank:>5}: [{left}] + [{right}] -> id {merge.new_id}   {show(merge.ids)}")
        print(f"  ids: {chunk.ids}")
    ids = [i for chunk in chunks for i in chunk.ids]
    print(f"\nids: {ids}")
    print(f"{len(args.text)} characters, {len(args.text.encode('utf-8'))} bytes -> {len(ids)} tokens")
    _say_prompt(tok)
    return 0


def _say_prompt(tok: BPETokenizer) -> None:
    """What a Hugging Face post-processor puts around the text, and where generation stops."""
    prompt = tok.prompt
    if prompt is None or not (prompt.prefix or prompt.suffix or prompt.eos_ids):
        return
    around = [f"{show} {[tok.decode([i]) for i in ids]} {list(ids)}" for show, ids in
              (("before the text", prompt.prefix), ("after it", prompt.suffix)) if ids]  # fmt: skip
    if around:
        print(f"tokenizer(text) puts {' and '.join(around)}")
    if prompt.eos_ids:
        print(f"generation stops at {[tok.decode([i]) for i in prompt.eos_ids]} {list(prompt.eos_ids)}")


def stats(args: argparse.Namespace) -> int:
    sizes = _vocab_sizes(args.vocab_sizes)
    documents = load_documents(args.data)
    characters = sum(len(d) for d in documents)
    size = sum(len(d.encode("utf-8")) for d in documents)
    print(
        f"corpus: {args.data or DEFAULT_CORPUS}, {len(documents)} documents, {characters:,} characters, {size:,} bytes"
    )
    rows = [("bytes", "0", f"{size:,}", f"{characters / size:.2f}", "1.00")]
    for vocab_size in sizes:
        tok = load_or_train_tokenizer(documents, vocab_size, cache_dir=args.cache_dir, say=_to_stderr)
        tokens = sum(len(tok.encode_ordinary(d)) for d in documents)
        vocabulary = str(tok.vocab_size) + (f" (asked {vocab_size})" if tok.vocab_size < vocab_size else "")
        ratios = (f"{characters / tokens:.2f}", f"{size / tokens:.2f}")
        rows.append((vocabulary, str(len(tok.merges)), f"{tokens:,}", *ratios))
    print(format_table(("vocabulary", "merges", "tokens", "chars/token", "bytes/token"), rows))
    print("(each tokenizer trained on this corpus and measured on it: in-sample; a vocabulary smaller than")
    print("asked: no pair was left that occurs twice)")
    return 0


def _vocab_sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"--vocab-sizes must be integers separated by commas, got {text!r}") from None
    smallest = 256 + 1  # the bytes and <|endoftext|>
    if any(size < smallest for size in sizes):
        raise ValueError(f"--vocab-sizes must each be at least {smallest} (256 bytes + {EOT}), got {text!r}")
    return sizes


def train(args: argparse.Namespace) -> int:
    specials = tuple(args.special_token) if args.special_token else (EOT,)
    out = check_output_file(args.out, "--out")  # found now, not after a long training run
    if not out.absolute().parent.is_dir():
        raise ValueError(f"cannot write {args.out}: no directory {out.absolute().parent}")
    read = ReadStats()
    start = time.perf_counter()
    with interrupts.deferred():  # a stop signal during the training or the save: the file is whole or absent
        tok = train_tokenizer(
            source_from(args, args.data),
            args.vocab_size,
            special_tokens=specials,
            max_bytes=args.max_bytes,
            workers=args.workers,
            progress=True,
            stats=read,
        )
        seconds = time.perf_counter() - start
        tok.save(args.out)
    megabytes = min(read.bytes, args.max_bytes or read.bytes) / 1e6
    print(
        f"trained {tok.vocab_size} tokens ({len(tok.merges)} merges, {len(tok.special_tokens)} special) "
        f"on {megabytes:.2f} MB in {seconds:.1f} s; wrote {args.out}"
    )
    return 0


def _to_stderr(text: str) -> None:
    print(text, file=sys.stderr)
