"""``numforge bench generate``: greedy decoding with the KV cache at GPT-2 124M's shape, vs ``transformers``.

The model is built here with random weights (12 layers, d_model 768, 12
heads, 1024 positions, 50257 tokens; nothing is downloaded). A random
128-token prompt is decoded greedily for 128 new tokens. Each side is timed
twice per round, for 1 new token (the prefill: the prompt through the model,
filling the cache) and for all 128, the rounds alternating between numforge
and ``transformers``' ``generate(do_sample=False)`` on the same weights (when
torch and transformers are installed), so that a busy machine slows both
alike; the best round is kept. Decoding speed is the 127 tokens after the
first over the time they add. BLAS runs on one thread on both sides
(threadpoolctl; without it, set ``OPENBLAS_NUM_THREADS=1`` before starting).

The KV cache's size is stated, measured on the cache the model allocates:
``2 L H_kv T_max D`` float32 numbers. ``--kv-heads N`` gives numforge's model
grouped-query attention (``N`` key/value heads for the 12 query heads): its
cache is ``N / 12`` of full attention's (GPT-2 has no such option, so
``transformers`` then sits out).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from ..backend import array_module, to_numpy
from ..generate import generate_ids
from ..hf.weights import PREFIX, hf_name
from ..model import GPT, GPTConfig
from .measure import MIB, peak_extra_bytes, positive_int

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}  # the CPU clock: what a busy machine disturbs less
GPT2_124M = dict(vocab_size=50257, max_seq_len=1024, d_model=768, num_heads=12, num_layers=12)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompt-tokens", type=positive_int, default=128, help="prompt length (default 128)")
    parser.add_argument("--new-tokens", type=positive_int, default=128, help="tokens to generate (default 128)")
    parser.add_argument("--repeats", type=positive_int, default=3, help="rounds, alternating sides; best kept")
    parser.add_argument("--layers", type=positive_int, default=12, help="fewer layers for a quick run (default 12)")
    parser.add_argument(
        "--kv-heads", type=positive_int, help="key/value heads, dividing 12: grouped-query attention (default 12)"
    )
    parser.add_argument("--no-transformers", action="store_true", help="skip transformers even if installed")
    parser.add_argument("--profile", action="store_true", help="profile numforge's decoding: where the time goes")


def run(args: argparse.Namespace) -> int:
    if args.prompt_tokens + args.new_tokens > GPT2_124M["max_seq_len"]:
        raise ValueError(f"--prompt-tokens + --new-tokens must be at most {GPT2_124M['max_seq_len']}")
    threads = _one_blas_thread()
    config = GPTConfig(**{**GPT2_124M, "num_layers": args.layers, "num_kv_heads": args.kv_heads})
    model = GPT(config, seed=0)
    prompt = np.random.default_rng(0).integers(0, config.vocab_size, size=args.prompt_tokens).tolist()
    print(
        f"GPT-2 shape: {config.num_layers} layers, d_model {config.d_model}, {config.num_heads} heads "
        f"({config.num_kv_heads} key/value heads), "
        f"vocabulary {config.vocab_size}; {model.num_params():,} parameters (random, seed 0), float32; "
        f"prompt {args.prompt_tokens} tokens, {args.new_tokens} new, greedy, KV cache; BLAS threads: {threads}; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    sides = {"numforge": lambda n: list(generate_ids(model, prompt, n, temperature=0))}
    full_attention = config.num_kv_heads == config.num_heads
    if not full_attention and not args.no_transformers:
        print("(GPT-2 has no grouped-query attention: numforge alone)")
    hf = None if args.no_transformers or not full_attention else _transformers_side(model, prompt)
    if hf is not None:
        sides["transformers"] = hf
    # per side, clock ("wall" or "cpu") and count (1 or all): the best seconds over the rounds
    best = {(name, clock, count): float("inf") for name in sides for clock in CLOCKS for count in (1, args.new_tokens)}
    tokens = {}
    for _ in range(args.repeats):
        for name, decode in sides.items():
            for count in (1, args.new_tokens):
                start = {clock: read() for clock, read in CLOCKS.items()}
                tokens[name] = decode(count)
                for clock, read in CLOCKS.items():
                    best[name, clock, count] = min(best[name, clock, count], read() - start[clock])
    rates = {}  # (name, clock) -> (prefill s, decode tokens/s)
    for name in sides:
        for clock in CLOCKS:
            prefill, whole = best[name, clock, 1], best[name, clock, args.new_tokens]
            rates[name, clock] = (prefill, (args.new_tokens - 1) / max(whole - prefill, 1e-9))
    print(f"\n{'':14s} {'prefill':>10s} {'decode tok/s':>13s}   (process CPU time: prefill, decode tok/s)")
    for name in sides:
        (prefill, rate), (prefill_cpu, rate_cpu) = rates[name, "wall"], rates[name, "cpu"]
        print(f"{name:14s} {prefill * 1e3:7.0f} ms {rate:13.1f}   ({prefill_cpu * 1e3:.0f} ms, {rate_cpu:.1f})")
    if hf is not None:
        same = next((i for i, (a, b) in enumerate(zip(tokens["numforge"], tokens["transformers"])) if a != b), None)
        for clock in CLOCKS:
            ours, theirs = rates["numforge", clock], rates["transformers", clock]
            print(
                f"numforge / transformers ({clock} clock): decode tokens/s {ours[1] / theirs[1]:.2f}x, "
                f"prefill speed {theirs[0] / ours[0]:.2f}x"
            )
        print(f"same greedy tokens: {'all ' + str(args.new_tokens) if same is None else f'the first {same}'}")
    weights = sum(int(p.nbytes) for p in model.params.values())
    peak = peak_extra_bytes(lambda: list(generate_ids(model, prompt, args.new_tokens, temperature=0)), array_module())
    cache = kv_cache_bytes(model)
    print(
        f"numforge memory: weights {weights / MIB:.0f} MiB; peak above them while generating "
        f"{peak / MIB:.0f} MiB (KV cache {cache / MIB:.0f} MiB of it)"
    )
    H, H_kv, D, L, T = config.num_heads, config.num_kv_heads, config.head_dim, config.num_layers, config.max_seq_len
    print(
        f"KV cache: 2 x {L} layers x {H_kv} key/value heads x {T} positions x {D} x 4 bytes = {cache / MIB:.1f} MiB, "
        f"{cache // T:,} bytes per token"
        + ("" if full_attention else f"; {H_kv}/{H} of full attention's {cache * H // H_kv / MIB:.1f} MiB")
    )
    if args.profile:
        from .train import profile

        print(profile(lambda: list(generate_ids(model, prompt, args.new_tokens, temperature=0)), 1))
    return 0


def kv_cache_bytes(model: GPT) -> int:
    """The bytes of the cache ``model`` decodes one sequence with: keys and values, every layer,
    ``2 L H_kv T_max D`` numbers, measured on the arrays ``new_kv_cache`` allocates."""
    cache = model.new_kv_cache(1)
    return sum(int(a.nbytes) for a in cache.keys + cache.values)


def _one_blas_thread() -> str:
    """Limit NumPy's and torch's BLAS to one thread (threadpoolctl), or say how to."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        hint = "not limited (install threadpoolctl or set OPENBLAS_NUM_THREADS=1)"
        return os.environ.get("OPENBLAS_NUM_THREADS", hint)
    threadpool_limits(1)
    try:
        import torch
    except ImportError:
        return "1"
    torch.set_num_threads(1)
    return "1"


def _transformers_side(model: GPT, prompt: list[int]):
    """``decode(n) -> ids``: transformers' greedy generate on ``model``'s weights, or None if not installed."""
    try:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        print("(torch + transformers not importable: numforge alone)")
        return None
    c = model.config
    config = GPT2Config(
        vocab_size=c.vocab_size, n_positions=c.max_seq_len, n_embd=c.d_model, n_head=c.num_heads,
        n_layer=c.num_layers, activation_function="gelu_new", layer_norm_epsilon=c.norm_eps,
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    hf = GPT2LMHeadModel(config).eval()
    state = {PREFIX + hf_name(name): torch.from_numpy(to_numpy(p).copy()) for name, p in model.params.items()}
    missing, unexpected = hf.load_state_dict(state, strict=False)
    if unexpected or [name for name in missing if name != "lm_head.weight"]:
        raise ValueError(f"the transformers model's names differ: missing {missing}, unexpected {unexpected}")
    hf.tie_weights()
    ids = torch.tensor([prompt])

    def decode(count: int) -> list[int]:
        with torch.no_grad():
            out = hf.generate(
                ids, max_new_tokens=count, min_new_tokens=count, do_sample=False, use_cache=True,
                attention_mask=torch.ones_like(ids), pad_token_id=0,
            )  # fmt: skip
        return out[0, len(prompt) :].tolist()

    return decode
