"""The Experts view in headless Chromium: each token's experts and gates as the server sent them, no WCAG 2.1 AA
violation (axe-core) and no sideways scroll at 1280 and 390 px, for a model with experts and a dense one."""

import threading

import pytest
from helpers import STUDY_TEXT, tiny_model
from test_studio_routing import MOE
from test_studio_server import call

from numforge.study.studio import Studio, StudioServer
from numforge.tokenizer import BPETokenizer

pytest.importorskip("selenium", reason='the browser tests need selenium: pip install -e ".[test]"')
pytest.importorskip("axe_core_python.selenium", reason='pip install -e ".[test]" (axe-core-python)')

from browser import CHROMIUM, DRIVER, MISSING, PHONE, WIDE, axe_violations, open_view, page_fits, start_browser  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

if CHROMIUM is None or DRIVER is None:
    pytest.skip(MISSING, allow_module_level=True)

PROMPT = "The cat sat on the mat."  # the page's own default prompt


@pytest.fixture(scope="module", params=["experts", "dense"])
def server(request):
    tokenizer = BPETokenizer.train(STUDY_TEXT, 256 + 12)
    model = tiny_model(tokenizer, max_seq_len=32, **(MOE if request.param == "experts" else {}))
    server = StudioServer(Studio(model, tokenizer, f"a tiny untrained model ({request.param})"), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("size", [WIDE, PHONE], ids=["1280px", "390px"])
def test_the_view_shows_the_servers_routes_and_has_no_violation(server, size):
    _, answer, _ = call(server, "POST", "/api/routing", {"text": PROMPT})
    browser = start_browser(size)
    try:
        open_view(browser, server, "routing")
        assert axe_violations(browser) == []
        assert page_fits(browser)
        note = browser.find_element(By.ID, "route-note").text
        details = browser.find_element(By.ID, "route-details")
        if not answer["experts"]:
            assert note.startswith("This model has no experts") and not details.is_displayed()
            return
        assert note.startswith("Each token goes to 2 of 6 experts at every layer") and details.is_displayed()
        rows = browser.find_elements(By.CSS_SELECTOR, "#route-table tr")
        assert len(rows) == 1 + len(answer["tokens"]) + 1  # the header, a row per token, the loads
        for i, tr in enumerate(rows[1:-1]):
            cells = tr.find_elements(By.TAG_NAME, "td")
            for layer, td in zip(answer["layers"], cells[2:]):
                chips = [c.text.split() for c in td.find_elements(By.CLASS_NAME, "route")]
                assert [int(c[1]) for c in chips] == layer["chosen"][i]
                assert [float(c[2]) for c in chips] == pytest.approx(layer["gates"][i], rel=2e-3)
        marked = browser.find_elements(By.CSS_SELECTOR, "#route-probs td.chosen")
        assert len(marked) == 2 * len(answer["tokens"])  # layer 0's chosen experts, marked in its probabilities
    finally:
        browser.quit()
