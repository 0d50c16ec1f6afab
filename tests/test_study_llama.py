"""The study tools on the modern decoder: trace, the backward stages, the lens, attention, inspect and params
on Llama-style models (RMSNorm, rotary positions, QK-norm in either order), all read from the caches."""

import json
import re

import numpy as np
import pytest
from helpers import STUDY_PROMPT, STUDY_TEXT, tiny_model, tiny_run

from numforge.backend import to_numpy
from numforge.cli import main
from numforge.model.config import ARCHS
from numforge.ops.rmsnorm import rms_norm_forward
from numforge.ops.rope import rope_forward
from numforge.study.backward import backward_stages
from numforge.study.prompt import run_prompt
from numforge.study.trace import forward_stages
from numforge.tokenizer import BPETokenizer

QWEN3_STYLE = {**ARCHS["llama"], "qk_norm": True, "num_kv_heads": 1}  # QK-norm, then the rotation
NANOCHAT_STYLE = {**ARCHS["llama"], "qk_norm": True, "qk_norm_order": "after_rope", "norm_weight": False}


@pytest.fixture(scope="module")
def tokenizer():
    return BPETokenizer.train(STUDY_TEXT, 256 + 12)


@pytest.mark.parametrize("options, steps", [(QWEN3_STYLE, ("qk_norm", "rope")), (NANOCHAT_STYLE, ("rope", "qk_norm"))])
def test_q_and_k_are_shown_after_each_step_as_the_cache_holds_them(tokenizer, options, steps):
    model = tiny_model(tokenizer, dtype="float64", **options)
    prompt = run_prompt(model, tokenizer, STUDY_PROMPT)
    stages = {s.name: s for s in forward_stages(model, prompt)}
    assert "position embedding" not in stages  # rotary positions add nothing to the embeddings
    names = [s.name for s in forward_stages(model, prompt) if s.name.startswith("layer 0 q")]
    assert names == ["layer 0 q", *(f"layer 0 q after {step}" for step in steps)]
    T = len(prompt.ids)
    cos, sin = (model.position_tables[name][:T] for name in ("rope_cos", "rope_sin"))
    q = to_numpy(stages["layer 0 q"].array)
    weight = model.params.get("layers.0.attn.q_norm.weight")
    by_hand = {"qk_norm": lambda x: rms_norm_forward(x, weight, eps=model.config.norm_eps)[0],
               "rope": lambda x: rope_forward(x, cos, sin)[0]}  # fmt: skip
    for step in steps:  # each stage is the op applied to the one before it
        q = by_hand[step](q)
        np.testing.assert_allclose(to_numpy(stages[f"layer 0 q after {step}"].array), q, rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(q, to_numpy(prompt.cache.blocks[0].attention.attention.q))  # what it attended


@pytest.mark.parametrize("options", [QWEN3_STYLE, NANOCHAT_STYLE, {**ARCHS["llama"], "attention": "plain"}])
def test_the_recorded_backward_is_the_backward(tokenizer, options):
    model = tiny_model(tokenizer, **options)
    prompt = run_prompt(model, tokenizer, STUDY_PROMPT)
    plain = model.backward(prompt.cache)
    stages, recorded = backward_stages(model, prompt)
    for name in plain:
        np.testing.assert_array_equal(to_numpy(recorded[name]), to_numpy(plain[name]))
    names = [s.name for s in stages if s.name.startswith("layer 0 ")]
    assert (
        names.index("layer 0 q")
        < names.index("layer 0 q before rope")
        < names.index("layer 0 pre-attention RMSNorm output")
    )
    by_name = {s.name: s for s in stages}
    if options.get("qk_norm") and model.config.norm_weight:  # the norm's weight gradient, at its step
        assert [p[0] for p in by_name["layer 0 q before q_norm"].params] == ["layers.0.attn.q_norm.weight"]


def test_the_commands_on_a_llama_run(tmp_path, capsys):
    run = tiny_run(tmp_path, "--arch", "llama", "--kv-heads", "1", "--qk-norm")
    capsys.readouterr()
    assert main(["trace", "--checkpoint", str(run), "--prompt", STUDY_PROMPT, "--backward", "--lens"]) == 0
    out = capsys.readouterr().out
    for shown in ("layer 0 q after rope", "layer 0 k after qk_norm", "layer 0 q before rope", "logit lens"):
        assert shown in out
    assert "position embedding" not in out and "position_embedding" not in out
    assert main(["attention", "--checkpoint", str(run), "--prompt", STUDY_PROMPT]) == 0
    difference = float(capsys.readouterr().out.split("max |P - P_plain| = ")[1].split()[0])
    assert difference < 1e-6
    page = tmp_path / "report.html"
    assert main(["inspect", "--checkpoint", str(run), "--prompt", STUDY_PROMPT, "--out", str(page)]) == 0
    data = json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', page.read_text(), re.S)[1])
    forward = data["answers"]["trace"]["forward"]
    assert any(stage["name"] == "layer 0 q after rope" and stage["equation"] for stage in forward)
    capsys.readouterr()
    assert main(["params", "--checkpoint", str(run)]) == 0
    out = capsys.readouterr().out
    assert "rmsnorm norms, QK-norm before rope over each head's D values, rope positions" in out and "no biases" in out
    assert re.search(r"^position table +0 .*rotated", out, flags=re.MULTILINE)
    assert "KV cache (sampling): 2 x L x H_kv x D = 8 values per token" in out  # 1 layer, 1 key/value head of 4
    assert "1/2 of full attention's 16 values" in out
