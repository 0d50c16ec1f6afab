"""numforge.study.trace: the forward stages, in order, read from the forward's cache; and `numforge trace`."""

import numpy as np
import pytest
from helpers import STUDY_PROMPT, STUDY_TEXT, tiny_model, tiny_run

from numforge.backend import to_numpy
from numforge.cli import main
from numforge.model.config import ARCHS
from numforge.study.backward import backward_stages
from numforge.study.components import stage_name
from numforge.study.equations import stage_equation
from numforge.study.prompt import run_prompt, shown_token, token_label
from numforge.study.trace import format_stages, format_tokens, forward_stages
from numforge.tokenizer import BPETokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return BPETokenizer.train(STUDY_TEXT, 256 + 12)


MLP_STAGES = {  # ffn -> the MLP stages between the pre-MLP norm and the residual, with their widths F
    "gelu": [("MLP up_proj output (GELU input)", 32), ("MLP GELU output (down_proj input)", 32)],
    "swiglu": [
        ("MLP gate_proj output (SwiGLU gate)", 64),
        ("MLP up_proj output (SwiGLU up)", 64),
        ("MLP SwiGLU output (down_proj input)", 64),
    ],
    "relu": [("MLP ReLU output (down_proj input)", 32)],  # ReLU's cache keeps only a mask: no pre-activation
}


@pytest.mark.parametrize("ffn", sorted(MLP_STAGES))
def test_stages_in_data_flow_order_with_their_shapes(tokenizer, ffn):
    model = tiny_model(tokenizer, activation=ffn)
    T = len(tokenizer.encode(STUDY_PROMPT))
    expected = [
        ("token embedding", (1, T, 8)),
        ("learned position embedding", (1, T, 8)),
        ("embedding sum x = e + p", (1, T, 8)),
    ]
    for i in range(2):
        expected += [(f"layer {i} pre-attention LayerNorm output", (1, T, 8))]
        expected += [(f"layer {i} {name}", (1, 2, T, 4)) for name in "qkv"]
        expected += [
            (f"layer {i} heads merged (out_proj input)", (1, T, 8)),
            (f"layer {i} attention branch output", (1, T, 8)),
            (f"layer {i} residual after attention", (1, T, 8)),
            (f"layer {i} pre-MLP LayerNorm output", (1, T, 8)),
        ]
        expected += [(f"layer {i} {name}", (1, T, F)) for name, F in MLP_STAGES[ffn]]
        expected += [(f"layer {i} MLP branch output", (1, T, 8)), (f"layer {i} residual after MLP", (1, T, 8))]
    expected += [("final LayerNorm output (into the tied unembedding, the token table)", (1, T, 8))]
    stages = forward_stages(model, run_prompt(model, tokenizer, STUDY_PROMPT))
    assert [(s.name, s.shape) for s in stages] == expected


GEMMA_STYLE = {  # Gemma 2's parts: (1 + w) RMSNorm, scaled embeddings, GeGLU, post-norms, soft caps, a local layer
    "norm": "rmsnorm_offset", "position": "rope", "activation": "geglu", "use_bias": False, "scale_embeddings": True,
    "post_norms": True, "query_pre_attn_scalar": 16.0, "attn_softcap": 50.0, "logit_softcap": 30.0,
    "sliding_window": 3, "window_layers": [0], "num_kv_heads": 1,
}  # fmt: skip
# each family: the names of its stages outside layer 0, then those of layer 0 that differ from GPT-2's
FAMILY_NAMES = {
    "gpt2": (
        {},
        ["token embedding", "learned position embedding", "embedding sum x = e + p",
         "final LayerNorm output (into the tied unembedding, the token table)"],
        ["pre-attention LayerNorm output", "pre-MLP LayerNorm output", "MLP up_proj output (GELU input)",
         "MLP GELU output (down_proj input)", "attention branch output", "MLP branch output"],
    ),
    "llama": (
        {**ARCHS["llama"], "num_kv_heads": 1},
        ["token embedding", "residual stream x = e (no position added: rope acts in attention)",
         "final RMSNorm output (into lm_head, untied)"],
        ["pre-attention RMSNorm output", "q after rope", "k after rope", "pre-MLP RMSNorm output",
         "MLP gate_proj output (SwiGLU gate)", "MLP up_proj output (SwiGLU up)", "MLP SwiGLU output (down_proj input)"],
    ),
    "gemma": (
        GEMMA_STYLE,
        ["token embedding * sqrt(C)", "residual stream x = e (no position added: rope acts in attention)",
         "final RMSNorm (1 + w) output (into the tied unembedding, the token table)"],
        ["pre-attention RMSNorm (1 + w) output", "attention branch output (post-attention RMSNorm (1 + w))",
         "MLP gate_proj output (GeGLU gate)", "MLP GeGLU output (down_proj input)",
         "MLP branch output (post-MLP RMSNorm (1 + w))"],
    ),
    "moe": (
        {**ARCHS["moe"], "num_experts": 4, "d_ff": 16},
        ["token embedding", "residual stream x = e (no position added: rope acts in attention)",
         "final RMSNorm output (into lm_head, untied)"],
        ["pre-MLP RMSNorm output (router and experts input)", "router probabilities (N,E)",
         "gates of the chosen experts (N,k)", "MLP branch output (gated sum of the chosen experts)"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("family", sorted(FAMILY_NAMES))
def test_stages_are_named_by_the_models_own_components(tokenizer, family):
    """No GPT-2 name on another model: no "embedding sum" where no position is added, the norm, the activation,
    the unembedding, Gemma's scale and post-norms said as they are; each name's equation says the same."""
    options, outside, inside = FAMILY_NAMES[family]
    model = tiny_model(tokenizer, **options)
    prompt = run_prompt(model, tokenizer, STUDY_PROMPT)
    stages = forward_stages(model, prompt)
    assert [s.name for s in stages if s.layer is None] == outside
    layer0 = [s.name for s in stages if s.layer == 0]
    assert all(f"layer 0 {name}" in layer0 for name in inside), layer0
    others = {"gpt2": ("RMSNorm", "SwiGLU", "GeGLU", "lm_head", "post-"), "llama": ("LayerNorm", "GELU", "e + p")}
    for wrong in others.get(family, ()):
        assert not any(wrong in s.name for s in stages), wrong
    for s in stages + backward_stages(model, prompt)[0]:  # every name is the kind's, said for this model
        assert s.name == stage_name(s.kind, model.config, s.layer)
    equations = {s.name: stage_equation(s.kind, model.config, s.layer) for s in stages}
    final = equations[outside[-1]]
    assert ("W_tok^T" in final) == model.config.tie_weights and ("tanh" in final) == (family == "gemma")
    merged = [equations[f"layer {i} heads merged (out_proj input)"] for i in range(2)]
    if family == "gemma":  # the local layer's window and the soft cap, the global layer causal
        assert "softcap c = 50, window W = 3" in merged[0] and "softcap c = 50, causal" in merged[1]
        assert "1/sqrt(16)" in merged[0]
    else:
        assert merged[0].endswith("S' = S with causal") and "1/sqrt(D) = 1/sqrt(4)" in merged[0]
    branch = [equation for name, equation in equations.items() if name.startswith("layer 0 attention branch output")]
    assert (" + b_" in branch[0]) == (family == "gpt2") and ("post-attention" in branch[0]) == (family == "gemma")


def test_numbers_are_those_of_the_arrays_named(tokenizer):
    """Recomputed here by plain indexing and matrix products, from the parameters."""
    model = tiny_model(tokenizer)
    ids = tokenizer.encode(STUDY_PROMPT)
    stages = {s.name: s for s in forward_stages(model, run_prompt(model, tokenizer, STUDY_PROMPT))}
    p = {name: to_numpy(a).astype(np.float64) for name, a in model.params.items()}
    tokens, positions = p["token_embedding"][ids], p["position_embedding"][: len(ids)]  # (T,C)
    for name, expected in (("token embedding", tokens), ("learned position embedding", positions)):
        stage = stages[name]
        np.testing.assert_allclose([stage.mean, stage.std, stage.min, stage.max], _stats(expected), rtol=1e-6)
    embedded = tokens + positions
    np.testing.assert_allclose(stages["embedding sum x = e + p"].last, embedded[-1, :4], rtol=1e-6)
    final = "final LayerNorm output (into the tied unembedding, the token table)"
    for name in ("layer 0 pre-attention LayerNorm output", "layer 1 pre-MLP LayerNorm output", final):
        assert abs(stages[name].mean) < 1e-6 and 0.9 < stages[name].std < 1.0  # unit weight, zero bias
    # the attention branch's output is out_proj applied to the merged heads (here, by hand)
    merged = to_numpy(stages["layer 0 heads merged (out_proj input)"].array).astype(np.float64)[0]  # (T,C)
    branch = merged @ p["layers.0.attn.out_proj.weight"] + p["layers.0.attn.out_proj.bias"]
    np.testing.assert_allclose(to_numpy(stages["layer 0 attention branch output"].array)[0], branch, atol=1e-6)
    residual = to_numpy(stages["layer 0 residual after attention"].array)[0]
    np.testing.assert_allclose(residual, embedded + branch, atol=1e-6)


def _stats(a):
    return [a.mean(), a.std(), a.min(), a.max()]


def test_one_token_has_no_loss_and_bad_text_is_refused(tokenizer):
    model = tiny_model(tokenizer, num_layers=1)
    prompt = run_prompt(model, tokenizer, "the")
    assert prompt.loss is None and prompt.targets == (-1,)
    with pytest.raises(ValueError, match="no tokens"):
        run_prompt(model, tokenizer, "")
    with pytest.raises(ValueError, match="max_seq_len 16"):
        run_prompt(model, tokenizer, "xyz " * 20)
    with pytest.raises(TypeError, match="str"):
        run_prompt(model, tokenizer, [1, 2])


def test_a_piece_of_a_character_is_shown_as_its_bytes(tokenizer):
    ids = tokenizer.encode("世")  # not in the training text: three byte tokens
    assert [token_label(tokenizer, i) for i in ids] == ["<e4>", "<b8>", "<96>"]
    assert token_label(tokenizer, tokenizer.encode(" cat")[0]) == tokenizer.decode(tokenizer.encode(" cat")[:1])
    assert [shown_token(tokenizer, i) for i in ids] == ["<e4>", "<b8>", "<96>"]  # hex, spaces untouched
    assert [shown_token(tokenizer, i) for i in tokenizer.encode("a\n\t")] == ["a", "\\n", "\\t"]
    assert shown_token(tokenizer, tokenizer.vocab_size + 3) == "(no token)"


def test_format_has_a_line_per_stage_with_its_source(tokenizer):
    model = tiny_model(tokenizer, num_layers=1)
    prompt = run_prompt(model, tokenizer, STUDY_PROMPT)
    stages = forward_stages(model, prompt)
    text = format_stages(stages)
    for stage in stages:
        assert any(stage.name in line and line.rstrip().endswith(stage.source) for line in text.splitlines())
    tokens = format_tokens(prompt)
    rows = [line.split(maxsplit=2) for line in tokens.splitlines()[2:]]
    assert rows == [[str(t), str(i), s] for t, (i, s) in enumerate(zip(prompt.ids, prompt.shown))]
    assert prompt.shown == tuple(shown_token(tokenizer, i) for i in prompt.ids) and "\u00b7sat" in prompt.shown


def test_cli_on_a_tiny_checkpoint_and_without_one(tmp_path, capsys):
    run = tiny_run(tmp_path)
    capsys.readouterr()
    dump = tmp_path / "stages.npz"
    assert main(["trace", "--checkpoint", str(run), "--prompt", STUDY_PROMPT, "--backward", "--dump", str(dump)]) == 0
    out = capsys.readouterr().out
    assert f"checkpoint: {run} (1 layers" in out and "layer 0 q" in out and "layer 1" not in out
    assert "predictions at each position" in out and "backward pass" in out and "logit lens" not in out
    with np.load(dump) as arrays:
        assert arrays["layer 0 q"].shape[:3] == (1, 2, len(arrays["ids"][0]))
        assert arrays["grad/position_embedding"].shape == (8, 8)
        into_layer_0 = arrays["grad/layer 0 residual into the block (skip + attention)"]  # (1,T,C)
        np.testing.assert_allclose(arrays["grad/position_embedding"][: into_layer_0.shape[1]], into_layer_0[0])
    assert main(["trace", "--prompt", "The standard function", "--lens"]) == 0
    out = capsys.readouterr().out
    assert "untrained model" in out and "{" not in out.splitlines()[0] and "layer 1 residual after MLP" in out
    assert "logit lens" in out
    assert main(["trace", "--checkpoint", str(tmp_path / "missing"), "--prompt", STUDY_PROMPT]) == 2
    assert main(["trace", "--prompt", STUDY_PROMPT, "--top", "0"]) == 2
