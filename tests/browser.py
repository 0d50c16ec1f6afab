"""Drive the studio's page in headless Chromium (selenium): the browser tests and docs/studio/screenshots.py share it.

Every wait is on the page's own progress (a view's ``data-ready`` counter, ``data-busy`` back to 0), never a sleep.
"""

import shutil

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
DRIVER = shutil.which("chromedriver")
MISSING = "no headless Chromium and chromedriver here (Debian: apt-get install chromium chromium-driver)"
WIDE, PHONE = (1280, 900), (390, 844)
WCAG_AA = {"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}}


def start_browser(size=WIDE):
    """A headless Chromium window of ``size`` (CSS pixels) that keeps the page's console log."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars"):
        options.add_argument(flag)
    options.add_argument(f"--window-size={size[0]},{size[1]}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=webdriver.ChromeService(DRIVER), options=options)
    driver.set_window_size(*size)
    return driver


def console_errors(browser) -> list:
    return [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]


def ready(browser, view: str) -> int:
    return int(browser.find_element(By.ID, f"view-{view}").get_attribute("data-ready") or 0)


def wait_for(browser, view: str, after: int, timeout: float = 60) -> None:
    """Until the view has drawn an answer newer than ``after`` and no request is in flight."""

    def done(driver):
        return (
            ready(driver, view) > after and driver.find_element(By.TAG_NAME, "body").get_attribute("data-busy") == "0"
        )

    WebDriverWait(browser, timeout).until(done)


def open_view(browser, server, view: str, timeout: float = 60) -> None:
    if not browser.current_url.startswith(server.url.split("#")[0]):
        browser.get(server.url)
        WebDriverWait(browser, 60).until(
            lambda d: d.execute_script("return !!document.querySelector('.view:not([hidden])')")
        )
    before = ready(browser, view)
    browser.find_element(By.CSS_SELECTOR, f'#tabs [data-view="{view}"]').click()
    wait_for(browser, view, before, timeout)


def type_prompt(browser, text: str, view: str) -> None:
    before = ready(browser, view)
    box = browser.find_element(By.ID, "prompt")
    browser.execute_script("arguments[0].value = ''", box)  # send_keys cannot type every character (emoji)
    box.send_keys("x")
    browser.execute_script(
        "arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('input'))", box, text
    )
    wait_for(browser, view, before)


def chips(browser, container: str) -> list[tuple[str, int]]:
    """``(shown text, id)`` of each token chip in ``container``."""
    found = browser.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0] + ' .tok')).map(function (c) {"
        "  return [c.firstChild.textContent, Number(c.querySelector('small').textContent)]; })",
        f"#{container}",
    )
    return [(text, i) for text, i in found]


def page_fits(browser) -> bool:
    return browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1")


def axe_violations(driver) -> list[str]:
    """axe-core's WCAG 2.1 A and AA violations on the page as it is: ``rule: element`` for each element at fault.
    (The tests that call it skip first where axe-core-python is missing.)"""
    from axe_core_python.selenium import Axe

    found = Axe().run(driver, options=WCAG_AA)["violations"]
    return [f"{v['id']}: {node['target']}" for v in found for node in v["nodes"]]
