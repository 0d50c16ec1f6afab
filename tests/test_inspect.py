"""numforge.study.report and `numforge inspect`: one self-contained page whose data are the trace's numbers."""

import json
import re
import shutil
import subprocess

import numpy as np
import pytest
from helpers import STUDY_PROMPT, STUDY_TEXT, tiny_model, tiny_run

from numforge.cli import main
from numforge.study.attention import model_attention_weights
from numforge.study.backward import backward_stages
from numforge.study.predictions import logit_lens, position_predictions
from numforge.study.prompt import run_prompt
from numforge.study.report import inspect_data, render_page
from numforge.study.trace import forward_stages
from numforge.tokenizer import BPETokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return BPETokenizer.train(STUDY_TEXT, 256 + 12)


def embedded_data(page: str) -> dict:
    found = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, flags=re.DOTALL)
    return json.loads(found.group(1))


def test_the_embedded_data_are_the_traces_numbers(tokenizer):
    model = tiny_model(tokenizer)
    page = render_page(inspect_data(model, tokenizer, STUDY_PROMPT))
    data = embedded_data(page)
    prompt = run_prompt(model, tokenizer, STUDY_PROMPT)
    assert [(t["id"], t["text"]) for t in data["tokens"]] == list(zip(prompt.ids, prompt.tokens))
    assert data["loss"] == prompt.loss
    stages = forward_stages(model, prompt)
    assert [(s["name"], s["mean"], s["std"], s["source"]) for s in data["forward"]] == [
        (s.name, s.mean, s.std, s.source) for s in stages
    ]
    T = len(prompt.ids)
    for layer, weights in zip(data["attention"]["weights"], model_attention_weights(prompt.cache)):
        for head, matrix in enumerate(layer):
            for i in range(T):
                assert matrix[i][i + 1 :] == [None] * (T - 1 - i)  # the masked upper triangle
                assert matrix[i][: i + 1] == weights[0, head, i, : i + 1].tolist()
    assert [(p["target"], p["loss"], [q[:1] + q[2:] for q in p["top"]]) for p in data["predictions"]] == [
        (p.target, p.loss, [list(x) for x in p.top]) for p in position_predictions(prompt)
    ]
    assert [[[q[0] for q in top] for top in r["top"]] for r in data["lens"]] == [
        [[i for i, _ in top] for top in r.top] for r in logit_lens(model, prompt)
    ]
    grad_stages, _ = backward_stages(model, prompt)
    assert [(s["name"], s["norm"], [p[2] for p in s["params"]]) for s in data["backward"]] == [
        (s.name, s.norm, [norm for _, _, norm in s.params]) for s in grad_stages
    ]


def test_the_page_needs_nothing_from_outside(tokenizer):
    page = render_page(inspect_data(tiny_model(tokenizer), tokenizer, "the </script>"))
    assert not re.search(r"(https?:|//[a-z]|\bsrc=|<link|@import|url\()", page)
    assert page.count("</script>") == 2  # the prompt's own "</script>" is escaped inside the data
    assert embedded_data(page)["prompt"] == "the </script>"


def test_cli_writes_the_page(tmp_path, capsys):
    run = tiny_run(tmp_path)
    out = tmp_path / "report.html"
    assert main(["inspect", "--checkpoint", str(run), "--prompt", STUDY_PROMPT, "--out", str(out)]) == 0
    data = embedded_data(out.read_text(encoding="utf-8"))
    assert len(data["attention"]["weights"]) == 1 and len(data["attention"]["weights"][0]) == 2  # 1 layer, 2 heads
    with pytest.raises(SystemExit, match="2"):  # argparse: --out is required
        main(["inspect", "--checkpoint", str(run), "--prompt", STUDY_PROMPT])


def test_chromium_opens_it_with_no_script_error(tmp_path, tokenizer):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no headless Chromium here (Debian: apt-get install chromium)")
    page = tmp_path / "report.html"
    page.write_text(render_page(inspect_data(tiny_model(tokenizer), tokenizer, STUDY_PROMPT)), encoding="utf-8")
    flags = [browser, "--headless", "--disable-gpu", "--no-sandbox", "--enable-logging=stderr", "--v=0"]
    dom = subprocess.run(flags + ["--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console  # an uncaught error or a console message would be logged here
    assert 'data-drawn="4"' in dom.stdout  # the script ran to its end: 2 layers x 2 heads drawn
    shot = tmp_path / "shot.png"
    subprocess.run(
        flags + [f"--screenshot={shot}", "--window-size=1200,1600", page.as_uri()], capture_output=True, timeout=120
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert np.frombuffer(shot.read_bytes(), dtype=np.uint8).size > 10_000  # a page, not an empty image
