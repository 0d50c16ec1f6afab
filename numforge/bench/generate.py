"""``numforge bench generate``: greedy decoding with the KV cache at a real model's shape, vs ``transformers``.

The model is built here with random weights (nothing is downloaded), at one of three shapes (``--arch``):

    gpt2   GPT-2 124M: 12 layers, d_model 768, 12 heads, 1024 positions, 50257 tokens, tied
    llama  SmolLM2-135M: 30 layers, d_model 576, 9 heads of 64 sharing 3 key/value heads, SwiGLU of
           1536, RMSNorm, rotary positions (theta 100,000), 8192 positions, 49152 tokens, tied
    moe    a small Mixtral: 8 layers, d_model 512, 8 heads of 64 sharing 2 key/value heads (Mixtral's 4 to
           1), 8 SwiGLU experts of width 1792 (Mixtral's 3.5 d_model) in each layer, top-2, renormalised,
           RMSNorm, rotary positions (theta 1,000,000), 4096 positions, 32000 tokens, untied: 215M parameters,
           56M of them used per token

A random 128-token prompt is decoded greedily for 128 new tokens. Each side is timed
twice per round, for 1 new token (the prefill: the prompt through the model,
filling the cache) and for all 128, the rounds alternating between numforge
and ``transformers``' ``generate(do_sample=False)`` on the same weights (when
torch and transformers are installed; ``GPT2LMHeadModel``, ``LlamaForCausalLM`` or
``MixtralForCausalLM`` built from the config ``numforge convert`` would write), so that a busy machine
slows both alike; the best round is kept. Decoding speed is the 127 tokens after
the first over the time they add. BLAS runs on one thread on both sides
(NumPy's OpenBLAS through ``blas.blas_threads_set``, torch's ``set_num_threads(1)``). The two sides' greedy
tokens must be the same: the bench says so, or names the first that differs and exits 1.

The KV cache's size is stated, measured on the cache the model allocates:
``2 L H_kv D`` float32 numbers per position, for the positions ``generate``
allocates (the prompt and the new tokens) and for the whole context.
``--kv-heads N`` sets the key/value heads (grouped-query attention): the cache is
``N / H`` of full attention's. transformers' GPT-2 has no such option and then sits out.

``--window W`` gives every layer a sliding window of W positions (Mistral's ``sliding_window``; with
``--arch llama`` transformers runs it as ``MistralForCausalLM``, with ``moe`` as Mixtral with its window).
A windowed layer's cache is a ring of W positions (``model/kv_cache.py``), so the bench prints each
layer's bytes beside what the same layer holds without the window: ``2 H_kv W D`` float32 numbers
whatever the length decoded, against ``2 H_kv T D`` for T positions: memory ``∝ W``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..backend import array_module, get_xp, to_numpy
from ..blas import blas_threads, blas_threads_set, numpy_openblas
from ..generate import generate_ids
from ..hf.config import config_to_hf
from ..hf.weights import write_tensors
from ..model import GPT, GPTConfig
from ..model.config import ARCHS
from ..model.kv_cache import KVCache
from .measure import MIB, optional_torch, peak_extra_bytes, positive_int, where_it_runs

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}  # the CPU clock: what a busy machine disturbs less
SHAPES = {
    "gpt2": ("GPT-2 124M", dict(vocab_size=50257, max_seq_len=1024, d_model=768, num_heads=12, num_layers=12)),
    "llama": (
        "SmolLM2-135M",
        {**ARCHS["llama"], **dict(vocab_size=49152, max_seq_len=8192, d_model=576, num_heads=9, num_kv_heads=3,
                                  num_layers=30, d_ff=1536, rope_theta=100000.0, tie_weights=True)},
    ),
    "moe": (
        "small Mixtral",
        {**ARCHS["moe"], **dict(vocab_size=32000, max_seq_len=4096, d_model=512, num_heads=8, num_kv_heads=2,
                                num_layers=8, d_ff=1792, rope_theta=1000000.0)},
    ),
}  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--arch",
        choices=tuple(SHAPES),
        default="gpt2",
        help="GPT-2 124M's shape, SmolLM2-135M's, or a small Mixtral's (8 experts, top-2) (default gpt2)",
    )
    parser.add_argument("--prompt-tokens", type=positive_int, default=128, help="prompt length (default 128)")
    parser.add_argument("--new-tokens", type=positive_int, default=128, help="tokens to generate (default 128)")
    parser.add_argument("--repeats", type=positive_int, default=3, help="rounds, alternating sides; best kept")
    parser.add_argument("--layers", type=positive_int, help="fewer layers for a quick run (default: the shape's)")
    parser.add_argument(
        "--kv-heads", type=positive_int, help="key/value heads, dividing the heads (default: the shape's: 12, 3)"
    )
    parser.add_argument(
        "--window",
        type=positive_int,
        metavar="W",
        help="a sliding window of W positions on every layer (Mistral's): the cache keeps a ring of W per layer",
    )
    parser.add_argument("--no-transformers", action="store_true", help="skip transformers even if installed")
    parser.add_argument("--profile", action="store_true", help="profile numforge's decoding: where the time goes")


def run(args: argparse.Namespace) -> int:
    name, shape = SHAPES[args.arch]
    if args.prompt_tokens + args.new_tokens > shape["max_seq_len"]:
        raise ValueError(f"--prompt-tokens + --new-tokens must be at most {shape['max_seq_len']}")
    torch = None if args.no_transformers else optional_torch()
    torch_threads = torch.get_num_threads() if torch else None
    with blas_threads_set(1):  # NumPy's OpenBLAS and torch on one thread each, restored after
        if torch:
            torch.set_num_threads(1)
        try:
            return _run(args, name, shape, torch)
        finally:
            if torch:
                torch.set_num_threads(torch_threads)


def _run(args: argparse.Namespace, name: str, shape: dict, torch) -> int:
    print(where_it_runs(torch))
    overrides = {"num_layers": args.layers, "num_kv_heads": args.kv_heads, "sliding_window": args.window}
    config = GPTConfig(**{**shape, **{k: v for k, v in overrides.items() if v is not None}})
    model = GPT(config, seed=0)
    prompt = np.random.default_rng(0).integers(0, config.vocab_size, size=args.prompt_tokens).tolist()
    print(
        f"{name} shape: {config.num_layers} layers, d_model {config.d_model}, {config.num_heads} heads of "
        f"{config.head_dim} ({config.num_kv_heads} key/value heads), {_mlp(config)}, {config.norm}, "
        f"{config.position} positions, vocabulary {config.vocab_size}; {model.num_params():,} parameters (random, "
        f"seed 0), float32; prompt {args.prompt_tokens} tokens, {args.new_tokens} new, greedy, KV cache; "
        f"BLAS threads: {blas_threads()}{'' if numpy_openblas() else ' (NumPy links another BLAS: not limited)'}"
        + (f"; a sliding window of {config.sliding_window} on every layer" if args.window else "")
    )
    sides = {"numforge": lambda n: list(generate_ids(model, prompt, n, temperature=0))}
    hf = None if args.no_transformers else _transformers_side(model, prompt)
    if hf is not None:
        sides["transformers"] = hf
    rates, tokens = _best_rates(sides, args.new_tokens, args.repeats)
    same = _speed_section(rates, tokens, args.new_tokens)
    _memory_section(model, prompt, args)
    if args.profile:
        from .train import profile

        print(profile(lambda: list(generate_ids(model, prompt, args.new_tokens, temperature=0)), 1))
    return 0 if same else 1


def _mlp(config: GPTConfig) -> str:
    """``"swiglu"``, or with experts ``"8 swiglu experts of width 1792, top-2"``."""
    if not config.num_experts:
        return config.activation
    return f"{config.num_experts} {config.activation} experts of width {config.d_ff}, top-{config.experts_top_k}"


def _best_rates(sides: dict, new_tokens: int, repeats: int) -> tuple[dict, dict]:
    """``(rates, tokens)``: per side and clock ``(prefill s, decode tokens/s)`` from the best of ``repeats``
    rounds (the sides taking turns), and each side's ``new_tokens`` decoded ids."""
    # per side, clock ("wall" or "cpu") and count (1 or all): the best seconds over the rounds
    best = {(name, clock, count): float("inf") for name in sides for clock in CLOCKS for count in (1, new_tokens)}
    tokens = {}
    for _ in range(repeats):
        for name, decode in sides.items():
            for count in (1, new_tokens):
                start = {clock: read() for clock, read in CLOCKS.items()}
                tokens[name] = decode(count)
                for clock, read in CLOCKS.items():
                    best[name, clock, count] = min(best[name, clock, count], read() - start[clock])
    rates = {}  # (name, clock) -> (prefill s, decode tokens/s)
    for name in sides:
        for clock in CLOCKS:
            prefill, whole = best[name, clock, 1], best[name, clock, new_tokens]
            rates[name, clock] = (prefill, (new_tokens - 1) / max(whole - prefill, 1e-9))
    return rates, tokens


def _speed_section(rates: dict, tokens: dict, new_tokens: int) -> bool:
    """Each side's prefill and decoding speed; with transformers beside numforge, the ratios and whether the
    greedy tokens are the same (returned: True when they are, or numforge ran alone)."""
    print(f"\n{'':14s} {'prefill':>10s} {'decode tok/s':>13s}   (process CPU time: prefill, decode tok/s)")
    for name in tokens:
        (prefill, rate), (prefill_cpu, rate_cpu) = rates[name, "wall"], rates[name, "cpu"]
        print(f"{name:14s} {prefill * 1e3:7.0f} ms {rate:13.1f}   ({prefill_cpu * 1e3:.0f} ms, {rate_cpu:.1f})")
    if "transformers" not in tokens:
        return True
    differ = next((i for i, (a, b) in enumerate(zip(tokens["numforge"], tokens["transformers"])) if a != b), None)
    for clock in CLOCKS:
        ours, theirs = rates["numforge", clock], rates["transformers", clock]
        print(
            f"numforge / transformers ({clock} clock): decode tokens/s {ours[1] / theirs[1]:.2f}x, "
            f"prefill speed {theirs[0] / ours[0]:.2f}x"
        )
    if differ is None:
        print(f"same greedy tokens: all {new_tokens}")
    else:
        print(f"DIFFERENT greedy tokens: the same first {differ} of {new_tokens}, then {tokens['numforge'][differ]} "
              f"(numforge) against {tokens['transformers'][differ]} (transformers)")  # fmt: skip
    return differ is None


def _memory_section(model: GPT, prompt: list[int], args: argparse.Namespace) -> None:
    """numforge's weights, its peak above them while generating, and what its KV cache holds."""
    weights = sum(int(p.nbytes) for p in model.params.values())
    peak = peak_extra_bytes(lambda: list(generate_ids(model, prompt, args.new_tokens, temperature=0)), array_module())
    positions = args.prompt_tokens + args.new_tokens
    cache = kv_cache_bytes(model, positions)
    print(
        f"numforge memory: weights {weights / MIB:.0f} MiB; peak above them while generating "
        f"{peak / MIB:.0f} MiB (KV cache {cache / MIB:.1f} MiB of it)"
    )
    print(kv_cache_line(model, positions))
    if model.config.sliding_window is not None:
        print(kv_cache_layers_line(model, positions))


def kv_cache_bytes(model: GPT, positions: int | None = None) -> int:
    """The bytes of the cache ``model`` decodes one sequence of up to ``positions`` (default: its context) with:
    keys and values, every layer, ``2 L H_kv T D`` numbers, measured on the arrays ``new_kv_cache`` allocates."""
    return sum(layer_cache_bytes(model.new_kv_cache(1, positions)))


def layer_cache_bytes(cache: KVCache) -> list[int]:
    """Each layer's bytes of keys and values in ``cache``: ``2 H_kv T D`` numbers, ``T`` what the layer keeps."""
    return [int(k.nbytes + v.nbytes) for k, v in zip(cache.keys, cache.values)]


def kv_cache_layers_line(model: GPT, positions: int) -> str:
    """A windowed layer's cache, for ``positions`` decoded and for the whole context, beside the same layer's
    without the window (measured on a cache allocated for the config with no window): memory ``∝ W``."""
    c = model.config
    layer = next(i for i in range(c.num_layers) if c.layer_window(i) is not None)
    xp, unwindowed = get_xp(*model.params.values()), replace(c, sliding_window=None, window_layers=None)
    windowed = [layer_cache_bytes(model.new_kv_cache(1, n))[layer] for n in (positions, None)]
    full = [layer_cache_bytes(KVCache(xp, 1, unwindowed, model.dtype, n))[layer] for n in (positions, None)]
    ring = min(c.sliding_window, c.max_seq_len)
    count = sum(c.layer_window(i) is not None for i in range(c.num_layers))
    return (
        f"KV cache per layer, W = {c.sliding_window} on {count} of {c.num_layers} layers: a windowed layer holds "
        f"{windowed[0]:,} bytes for the {positions} positions decoded, {windowed[1]:,} for the whole context of "
        f"{c.max_seq_len} (a ring of {ring} positions, 2 x {c.num_kv_heads} x {ring} x {c.head_dim} x 4 bytes); "
        f"the same layer without the window {full[0]:,} and {full[1]:,}: memory grows with W, not the positions"
    )


def kv_cache_line(model: GPT, positions: int) -> str:
    """What the KV cache holds: per position, for the ``positions`` decoded, for the context; H_kv / H of full."""
    c = model.config
    per_position = kv_cache_bytes(model, 1)
    size = kv_cache_bytes(model, positions)
    text = (
        f"KV cache: 2 x {c.num_layers} layers x {c.num_kv_heads} key/value heads x {c.head_dim} x 4 bytes = "
        f"{per_position:,} bytes per position; {size / MIB:.1f} MiB for the {positions} positions decoded (what "
        f"generate allocates), {kv_cache_bytes(model) / MIB:.1f} MiB for the whole context of {c.max_seq_len}"
    )
    if c.num_kv_heads != c.num_heads:
        text += f"; {c.num_kv_heads}/{c.num_heads} of full attention's {per_position * c.num_heads // c.num_kv_heads:,}"
    return text


def _transformers_side(model: GPT, prompt: list[int]):
    """``decode(n) -> ids``: transformers' greedy generate on ``model``'s weights, from the config.json and
    model.safetensors ``numforge convert`` writes (to a temporary directory: ``from_pretrained`` turns a
    Mixtral's per-expert tensors into its fused experts); None (and why, printed) if transformers is not installed
    or cannot express the model."""
    try:
        hf_config, layout = config_to_hf(model.config, {"bos_token_id": None, "eos_token_id": None})
    except ValueError as error:
        print(f"(transformers sits out: {error})")
        return None
    try:
        import torch
        import transformers
    except ImportError:
        print("(torch + transformers not importable: numforge alone)")
        return None
    params = {name: to_numpy(p) for name, p in model.params.items()}
    with tempfile.TemporaryDirectory() as directory:
        (Path(directory) / "config.json").write_text(json.dumps({**hf_config, "dtype": "float32"}), encoding="utf-8")
        write_tensors(Path(directory) / "model.safetensors", params, layout)
        transformers.utils.logging.disable_progress_bar()
        hf = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    ids = torch.tensor([prompt])

    def decode(count: int) -> list[int]:
        with torch.no_grad():
            out = hf.generate(
                ids, max_new_tokens=count, min_new_tokens=count, do_sample=False, use_cache=True,
                attention_mask=torch.ones_like(ids), pad_token_id=0,
            )  # fmt: skip
        return out[0, len(prompt) :].tolist()

    return decode
