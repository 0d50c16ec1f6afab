"""``numforge train --init-from SRC``: a new run that starts from a pretrained model (fine-tuning).

SRC is anything ``checkpoint.load_model`` reads: a numforge run or checkpoint,
or a Hugging Face directory (GPT-2, Llama, Mistral, Qwen2, Qwen3). The run takes SRC's weights, shape and
tokenizer; AdamW, the schedule and the batches start fresh. Shape flags may
be given only if they agree with SRC; ``--dropout`` and ``--attention`` set
the new run's. The sequence length is by default the smaller of the usual
default and SRC's positions; a ``--seq-len`` beyond SRC's positions is an error.
"""

from __future__ import annotations

import dataclasses

from ..checkpoint import load_model
from ..model import GPT
from ..tokenizer import BPETokenizer

SETTABLE = ("drop_prob", "attention")  # config fields a fine-tuning run may set; the others are the model's shape


def start_from(
    path, seq_len: int | None, flags: dict[str, tuple[str, object]], trust_pattern: bool = False
) -> tuple[GPT, BPETokenizer]:
    """The model and tokenizer of ``path`` to fine-tune, with ``flags`` (the word that names it, a flag or the
    field itself -> (GPTConfig field, value)) checked.

    A shape flag that disagrees with the model, or a ``seq_len`` asked for
    (None: none was) beyond its ``max_seq_len``, is a ``ValueError`` naming
    both values; ``drop_prob`` and ``attention`` (the same numbers by either
    kernel) are set on the model's config.
    ``trust_pattern``: see ``BPETokenizer.from_dict``.
    """
    model, tokenizer = load_model(path, trust_pattern=trust_pattern)
    config = model.config
    for flag, (field, value) in flags.items():
        if field not in SETTABLE and getattr(config, field) != value:
            raise ValueError(
                f"{flag} {value} disagrees with {path}, whose {field} is {getattr(config, field)}; "
                "a run started with --init-from keeps the model's shape (leave the flag out)"
            )
    if seq_len is not None and seq_len > config.max_seq_len:
        raise ValueError(f"--seq-len {seq_len} exceeds the {config.max_seq_len} positions of {path}")
    settable = {field: value for field, value in flags.values() if field in SETTABLE}
    model.config = dataclasses.replace(config, **settable)
    return model, tokenizer
