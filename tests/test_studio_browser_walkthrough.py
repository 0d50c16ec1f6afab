"""The studio's Walkthrough view in headless Chromium: one position's path through the model, each step's numbers
equal to the study API's (the trace's stages at the position, the next-token answer at the same position).

Every wait is on the page's own progress (``data-ready``), never a sleep.
"""

import json
import threading

import pytest
from helpers import make_tiny_run

from numforge.checkpoint import load_model
from numforge.study.studio import Studio, StudioServer

pytest.importorskip("selenium", reason='the browser tests need selenium: pip install -e ".[test]"')

from browser import CHROMIUM, DRIVER, MISSING, WIDE, open_view, ready, start_browser  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

if CHROMIUM is None or DRIVER is None:
    pytest.skip(MISSING, allow_module_level=True)


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


def steps(browser) -> list[dict]:
    return browser.execute_script(
        "return Array.from(document.querySelectorAll('#walk-steps > li')).map(function (li) { return {"
        "  name: li.querySelector('h3').textContent, norm: li.getAttribute('data-norm'),"
        "  first: li.getAttribute('data-first'), text: li.textContent }; })"
    )


def test_each_step_shows_the_study_apis_numbers_at_the_followed_position(browser, server):
    open_view(browser, server, "walkthrough")
    sampled(browser, 0)
    text = browser.find_element(By.ID, "prompt").get_attribute("value")
    for position in (None, 2):
        if position is not None:  # another position, followed by the keyboard
            marker = int(browser.find_element(By.ID, "walk-sample").get_attribute("data-ready"))
            browser.find_element(By.CSS_SELECTOR, f'#walk-tokens .tok[data-position="{position}"]').send_keys(
                Keys.ENTER
            )
            sampled(browser, marker)
        body = {"text": text} if position is None else {"text": text, "position": position}
        trace = server.studio.trace(body)
        shown = steps(browser)
        assert [s["name"].split("  (")[0] for s in shown] == [s["name"] for s in trace["forward"]]
        names = " ".join(s["name"] for s in shown)
        for part in (
            "token embedding",
            "layer 0 q",
            "layer 0 k",
            "layer 0 v",
            "heads merged",
            "residual",
            "MLP",
            "final LayerNorm output",
        ):
            assert part in names
        for got, stage in zip(shown, trace["forward"]):
            assert float(got["norm"]) == stage["at"][0] and json.loads(got["first"]) == stage["at"][1:]
            assert f"({', '.join(map(str, stage['shape']))})" in got["name"]
        answer = server.studio.next_token({**body, "temperature": 1.0, "greedy": True, "seed": 0})
        chosen = browser.find_element(By.CSS_SELECTOR, "#walk-sample [data-chosen]")
        assert int(chosen.get_attribute("data-chosen")) == answer["chosen"]["id"]
        assert (
            f"{answer['kept_count']} of {answer['vocab_size']} tokens kept"
            in browser.find_element(By.ID, "walk-sample").text
        )
    assert ready(browser, "walkthrough") > 0
