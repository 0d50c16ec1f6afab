"""A batch with ignored targets spread unevenly over its rows, for ``test_masked_mean.py``; run under mpiexec too.

    mpiexec -n 2 python tests/masked_batch.py OUT.npz --threads 2 --grad-accum 1 [--packed]

Rank 0 writes ``OUT.npz``: the batch's loss (``loss``) and its gradients (by parameter name); ``--packed``:
of the batch's rows packed as ``SEGMENTS`` says.
"""

import argparse

import numpy as np

from numforge.model import GPT, IGNORE_INDEX, GPTConfig
from numforge.training.parallel import DataParallel, connect
from numforge.training.threads import Threads

ROWS, LENGTH, VOCAB = 6, 8, 50
IGNORED = {0: 3, 1: LENGTH, 4: 5}  # row -> its first targets ignored: 3, all 8 (a part may count none), 5
# the rows as packed sequences (model/packing.py): 3 + 5; one; 2 + 2 + 4; 6 + 2; 1 + 7; 4 + 3 + 1
SEGMENTS = [
    [0] * 3 + [1] * 5,
    [0] * 8,
    [0, 0, 1, 1, 2, 2, 2, 2],
    [0] * 6 + [1] * 2,
    [0] + [1] * 7,
    [0] * 4 + [1] * 3 + [2],
]


def masked_batch(ignored: dict[int, int] = IGNORED):
    """``(model, x, y)``: a float64 tiny model and ``x, y (6,8)``, the first ``ignored[row]`` targets of each row
    set to ``IGNORE_INDEX``."""
    config = GPTConfig(vocab_size=VOCAB, max_seq_len=LENGTH, num_layers=1, d_model=16, num_heads=2)
    rng = np.random.default_rng(33)
    x, y = rng.integers(0, VOCAB, (2, ROWS, LENGTH))
    for row, count in ignored.items():
        y[row, :count] = IGNORE_INDEX
    return GPT(config, seed=0, dtype="float64"), x, y


def split_loss_and_gradients(model, x, y, world, threads: int, grad_accum: int, segments=None):
    """``(loss, grads)`` of the batch on ``world``'s ranks, in ``grad_accum`` micro-batches on ``threads`` threads
    (packed: ``segments (6,8)``)."""
    parallel = DataParallel(world, model, grad_accum=grad_accum, threads=Threads(threads))
    loss, grads = parallel.loss_and_gradients(x, y, lambda rows: None, segments)
    return loss, {name: np.array(g) for name, g in grads.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--packed", action="store_true")
    args = parser.parse_args()
    world = connect()
    segments = np.array(SEGMENTS) if args.packed else None
    loss, grads = split_loss_and_gradients(*masked_batch(), world, args.threads, args.grad_accum, segments)
    if world.is_root:
        np.savez(args.out, loss=loss, **grads)


if __name__ == "__main__":
    main()
