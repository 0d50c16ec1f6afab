"""The studio's figures at a real size (issue 36), in the headless Chromium of the browser tests (not collected by
pytest; minutes, not seconds):

    PYTHONPATH=. python tests/bench_studio.py typing        # 8 keystrokes 300 ms apart after a 710-token prompt
    PYTHONPATH=. python tests/bench_studio.py axe           # axe-core's violations of each view at 1280 and 390 px
    PYTHONPATH=. python tests/bench_studio.py shots --out DIR   # the walkthrough at 1280 and 390 px, DIR/*.png

``typing`` opens the studio's default view (Next token), puts a 710-token prompt in the box, then types 8
characters 300 ms apart (WebDriver's keystrokes) and prints: the time from the first keystroke until the answer
for the final text is drawn (the page's ``data-ready``, read by a MutationObserver on the page's clock), the forward
passes the server ran meanwhile (``model.forward`` counted), and how soon after each keystroke a busy state showed
(the status line's ``busy`` class, or the view greyed or ``aria-busy``). ``axe`` counts axe-core's WCAG 2.1 AA
violations (rules and elements) and the page's ``scrollWidth`` on every tab the page enables, and on the page
``numforge inspect`` writes (a ``--model`` path with a long unbroken name, as the cache's, tests that the model line
wraps at 390 px). The server runs in this process, so ``PYTHONPATH`` may name an older checkout: the
page and server measured are that checkout's, the views are those its page has; this script and
``tests/browser.py`` are this one's.

The model: a Hugging Face GPT-2 directory (GPT-2's vocabulary of 50,257 and context of 1,024; d_model 384, 6
heads, 4 layers: 26.8M parameters; random weights of std 0.02, seed 0; a 4,096-token byte-level BPE trained on
``pydoc_data.topics``), written once to ``--model`` and read back with ``load_model``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
from browser import PHONE, WIDE, axe_violations, chips, ready, start_browser, wait_for
from hf_dirs import DOCS, gpt2_shapes, write_gpt2_dir
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from numforge.bench.measure import where_it_runs
from numforge.checkpoint import load_model
from numforge.study.prompt import describe_model
from numforge.study.studio import Studio, StudioServer
from numforge.tokenizer import BPETokenizer

SHAPE = {"vocab_size": 50257, "n_positions": 1024, "n_embd": 384, "n_head": 6, "n_layer": 4}
TYPED = " the cat"  # 8 keystrokes
WAIT = 900  # seconds any one answer may take (8 forwards of the old page in turn)
RECORDER = """
var b = window.__bench = {input: [], busy: [], drawn: []};
var view = document.getElementById('view-next'), status = document.getElementById('status');
function busy() {
  return status.classList.contains('busy') || view.classList.contains('stale') ||
    view.getAttribute('aria-busy') === 'true';
}
function look() {
  if (!busy()) return;
  var now = performance.now();
  b.input.forEach(function (t, k) { if (b.busy[k] === undefined) b.busy[k] = now - t; });
}
document.addEventListener('input', function (e) {
  if (e.target.id === 'prompt') { b.input.push(performance.now()); setTimeout(look, 0); }
}, true);
new MutationObserver(look).observe(status, {attributes: true, childList: true, characterData: true, subtree: true});
new MutationObserver(look).observe(view, {attributes: true, attributeFilter: ['class', 'aria-busy']});
new MutationObserver(function () {
  b.drawn.push([performance.now(), Number(view.getAttribute('data-ready'))]);
}).observe(view, {attributes: true, attributeFilter: ['data-ready']});
"""


def model_dir(path: Path) -> Path:
    """The GPT-2 directory of SHAPE at ``path``, written unless it is there."""
    if not (path / "model.safetensors").is_file():
        rng = np.random.default_rng(0)
        shapes = gpt2_shapes(SHAPE)
        tensors = {name: rng.normal(0.0, 0.02, size=s).astype(np.float32) for name, s in shapes.items()}
        for name in tensors:
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                tensors[name][:] = 1.0
        write_gpt2_dir(path, SHAPE, tensors, BPETokenizer.train(DOCS, 4096))
    return path


def prompt_of(tokenizer, count: int) -> str:
    """A text of pydoc_data.topics that encodes to exactly ``count`` tokens."""
    ids = tokenizer.encode(DOCS)
    for cut in range(count, count + 50):
        text = tokenizer.decode(ids[:cut])
        if len(tokenizer.encode(text)) == count:
            return text
    raise ValueError(f"no cut of the docs encodes to {count} tokens")


class Forwards:
    """``model.forward`` counted: ``calls``."""

    def __init__(self, model):
        self.calls, forward = 0, model.forward

        def counted(*args, **kwargs):
            self.calls += 1
            return forward(*args, **kwargs)

        model.forward = counted


def serve(path: Path, run_dir: Path | None = None) -> StudioServer:
    model, tokenizer = load_model(path)
    server = StudioServer(Studio(model, tokenizer, f"checkpoint: {path} ({describe_model(model)})", run_dir))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def attribute(browser, element_id: str, name: str):
    element = (
        browser.find_element(By.TAG_NAME, "body") if element_id == "body" else browser.find_element(By.ID, element_id)
    )
    return element.get_attribute(name)


def settled(browser, after: float = 0.0) -> None:
    """Until ``after`` (a perf_counter time) has passed and no request is in flight."""
    WebDriverWait(browser, WAIT, poll_frequency=0.05).until(
        lambda d: time.perf_counter() > after and attribute(d, "body", "data-busy") == "0"
    )


def put_prompt(browser, text: str) -> None:
    before = ready(browser, "next")
    browser.execute_script(
        "var box = document.getElementById('prompt'); box.value = arguments[0]; box.dispatchEvent(new Event('input'))",
        text,
    )
    wait_for(browser, "next", before, WAIT)


def typing(args) -> None:
    server = serve(model_dir(args.model))
    prompt = prompt_of(server.studio.tokenizer, args.tokens)
    print(where_it_runs())
    print(
        f"model: {server.studio.source}; prompt {args.tokens} tokens, "
        f"then {TYPED!r} typed {args.gap * 1000:.0f} ms apart"
    )
    browser, forwards, totals = start_browser(WIDE), Forwards(server.studio.model), []
    try:
        for _ in range(args.repeats):
            totals.append(typing_round(browser, server, forwards, prompt, args.gap))
    finally:
        browser.quit()
        server.shutdown()
    print(f"first keystroke to the final answer, {len(totals)} rounds: median {np.median(totals):.2f} s, "
          f"min {min(totals):.2f} s, max {max(totals):.2f} s; load average now {os.getloadavg()[0]:.2f}")  # fmt: skip


def typing_round(browser, server, forwards: Forwards, prompt: str, gap: float) -> float:
    """One round on a freshly opened page: its lines printed, the seconds to the final answer returned."""
    browser.get(server.url)
    WebDriverWait(browser, WAIT).until(lambda d: ready(d, "next") > 0)
    settled(browser)
    put_prompt(browser, prompt)
    print(f"one answer to the prompt, asked to drawn: {attribute(browser, 'view-next', 'data-ms')} ms")
    browser.execute_script(RECORDER)
    box, calls, dropped = browser.find_element(By.ID, "prompt"), forwards.calls, getattr(server.studio, "dropped", 0)
    start = time.perf_counter()
    for k, key in enumerate(TYPED):
        time.sleep(max(0.0, start + k * gap - time.perf_counter()))
        box.send_keys(key)
    settled(browser, time.perf_counter() + 1.0)  # past the page's 250 ms wait after typing
    record = browser.execute_script(
        "var b = window.__bench; b.asked = performance.getEntriesByType('resource').filter(function (e) {"
        "  return e.name.indexOf('/api/next') > 0 && e.startTime >= b.input[0]; }).length; return b"
    )
    final, tokenizer = prompt + TYPED, server.studio.tokenizer
    assert attribute(browser, "prompt", "value") == final, "the box does not hold the text typed"
    assert [i for _, i in chips(browser, "next-tokens")] == tokenizer.encode(final), "the last answer is not the text's"
    drawn = max(record["drawn"], key=lambda entry: entry[1])
    total = (drawn[0] - record["input"][0]) / 1000
    busy = [None if ms is None else round(ms, 1) for ms in record["busy"]] + [None] * (len(TYPED) - len(record["busy"]))
    gaps = [round(b - a) for a, b in zip(record["input"], record["input"][1:])]
    print(f"  first keystroke to the final text's answer drawn: {total:.2f} s")
    print(
        f"  keystrokes {len(record['input'])}, ms apart on the page's clock: {gaps}; questions sent: {record['asked']}"
    )
    print(f"  forward passes the server ran: {forwards.calls - calls}; answers drawn: {len(record['drawn'])}; "
          f"requests dropped unasked: {getattr(server.studio, 'dropped', 0) - dropped}")  # fmt: skip
    print(f"  busy state shown, ms after each keystroke (None: not before the answer): {busy}")
    print(f"  busy within 100 ms of every keystroke: {all(ms is not None and ms < 100 for ms in busy)}")
    return total


def views_enabled(browser) -> list[str]:
    return browser.execute_script(
        "return Array.from(document.querySelectorAll('#tabs button:not(:disabled)')).map(b => b.dataset.view)"
    )


def show(browser, view: str) -> str:
    """Click the view's tab and wait for its answer; "" or why it was not seen drawn."""
    before = ready(browser, view)
    browser.find_element(By.CSS_SELECTOR, f'#tabs [data-view="{view}"]').click()
    try:
        wait_for(browser, view, before, 30)
    except TimeoutException:
        return " (no answer drawn in 30 s)"
    return ""


def axe_line(browser, view: str, note: str) -> tuple[int, int]:
    found = axe_violations(browser)
    rules = Counter(line.split(":")[0] for line in found)
    width = browser.execute_script("return document.documentElement.scrollWidth")
    named = ", ".join(f"{rule} {count}" for rule, count in rules.items())
    print(f"  {view:<12} {len(rules):2d} rules, {len(found):3d} elements; scrollWidth {width}{note}  {named}")
    return len(rules), len(found)


def axe_pages(browser, url: str, first: str, size) -> None:
    browser.set_window_size(*size)
    browser.get(url)
    WebDriverWait(browser, WAIT).until(lambda d: ready(d, first) > 0)
    print(f"{url.split('?')[0]} at {size[0]} px:")
    totals = [0, 0]
    for view in views_enabled(browser):
        rules, nodes = axe_line(browser, view, show(browser, view))
        totals = [totals[0] + rules, totals[1] + nodes]
    print(f"  {'all views':<12} {totals[0]:2d} rules, {totals[1]:3d} elements")


def axe(args) -> None:
    from helpers import make_tiny_run

    from numforge.study.page import render_page
    from numforge.study.report import inspect_data

    print(where_it_runs())
    with tempfile.TemporaryDirectory() as root:
        server = serve(model_dir(args.model), make_tiny_run(Path(root)))
        studio = server.studio
        page = Path(root) / "inspect.html"
        page.write_text(render_page(inspect_data(studio.model, studio.tokenizer, "the cat sat on a mat")), "utf-8")
        print(f"model: {studio.source}; the Training view watches a tiny run")
        browser = start_browser(WIDE)
        try:
            for size in (WIDE, PHONE):
                axe_pages(browser, server.url, "next", size)
                axe_pages(browser, page.as_uri(), "trace", size)
        finally:
            browser.quit()
            server.shutdown()


def shots(args) -> None:
    server = serve(model_dir(args.model))
    browser = start_browser(WIDE)
    try:
        for size, name in ((WIDE, "walkthrough-1280.png"), (PHONE, "walkthrough-390.png")):
            browser.set_window_size(*size)
            browser.get(server.url.split("#")[0] + "#walkthrough")
            WebDriverWait(browser, WAIT).until(lambda d: ready(d, "walkthrough") > 0)
            settled(browser)
            height = browser.execute_script("return document.documentElement.scrollHeight")
            browser.set_window_size(size[0], min(height, 12000))  # the whole page in one picture
            browser.save_screenshot(str(args.out / name))
            print(f"{args.out / name}: {size[0]} x {min(height, 12000)}")
    finally:
        browser.quit()
        server.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["typing", "axe", "shots"])
    parser.add_argument("--model", type=Path, default=Path(tempfile.gettempdir()) / "numforge-bench-studio-gpt2")
    parser.add_argument("--tokens", type=int, default=710, help="the prompt's tokens before typing (typing)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds, each on a fresh page (typing)")
    parser.add_argument("--gap", type=float, default=0.3, help="seconds between two keystrokes (typing)")
    parser.add_argument("--out", type=Path, default=Path("."), help="where the screenshots go (shots)")
    args = parser.parse_args()
    {"typing": typing, "axe": axe, "shots": shots}[args.what](args)


if __name__ == "__main__":
    main()
