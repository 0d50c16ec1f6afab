"""The studio's one page, in its two forms: served by ``numforge studio``, or written whole by ``numforge inspect``.

The page is ``web/studio.html`` (package data), its style ``web/studio.css``
and its script ``web/studio.js``. Served (``studio_page``), the page links
them from ``/static/`` and the script asks the server's routes. Written
(``render_page(data)``), style and script are inline, the answers are
embedded once as JSON (``<script type="application/json" id="data">``), and a
Content-Security-Policy lets only that script and that style run: no
network, no external file, the page opens from disk in any browser.

The JSON is written with ``<``, ``>`` and ``&`` escaped (``\\u003c`` ...), so no
prompt (``</script>``, ``<!--<script>``) can end or bend the script element that
holds it, and with every other character as it is (世界, not ``\\u4e16``).
"""

from __future__ import annotations

import base64
import hashlib
import json
from importlib import resources

WEB = "web"  # the package data folder beside this file


def web_file(name: str) -> str:
    """One file of ``numforge/study/web/``."""
    return resources.files(__package__).joinpath(WEB, name).read_text(encoding="utf-8")


def studio_page() -> str:
    """The page ``numforge studio`` serves: style and script linked from ``/static/``."""
    head = '<link rel="stylesheet" href="/static/studio.css">\n<script src="/static/studio.js" defer></script>'
    return web_file("studio.html").replace("<!-- head -->", head)


def script_json(data) -> str:
    """``data`` as JSON that is safe inside ``<script type="application/json">``: ``<``, ``>``, ``&`` and the
    JavaScript line separators escaped, everything else as it is (not ASCII-escaped)."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for raw in ("<", ">", "&", "\u2028", "\u2029"):
        text = text.replace(raw, f"\\u{ord(raw):04x}")  # "<" -> "\\u003c", the same string to a JSON reader
    return text


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def render_page(data: dict) -> str:
    """The page with ``data`` (``report.inspect_data``) embedded, as one self-contained HTML string."""
    style, script = web_file("studio.css"), web_file("studio.js")
    for name, text in (("studio.css", style), ("studio.js", script)):
        if "</" in text or "<!--" in text:
            raise ValueError(f"{name} holds '</' or '<!--', which would end its inline element")
    policy = f"default-src 'none'; script-src '{_sha256(script)}'; style-src '{_sha256(style)}'; img-src data:"
    head = f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n<style>{style}</style>'
    end = f'<script type="application/json" id="data">{script_json(data)}</script>\n<script>{script}</script>'
    return web_file("studio.html").replace("<!-- head -->", head).replace("<!-- end -->", end)
