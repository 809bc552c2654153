"""A run report (report.html) read as a file, without a browser: its scripts, its embedded columns, its metadata.

Shared by the report's tests (tests/runs/test_html_report.py) and the attribution's, which reads what the
report says of each anomaly (tests/runs/test_attribution.py).
"""

from __future__ import annotations

import base64
import json
import sys
from array import array
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

#: the page's typed arrays, as array typecodes (all little-endian in the file)
TYPECODES = {"Float64": "d", "Float32": "f", "Int32": "i", "Uint32": "I", "Uint16": "H", "Int8": "b", "Uint8": "B"}


class Page(HTMLParser):
    """The parts of a report the tests read: elements by id, every tag with its attributes, the scripts' text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: dict[str, tuple[dict[str, str | None], str]] = {}
        self.text_of: dict[str, str] = {}
        self._open: list[tuple[str, str | None, list[str]]] = []
        self._script: tuple[dict[str, str | None], list[str]] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "script":
            self._script = (a, [])
        elif tag not in ("img", "meta", "input", "br", "link"):
            self._open.append((tag, a.get("id"), []))

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._script is not None:
            attrs, parts = self._script
            self.scripts[str(attrs.get("id"))] = (attrs, "".join(parts))
            self._script = None
            return
        while self._open:
            name, ident, parts = self._open.pop()
            text = "".join(parts)
            if ident:
                self.text_of[ident] = text
            if self._open:
                self._open[-1][2].append(text)
            if name == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            self._script[1].append(data)
        elif self._open:
            self._open[-1][2].append(data)


def read_page(path: Path) -> tuple[str, Page, dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    page = Page(text)
    meta = json.loads(page.scripts["lc-meta"][1])
    return text, page, meta


def decoded(page: Page, name: str) -> array:
    attrs, b64 = page.scripts[f"c-{name}"]
    values = array(TYPECODES[str(attrs["data-type"])])
    values.frombytes(base64.b64decode(b64))
    if sys.byteorder == "big":
        values.byteswap()
    return values
