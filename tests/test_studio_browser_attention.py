"""The Attention view's overview and scores mode in headless Chromium, for a Llama-style model with 4 query heads
over 2 key/value heads and a window of 3 keys: every layer x head a thumbnail that a click, Enter or Space turns
into the layer and head shown; the scores mode's cell (q_i . k_j s, S, the mask's term, S') equal to an
independent float64 NumPy forward (``tests/numpy_forward.py``); no WCAG 2.1 AA violation (axe-core) with the
overview and a cell's detail shown, and no sideways scroll at 390 px. Screenshots to ``/work/shots`` when it
exists. Every wait is on the page's own progress (``data-ready``), never a sleep."""

import json
import os
import threading

import pytest
from helpers import LLAMA_TINY, STUDY_TEXT, sharp_model
from numpy_forward import reference

from numforge.study.studio import Studio, StudioServer
from numforge.tokenizer import BPETokenizer

pytest.importorskip("selenium", reason='the browser tests need selenium: pip install -e ".[test]"')
pytest.importorskip("axe_core_python.selenium", reason='pip install -e ".[test]" (axe-core-python)')

from browser import CHROMIUM, DRIVER, MISSING, PHONE, WIDE, axe_violations, open_view, page_fits, start_browser  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

if CHROMIUM is None or DRIVER is None:
    pytest.skip(MISSING, allow_module_level=True)

PROMPT = "The cat sat on the mat."  # the page's own default prompt
SHOTS = "/work/shots"


@pytest.fixture(scope="module")
def served():
    tokenizer = BPETokenizer.train(STUDY_TEXT, 256 + 12)
    model = sharp_model(dict(LLAMA_TINY, vocab_size=tokenizer.vocab_size, max_seq_len=64))
    server = StudioServer(Studio(model, tokenizer, "a tiny sharp Llama-style model"), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, reference(model, tokenizer.encode_prompt(PROMPT))
    server.shutdown()
    server.server_close()


def counter(browser, element: str) -> int:
    return int(browser.find_element(By.ID, element).get_attribute("data-ready") or 0)


def until_ready(browser, element: str, after: int) -> None:
    WebDriverWait(browser, 60).until(lambda d: counter(d, element) > after)


def shown(browser) -> tuple[str, str]:
    return (browser.find_element(By.ID, "att-layer").get_attribute("value"),
            browser.find_element(By.ID, "att-head").get_attribute("value"))  # fmt: skip


def thumb(browser, layer: int, head: int):
    return browser.find_element(By.CSS_SELECTOR, f'#att-overview button[data-layer="{layer}"][data-head="{head}"]')


def shot(browser, name: str) -> None:
    if os.path.isdir(SHOTS):
        browser.save_screenshot(f"{SHOTS}/{name}")


@pytest.mark.parametrize("size", [WIDE, PHONE], ids=["1280px", "390px"])
def test_a_thumbnail_click_enter_or_space_shows_its_layer_and_head(served, size):
    server, _ = served
    browser = start_browser(size)
    try:
        open_view(browser, server, "attention")
        assert len(browser.find_elements(By.CSS_SELECTOR, "#att-overview button.thumb")) == 2 * 4
        assert thumb(browser, 0, 0).get_attribute("aria-pressed") == "true"
        assert [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#att-overview th small")] == [
            "kv 0", "kv 0", "kv 1", "kv 1"]  # fmt: skip
        before = counter(browser, "view-attention")
        thumb(browser, 1, 2).click()
        until_ready(browser, "view-attention", before)
        assert shown(browser) == ("1", "2") and thumb(browser, 1, 2).get_attribute("aria-pressed") == "true"
        assert "Grouped-query attention" in browser.find_element(By.ID, "att-note").text
        thumb(browser, 1, 3).send_keys(Keys.ENTER)  # the same layer: drawn again, nothing asked
        assert shown(browser) == ("1", "3") and thumb(browser, 1, 2).get_attribute("aria-pressed") == "false"
        before = counter(browser, "view-attention")
        thumb(browser, 0, 1).send_keys(Keys.SPACE)
        until_ready(browser, "view-attention", before)
        assert shown(browser) == ("0", "1")
        table = browser.find_element(By.ID, "att-overview-text")  # the text alternative: a row per head
        assert len(table.find_elements(By.TAG_NAME, "tr")) == 1 + 2 * 4
        assert axe_violations(browser) == []
        assert page_fits(browser)
        shot(browser, f"attention-overview-{size[0]}.png")
    finally:
        browser.quit()


def cell(browser, arrows: list[str]) -> dict:
    """Move the heatmap's keyboard cursor by ``arrows``; the cell's numbers as the page shows them."""
    box = browser.find_element(By.ID, "att-main")
    for key in arrows:
        box.send_keys(key)
    return json.loads(browser.find_element(By.ID, "att-qk").get_attribute("data-cell"))


@pytest.mark.parametrize("size", [WIDE, PHONE], ids=["1280px", "390px"])
def test_the_scores_mode_shows_the_references_scores_mask_and_q_k(served, size):
    server, ours = served
    browser = start_browser(size)
    try:
        open_view(browser, server, "attention")
        before = counter(browser, "att-qk-box")
        Select(browser.find_element(By.ID, "att-head")).select_by_visible_text("3")
        Select(browser.find_element(By.ID, "att-show")).select_by_value("raw")
        until_ready(browser, "att-qk-box", before)
        scores, masked = ours[(0, "scores")][3], ours[(0, "mask")][3]  # (T,T) each, -inf hidden
        got = cell(browser, [Keys.ARROW_DOWN] * 5 + [Keys.ARROW_RIGHT] * 2)  # (5, 2): 3 back, beyond the window
        assert (got["i"], got["j"]) == (5, 2)
        assert got["qk_s"] == pytest.approx(scores[5, 2], rel=1e-5) and got["raw"] == pytest.approx(
            scores[5, 2], rel=1e-6
        )
        assert got["terms"] == got["modified"] == "-Infinity"
        got = cell(browser, [Keys.ARROW_RIGHT])  # (5, 3): in the window
        assert got["qk_s"] == pytest.approx(scores[5, 3], rel=1e-5)
        assert (got["terms"], float(got["modified"])) == ("0", pytest.approx(masked[5, 3], rel=1e-6))
        assert "key/value head 1" in browser.find_element(By.ID, "att-qk").text
        assert axe_violations(browser) == []
        assert page_fits(browser)
        browser.execute_script('document.getElementById("att-qk-box").scrollIntoView({block: "end"})')
        shot(browser, f"attention-scores-{size[0]}.png")
    finally:
        browser.quit()
