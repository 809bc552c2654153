"""Headless Chromium from Debian's packages, for the run report's browser tests and its benchmark.

The report is a page people open in a browser, so it is tested in one: Debian's
``chromium`` driven through its ``chromium-driver`` by Selenium. Both paths are
given explicitly, so Selenium never starts selenium-manager (which would try to
download a browser and a driver: the tests must work offline, and must test
the browser CI installs, not whatever a download brings).

A missing browser is an error, never a skip: CI installs both packages
(``.ci/run``), so a run without them would silently stop testing the report.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.chrome.webdriver import WebDriver

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WIDTH, HEIGHT = 1600, 1000

#: what to do about a missing browser, in every message that reports one
INSTALL_HINT = "install Debian's chromium and chromium-driver (apt-get install chromium chromium-driver; .ci/run does)"

#: Chromium's switches: headless, no sandbox (CI containers run as root), and nothing
#: that reaches the network or varies between runs (extensions, first-run pages,
#: background fetches); /dev/shm is small in containers, so no shared-memory buffers.
ARGUMENTS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-extensions",
    "--no-first-run",
    f"--window-size={WIDTH},{HEIGHT}",
)


class BrowserMissing(RuntimeError):
    """Chromium or its driver is not installed where Debian puts them."""


def missing() -> list[str]:
    """The executables of the two packages that are not there (empty when both are)."""
    return [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not (p.is_file() and os.access(p, os.X_OK))]


def chromium() -> WebDriver:
    """A fresh headless Chromium; the caller quits it (or uses :func:`headless_chromium`).

    The browser's console is captured at every level, so a test can read the
    page's errors back with :func:`console_errors`.
    """
    gone = missing()
    if gone:
        raise BrowserMissing(f"not found: {', '.join(gone)}: {INSTALL_HINT}")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ARGUMENTS:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))


@contextmanager
def headless_chromium() -> Iterator[WebDriver]:
    """:func:`chromium`, quit on the way out whatever happened."""
    driver = chromium()
    try:
        yield driver
    finally:
        driver.quit()


def window_width(driver: WebDriver, width: int, height: int = HEIGHT) -> int:
    """Resize the window to ``width`` x ``height``; the page's width in css px after (headless: the window is all viewport)."""
    driver.set_window_size(width, height)
    return int(driver.execute_script("return window.innerWidth;"))


def console_errors(driver: WebDriver) -> list[str]:
    """The browser console's SEVERE entries since the last call (reading empties the log)."""
    entries: list[dict[str, Any]] = driver.get_log("browser")
    return [str(e.get("message", "")) for e in entries if e.get("level") == "SEVERE"]


def full_page_png(driver: WebDriver) -> bytes:
    """A PNG of the whole page, not just the window: a report reads top to bottom (verdict,
    anomalies, timeline, plots), and a picture of it should too. Chromium's DevTools capture
    lays the page out beyond the viewport for the shot and puts it back after."""
    width, height = driver.execute_script(
        "const e = document.documentElement; return [e.scrollWidth, e.scrollHeight];"
    )
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {"format": "png", "captureBeyondViewport": True, "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}},
    )
    return base64.b64decode(shot["data"])
