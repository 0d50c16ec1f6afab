"""LoRA: the op against its textbook and torch twins, the frozen base (no dW at all), the adapters' layout."""

import numpy as np
import pytest

from numforge.backend import default_rng
from numforge.gradcheck.cases import all_cases
from numforge.gradcheck.model import GQA, LLAMA, TINY, randomized_model, tiny_batch
from numforge.model import GPT, GPTConfig
from numforge.model.lora import TARGETS, LoraConfig, adapter_bytes, adapter_parameter_count, adapter_shapes, adapters
from numforge.ops.lora import lora_backward, lora_forward, lora_textbook, lora_textbook_backward, lora_torch


def _adapter(seed=0, shape=(3, 5, 7), rank=4, c_out=6):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape), rng.standard_normal((shape[-1], rank)), rng.standard_normal((rank, c_out))


@pytest.mark.parametrize("dropout_p", [0.0, 0.25])
def test_op_equals_its_textbook_and_torch_twins(dropout_p):
    x, a, b = _adapter()
    rng = None if dropout_p == 0 else default_rng(3)
    update, cache = lora_forward(x, a, b, scale=2.5, dropout_p=dropout_p, rng=rng)
    keep = None if cache.dropout.keep is None else cache.dropout.keep.reshape(x.shape)
    dy = np.random.default_rng(9).standard_normal(update.shape)
    np.testing.assert_allclose(update, lora_textbook(x, a, b, 2.5, keep, dropout_p), rtol=1e-12, atol=1e-12)
    for mine, plain in zip(lora_backward(dy, cache), lora_textbook_backward(dy, x, a, b, 2.5, keep, dropout_p)):
        np.testing.assert_allclose(mine, plain, rtol=1e-12, atol=1e-12)
    torch = pytest.importorskip("torch")
    tx, ta, tb = (torch.tensor(v, requires_grad=True) for v in (x, a, b))
    tkeep = None if keep is None else torch.tensor(keep)
    out = lora_torch(tx, ta, tb, 2.5, tkeep, dropout_p)
    (out * torch.tensor(dy)).sum().backward()
    np.testing.assert_allclose(update, out.detach().numpy(), rtol=1e-12, atol=1e-12)
    for mine, tensor in zip(lora_backward(dy, cache), (tx, ta, tb)):
        np.testing.assert_allclose(mine, tensor.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_gradient_checks_of_lora_pass():
    cases = [case for case in all_cases() if case.name.startswith("lora")]
    assert {case.name for case in cases} == {"lora", "lora[dropout]", "lora_model[q,v]", "lora_model[all]"}
    for case in cases:
        results = case.run()
        assert results and all(r.passed for r in results), [r for r in results if not r.passed]


def test_frozen_base_makes_no_weight_gradient(monkeypatch):
    """Not one dW product: the layers' linear_backward is never called, the head's dtable never made."""
    import numforge.model.layers as layers
    import numforge.ops.cross_entropy as cross_entropy

    model = randomized_model({**LLAMA, **GQA})
    model.add_lora(LoraConfig(rank=2, targets=TARGETS), seed=1)
    ids, targets = tiny_batch(model.config.vocab_size)
    _, cache = model.forward(ids, targets)
    assert cache.loss.op_cache.dtable_of_sum is None

    def refused(*args):
        raise AssertionError("linear_backward (which makes dW) ran on a frozen layer")

    monkeypatch.setattr(layers, "linear_backward", refused)
    monkeypatch.setattr(cross_entropy, "tied_cross_entropy_backward", refused)
    grads = model.backward(cache)
    assert list(grads) == list(model.adapters) == list(adapter_shapes(model.config, model.lora))


def test_a_lora_forward_keeps_no_frozen_input_and_no_mask_of_a_dropout_that_is_off():
    """What only a dW or the model's own dropout would read is not kept: no frozen layer's cache holds its input,
    and with LoRA's dropout alone (drop_prob 0) the embedding's and branches' dropouts keep no cache (their
    backward then copies nothing); the adapters keep their masks."""
    model = randomized_model({**LLAMA, **GQA})
    model.add_lora(LoraConfig(rank=2, dropout=0.25, targets=TARGETS), seed=1)
    ids, targets = tiny_batch(model.config.vocab_size)
    _, cache = model.forward(ids, targets, rng=default_rng(3))
    assert cache.embedding_dropout is None
    for block in cache.blocks:
        linears = (block.attention.qkv_proj, block.attention.out_proj, *block.mlp.projections, block.mlp.down_proj)
        assert all(linear.base.x is None and linear.adapters for linear in linears)
        assert all(lora.dropout.keep is not None for linear in linears for _, lora in linear.adapters)
        assert block.attention.dropout is None and block.mlp.dropout is None


def test_adapters_start_as_the_base_model_and_follow_peft_init():
    model = randomized_model({**LLAMA, **GQA})
    ids, targets = tiny_batch(model.config.vocab_size)
    before = model.logits(ids)
    model.add_lora(LoraConfig(rank=3, alpha=6, targets=("q", "k", "v", "down")), seed=4)
    np.testing.assert_array_equal(model.logits(ids), before)  # B = 0: the adapted model is the base
    for name, value in model.adapters.items():
        if name.endswith(".b"):
            assert not value.any()
        else:  # kaiming-uniform (a = sqrt(5)): U(-1/sqrt(C_in), 1/sqrt(C_in))
            bound = 1 / np.sqrt(value.shape[0])
            assert np.abs(value).max() <= bound and np.abs(value).max() > 0.5 * bound


def test_q_adapter_writes_the_q_columns_of_the_fused_projection():
    config = GPTConfig(**{**TINY, **LLAMA, **GQA})
    H, H_kv, D = config.num_heads, config.num_kv_heads, config.head_dim
    found = {a.target: (a.start, a.stop) for a in adapters(config, LoraConfig(targets=("q", "k", "v")))}
    assert found == {"q": (0, H * D), "k": (H * D, (H + H_kv) * D), "v": ((H + H_kv) * D, (H + 2 * H_kv) * D)}
    lora = LoraConfig(rank=2, targets=("q",))
    model = GPT(config, dtype="float64")
    model.add_lora(lora, values={n: np.ones(s) for n, s in adapter_shapes(config, lora).items()})
    h = np.random.default_rng(0).standard_normal((5, config.d_model))
    from numforge.model.layers import linear_layer_forward

    y, _ = linear_layer_forward(h, model.layers[0], "attn.qkv_proj")
    base = h @ model.params["layers.0.attn.qkv_proj.weight"]
    np.testing.assert_allclose(y[:, H * D :], base[:, H * D :], rtol=0, atol=0)  # k, v untouched
    np.testing.assert_allclose(y[:, : H * D], base[:, : H * D] + lora.scale * h @ np.ones((8, 2)) @ np.ones((2, 8)))


def test_parameter_count_and_bytes():
    config = GPTConfig(**{**TINY, **LLAMA, **GQA})
    lora = LoraConfig(rank=4, targets=TARGETS)
    count = adapter_parameter_count(config, lora)
    assert count == sum(int(np.prod(s)) for s in adapter_shapes(config, lora).values())
    C, F, kv = config.d_model, config.d_ff, config.num_kv_heads * config.head_dim
    assert count == config.num_layers * 4 * ((C + C) * 2 + (C + kv) * 2 + (C + F) * 2 + (F + C))  # q,o k,v gate,up down
    assert adapter_bytes(config, lora) == {"adapters": 4 * count, "gradients": 4 * count, "optimizer": 8 * count}


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"targets": ("q", "x")}, "LoRA targets must be distinct names among"),
        ({"targets": ()}, "LoRA targets"),
        ({"rank": 0}, "LoRA rank"),
        ({"alpha": 0}, "LoRA alpha"),
        ({"dropout": 1.0}, "LoRA dropout"),
    ],
)
def test_bad_lora_configs_are_named(kwargs, words):
    with pytest.raises(ValueError, match=words):
        LoraConfig(**kwargs)


def test_a_target_the_model_lacks_is_named():
    model = GPT(GPTConfig(**TINY))  # GELU: no gate projection
    with pytest.raises(ValueError, match=r"LoRA target .gate.: this model has no linear layer mlp.gate_proj \(it has"):
        model.add_lora(LoraConfig(targets=("gate",)))
