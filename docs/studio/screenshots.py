"""Take the screenshots of numforge studio in docs/studio.md, and measure its views at the model's whole context.

    python docs/studio/screenshots.py                           # the studio's default model (trained once, cached)
    python docs/studio/screenshots.py --checkpoint runs/run-1   # or any run

writes docs/studio/{tokenizer,next,attention,trace,training}.png (1280 px wide) and next-phone.png,
attention-phone.png (390 px), with the browser the tests use (tests/browser.py: headless Chromium through
selenium). Then it types a prompt of the model's whole context and prints, for each view, the time from the
question to the drawn answer (the page's own ``data-ms``) and the bytes of the answer, and the size of the page
``numforge inspect`` writes for that prompt. The PNGs are reduced to 256 colours when Pillow is installed.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from browser import PHONE, WIDE, open_view, start_browser, type_prompt, wait_for  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from numforge.checkpoint import load_model  # noqa: E402
from numforge.commands._default_model import default_model  # noqa: E402
from numforge.study.page import render_page  # noqa: E402
from numforge.study.report import inspect_data  # noqa: E402
from numforge.study.studio import Studio, StudioServer  # noqa: E402

PROMPT = 'The "with" statement is used to wrap the execution of a block'
OUT = Path(__file__).resolve().parent


def save(browser, name: str) -> None:
    path = OUT / f"{name}.png"
    browser.save_screenshot(str(path))
    try:
        from PIL import Image
    except ImportError:
        return
    Image.open(path).convert("RGB").quantize(256).save(path, optimize=True)


def lens_drawn(browser) -> bool:
    return bool(browser.find_element(By.ID, "trace-lens").get_attribute("data-ready"))


def shoot(browser, server) -> None:
    for view in ("tokenizer", "next", "attention", "trace", "training"):
        open_view(browser, server, view)
        if view != "training":
            type_prompt(browser, PROMPT, view)
        if view == "tokenizer":
            browser.find_element(By.CSS_SELECTOR, "#tok-chunks details").click()
        if view == "attention":
            box = browser.find_element(By.ID, "att-main")
            browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", box)
            ActionChains(browser).move_to_element_with_offset(box, 10, 40).perform()  # a cell's tooltip
        if view == "trace":
            before = int(browser.find_element(By.ID, "view-trace").get_attribute("data-ready"))
            browser.find_element(By.CSS_SELECTOR, "#trace-tokens .tok[data-position='3']").click()
            wait_for(browser, "trace", before)
            lens = browser.find_element(By.ID, "trace-lens")
            WebDriverWait(browser, 120).until(lens_drawn)  # the trace view asks for it after its stages
            browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", lens)
        save(browser, view)
    browser.set_window_size(*PHONE)
    for view in ("next", "attention"):
        open_view(browser, server, view)
        browser.execute_script("window.scrollTo(0, 0)")
        save(browser, f"{view}-phone")
    browser.set_window_size(*WIDE)


def measure(browser, server) -> None:
    studio = server.studio
    context = studio.model.config.max_seq_len
    ids = studio.tokenizer.encode(" ".join([PROMPT] * 200), allowed_special="all")[:context]
    text = studio.tokenizer.decode(ids)
    print(f"a prompt of the whole context: {len(studio.tokenizer.encode(text))} tokens (context {context})")
    open_view(browser, server, "tokenizer")
    type_prompt(browser, text, "tokenizer")
    for view, method in (
        ("tokenizer", "tokenize"),
        ("next", "next_token"),
        ("attention", "attention"),
        ("trace", "trace"),
    ):
        with studio.lock:
            studio._last = None  # each view pays for its own passes
            started = time.perf_counter()
            getattr(studio, method)({"text": text})
            computed = time.perf_counter() - started
            studio._last = None
        if view != "tokenizer":
            open_view(browser, server, view, timeout=1200)
        ms = browser.find_element(By.ID, f"view-{view}").get_attribute("data-ms")
        sizes = browser.execute_script(
            "return performance.getEntriesByType('resource')"
            ".filter(function (e) { return e.name.indexOf('/api/') > 0; })"
            ".map(function (e) { return e.encodedBodySize; })"
        )
        print(f"  {view:<10} computed in {computed:6.2f} s; asked to drawn {ms:>6} ms, answer {sizes[-1]:>10,} bytes")
    with studio.lock:
        started = time.perf_counter()
        lens = studio.lens({"text": text})  # the trace view asks for it after its stages: the passes are kept
        computed = time.perf_counter() - started
    lens_bytes = len(json.dumps(lens, ensure_ascii=False).encode())
    WebDriverWait(browser, 1200).until(lambda d: d.find_element(By.ID, "trace-lens").get_attribute("data-ms"))
    ms = browser.find_element(By.ID, "trace-lens").get_attribute("data-ms")
    print(f"  {'lens':<10} computed in {computed:6.2f} s; asked to drawn {ms:>6} ms, answer {lens_bytes:>10,} bytes")
    started = time.perf_counter()
    page = render_page(inspect_data(studio.model, studio.tokenizer, text))
    made = time.perf_counter() - started
    path = OUT / "measure-inspect.html"
    path.write_text(page, encoding="utf-8")
    started = time.perf_counter()
    browser.get(path.as_uri())
    wait_for(browser, "trace", 0, timeout=1200)
    opened = time.perf_counter() - started
    path.unlink()
    size = len(page.encode())
    print(f"  numforge inspect's page: {size:,} bytes, made in {made:.2f} s, opened and drawn in {opened:.2f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--checkpoint", help="a run directory written by numforge train (default: the studio's default model)"
    )
    parser.add_argument("--no-shots", action="store_true", help="only measure")
    args = parser.parse_args()
    if args.checkpoint is None:
        model, tokenizer, source, run_dir = default_model()
    else:
        model, tokenizer = load_model(args.checkpoint)
        source, run_dir = f"checkpoint: {Path(args.checkpoint).name}", Path(args.checkpoint)
    studio = Studio(model, tokenizer, source, run_dir=run_dir)
    server = StudioServer(studio, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    browser = start_browser(WIDE)
    try:
        if not args.no_shots:
            shoot(browser, server)
        measure(browser, server)
    finally:
        browser.quit()
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
