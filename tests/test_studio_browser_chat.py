"""The studio's Chat view in headless Chromium: each reply streamed piece by piece is the reply ``ChatSession`` gives
for the same messages and settings, the notices are shown, New conversation starts again, Stop ends a reply mid-way
(the server keeps what was sampled), refusals are said by the field at fault, a model without a chat template says
so, and axe-core finds no WCAG 2.1 AA violation at 1280 and 390 px. On the random Llama beside SmolLM2's tokenizer
and template (``chat_templates.py``). Every wait is on the page's own progress (the view's ``data-ready`` counter and
``data-state``), never a sleep; the gate (``helpers.gated``) holds a reply after its third piece."""

import threading
from pathlib import Path

import pytest
from chat_templates import chat_model_directory
from helpers import chat_reference, gated

from numforge.checkpoint import load_model
from numforge.commands.studio import NO_TEMPLATE, chat_of
from numforge.study.studio import CHAT_STOPS, MAX_CHAT_TOKENS, Studio, StudioServer

pytest.importorskip("jinja2")
pytest.importorskip("selenium", reason='the browser tests need selenium: pip install -e ".[test]"')
pytest.importorskip("axe_core_python.selenium", reason='pip install -e ".[test]" (axe-core-python)')

from browser import (  # noqa: E402
    CHROMIUM,
    DRIVER,
    MISSING,
    PHONE,
    WIDE,
    axe_violations,
    console_errors,
    open_view,
    page_fits,
    start_browser,
)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

if CHROMIUM is None or DRIVER is None:
    pytest.skip(MISSING, allow_module_level=True)

SHOTS = Path("/work/shots")  # where the screenshots go when that folder exists (a look at the page, not a check)
GATE = threading.Event()  # open: replies run through; cleared by a test, a reply waits after its third piece


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    directory = chat_model_directory(tmp_path_factory.mktemp("chat") / "model")
    model, tokenizer = load_model(directory)
    new_chat, why = chat_of(directory)
    assert why is None
    return model, tokenizer, new_chat


def serve(studio):
    server = StudioServer(studio, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def server(loaded):
    model, tokenizer, new_chat = loaded
    GATE.set()
    server = serve(Studio(model, tokenizer, "a random chat model", new_chat=gated(new_chat, GATE)))
    yield server
    GATE.set()
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    driver = start_browser(WIDE)
    yield driver
    driver.quit()


def view(browser, name: str) -> str:
    return browser.find_element(By.ID, "view-chat").get_attribute(name) or ""


def drawn(browser) -> int:
    return int(view(browser, "data-ready") or 0)


def settle(browser, after: int, timeout: float = 60) -> None:
    """Until the view has drawn something newer than ``after`` and is idle."""
    WebDriverWait(browser, timeout).until(lambda d: drawn(d) > after and view(d, "data-state") == "")


def fill(browser, element_id: str, value) -> None:
    browser.execute_script("arguments[0].value = arguments[1]", browser.find_element(By.ID, element_id), str(value))


def send(browser, text: str, temperature, max_tokens) -> None:
    """Type the message and press Enter, with these settings."""
    fill(browser, "chat-temperature", temperature)
    fill(browser, "chat-max-tokens", max_tokens)
    fill(browser, "chat-message", "")
    box = browser.find_element(By.ID, "chat-message")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def shown(browser) -> list[dict]:
    """The log's messages as the page shows them: role and text (textContent: every space as it is)."""
    return browser.execute_script(
        "return Array.from(document.querySelectorAll('#chat-messages .chat-msg')).map(function (m) {"
        "  return { role: m.classList[1], content: m.querySelector('.chat-text').textContent }; })"
    )


def texts(browser, selector: str) -> list[str]:
    return browser.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(function (n) { return n.textContent; })",
        selector,
    )


def shoot(browser, name: str) -> None:
    if SHOTS.is_dir():
        browser.save_screenshot(str(SHOTS / f"chat-{name}.png"))


def reset(browser, system: str = "") -> None:
    fill(browser, "chat-system", system)
    before = drawn(browser)
    browser.find_element(By.ID, "chat-reset").click()
    settle(browser, before)


TURNS = [("Hi there", 0, 30), ("What is a list?", 0.8, 40), ("Go on", 0, 40), ("Once more", 0, 40)]


def test_each_streamed_reply_is_the_chat_sessions_reply_and_the_notices_are_shown(browser, server, loaded):
    open_view(browser, server, "chat")
    reset(browser, "Be brief.")
    assert shown(browser) == [{"role": "system", "content": "Be brief."}]
    session, notices = chat_reference(loaded, system="Be brief.")
    for text, temperature, max_tokens in TURNS:
        before, said = drawn(browser), len(notices)
        send(browser, text, temperature, max_tokens)
        settle(browser, before)
        session.temperature, session.max_new_tokens = temperature, max_tokens
        pieces = list(session.send(text))
        assert int(view(browser, "data-pieces")) == len(pieces)  # one piece drawn for each line streamed
        assert shown(browser) == session.messages and shown(browser)[-1]["content"] == "".join(pieces)
        assert texts(browser, "#chat-notices li") == notices[said:]
        assert f"holds {len(session.ids)} of its 128 positions" in browser.find_element(By.ID, "chat-info").text
        assert browser.find_element(By.ID, "chat-message").get_attribute("value") == ""
        said_aloud = browser.find_element(By.ID, "chat-said").get_attribute("textContent")
        assert said_aloud.startswith("The model replied: " + "".join(pieces))
        stopped = [] if session.stop_reason == "end" else [f"(stopped: {CHAT_STOPS[session.stop_reason]})"]
        assert texts(browser, ".chat-stopped") == stopped  # said under the last reply, unless it ended its turn
    assert notices and "dropped" in notices[-1]  # the history passed the context, and the page said so
    shoot(browser, "conversation")
    assert console_errors(browser) == []


def test_new_conversation_samples_from_the_seed_again(browser, server, loaded):
    open_view(browser, server, "chat")
    conversations = []
    for _ in range(2):
        reset(browser)
        assert shown(browser) == [] and texts(browser, ".chat-empty") == ["No message yet: type one below."]
        assert "holds 0 of its 128 positions" in browser.find_element(By.ID, "chat-info").text
        before = drawn(browser)
        send(browser, "Hi there", 0.8, 12)
        settle(browser, before)
        conversations.append(shown(browser))
    session, _ = chat_reference(loaded)
    session.temperature, session.max_new_tokens = 0.8, 12
    list(session.send("Hi there"))
    assert conversations == [session.messages, session.messages]


def test_stop_ends_the_reply_mid_way_and_the_conversation_keeps_what_was_sampled(browser, server, loaded):
    open_view(browser, server, "chat")
    reset(browser, "Be brief.")
    full, _ = chat_reference(loaded, system="Be brief.")
    full.temperature = 0
    pieces = list(full.send("Tell me a story"))
    assert len(pieces) > 10  # greedy on a random model: it runs to max tokens
    GATE.clear()
    before = drawn(browser)
    send(browser, "Tell me a story", 0, MAX_CHAT_TOKENS)
    WebDriverWait(browser, 60).until(lambda d: view(d, "data-pieces") == "3")  # the gate holds the fourth
    assert view(browser, "data-state") == "replying" and browser.find_element(By.ID, "chat-stop").is_enabled()
    assert not browser.find_element(By.ID, "chat-send").is_enabled()
    assert shown(browser)[-1] == {"role": "assistant", "content": "".join(pieces[:3])}  # streamed: 3 pieces so far
    shoot(browser, "replying")
    browser.find_element(By.ID, "chat-stop").click()
    WebDriverWait(browser, 30).until(lambda d: view(d, "data-state") == "stopping")
    GATE.set()
    settle(browser, before)
    kept = server.studio._chat.messages[-1]
    assert server.studio._chat.stop_reason is None  # neither an end of turn nor max tokens: the hang-up stopped it
    assert shown(browser)[-1] == kept and kept["role"] == "assistant"
    assert kept["content"].startswith("".join(pieces[:3])) and len(kept["content"]) < len("".join(pieces))
    assert texts(browser, ".chat-stopped")[-1] == "(stopped: by you; the conversation keeps the reply so far)"
    assert browser.switch_to.active_element.get_attribute("id") == "chat-message"


def error_shown(browser, slot: str) -> str:
    WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, slot).is_displayed())
    return browser.find_element(By.ID, slot).text


@pytest.mark.parametrize(
    ("message", "temperature", "max_tokens", "slot", "control", "words"),
    [
        ("", 0, 10, "chat-message-error", "chat-message", "the message is empty: type at least one character"),
        ("x" * 4001, 0, 10, "chat-message-error", "chat-message", "this one has 4,001: remove 1"),
        ("Hi", 150, 10, "chat-temperature-error", "chat-temperature", "from 0 (greedy) to 100, got 150"),
        ("Hi", "", 10, "chat-temperature-error", "chat-temperature", "Type a temperature"),
        ("Hi", 0, 2.5, "chat-max-tokens-error", "chat-max-tokens", "a whole number from 1 to 200, got 2.5"),
        ("Hi", 0, "", "chat-max-tokens-error", "chat-max-tokens", "Type the most tokens a reply may take"),
    ],
)
def test_a_refusal_is_said_by_the_field_at_fault(
    browser, server, message, temperature, max_tokens, slot, control, words
):
    open_view(browser, server, "chat")
    kept = shown(browser)
    fill(browser, "chat-temperature", temperature)
    fill(browser, "chat-max-tokens", max_tokens)
    fill(browser, "chat-message", message)
    browser.find_element(By.ID, "chat-send").click()
    assert words in error_shown(browser, slot)
    assert browser.find_element(By.ID, control).get_attribute("aria-invalid") == "true"
    assert shown(browser) == kept and view(browser, "data-state") == ""
    fill(browser, "chat-temperature", 0)
    fill(browser, "chat-max-tokens", 3)
    before = drawn(browser)
    send(browser, "Hi", 0, 3)
    settle(browser, before)
    assert not browser.find_element(By.ID, slot).is_displayed()  # said until the next try
    assert browser.find_element(By.ID, control).get_attribute("aria-invalid") is None


def test_a_bad_system_message_is_said_by_its_box(browser, server):
    open_view(browser, server, "chat")
    fill(browser, "chat-system", "s" * 4001)
    browser.find_element(By.ID, "chat-reset").click()
    assert "this one has 4,001: remove 1" in error_shown(browser, "chat-system-error")
    assert browser.find_element(By.ID, "chat-system").get_attribute("aria-invalid") == "true"


@pytest.mark.parametrize("size", [WIDE, PHONE], ids=["1280px", "390px"])
def test_the_chat_view_has_no_wcag_aa_violation_and_no_sideways_scroll(server, size):
    browser = start_browser(size)
    try:
        open_view(browser, server, "chat")
        reset(browser, "Be brief.")
        for text in ("Hi there", "What is a list?", "Go on"):  # the last one's history is trimmed: a notice
            before = drawn(browser)
            send(browser, text, 0, 40)
            settle(browser, before)
        fill(browser, "chat-temperature", 150)
        fill(browser, "chat-message", "Hi")
        browser.find_element(By.ID, "chat-send").click()
        error_shown(browser, "chat-temperature-error")
        assert texts(browser, "#chat-notices li")  # every part of the view on screen: notices, an error
        assert axe_violations(browser) == []
        assert page_fits(browser)
        shoot(browser, f"{size[0]}px")
    finally:
        browser.quit()


def test_a_model_without_a_chat_template_says_so_and_how_to_get_one(browser, loaded):
    model, tokenizer, _ = loaded
    server = serve(Studio(model, tokenizer, "a model without a template", new_chat=None, no_chat=NO_TEMPLATE))
    try:
        browser.get("about:blank")
        open_view(browser, server, "chat")
        assert browser.find_element(By.ID, "chat-why").text == f"No chat with this model: {NO_TEMPLATE}."
        assert "numforge studio --checkpoint DIR" in browser.find_element(By.ID, "chat-none").text
        assert not browser.find_element(By.ID, "chat-on").is_displayed()
        assert not browser.find_element(By.ID, "prompt").is_displayed()  # the prompt box is the other views'
        assert axe_violations(browser) == []
        shoot(browser, "none")
    finally:
        server.shutdown()
        server.server_close()
