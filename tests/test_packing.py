"""Packed rows (model/packing.py): a row of several sequences, each attending to its own tokens and counting its
positions from 0, gives each sequence's loss and gradients as if it ran alone, for every position scheme and
both kernels, in float64; and transformers' Llama with position_ids and a 4D block mask gives the same loss and
gradients."""

import numpy as np
import pytest

from numforge.backend import asarray, to_numpy
from numforge.model import GPT, GPTConfig
from numforge.model.config import ARCHS

V, T = 50, 16
# two rows of T = 16: sequences of 5, 3 and 6 tokens then 2 of padding; 9 and 4 then 3 of padding
LENGTHS = [[5, 3, 6], [9, 4]]
TINY = {"vocab_size": V, "max_seq_len": T, "d_model": 12, "num_heads": 2, "num_layers": 2}
CONFIGS = {
    "gpt2 tiled": {},
    "gpt2 plain": {"attention": "plain"},
    "llama gqa": {**ARCHS["llama"], "num_heads": 4, "num_kv_heads": 2, "d_model": 16},
    "sinusoidal, window 4": {"position": "sinusoidal", "sliding_window": 4, "window_layers": (1,)},
    "alibi, qk-norm": {**ARCHS["llama"], "position": "alibi", "qk_norm": True},
}


def sequences(seed=0):
    """Each sequence's ``(ids (n,), targets (n,))``, about a third of the targets ignored (-1)."""
    rng = np.random.default_rng(seed)
    out = []
    for n in (n for row in LENGTHS for n in row):
        targets = rng.integers(1, V, n)
        targets[rng.random(n) < 0.35] = -1
        targets[-1] = rng.integers(1, V)  # at least one counted target
        out.append((rng.integers(1, V, n), targets))
    return out


def packed_batch(seqs):
    """``(ids, targets, segments)`` ``(2, T)`` each: the sequences end to end, the tail padding its own segment."""
    ids, targets, segments = np.zeros((2, T), np.int64), np.full((2, T), -1, np.int64), np.zeros((2, T), np.int64)
    it = iter(seqs)
    for row, lengths in enumerate(LENGTHS):
        start = 0
        for s, n in enumerate(lengths):
            ids[row, start : start + n], targets[row, start : start + n] = next(it)
            segments[row, start : start + n] = s
            start += n
        segments[row, start:] = len(lengths)
    return ids, targets, segments


def counted(targets) -> int:
    return int((np.asarray(targets) != -1).sum())


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("recompute", [False, True], ids=["", "recompute"])
def test_a_packed_batch_is_the_sum_of_its_sequences_run_alone(name, recompute):
    model = GPT(GPTConfig(**TINY | CONFIGS[name]), seed=1, dtype="float64")
    seqs = sequences()
    ids, targets, segments = packed_batch(seqs)
    loss, cache = model.forward(asarray(ids), asarray(targets), segments=asarray(segments), recompute=recompute)
    grads = model.backward(cache)
    total = counted(targets)
    summed_loss, summed = 0.0, {n: 0.0 for n in grads}
    for x, y in seqs:  # loss = sum of the counted targets' losses / their count: sums compare
        alone, alone_cache = model.forward(asarray(x[None]), asarray(y[None]))
        summed_loss += float(alone) * counted(y)
        for n, g in model.backward(alone_cache).items():
            summed[n] = summed[n] + to_numpy(g) * counted(y)
    assert float(loss) * total == pytest.approx(summed_loss, rel=1e-13)
    for n, g in grads.items():
        scale = np.abs(summed[n]).max()
        np.testing.assert_allclose(to_numpy(g) * total, summed[n], rtol=0, atol=1e-12 * scale, err_msg=n)


def test_without_the_segments_the_sequences_see_each_other():
    # the check above can fail: the same rows without segments (one sequence a row) are far from the sum alone
    model = GPT(GPTConfig(**TINY | CONFIGS["llama gqa"]), seed=1, dtype="float64")
    seqs = sequences()
    ids, targets, _ = packed_batch(seqs)
    plain, _ = model.forward(asarray(ids), asarray(targets), for_backward=False)
    alone = sum(float(model.forward(asarray(x[None]), asarray(y[None]), for_backward=False)[0]) * counted(y)
                for x, y in seqs)  # fmt: skip
    assert abs(float(plain) * counted(targets) - alone) > 1e-5 * alone  # 1e8 times the tolerance above


@pytest.mark.parametrize(
    "segments, error, message",
    [
        (np.zeros((2, T)), TypeError, "must be an integer array"),
        (np.zeros((2, T - 1), np.int64), ValueError, r"shape \(B, Tk\) = \(2, 16\)"),
        (np.tile(np.arange(T)[::-1], (2, 1)), ValueError, "must not decrease along a row"),
    ],
)
def test_bad_segments_are_named(segments, error, message):
    model = GPT(GPTConfig(**TINY))
    ids, targets, _ = packed_batch(sequences())
    with pytest.raises(error, match=message):
        model.forward(asarray(ids), asarray(targets), segments=asarray(segments))


def test_transformers_llama_with_position_ids_and_a_block_mask_agrees(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from chat_templates import chat_model_directory
    from test_hf_llama_transformers import float64_reference  # its RMSNorm and RoPE in float64, not float32

    from numforge.checkpoint import load_model

    directory = chat_model_directory(tmp_path / "model")  # a random tied Llama of 2 layers, 4/2 heads, width 32
    reference = float64_reference(transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float64))
    model, _ = load_model(directory, dtype="float64")
    ids, targets, segments = packed_batch(sequences())
    loss, cache = model.forward(asarray(ids), asarray(targets), segments=asarray(segments))
    grads = model.backward(cache)

    seg = torch.from_numpy(segments)
    positions = torch.arange(T) - torch.stack([torch.searchsorted(row, row) for row in seg])  # restart at 0
    allowed = (seg[:, :, None] == seg[:, None, :]) & torch.ones(T, T, dtype=torch.bool).tril()  # (B,T,T)
    mask = torch.zeros(2, 1, T, T, dtype=torch.float64).masked_fill(~allowed[:, None], -torch.inf)
    logits = reference(torch.from_numpy(ids), position_ids=positions, attention_mask=mask).logits  # (B,T,V)
    labels = torch.from_numpy(targets).masked_fill(torch.from_numpy(targets) == -1, -100)
    expected = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    expected.backward()
    assert positions[0].tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 0, 1, 2, 3, 4, 5, 0, 1]
    assert float(loss) == pytest.approx(expected.item(), rel=1e-12)
    theirs = reference.model.embed_tokens.weight.grad.numpy()  # tied: both sides, as numforge's
    np.testing.assert_allclose(to_numpy(grads["token_embedding"]), theirs, rtol=0, atol=1e-11 * np.abs(theirs).max())
    q_proj = reference.model.layers[0].self_attn.q_proj.weight.grad.numpy().T  # (C, H D), numforge's layout
    ours = to_numpy(grads["layers.0.attn.qkv_proj.weight"])[:, : q_proj.shape[1]]
    np.testing.assert_allclose(ours, q_proj, rtol=0, atol=1e-11 * np.abs(q_proj).max())
