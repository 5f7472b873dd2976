"""run.html: the page data (page.py) through a Jinja2 template with the CSS and
JavaScript of page_assets/ inlined, so the one file opens from file://, offline,
with no request to any address.

The run's data rides in ``<script type="application/json" id="run-data">``; every
``<``, ``>`` and ``&`` in it is written as a JSON unicode escape, so no text of a
case (an error message, a description) can close that element.  The MCP App
(``app_html``) is the same page with no data: its script asks the host for the
tool result and renders the run it names (page_assets/page.js).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

ASSETS = Path(__file__).resolve().parent / "page_assets"
TEMPLATE = "run.html.j2"


@lru_cache(maxsize=1)
def _environment() -> Any:
    import jinja2  # imported when a page is rendered, not when the server starts

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(ASSETS)), autoescape=True, undefined=jinja2.StrictUndefined
    )


def script_json(data: Any) -> str:
    """JSON safe inside a <script> element: no '<', '>' or '&' left to end it or open a comment."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_page(data: dict[str, Any] | None, *, title: str) -> str:
    """The self-contained page; ``data`` None gives the MCP App (it renders the run a host hands it)."""
    import markupsafe

    def asset(name: str) -> Any:  # our own file, inlined as is
        return markupsafe.Markup((ASSETS / name).read_text(encoding="utf-8"))

    return (
        _environment()
        .get_template(TEMPLATE)
        .render(
            title=title,
            css=asset("page.css"),
            js=asset("page.js"),
            data=markupsafe.Markup(script_json(data)),
            app=data is None,
        )
    )


def app_html() -> str:
    """The MCP App view (``ui://`` resource): the page with no run in it."""
    return render_page(None, title="operator debug run")
