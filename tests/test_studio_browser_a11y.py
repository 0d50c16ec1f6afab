"""WCAG 2.1 AA on every view of the studio, at a wide screen and a phone: axe-core in headless Chromium.

axe-core comes from the ``axe_core_python`` test package (its ``axe.min.js``, injected into the page); nothing
of it is copied here. Every wait is on the page's own progress (``data-ready``), never a sleep.
"""

import threading

import pytest
from helpers import make_tiny_run

from numforge.checkpoint import load_model
from numforge.study.studio import Studio, StudioServer

pytest.importorskip("selenium", reason='the browser tests need selenium: pip install -e ".[test]"')
pytest.importorskip("axe_core_python.selenium", reason='pip install -e ".[test]" (axe-core-python)')

from browser import (  # noqa: E402
    CHROMIUM,
    DRIVER,
    MISSING,
    PHONE,
    WIDE,
    axe_violations,
    open_view,
    page_fits,
    ready,
    start_browser,
    wait_for,
)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

if CHROMIUM is None or DRIVER is None:
    pytest.skip(MISSING, allow_module_level=True)

VIEWS = ["tokenizer", "next", "walkthrough", "attention", "trace", "routing", "training", "chat"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    run = make_tiny_run(tmp_path_factory.mktemp("a11y"), seq_len=64, words=3000)
    model, tokenizer = load_model(run)
    server = StudioServer(Studio(model, tokenizer, "a tiny run of 4 steps", run_dir=run), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("size", [WIDE, PHONE], ids=["1280px", "390px"])
def test_every_view_has_no_wcag_aa_violation_and_no_sideways_scroll(server, size):
    browser = start_browser(size)
    try:
        found = {}
        for view in VIEWS:
            open_view(browser, server, view)
            found[view] = axe_violations(browser)
            assert page_fits(browser), view
        assert found == {view: [] for view in VIEWS}
    finally:
        browser.quit()


@pytest.fixture(scope="module")
def browser():
    driver = start_browser(WIDE)
    yield driver
    driver.quit()


def focused(browser):
    return browser.switch_to.active_element


def test_the_tabs_follow_the_aria_tabs_pattern(browser, server):
    open_view(browser, server, "next")
    tabs = browser.find_elements(By.CSS_SELECTOR, '#tabs [role="tab"]')
    assert [t.get_attribute("tabindex") for t in tabs] == ["0" if t.text == "Next token" else "-1" for t in tabs]
    for tab in tabs:  # each tab names the panel it shows, and the panel is named by its tab
        panel = browser.find_element(By.ID, tab.get_attribute("aria-controls"))
        assert panel.get_attribute("role") == "tabpanel"
        assert panel.get_attribute("aria-labelledby") == tab.get_attribute("id")
    tabs[1].send_keys(Keys.ARROW_RIGHT)
    assert focused(browser).get_attribute("data-view") == "walkthrough"
    assert tabs[2].get_attribute("aria-selected") == "true" and tabs[1].get_attribute("aria-selected") == "false"
    assert browser.find_element(By.ID, "view-walkthrough").is_displayed()
    focused(browser).send_keys(Keys.END)
    assert focused(browser).get_attribute("data-view") == "chat"
    focused(browser).send_keys(Keys.ARROW_RIGHT)  # wraps round to the first
    assert focused(browser).get_attribute("data-view") == "tokenizer"
    focused(browser).send_keys(Keys.ARROW_LEFT)
    assert focused(browser).get_attribute("data-view") == "chat"
    focused(browser).send_keys(Keys.HOME)
    assert focused(browser).get_attribute("data-view") == "tokenizer"
    assert browser.find_element(By.ID, "view-tokenizer").is_displayed()


def test_token_chips_take_the_focus_and_enter_follows_a_position(browser, server):
    open_view(browser, server, "trace")
    chips = browser.find_elements(By.CSS_SELECTOR, "#trace-tokens .tok")
    assert len(chips) > 3 and all(c.get_attribute("tabindex") == "0" for c in chips)
    assert chips[1].accessible_name.startswith("position 1, id ")
    before = ready(browser, "trace")
    chips[1].send_keys(Keys.ENTER)
    wait_for(browser, "trace", before)
    assert (
        browser.find_element(By.CSS_SELECTOR, '#trace-tokens .tok[data-position="1"]').get_attribute("aria-pressed")
        == "true"
    )
    open_view(browser, server, "next")
    assert browser.find_element(By.ID, "next-seed").accessible_name == "seed"


def hidden_table(browser, node_id) -> list[list[str]]:
    return browser.execute_script(
        "return Array.from(document.querySelectorAll('#' + arguments[0] + '-text tr')).map(function (r) {"
        "  return Array.from(r.cells).map(function (c) { return c.textContent; }); })",
        node_id,
    )


def test_every_canvas_has_a_text_alternative(browser, server):
    for view in VIEWS:
        open_view(browser, server, view)
        unnamed = browser.execute_script(
            "return Array.from(document.querySelectorAll('#view-' + arguments[0] + ' canvas')).filter(function (c) {"
            "  return !c.closest('[aria-label], [aria-hidden=\"true\"]'); }).length",
            view,
        )
        assert unnamed == 0, view
    open_view(browser, server, "trace")
    lens = server.studio.lens({"text": browser.find_element(By.ID, "prompt").get_attribute("value")})
    table = hidden_table(browser, "trace-lens")
    assert len(table) == 1 + len(lens["streams"])
    for row, stream, top in zip(table[1:], lens["streams"], lens["top"]):
        assert row[0] == stream["name"]
        assert [cell.rsplit(" ", 1)[0] for cell in row[1:]] == [lens["labels"][str(t[0][0])] for t in top]


def test_the_heatmap_and_the_head_thumbnails_answer_the_keyboard(browser, server):
    open_view(browser, server, "attention")
    box = browser.find_element(By.ID, "att-main")
    assert box.get_attribute("tabindex") == "0" and "attention weights" in box.get_attribute("aria-label")
    box.send_keys(Keys.ARROW_DOWN, Keys.ARROW_DOWN, Keys.ARROW_RIGHT)
    assert box.get_attribute("data-hover").startswith("2,1,")
    assert browser.find_element(By.ID, "att-focus").text.startswith("query 2 ")
    assert browser.find_element(By.ID, "said").get_attribute("textContent").startswith("layer 0, head 0; query 2")
    strongest = hidden_table(browser, "att-main")[3]  # the header, then queries 0, 1, 2
    assert strongest[0].startswith("2 ")
    thumbs = browser.find_elements(By.CSS_SELECTOR, "#att-thumbs figure")
    thumbs[1].send_keys(Keys.ENTER)
    assert browser.find_element(By.ID, "att-head").get_attribute("value") == "1"
    pressed = browser.find_elements(By.CSS_SELECTOR, '#att-thumbs figure[aria-pressed="true"]')
    assert [f.get_attribute("aria-label") for f in pressed] == ["show head 1"]
