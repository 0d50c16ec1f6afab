"""The studio's Walkthrough view in headless Chromium: one position's path through the model, every step's
numbers those of an independent float64 NumPy forward (``tests/numpy_forward.py``) of the model served, and
those the study API sends; attention shown as its own steps (q, k, v of the head followed, its scores against
every key, the mask, the softmax, the weighted sum, the output projection, the residual).

Every wait is on the page's own progress (``data-ready``), never a sleep.
"""

import json
import threading

import numpy as np
import pytest
from helpers import make_tiny_run
from numpy_forward import reference

from numforge.checkpoint import load_model
from numforge.study.studio import Studio, StudioServer

pytest.importorskip("selenium", reason='the browser tests need selenium: pip install -e ".[test]"')
axe_selenium = pytest.importorskip("axe_core_python.selenium", reason='pip install -e ".[test]" (axe-core-python)')

from browser import CHROMIUM, DRIVER, MISSING, PHONE, WIDE, open_view, page_fits, start_browser  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

if CHROMIUM is None or DRIVER is None:
    pytest.skip(MISSING, allow_module_level=True)

ATTENTION = ["q", "k", "v", "scores", "mask", "softmax", "weighted sum", "heads merged (out_proj input)"]
ATTENTION += ["attention branch output", "residual after attention"]
WCAG_AA = {"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    run = make_tiny_run(tmp_path_factory.mktemp("walk"), seq_len=64, words=3000)
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


def sampled(browser, after: int) -> None:
    """Until the sampling steps are drawn for a question newer than ``after``."""
    WebDriverWait(browser, 60).until(
        lambda d: int(d.find_element(By.ID, "walk-sample").get_attribute("data-ready") or 0) > after
    )


def marker(browser) -> int:
    return int(browser.find_element(By.ID, "walk-sample").get_attribute("data-ready") or 0)


def steps(browser) -> list[dict]:
    return browser.execute_script(
        "return Array.from(document.querySelectorAll('#walk-steps li.walk-step')).map(function (li) { return {"
        "  name: li.querySelector('h4').textContent, kind: li.getAttribute('data-kind'),"
        "  layer: li.getAttribute('data-layer'), values: JSON.parse(li.getAttribute('data-values')),"
        "  norm: li.getAttribute('data-norm'), text: li.textContent, rows: li.querySelectorAll('tr').length }; })"
    )


def expected(ours, kind, t, head):
    """The independent forward's numbers for a step of ``kind`` at position ``t``, query head ``head`` (a model
    whose heads each have their own keys and values)."""
    if kind in ("scores", "mask", "softmax"):
        return ours[head, t]
    return ours[head, t] if ours.ndim == 3 else ours[t]


def check_against_numpy(browser, server, text, position, head):
    model = server.studio.model
    ids = server.studio.tokenizer.encode_prompt(text)
    ours, shown = reference(model, ids), steps(browser)
    t = len(ids) - 1 if position is None else position
    assert len(shown) == len(ours) and len(ids) > 5
    for s in shown:
        layer = None if s["layer"] == "" else int(s["layer"])
        want = expected(ours[(layer, s["kind"])], s["kind"], t, head)[: len(s["values"])]
        got = np.array([-np.inf if v is None else v for v in s["values"]])
        scale = np.abs(want[np.isfinite(want)]).max()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale, err_msg=s["name"])  # float32 model
        assert s["kind"] not in ("scores", "mask", "softmax") or s["rows"] == 1 + t + 1  # header, keys 0..t
    kinds = [s["kind"] for s in shown if s["layer"] == "0"]
    assert [k for k in kinds if k in ATTENTION] == ATTENTION
    softmax = next(s for s in shown if s["kind"] == "softmax")
    assert sum(softmax["values"][: t + 1]) == pytest.approx(1, abs=1e-5) and not any(softmax["values"][t + 1 :])


def test_each_step_is_an_independent_numpy_forwards_numbers_with_a_sentence(browser, server):
    open_view(browser, server, "walkthrough")
    sampled(browser, 0)
    text = browser.find_element(By.ID, "prompt").get_attribute("value")
    for position, head in ((None, 0), (2, 0), (2, 1)):
        before = marker(browser)
        if head == 1:  # another head, chosen in its list
            Select(browser.find_element(By.ID, "walk-head")).select_by_visible_text("1")
        elif position is not None:  # another position, followed by the keyboard
            browser.find_element(By.CSS_SELECTOR, f'#walk-tokens .tok[data-position="{position}"]').send_keys(
                Keys.ENTER
            )
        if position is not None:
            sampled(browser, before)
        check_against_numpy(browser, server, text, position, head)
        body = {"text": text, "head": head} | ({} if position is None else {"position": position})
        answer = server.studio.walkthrough(body)
        for got, step in zip(steps(browser), answer["steps"]):
            assert got["name"] == step["name"] and got["values"] == step["values"] and step["says"] in got["text"]
            assert step["says"] and (step["equation"] or "") in got["text"]
            assert f"({', '.join(map(str, step['shape']))})" in got["text"]
        assert f"Query head {head} reads key/value head {head}" in browser.find_element(By.ID, "walk-head-info").text
        settings = {"temperature": 1.0, "greedy": True, "seed": 0}
        nxt = server.studio.next_token({"text": text, "position": answer["position"], **settings})
        chosen = browser.find_element(By.CSS_SELECTOR, "#walk-sample [data-chosen]")
        assert int(chosen.get_attribute("data-chosen")) == nxt["chosen"]["id"]
        sample = browser.find_element(By.ID, "walk-sample").text
        assert f"{nxt['kept_count']} of {nxt['vocab_size']} tokens kept" in sample


def test_the_key_tables_name_each_key_and_the_hidden_ones(browser, server):
    open_view(browser, server, "walkthrough")
    before = marker(browser)
    browser.find_element(By.CSS_SELECTOR, '#walk-tokens .tok[data-position="1"]').send_keys(Keys.ENTER)
    sampled(browser, before)
    mask = browser.find_element(By.CSS_SELECTOR, '#walk-steps li[data-kind="mask"]')
    T = len(json.loads(mask.get_attribute("data-values")))
    assert f"Keys 2\u2026{T - 1} ({T - 2}) come later" in mask.text and f"{T - 2} of {T} keys hidden" in mask.text
    k = browser.find_element(By.CSS_SELECTOR, '#walk-steps li[data-kind="k"]')
    assert len(k.find_elements(By.CSS_SELECTOR, "tr")) == 1 + 2  # the header, keys 0 and 1


@pytest.mark.parametrize("size", [WIDE, PHONE], ids=["1280px", "390px"])
def test_a_position_inside_the_prompt_has_no_wcag_aa_violation_and_no_sideways_scroll(server, size):
    """Another head, a position with later keys: every key table drawn, each a region the keyboard scrolls."""
    browser = start_browser(size)
    try:
        open_view(browser, server, "walkthrough")
        Select(browser.find_element(By.ID, "walk-head")).select_by_visible_text("1")
        before = marker(browser)
        browser.find_element(By.CSS_SELECTOR, '#walk-tokens .tok[data-position="3"]').send_keys(Keys.ENTER)
        sampled(browser, before)
        boxes = browser.find_elements(By.CSS_SELECTOR, "#walk-steps .walk-keys")
        assert len(boxes) == 5 and all(b.get_attribute("tabindex") == "0" for b in boxes)  # k, v, S, S', P
        found = axe_selenium.Axe().run(browser, options=WCAG_AA)["violations"]
        assert [f"{v['id']}: {node['target']}" for v in found for node in v["nodes"]] == []
        assert page_fits(browser)
    finally:
        browser.quit()
