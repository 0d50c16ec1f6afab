"""The studio's one page, in its two forms: served by ``numforge studio``, or written whole by ``numforge inspect``.

The page is ``web/studio.html`` (package data), its style ``web/studio.css``
and its script the ES modules of ``web/js/``: ``studio.js`` (the entry: the
navigation) imports one module per view and the small shared ones. Served
(``studio_page``), the page links the style and the entry from ``/static/``
and the browser loads the modules it imports (no bundler, no build step);
the script asks the server's routes. Written (``render_page(data)``), style
and script are inline: the modules in the order the browser would run them
(``module_order``), their ``import`` lines dropped and ``export`` words taken
off (``inline_modules``), as one ``<script type="module">``; the answers are
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
import re
from collections import Counter
from importlib import resources

WEB = "web"  # the package data folder beside this file
MODULES = "js"  # the script's ES modules, in WEB
ENTRY = "studio.js"  # the module the page loads; it imports the others
IMPORT = re.compile(r'^import \{[\w$,\s]+\} from "\./([\w-]+\.js)";\n', re.MULTILINE)  # one module's names
EXPORT = re.compile(r"^export (?=(?:function|const|let) )", re.MULTILINE)
TOP_NAME = re.compile(r"^(?:function|const|let|var|class) ([\w$]+)", re.MULTILINE)  # a module's top-level names


def web_file(name: str) -> str:
    """One file of ``numforge/study/web/`` (``name`` may be ``js/studio.js``)."""
    return resources.files(__package__).joinpath(WEB, *name.split("/")).read_text(encoding="utf-8")


def read_module(name: str) -> str:
    """One module of ``web/js/``."""
    return web_file(f"{MODULES}/{name}")


def module_order(read=read_module, entry: str = ENTRY) -> list[str]:
    """The modules ``entry`` reaches through its imports, each after the modules it imports (the order a browser
    runs them in): ``studio.js`` imports ``a.js`` and ``b.js``, ``b.js`` imports ``a.js`` -> ``[a.js, b.js,
    studio.js]``. ``read(name)`` is a module's text. An import cycle is refused."""
    order, visiting = [], []

    def visit(name: str) -> None:
        if name in visiting:
            raise ValueError(f"the modules import each other in a cycle: {' -> '.join([*visiting, name])}")
        if name in order:
            return
        visiting.append(name)
        for imported in IMPORT.findall(read(name)):
            visit(imported)
        order.append(visiting.pop())

    visit(entry)
    return order


def inline_modules(read=read_module, entry: str = ENTRY) -> str:
    """The modules as one module script's text: each in ``module_order``, its ``import { ... } from "./x.js";``
    lines dropped and ``export`` taken off its declarations, so every module's top-level names share one scope
    (two modules may not declare the same name). Any other ``import`` or ``export`` is refused."""
    texts = {name: EXPORT.sub("", IMPORT.sub("", read(name))) for name in module_order(read, entry)}
    for name, text in texts.items():
        if re.search(r"^\s*(import|export)\b", text, flags=re.MULTILINE):
            raise ValueError(f"{name}: only 'import {{ names }} from \"./x.js\";' and 'export' declarations inline")
    twice = [top for top, n in Counter(TOP_NAME.findall("\n".join(texts.values()))).items() if n > 1]
    if twice:
        raise ValueError(f"more than one module declares {twice}: inlined, they would share one scope")
    return "".join(f"/* ---- {name} */\n{text}" for name, text in texts.items())


def studio_page() -> str:
    """The page ``numforge studio`` serves: the style and the entry module linked from ``/static/``."""
    head = (
        '<link rel="stylesheet" href="/static/studio.css">\n'
        f'<script type="module" src="/static/{MODULES}/{ENTRY}"></script>'
    )
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
    style, script = web_file("studio.css"), inline_modules()
    for name, text in (("studio.css", style), ("the modules", script)):
        if "</" in text or "<!--" in text:
            raise ValueError(f"{name} holds '</' or '<!--', which would end its inline element")
    policy = f"default-src 'none'; script-src '{_sha256(script)}'; style-src '{_sha256(style)}'; img-src data:"
    head = f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n<style>{style}</style>'
    end = f'<script type="application/json" id="data">{script_json(data)}</script>\n'
    end += f'<script type="module">{script}</script>'
    return web_file("studio.html").replace("<!-- head -->", head).replace("<!-- end -->", end)
