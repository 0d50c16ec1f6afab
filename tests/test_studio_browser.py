"""numforge studio and the inspector page in a real browser: headless Chromium, driven by selenium.

One browser and one server for the module, on a tiny run of context 256. Every wait is on the page's own
progress (a view's ``data-ready`` counter, ``data-busy`` back to 0), never a sleep. Without selenium or
Chromium the tests skip and say what to install.
"""

import base64
import json
import threading

import numpy as np
import pytest
from helpers import make_tiny_run

from numforge.checkpoint import load_model
from numforge.cli import main
from numforge.generate import decodable_ids, generate
from numforge.model import GPT, GPTConfig
from numforge.study.attention import attention_weights
from numforge.study.page import module_order, render_page
from numforge.study.prompt import run_prompt, shown_text, shown_token
from numforge.study.report import inspect_data
from numforge.study.studio import Studio, StudioServer
from numforge.tokenizer.pretokenize import chunker
from numforge.training.logs import LOSS_CSV, write_loss_csv

pytest.importorskip("selenium", reason='the browser tests need selenium: pip install -e ".[test]"')

from browser import (  # noqa: E402  (selenium is there: checked above)
    CHROMIUM,
    DRIVER,
    MISSING,
    PHONE,
    WIDE,
    chips,
    console_errors,
    open_view,
    page_fits,
    ready,
    start_browser,
    type_prompt,
    wait_for,
)
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

if CHROMIUM is None or DRIVER is None:
    pytest.skip(MISSING, allow_module_level=True)

PROMPT = "the cat sat on a mat"
HOSTILE = [
    "<!--<script>",
    "</script><script>window.pwned = 1</script>",
    '"&<>',
    '<img src=x onerror="window.pwned = 1"> &amp; &lt;b&gt;',
    "🙂 世界 👩‍👩‍👧 e\u0301",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_tiny_run(tmp_path_factory.mktemp("studio"), seq_len=256, words=6000)


@pytest.fixture(scope="module")
def server(run):
    model, tokenizer = load_model(run)
    server = StudioServer(Studio(model, tokenizer, "a tiny run of 4 steps", run_dir=run), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    driver = start_browser(WIDE)
    yield driver
    driver.quit()


def softmax(z, tau):
    p = np.exp((z - z.max()) / tau)
    return p / p.sum()


def all_logits(server, ids):
    answer = server.studio.next_token({"ids": ids, "all_logits": True})
    z = np.array(answer["all_logits"])
    allowed = decodable_ids(server.studio.tokenizer, server.studio.model.config.vocab_size)
    return z if allowed is None else np.where(allowed, z, -np.inf)


def test_the_page_loads_its_modules_with_no_console_error(browser, server):
    browser.get(server.url)
    WebDriverWait(browser, 60).until(lambda d: ready(d, "next") > 0)
    loaded = browser.execute_script(
        "return performance.getEntriesByType('resource').map(function (r) { return new URL(r.name).pathname; })"
    )
    assert sorted(p for p in loaded if p.startswith("/static/js/")) == sorted(f"/static/js/{m}" for m in module_order())
    assert console_errors(browser) == []


def test_the_temperature_slider_reshapes_the_probabilities_as_softmax_z_over_tau(browser, server):
    open_view(browser, server, "next")
    type_prompt(browser, PROMPT, "next")
    ids = [i for _, i in chips(browser, "next-tokens")]
    assert ids == server.studio.tokenizer.encode(PROMPT)
    z = all_logits(server, ids)
    seen = {}
    for presses, tau in ((0, 1.0), (10, 1.5), (-18, 0.6)):
        slider = browser.find_element(By.ID, "next-temperature")
        before = ready(browser, "next")
        slider.send_keys(*([Keys.ARROW_RIGHT] * presses if presses > 0 else [Keys.ARROW_LEFT] * -presses))
        if presses:
            wait_for(browser, "next", before)
        table = browser.find_element(By.ID, "next-table")
        assert float(table.get_attribute("data-temperature")) == pytest.approx(tau)
        rows = [
            (int(r.get_attribute("data-id")), float(r.get_attribute("data-p")))
            for r in table.find_elements(By.CSS_SELECTOR, "tr[data-id]")
        ]
        expected = softmax(z, tau)
        assert [i for i, _ in rows] == list(np.argsort(-expected, kind="stable")[: len(rows)])
        for token, p in rows:
            assert p == pytest.approx(expected[token], rel=1e-9)
        seen[tau] = rows[0][1]
    assert seen[0.6] > seen[1.0] > seen[1.5]  # a lower temperature sharpens the distribution
    assert console_errors(browser) == []


def test_stepping_greedily_gives_numforge_samples_tokens(browser, server, run, capsys):
    open_view(browser, server, "next")
    type_prompt(browser, PROMPT, "next")
    for _ in range(4):
        before = ready(browser, "next")
        browser.find_element(By.ID, "next-step").click()
        wait_for(browser, "next", before)
    stepped = [i for _, i in chips(browser, "next-generated")]
    before = ready(browser, "next")
    browser.find_element(By.ID, "next-generate").click()  # 10 more, with the KV cache
    wait_for(browser, "next", before)
    generated = [i for _, i in chips(browser, "next-generated")]
    model, tokenizer = server.studio.model, server.studio.tokenizer
    expected = generate(model, tokenizer, PROMPT, 14, temperature=0).ids
    assert stepped == expected[:4] and generated == expected and len(expected) == 14
    capsys.readouterr()
    flags = ["--prompt", PROMPT, "--max-new-tokens", "14", "--temperature", "0"]
    assert main(["sample", "--checkpoint", str(run), *flags]) == 0
    assert capsys.readouterr().out == PROMPT + tokenizer.decode(generated) + "\n"
    browser.find_element(By.ID, "next-reset").click()
    assert console_errors(browser) == []


def test_hovering_a_heatmap_cell_shows_its_weight(browser, server):
    open_view(browser, server, "attention")
    type_prompt(browser, PROMPT, "attention")
    before = ready(browser, "attention")
    browser.execute_script(
        "var s = document.getElementById('att-head'); s.value = '1'; s.dispatchEvent(new Event('change'))"
    )
    box = browser.find_element(By.ID, "att-main")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", box)  # all of it on the screen
    geometry = json.loads(box.get_attribute("data-geometry"))
    assert ready(browser, "attention") == before
    prompt = run_prompt(server.studio.model, server.studio.tokenizer, PROMPT)
    weights = attention_weights(prompt.cache.blocks[0].attention.attention)[0, 1]  # layer 0, head 1: (T,T)
    for i, j in ((4, 1), (2, 2), (len(prompt.ids) - 1, 0)):
        x = geometry["left"] + (j + 0.5) * geometry["cellW"] - box.size["width"] / 2
        y = geometry["top"] + (i + 0.5) * geometry["cellH"] - box.size["height"] / 2
        ActionChains(browser).move_to_element_with_offset(box, int(x), int(y)).perform()
        tip = browser.find_element(By.ID, "tip")
        assert tip.is_displayed()
        lines = tip.text.splitlines()
        assert lines[1].split() == ["query", str(i), prompt.shown[i]] and lines[2].split() == [
            "key",
            str(j),
            prompt.shown[j],
        ]
        shown = float(lines[3].split()[1])
        assert shown == pytest.approx(weights[i, j], rel=1.5e-3)  # float16 (2^-11), then 4 digits
        assert box.get_attribute("data-hover").split(",")[:2] == [str(i), str(j)]
        focus = browser.find_element(By.ID, "att-focus").text
        assert focus.startswith(f"query {i} {prompt.shown[i]}") and "top predictions" in focus
    for draw in ("lines", "heatmap"):
        browser.execute_script(
            "var s = document.getElementById('att-draw'); s.value = arguments[0]; s.dispatchEvent(new Event('input'))",
            draw,
        )
    assert console_errors(browser) == []


@pytest.mark.parametrize("size", [WIDE, PHONE], ids=["1280px", "390px"])
def test_hostile_prompts_render_as_text_in_every_view(browser, server, size):
    browser.set_window_size(*size)
    tokenizer = server.studio.tokenizer
    long = " ".join(["the cat sat on a mat while one dog ran"] * 40)
    long = tokenizer.decode(tokenizer.encode(long)[:200])
    try:
        open_view(browser, server, "tokenizer")
        scripts = browser.execute_script("return document.scripts.length")
        for text in (" ".join(HOSTILE), long):  # every hostile string at once, then the long prompt
            ids = tokenizer.encode(text, allowed_special="all")
            expected = [(shown_token(tokenizer, i), i) for i in ids]
            for view, strip in (("tokenizer", "tok-tokens"), ("next", "next-tokens"), ("trace", "trace-tokens")):
                open_view(browser, server, view)
                type_prompt(browser, text, view)
                assert chips(browser, strip) == expected, (view, text)
                assert page_fits(browser), (view, text, size)
                if view == "trace" and size == WIDE:  # the stage tables fit 1280 px: no sideways scroll
                    widths = browser.execute_script(
                        "return ['trace-forward', 'trace-backward'].map(function (id) {"
                        "  var box = document.getElementById(id).parentNode;"
                        "  return box.scrollWidth - box.clientWidth; })"
                    )
                    assert widths == [0, 0], widths
            open_view(browser, server, "attention")
            assert chips(browser, "att-tokens") == expected
            assert page_fits(browser)
            assert browser.execute_script("return document.scripts.length") == scripts
            assert browser.execute_script("return window.pwned === undefined")
        assert len(ids) == 200
        open_view(browser, server, "tokenizer")
        codes = browser.execute_script(
            "return Array.from(document.querySelectorAll('#tok-chunks code')).map(function (c) {"
            "  return c.textContent; })"
        )
        assert codes == [shown_text(chunk) for chunk in chunker(tokenizer.pattern)(long)]
    finally:
        browser.set_window_size(*WIDE)
    assert console_errors(browser) == []


def test_on_a_phone_a_tap_shows_a_weight_and_the_canvases_are_sharp(browser, server):
    """390 px at 3 device pixels per CSS pixel, with touch: a tap on a cell shows its weight."""
    metrics = {"width": PHONE[0], "height": PHONE[1], "deviceScaleFactor": 3, "mobile": True}
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    browser.execute_cdp_cmd("Emulation.setTouchEmulationEnabled", {"enabled": True, "maxTouchPoints": 1})
    try:
        browser.get(server.url)
        open_view(browser, server, "attention")
        type_prompt(browser, PROMPT, "attention")
        box = browser.find_element(By.ID, "att-main")
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", box)
        canvas = box.find_element(By.TAG_NAME, "canvas")
        css = browser.execute_script("return arguments[0].getBoundingClientRect().width", canvas)
        assert int(canvas.get_attribute("width")) == round(3 * css)  # drawn at the screen's own density
        geometry = json.loads(box.get_attribute("data-geometry"))
        rect = browser.execute_script("var r = arguments[0].getBoundingClientRect(); return [r.left, r.top]", box)
        x, y = rect[0] + geometry["left"] + 1.5 * geometry["cellW"], rect[1] + geometry["top"] + 3.5 * geometry["cellH"]
        touch = {"type": "touchStart", "touchPoints": [{"x": x, "y": y}]}
        browser.execute_cdp_cmd("Input.dispatchTouchEvent", touch)
        browser.execute_cdp_cmd("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})
        tip = browser.find_element(By.ID, "tip")
        assert tip.is_displayed() and tip.text.splitlines()[1].startswith("query 3 ")
        assert tip.text.splitlines()[2].startswith("key   1 ")
        tip_box = browser.execute_script("var r = arguments[0].getBoundingClientRect(); return [r.left, r.right]", tip)
        assert 0 <= tip_box[0] and tip_box[1] <= PHONE[0]  # kept inside the window
        for view in ("training", "next", "tokenizer", "trace"):
            open_view(browser, server, view)
            assert page_fits(browser), view
    finally:
        browser.execute_cdp_cmd("Emulation.setTouchEmulationEnabled", {"enabled": False})
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        browser.set_window_size(*WIDE)
    assert console_errors(browser) == []


def test_the_training_view_follows_loss_csv_as_it_grows(browser, server, run):
    open_view(browser, server, "training")
    chart = browser.find_element(By.ID, "train-loss")
    assert chart.get_attribute("data-rows") == "4"  # the run's own 4 steps
    assert "step 4" in browser.find_element(By.ID, "train-sample").text
    rows = [{"step": s, "train_loss": f"{5 - s / 10:.4f}", "val_loss": "" if s % 2 else "4.9", "lr": "0.001"}
            for s in range(1, 9)]  # fmt: skip
    write_loss_csv(run / LOSS_CSV, rows)
    WebDriverWait(browser, 30).until(lambda d: chart.get_attribute("data-rows") == "8")
    assert "the last step 8" in browser.find_element(By.ID, "train-info").text
    assert chart.get_attribute("data-x-ticks").split(",") == [str(s) for s in range(1, 9)]  # every step here
    assert console_errors(browser) == []


def test_the_inspector_page_shows_the_same_views_from_disk(browser, server, tmp_path):
    model, tokenizer = server.studio.model, server.studio.tokenizer
    text = HOSTILE[0] + " " + HOSTILE[1] + " " + HOSTILE[4]
    page = tmp_path / "report.html"
    page.write_text(render_page(inspect_data(model, tokenizer, text)), encoding="utf-8")
    browser.get(page.as_uri())
    WebDriverWait(browser, 60).until(lambda d: ready(d, "trace") > 0)
    ids = tokenizer.encode(text, allowed_special="all")
    assert chips(browser, "trace-tokens") == [(shown_token(tokenizer, i), i) for i in ids]
    assert browser.find_element(By.ID, "prompt").get_attribute("value") == text
    browser.find_element(By.CSS_SELECTOR, "#trace-tokens .tok[data-position='2']").click()
    WebDriverWait(browser, 30).until(lambda d: ready(d, "trace") > 1)
    assert "at position 2" in browser.find_element(By.ID, "trace-forward").text
    for view in ("attention", "tokenizer", "next"):
        before = ready(browser, view)
        browser.find_element(By.CSS_SELECTOR, f'#tabs [data-view="{view}"]').click()
        wait_for(browser, view, before)
    assert browser.find_element(By.CSS_SELECTOR, '#tabs [data-view="training"]').get_attribute("disabled")
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0  # no request
    assert browser.execute_script("return window.pwned === undefined")
    assert console_errors(browser) == []
    weights = browser.execute_script("return document.getElementById('att-main').getAttribute('data-geometry')")
    assert json.loads(weights)["cellW"] >= 1
    sent = inspect_data(model, tokenizer, text)["answers"]["attention"][0]["weights"][0]
    assert np.frombuffer(base64.b64decode(sent), dtype="<f2").size == len(ids) * (len(ids) + 1) // 2


def test_an_inspector_page_without_a_layers_attention_says_so_for_that_layer(browser, server, tmp_path):
    tokenizer = server.studio.tokenizer
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, max_seq_len=64, d_model=8, num_heads=2, num_layers=2))
    page = tmp_path / "layer-0.html"
    page.write_text(render_page(inspect_data(model, tokenizer, PROMPT, attention_mib=0)), encoding="utf-8")
    browser.get(page.as_uri())
    WebDriverWait(browser, 60).until(lambda d: ready(d, "trace") > 0)
    before = ready(browser, "attention")
    browser.find_element(By.CSS_SELECTOR, '#tabs [data-view="attention"]').click()
    wait_for(browser, "attention", before)  # layer 0: drawn
    options = Select(browser.find_element(By.ID, "att-layer")).options
    assert [(o.text, o.get_attribute("value"), o.is_enabled()) for o in options] == [
        ("0", "0", True),
        ("1 (numforge studio)", "1", False),
    ]
    browser.execute_script(
        "var box = document.getElementById('att-layer'); box.value = '1';box.dispatchEvent(new Event('change'))"
    )  # what the disabled option keeps a user from
    status = browser.find_element(By.ID, "status")
    WebDriverWait(browser, 30).until(lambda _: "layers 0-0" in status.text)
    assert status.text == (
        "this page holds the attention weights of layers 0-0 (numforge inspect --attention-mib): run numforge "
        "studio, or inspect with a larger --attention-mib, for layer 1"
    )
    assert console_errors(browser) == []
