"""What the experiment demos share: a byte-level corpus and a short training run of a tiny GPT.

Not a demo itself (the leading underscore): ``exp_*.py`` import it. Bytes as
tokens (vocabulary 256) need no tokenizer, so a run starts at once; the
corpus is the first characters of this Python's documentation.
"""

import sys
import time

import numpy as np

from numforge.backend import asarray
from numforge.data import BatchSampler, load_documents, split_tokens, windows
from numforge.model import GPT
from numforge.optim import AdamW, clip_grad_norm, warmup_cosine_lr

PROGRESS_EVERY = 5.0  # seconds between progress lines (on stderr: the results stay on stdout)
SEQ_LEN = 32
BATCH_SIZE = 16
EVAL_WINDOWS = 64


def byte_tokens(num_chars: int = 200_000) -> np.ndarray:
    """The corpus as UTF-8 bytes, ``(N,)`` int64 ids in [0, 256)."""
    text = "\n".join(load_documents(None))[:num_chars]  # None: the embedded corpus
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)


def train_tiny(config, steps: int, seed: int = 0, lr: float = 3e-3) -> tuple[GPT, float, float]:
    """Train ``GPT(config)`` on ``byte_tokens()`` for ``steps`` AdamW steps; ``(model, first loss, validation loss)``.

    The same batches for every config with the same seed, and the same fixed
    validation windows for all, so two runs differ only by the model.
    """
    train_part, val_part = split_tokens(byte_tokens(), config.max_seq_len)
    sampler = BatchSampler(train_part, BATCH_SIZE, config.max_seq_len, seed)
    model = GPT(config, seed=seed)
    optimizer = AdamW(model.params, lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    first_loss, last_line = None, time.monotonic()
    for step in range(steps):
        x, y = sampler.next_batch()  # (B,T), (B,T)
        loss, cache = model.forward(asarray(x), asarray(y))
        first_loss = float(loss) if first_loss is None else first_loss
        grads = model.backward(cache)
        clip_grad_norm(grads, 1.0)
        optimizer.lr = warmup_cosine_lr(step, max_lr=lr, min_lr=lr / 10, warmup_steps=steps // 10, total_steps=steps)
        optimizer.step(grads)
        if time.monotonic() - last_line >= PROGRESS_EVERY:
            last_line = time.monotonic()
            print(f"  ... step {step + 1} of {steps}, loss {float(loss):.3f}", file=sys.stderr, flush=True)
    starts = np.linspace(0, len(val_part) - config.max_seq_len - 1, EVAL_WINDOWS).astype(np.int64)
    x, y = windows(val_part, starts, config.max_seq_len)  # (n,T), (n,T)
    val_loss, _ = model.forward(asarray(x), asarray(y), for_backward=False)
    return model, first_loss, float(val_loss)
