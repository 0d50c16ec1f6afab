"""numforge.study.report and `numforge inspect`: one self-contained page whose data are the trace's numbers."""

import base64
import json
import re

import numpy as np
import pytest
from helpers import STUDY_PROMPT, STUDY_TEXT, tiny_model, tiny_run

from numforge.cli import main
from numforge.model import GPTConfig
from numforge.model.config import ARCHS
from numforge.study.attention import model_attention_weights
from numforge.study.backward import backward_stages
from numforge.study.page import inline_modules, module_order, read_module, render_page
from numforge.study.predictions import logit_lens, position_predictions
from numforge.study.prompt import run_prompt, shown_token
from numforge.study.report import attention_layers, inspect_data
from numforge.study.trace import at_position, forward_stages
from numforge.tokenizer import BPETokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return BPETokenizer.train(STUDY_TEXT, 256 + 12)


def embedded_data(page: str) -> dict:
    found = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, flags=re.DOTALL)
    return json.loads(found.group(1))


@pytest.mark.parametrize("options", [{}, {**ARCHS["llama"], "num_kv_heads": 1}], ids=["gpt2", "llama-mqa"])
def test_the_embedded_data_are_the_traces_numbers(tokenizer, options):
    model = tiny_model(tokenizer, **options)
    page = render_page(inspect_data(model, tokenizer, STUDY_PROMPT))
    data = embedded_data(page)
    answers = data["answers"]
    prompt = run_prompt(model, tokenizer, STUDY_PROMPT)
    trace = answers["trace"]
    assert [(t["id"], t["text"], t["shown"]) for t in trace["tokens"]] == list(
        zip(prompt.ids, prompt.tokens, prompt.shown)
    )
    assert trace["loss"] == prompt.loss
    stages = forward_stages(model, prompt)
    assert [(s["name"], s["mean"], s["std"], s["source"]) for s in trace["forward"]] == [
        (s.name, s.mean, s.std, s.source) for s in stages
    ]
    T = len(prompt.ids)
    for t in range(T):  # each stage's norm at every position, rounded
        for at, stage in zip(answers["at"][t]["forward"], stages):
            np.testing.assert_allclose(at, [np.linalg.norm(at_position(stage.array, t, T))], rtol=5e-4)
    for at, stage in zip([s["at"] for s in trace["forward"]], stages):  # the last position: its first values too
        part = at_position(stage.array, T - 1, T)
        np.testing.assert_allclose(at, [np.linalg.norm(part), *part.ravel()[:4]], rtol=5e-4, atol=1e-12)
    for layer, weights in zip(answers["attention"], model_attention_weights(prompt.cache)):
        assert len(layer["weights"]) == 2  # heads 0 and 1; the tokens and predictions only with layer 0
        for head, b64 in enumerate(layer["weights"]):
            sent = np.frombuffer(base64.b64decode(b64), dtype="<f2").astype(np.float64)  # no masked triangle
            np.testing.assert_allclose(sent, weights[0, head][np.tril_indices(T)], rtol=2**-11, atol=6e-8)
    assert [(p["target"], p["loss"], [q[0] for q in p["top"]]) for p in trace["predictions"]] == [
        (p.target, None if p.loss is None else float(f"{p.loss:.6g}"), [i for i, _ in p.top])
        for p in position_predictions(prompt)
    ]
    assert [[[q[0] for q in top] for top in row] for row in answers["lens"]["top"]] == [
        [[i for i, _ in top] for top in r.top] for r in logit_lens(model, prompt)
    ]
    grad_stages, _ = backward_stages(model, prompt)
    assert [(s["name"], s["norm"], [p[2] for p in s["params"]]) for s in trace["backward"]] == [
        (s.name, s.norm, [norm for _, _, norm in s.params]) for s in grad_stages
    ]
    assert answers["next"]["chosen"]["id"] == trace["predictions"][-1]["top"][0][0]  # greedy = the top prediction
    labels = trace["labels"]
    assert all(labels[str(i)] == shown_token(tokenizer, i) for i in map(int, labels))


@pytest.mark.parametrize("prompt", ["the </script> cat", "the <!--<script> cat", 'the "&<> cat', "世界 🙂"])
def test_no_prompt_can_end_the_data_script_and_nothing_comes_from_outside(tokenizer, prompt):
    page = render_page(inspect_data(tiny_model(tokenizer), tokenizer, prompt))
    assert not re.search(r"(https?:|//[a-z]|\bsrc=|@import|url\()", page)
    assert re.findall(r"<link[^>]*>", page) == ['<link rel="icon" href="data:,">']  # no favicon request
    assert page.count("</script>") == 2 and page.count("<script") == 2  # the data and the page's one script
    assert "<!--" not in page.split("<body>", 1)[1]  # the prompt's own "<!--" is escaped inside the data
    data = embedded_data(page)
    assert data["prompt"] == prompt and data["answers"]["tokenize"]["chunks"][0]["text"] in prompt
    assert prompt.split()[-1] in page or not prompt.isascii()  # written as it is, not ASCII-escaped
    assert "世界" in page or "世界" not in prompt
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1)
    assert policy.startswith("default-src 'none'; script-src 'sha256-") and "'unsafe-inline'" not in policy


def test_a_prompt_of_the_whole_context_stays_small(tokenizer):
    model = tiny_model(tokenizer, max_seq_len=256, num_layers=3, num_heads=4)
    text = tokenizer.decode(tokenizer.encode(STUDY_TEXT * 4)[:256])
    page = render_page(inspect_data(model, tokenizer, text))
    T, heads = len(tokenizer.encode(text)), 3 * 4
    assert T == 256
    weights = heads * T * (T + 1) // 2 * 2 * 4 / 3  # float16, base64: the bulk of the page
    assert len(page.encode()) < weights + 600_000, len(page.encode())


def test_the_page_holds_the_attention_layers_its_budget_holds(tokenizer):
    gpt2 = GPTConfig(vocab_size=50257, max_seq_len=1024, d_model=768, num_heads=12, num_layers=12)
    layer = 12 * 1024 * 1025 // 2 * 2  # bytes of one layer's float16 weights at T 1024: 12.6 MB
    assert [attention_layers(gpt2, 1024, mib) for mib in (0, 16, layer * 3 / 2**20, 1000)] == [1, 1, 3, 12]
    assert attention_layers(gpt2, 64) == 12  # a short prompt: every layer
    model = tiny_model(tokenizer, max_seq_len=64, num_layers=3, num_heads=4)
    T = len(tokenizer.encode(STUDY_PROMPT))
    per_layer = 4 * T * (T + 1) // 2 * 2
    for mib, held in ((16, 3), (2.5 * per_layer / 2**20, 2), (0, 1)):
        attention = inspect_data(model, tokenizer, STUDY_PROMPT, attention_mib=mib)["answers"]["attention"]
        assert [a.get("layer", 0) for a in attention] == list(range(held))


def test_cli_writes_the_page(tmp_path, capsys):
    run = tiny_run(tmp_path)
    out = tmp_path / "report.html"
    assert main(["inspect", "--checkpoint", str(run), "--prompt", STUDY_PROMPT, "--out", str(out)]) == 0
    data = embedded_data(out.read_text(encoding="utf-8"))
    attention = data["answers"]["attention"]
    assert len(attention) == 1 and len(attention[0]["weights"]) == 2  # 1 layer, 2 heads
    with pytest.raises(SystemExit, match="2"):  # argparse: --out is required
        main(["inspect", "--checkpoint", str(run), "--prompt", STUDY_PROMPT])
    capsys.readouterr()
    (tmp_path / "two").mkdir()
    two = tiny_run(tmp_path / "two", "--layers", "2")
    argv = ["inspect", "--checkpoint", str(two), "--prompt", STUDY_PROMPT, "--out", str(tmp_path / "small.html")]
    assert main([*argv, "--attention-mib", "0"]) == 0
    assert "it holds the attention weights of layers 0-0 of 2 (--attention-mib 0)" in capsys.readouterr().out
    assert len(embedded_data((tmp_path / "small.html").read_text(encoding="utf-8"))["answers"]["attention"]) == 1
    with pytest.raises(SystemExit, match="2"):
        main([*argv[:-2], "--out", str(tmp_path / "neg.html"), "--attention-mib", "-1"])
    assert "argument --attention-mib: expected a finite number >= 0, got '-1'" in capsys.readouterr().err


def test_the_modules_inline_in_the_order_a_browser_runs_them():
    order = module_order()
    assert order[-1] == "studio.js" and len(order) == len(set(order)) > 10
    for n, name in enumerate(order):  # each module after every module it imports
        imported = re.findall(r'^import \{[^}]*\} from "\./([\w-]+\.js)";', read_module(name), flags=re.MULTILINE)
        assert set(imported) <= set(order[:n]), name
    script = inline_modules()
    assert not re.search(r"^\s*(import|export)\b", script, flags=re.MULTILINE)
    assert [line[8:-3] for line in script.splitlines() if line.startswith("/* ---- ")] == order
    toy = {
        "studio.js": 'import { b } from "./b.js";\nimport { a } from "./a.js";\nb(a);\n',
        "b.js": 'import { a } from "./a.js";\nexport function b(x) { return x; }\n',
        "a.js": "export const a = 1;\n",
    }
    assert module_order(toy.get) == ["a.js", "b.js", "studio.js"]
    assert inline_modules(toy.get) == (
        "/* ---- a.js */\nconst a = 1;\n/* ---- b.js */\nfunction b(x) { return x; }\n/* ---- studio.js */\nb(a);\n"
    )


@pytest.mark.parametrize(
    "modules, words",
    [
        ({"a.js": 'import { b } from "./b.js";\n', "b.js": 'import { a } from "./a.js";\n'}, "a.js -> b.js -> a.js"),
        ({"a.js": 'import { b } from "./b.js";\nvar x = 1;\n', "b.js": "export const b = 2;\nvar x = 3;\n"}, "['x']"),
        ({"a.js": 'import * as b from "./b.js";\n'}, "a.js: only 'import { names }"),
        ({"a.js": "export default 1;\n"}, "a.js: only 'import { names }"),
    ],
    ids=["cycle", "a name twice", "import star", "export default"],
)
def test_modules_that_cannot_share_one_script_are_refused(modules, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        inline_modules(modules.get, "a.js")
