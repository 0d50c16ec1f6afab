"""LoRA out to PEFT and merged: peft.PeftModel.from_pretrained loads numforge's adapter directory onto transformers'
model with numforge's logits (float64), and the merged directory's logits are the adapter model's."""

import json

import numpy as np
import pytest
from hf_dirs import llama_fields, write_gpt2_dir, write_llama_dir

from numforge.checkpoint import load_model
from numforge.hf import save_pretrained
from numforge.hf.peft import ADAPTER_CONFIG, ADAPTER_WEIGHTS, save_peft_adapter
from numforge.model.lora import TARGETS, LoraConfig, adapter_shapes

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
pytest.importorskip("safetensors")
from test_hf_llama_transformers import float64_reference  # noqa: E402  (after the skips: it imports torch)

TOLERANCE = 1e-10  # float64 through 2 layers: rounding apart, a wrong transpose or scale is O(1)


def adapted(directory, targets, seed=0):
    """numforge's float64 model of ``directory`` with O(1)-scale adapters on ``targets`` (B not zero)."""
    model, tokenizer = load_model(directory, "float64")
    lora = LoraConfig(rank=3, alpha=4.5, dropout=0.1, targets=targets)
    rng = np.random.default_rng(seed)
    values = {n: rng.normal(0, 0.3, s) for n, s in adapter_shapes(model.config, lora).items()}
    model.add_lora(lora, values=values)
    return model, tokenizer


def hf_logits(model, ids) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(ids)).logits.numpy()


@pytest.mark.parametrize("model_type, targets", [("llama", ("q", "v")), ("qwen3", TARGETS)])
def test_peft_loads_the_adapters_with_numforges_logits_and_merged_equals_them(tmp_path, model_type, targets):
    directory, _ = write_llama_dir(tmp_path / "base", llama_fields(model_type))
    model, tokenizer = adapted(directory, targets)
    save_peft_adapter(model, tmp_path / "adapter", base=str(directory))
    config = json.loads((tmp_path / "adapter" / ADAPTER_CONFIG).read_text())
    assert config["r"] == 3 and config["lora_alpha"] == 4.5 and config["lora_dropout"] == 0.1
    assert config["target_modules"] == sorted(f"{t}_proj" for t in targets)
    from safetensors.numpy import load_file

    stored = load_file(str(tmp_path / "adapter" / ADAPTER_WEIGHTS))
    assert stored["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"].shape == (3, model.config.d_model)

    ids = np.arange(1, 25).reshape(2, 12)
    ours = model.logits(ids)
    base = float64_reference(transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float64).eval())
    peft_model = peft.PeftModel.from_pretrained(base, str(tmp_path / "adapter")).eval()
    theirs = hf_logits(peft_model, ids)
    assert np.abs(ours - theirs).max() < TOLERANCE * np.abs(theirs).max()
    with peft_model.disable_adapter():  # the adapters matter: without them the logits are far from ours
        assert np.abs(ours - hf_logits(peft_model, ids)).max() > 1e-3

    save_pretrained(model.merged(), tokenizer, tmp_path / "merged")
    merged = float64_reference(
        transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "merged", dtype=torch.float64)
    )
    merged_logits = hf_logits(merged.eval(), ids)
    print(f"merged vs peft, largest logit difference: {np.abs(merged_logits - theirs).max():.2e}")
    assert np.abs(merged_logits - theirs).max() < TOLERANCE * np.abs(theirs).max()


def test_a_family_without_a_module_per_projection_is_refused(tmp_path):
    directory, _ = write_gpt2_dir(tmp_path / "gpt2")
    model, _ = load_model(directory)
    model.add_lora(LoraConfig(targets=("q",)))
    with pytest.raises(ValueError, match="a PEFT adapter directory needs a module per adapted weight; gpt2"):
        save_peft_adapter(model, tmp_path / "adapter")
    assert not (tmp_path / "adapter").exists()
