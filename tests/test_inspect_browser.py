"""The page ``numforge inspect`` writes, opened from disk in headless Chromium: WCAG 2.1 AA by axe-core (from the
``axe_core_python`` test package, injected into the page; nothing of it is copied here) at a wide screen and a
phone, with no sideways scroll, and no control that looks as if it did something it cannot do without a server.

Every wait is on the page's own progress (``data-ready``), never a sleep.
"""

import pytest
from helpers import make_tiny_run

from numforge.checkpoint import load_model
from numforge.study.page import render_page
from numforge.study.report import inspect_data

pytest.importorskip("selenium", reason='the browser tests need selenium: pip install -e ".[test]"')
pytest.importorskip("axe_core_python.selenium", reason='pip install -e ".[test]" (axe-core-python)')

from browser import CHROMIUM, DRIVER, MISSING, PHONE, WIDE, axe_violations, page_fits, ready, start_browser, wait_for  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

if CHROMIUM is None or DRIVER is None:
    pytest.skip(MISSING, allow_module_level=True)

VIEWS = ["tokenizer", "next", "attention", "trace"]  # the inspector page's views (no walkthrough, no training)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    root = tmp_path_factory.mktemp("inspect")
    model, tokenizer = load_model(make_tiny_run(root, seq_len=64, words=3000))
    path = root / "report.html"
    path.write_text(render_page(inspect_data(model, tokenizer, "the cat sat on a mat")), encoding="utf-8")
    return path


def show(browser, view: str) -> None:
    before = ready(browser, view)
    browser.find_element(By.CSS_SELECTOR, f'#tabs [data-view="{view}"]').click()
    wait_for(browser, view, before)


def opened(browser, page) -> None:
    browser.get(page.as_uri())
    WebDriverWait(browser, 60).until(lambda d: ready(d, "trace") > 0)


@pytest.mark.parametrize("size", [WIDE, PHONE], ids=["1280px", "390px"])
def test_every_view_of_the_inspector_page_has_no_wcag_aa_violation_and_no_sideways_scroll(page, size):
    browser = start_browser(size)
    try:
        opened(browser, page)
        found = {}
        for view in VIEWS:
            show(browser, view)
            found[view] = axe_violations(browser)
            assert page_fits(browser), view
        assert found == {view: [] for view in VIEWS}
    finally:
        browser.quit()


def test_the_next_token_chips_do_not_look_clickable_and_the_page_says_why(page):
    browser = start_browser(WIDE)
    try:
        opened(browser, page)
        show(browser, "next")
        chips = browser.find_elements(By.CSS_SELECTOR, "#next-tokens .tok")
        assert len(chips) > 3
        for chip in chips:
            assert chip.get_attribute("role") == "listitem" and "click" not in chip.get_attribute("class")
            assert chip.value_of_css_property("cursor") == "default"
        last = str(len(chips) - 1)
        before = chips[1].value_of_css_property("background-color")
        chips[1].click()  # nothing follows it: the page holds the last position only
        assert chips[1].value_of_css_property("background-color") == before
        assert browser.find_element(By.CSS_SELECTOR, "#next-tokens .tok.on").get_attribute("data-position") == last
        note = browser.find_element(By.ID, "next-note").text
        assert "Click" not in note and f"at the last position, {last}, at temperature 1, greedy" in note
        show(browser, "trace")  # where the page holds every position, a chip follows one
        trace = browser.find_elements(By.CSS_SELECTOR, "#trace-tokens .tok")
        assert all(
            c.get_attribute("role") == "button" and c.value_of_css_property("cursor") == "pointer" for c in trace
        )
    finally:
        browser.quit()
