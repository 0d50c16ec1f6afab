"""``numforge convert SRC DST``: a numforge run or checkpoint <-> a Hugging Face directory (GPT-2, Llama, Gemma).

The direction follows from SRC: a Hugging Face directory (a config.json, no
numforge checkpoint) becomes a numforge run directory DST whose one checkpoint,
step 0, holds the model and its tokenizer (fresh AdamW moments; start
training from it with ``numforge train --init-from DST``); anything else is
read as a numforge run or checkpoint and written as a Hugging Face directory
that ``transformers`` opens: GPT-2's if GPT-2 can express the model, else
``LlamaForCausalLM`` (RMSNorm, rotary positions, SwiGLU, no biases; grouped-query
attention), ``Qwen2ForCausalLM`` (q/k/v biases), ``Qwen3ForCausalLM`` (QK-norm
before the rotation), ``MixtralForCausalLM`` (a mixture of experts), ``Gemma2ForCausalLM`` (RMSNorm with
``1 + w``, GeGLU, scaled embeddings, the sandwich of norms, soft caps) or ``Gemma3ForCausalLM`` (the same with
QK-norm and a local RoPE base); any other is refused by name before anything is written.
DST must not exist; it appears whole or not at all.

A run fine-tuned from a chat model (``--chat``, or ``--lora`` on a chat model's directory) carries that
model's chat template into DST (``chat_template.jinja``), so ``numforge chat`` and transformers'
``apply_chat_template`` read it there; a full fine-tune without ``--chat`` records no source to take it from.

A LoRA run (``numforge train --lora``) is written merged, its adapters folded into the weights
(``W + (alpha / r) A B``: a plain Hugging Face directory), or with ``--peft`` as a PEFT adapter directory
(``adapter_config.json``, ``adapter_model.safetensors``) that ``peft.PeftModel.from_pretrained`` loads onto
the base model (``hf/peft.py``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..atomic import atomic_directory
from ..checkpoint import chat_template_directory, latest_checkpoint_dir, load_checkpoint, load_model, save_checkpoint
from ..data.chat_template import template_source
from ..hf import save_pretrained
from ..hf.peft import save_peft_adapter
from ..optim import AdamW

HELP = (
    "convert a numforge run or checkpoint to a Hugging Face directory (GPT-2, Llama, Qwen2, Qwen3, Mixtral, "
    "Gemma 2, Gemma 3), or back"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", metavar="SRC", help="a numforge run or ckpt-* directory, or a Hugging Face directory")
    parser.add_argument("dst", metavar="DST", help="the directory to write (must not exist)")
    parser.add_argument(
        "--peft",
        action="store_true",
        help="a LoRA run: write its adapters as a PEFT adapter directory (default: merged into the weights)",
    )


def run(args: argparse.Namespace) -> int:
    src, dst = Path(args.src), Path(args.dst)
    if dst.exists():
        raise ValueError(f"{dst} already exists; choose a new directory")
    model, tokenizer = load_model(src)
    if args.peft and model.lora is None:
        raise ValueError(f"--peft writes a LoRA run's adapters; {src} has none (it was not trained with --lora)")
    if model.lora is not None:
        _write_lora(model, tokenizer, src, dst, args.peft, template_source(chat_template_directory(src)))
    elif latest_checkpoint_dir(src) is None:  # load_model read a Hugging Face directory
        with atomic_directory(dst) as temp:
            save_checkpoint(
                temp,
                step=0,
                params=model.params,
                optimizer_state=AdamW(model.params, lr=0.0).state_dict(),
                config=model.config.to_dict(),
                tokenizer=tokenizer.to_dict(),
                state={"step": 0, "converted_from": str(src.resolve())},
            )
        print(f"{src} (Hugging Face) -> {dst} (numforge checkpoint; fine-tune with: numforge train --init-from {dst})")
    else:
        save_pretrained(model, tokenizer, dst, template_source(chat_template_directory(src)))
        print(f"{src} (numforge) -> {dst} (Hugging Face; transformers: AutoModelForCausalLM.from_pretrained(DST))")
    return 0


def _write_lora(model, tokenizer, src: Path, dst: Path, peft: bool, chat_template: str | None) -> None:
    """A LoRA run as a PEFT adapter directory (``peft``; the template stays the base model's) or merged into a
    Hugging Face directory with ``chat_template``."""
    base = load_checkpoint(src).state["lora"]["base"]
    if peft:
        save_peft_adapter(model, dst, base=base)
        print(
            f"{src} (numforge LoRA) -> {dst} (PEFT adapter; peft: PeftModel.from_pretrained(base model of {base}, DST))"
        )
    else:
        save_pretrained(model.merged(), tokenizer, dst, chat_template)
        print(f"{src} (numforge LoRA, merged) -> {dst} (Hugging Face; AutoModelForCausalLM.from_pretrained(DST))")
