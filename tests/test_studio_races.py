"""numforge studio in Chromium on a model made slow on purpose: superseded requests are aborted, the page is busy
at once, only the last question's answer is drawn, generation never overwrites what was typed, errors sit by the
control at fault, and a stopped server is said plainly.

The slow model is a gate on the model's ``forward`` and ``logits``: each call waits until the test opens it
(``threading.Event``), so every step waits on an event or on the page's own counters, never on a sleep.
"""

import threading

import pytest
from helpers import STUDY_TEXT, make_tiny_run, tiny_model

from numforge.checkpoint import checkpoint_step, latest_checkpoint_dir, load_model
from numforge.study.prompt import shown_token
from numforge.study.studio import Studio, StudioServer
from numforge.tokenizer import BPETokenizer

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
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

if CHROMIUM is None or DRIVER is None:
    pytest.skip(MISSING, allow_module_level=True)

PROMPT = "the cat sat on"
LONG_SOURCE = (  # a cache folder's name: 64 hexadecimal digits, no place a line may break
    "checkpoint: /home/learner/.cache/numforge/models/" + "d6b93210ee330228" * 4 + "/run/checkpoint-000100"
)


class Gate:
    """The model's ``forward`` and ``logits`` held until ``release`` is set; ``calls`` counts the calls that ran,
    ``entered`` is set by the first call to arrive."""

    def __init__(self, model):
        self.calls, self.entered, self.release = 0, threading.Event(), threading.Event()
        self.release.set()
        for name in ("forward", "logits"):
            setattr(model, name, self.held(getattr(model, name)))

    def held(self, method):
        def call(*args, **kwargs):
            self.entered.set()
            assert self.release.wait(60), "the test never opened the gate"
            self.calls += 1
            return method(*args, **kwargs)

        return call

    def close(self):
        self.entered.clear()
        self.release.clear()


def serve(studio):
    server = StudioServer(studio, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def tokenizer():
    return BPETokenizer.train(STUDY_TEXT, 256 + 12)


@pytest.fixture(scope="module")
def server(tokenizer):
    model = tiny_model(tokenizer, max_seq_len=64, num_heads=4, num_kv_heads=2)
    server = serve(Studio(model, tokenizer, LONG_SOURCE))
    server.gate = Gate(model)
    yield server
    server.gate.release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    driver = start_browser(WIDE)
    yield driver
    driver.quit()


def expected_chips(tokenizer, text):
    return [(shown_token(tokenizer, i), i) for i in tokenizer.encode(text)]


def attribute(browser, element_id, name):
    """An attribute of the element ``element_id`` ("body": the page's body)."""
    found = (
        browser.find_element(By.TAG_NAME, "body") if element_id == "body" else browser.find_element(By.ID, element_id)
    )
    return found.get_attribute(name)


def test_rapid_typing_aborts_the_old_requests_and_draws_only_the_last(browser, server, tokenizer):
    open_view(browser, server, "next")
    type_prompt(browser, PROMPT, "next")
    gate, studio = server.gate, server.studio
    texts = [PROMPT + " the mat."[: k + 1] for k in range(8)]  # 8 keystrokes
    before_ready, calls, dropped = ready(browser, "next"), gate.calls, studio.dropped
    aborted = int(attribute(browser, "body", "data-aborted") or 0)
    gate.close()
    for k, text in enumerate(texts):
        asked = int(attribute(browser, "view-next", "data-asked"))
        busy_ms = browser.execute_script(  # the busy state, read in the same task as the keystroke
            "var box = document.getElementById('prompt'), t0 = performance.now();"
            "box.value = arguments[0]; box.dispatchEvent(new Event('input'));"
            "var view = document.getElementById('view-next');"
            "return view.classList.contains('stale') && view.getAttribute('aria-busy') === 'true' ?"
            "  performance.now() - t0 : null",
            text,
        )
        assert busy_ms is not None and busy_ms < 100, busy_ms
        WebDriverWait(browser, 30).until(lambda d, n=asked: int(attribute(d, "view-next", "data-asked")) > n)
        if k == 0:
            assert gate.entered.wait(30)  # the first question's forward is under way, held
    status = browser.find_element(By.ID, "status")
    assert status.get_attribute("class") == "busy" and status.text.startswith("Working")
    # questions 2-7 waited for the model and were hung up by the page: the server drops them unasked
    WebDriverWait(browser, 30).until(lambda _: studio.dropped == dropped + 6)
    assert ready(browser, "next") == before_ready  # nothing drawn while the answers are not the last question's
    gate.release.set()
    wait_for(browser, "next", before_ready)
    assert chips(browser, "next-tokens") == expected_chips(tokenizer, texts[-1])
    assert gate.calls == calls + 2  # the first (already running) and the last: 6 forwards never made
    assert int(attribute(browser, "body", "data-aborted")) == aborted + 7
    view = browser.find_element(By.ID, "view-next")
    assert "stale" not in view.get_attribute("class") and view.get_attribute("aria-busy") is None
    assert status.text == "" and console_errors(browser) == []


def test_generation_never_overwrites_what_was_typed_meanwhile(browser, server, tokenizer):
    open_view(browser, server, "next")
    type_prompt(browser, PROMPT, "next")
    gate = server.gate
    gate.close()
    browser.find_element(By.ID, "next-generate").click()
    assert gate.entered.wait(30)  # the generation is under way, held
    edited = "the dog sat"
    before, asked = ready(browser, "next"), int(attribute(browser, "view-next", "data-asked"))
    set_value(browser, "prompt", edited)  # aborts the generation at once, then asks for the text typed
    WebDriverWait(browser, 30).until(lambda d: int(attribute(d, "view-next", "data-asked")) > asked)
    gate.release.set()
    wait_for(browser, "next", before)
    assert attribute(browser, "prompt", "value") == edited
    assert chips(browser, "next-tokens") == expected_chips(tokenizer, edited)
    assert chips(browser, "next-generated") == []
    assert console_errors(browser) == []


def test_back_to_the_prompt_restores_its_exact_text_and_ids(browser, server, tokenizer):
    text = "the cat\n"
    open_view(browser, server, "next")
    type_prompt(browser, text, "next")
    for _ in range(2):
        before = ready(browser, "next")
        browser.find_element(By.ID, "next-step").click()
        wait_for(browser, "next", before)
    assert attribute(browser, "prompt", "value") == text  # the box is the learner's
    assert len(chips(browser, "next-generated")) == 2
    before = ready(browser, "next")
    browser.find_element(By.ID, "next-reset").click()
    wait_for(browser, "next", before)
    assert attribute(browser, "prompt", "value") == text
    assert chips(browser, "next-tokens") == expected_chips(tokenizer, text)
    assert chips(browser, "next-generated") == []


def shown_error(browser, slot):
    WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, slot).is_displayed())
    return browser.find_element(By.ID, slot).text


def set_value(browser, element_id, value):
    """Type ``value`` into the element at once. A short text goes as its UTF-16 code units, so that a lone
    surrogate (which WebDriver's JSON cannot carry) arrives as it is."""
    if len(value) > 1000:
        script, sent = "arguments[1]", value
    else:
        raw = value.encode("utf-16-le", "surrogatepass")
        script, sent = "String.fromCharCode.apply(null, arguments[1])", list(memoryview(raw).cast("H"))
    browser.execute_script(
        f"var box = document.getElementById(arguments[0]); box.value = {script}; box.dispatchEvent(new Event('input'))",
        element_id,
        sent,
    )


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "the prompt is empty: type at least one character"),
        ("the cat " * 40, "this model reads at most 64 (its context): shorten it by"),
        ("a\ud800b", "lone surrogate (U+D800, character 2)"),
        ("x " * 100_000, "the studio takes at most 98,304 bytes: the tokenizer view up to 20,000 characters"),
    ],
    ids=["empty", "past the context", "lone surrogate", "200 KB paste"],
)
def test_a_bad_prompt_greys_the_result_and_says_what_to_do_by_the_prompt(browser, server, text, words):
    open_view(browser, server, "next")
    type_prompt(browser, PROMPT, "next")
    set_value(browser, "prompt", text)
    assert words in shown_error(browser, "prompt-error")
    assert attribute(browser, "prompt", "aria-invalid") == "true"
    assert "stale" in attribute(browser, "view-next", "class")  # the old result greyed, not shown as this prompt's
    type_prompt(browser, PROMPT, "next")
    assert not browser.find_element(By.ID, "prompt-error").is_displayed()
    assert "stale" not in attribute(browser, "view-next", "class")
    assert attribute(browser, "prompt", "aria-invalid") is None


@pytest.mark.parametrize("top_p", ["0", "5"])
def test_a_bad_top_p_is_said_by_the_sampling_controls(browser, server, top_p):
    open_view(browser, server, "next")
    type_prompt(browser, PROMPT, "next")
    set_value(browser, "next-top-p", top_p)
    assert "top-p must be more than 0 and at most 1" in shown_error(browser, "next-sampling-error")
    assert attribute(browser, "next-top-p", "aria-invalid") == "true"
    assert "stale" in attribute(browser, "view-next", "class")
    before = ready(browser, "next")
    set_value(browser, "next-top-p", "")
    wait_for(browser, "next", before)
    assert not browser.find_element(By.ID, "next-sampling-error").is_displayed()


def test_the_model_line_and_attention_view_name_the_architecture_and_fit_a_phone(browser, server, tokenizer):
    open_view(browser, server, "attention")
    line = browser.find_element(By.ID, "model").text
    assert (
        "4 query heads of width 2 over 2 key/value heads" in line and "query heads 2-3 share key/value head 1" in line
    )
    assert "layernorm" in line and "learned positions" in line and "tied unembedding" in line
    note = browser.find_element(By.ID, "att-note").text
    assert "head 0 reads key/value head 0, with query heads 0, 1." in note
    captions = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "#att-thumbs figcaption")]
    assert captions == ["head 0 \u00b7 kv 0", "head 1 \u00b7 kv 0", "head 2 \u00b7 kv 1", "head 3 \u00b7 kv 1"]
    browser.set_window_size(*PHONE)
    try:
        for view in ("attention", "next", "tokenizer", "trace"):
            open_view(browser, server, view)
            assert page_fits(browser), view  # the long checkpoint path wraps
    finally:
        browser.set_window_size(*WIDE)


def test_the_tokenizer_takes_empty_text_and_text_past_the_context(browser, server, tokenizer):
    open_view(browser, server, "tokenizer")
    text = "the cat sat on the mat. " * 30  # more tokens than the context of 64
    type_prompt(browser, text, "tokenizer")
    assert chips(browser, "tok-tokens") == expected_chips(tokenizer, text)
    assert len(tokenizer.encode(text)) > 64
    type_prompt(browser, "", "tokenizer")
    assert chips(browser, "tok-tokens") == []
    assert browser.find_element(By.ID, "tok-summary").text.startswith("0 characters")


def test_a_stopped_server_is_said_plainly_and_the_page_stops_asking(browser, tokenizer):
    gone = serve(Studio(tiny_model(tokenizer), tokenizer, "a server about to stop"))
    open_view(browser, gone, "next")
    gone.shutdown()
    gone.server_close()
    set_value(browser, "prompt", "the dog")
    status = browser.find_element(By.ID, "status")
    WebDriverWait(browser, 30).until(lambda _: "server is not answering" in status.text)
    assert "it has stopped" in status.text and attribute(browser, "body", "data-server") == "gone"
    before = browser.execute_script("return performance.getEntriesByType('resource').length")
    browser.find_element(By.CSS_SELECTOR, '#tabs [data-view="training"]').click()  # polls while the server is up
    WebDriverWait(browser, 30).until(lambda _: attribute(browser, "body", "data-busy") == "0")
    assert "server is not answering" in status.text
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == before  # not asked


def test_the_training_view_wraps_a_long_model_path_on_a_phone(browser, tmp_path):
    run = make_tiny_run(tmp_path)
    model, tokenizer = load_model(run)
    watched = serve(Studio(model, tokenizer, LONG_SOURCE, run_dir=run))
    browser.set_window_size(*PHONE)
    try:
        open_view(browser, watched, "training")
        assert f"The other views show {LONG_SOURCE}" in browser.find_element(By.ID, "train-info").text
        assert page_fits(browser)
    finally:
        browser.set_window_size(*WIDE)
        watched.shutdown()
        watched.server_close()


def test_the_training_view_starts_stops_and_resumes_a_run_and_every_view_can_show_its_checkpoint(browser, tmp_path):
    run = make_tiny_run(tmp_path)
    model, tokenizer = load_model(run)
    trained = serve(Studio(model, tokenizer, "the model of step 4", run_dir=run))
    try:
        open_view(browser, trained, "training")
        assert attribute(browser, "train-state", "data-state") == "idle"
        for _ in range(2):  # started, then resumed
            rows = int(attribute(browser, "train-loss", "data-rows"))
            browser.find_element(By.ID, "train-start").click()
            WebDriverWait(browser, 60).until(
                lambda d, before=rows: int(attribute(d, "train-loss", "data-rows")) > before,
                message=lambda: browser.find_element(By.ID, "train-state").text,
            )
            assert attribute(browser, "train-state", "data-state") == "running"
            browser.find_element(By.ID, "train-stop").click()
            WebDriverWait(browser, 120).until(lambda d: attribute(d, "train-state", "data-state") == "stopped")
            assert "by Stop, after its checkpoint" in browser.find_element(By.ID, "train-state").text
        step = checkpoint_step(latest_checkpoint_dir(run))
        assert step > 4
        browser.find_element(By.ID, "train-use").click()
        line = browser.find_element(By.ID, "model")
        WebDriverWait(browser, 60).until(lambda _: f"checkpoint of step {step}" in line.text)
        assert (
            f"The other views show run run, checkpoint of step {step}" in browser.find_element(By.ID, "train-info").text
        )
        browser.find_element(By.CSS_SELECTOR, '#tabs [data-view="next"]').click()
        type_prompt(browser, "the cat", "next")  # the checkpoint's model answers (its context is 8 tokens)
        assert chips(browser, "next-tokens") == expected_chips(tokenizer, "the cat")
        scripts = [e for e in console_errors(browser) if e["source"] != "network"]  # the page's default prompt
        assert scripts == []  # is past this context: the 400s it was refused with are the only errors
    finally:
        if trained.studio.trainer.running():
            trained.studio.trainer.process.kill()
        trained.shutdown()
        trained.server_close()
