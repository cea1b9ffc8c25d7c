"""Fixtures of the browser tests: Playwright (sync API) driving Debian's /usr/bin/chromium headless.

The live server's requests and the test's own ORM calls (ticks, checks) share one in-memory SQLite connection,
so both are serialised by ``DB_LOCK``: take it around ORM work done while a page may be loading. Screenshots go
to docs/screenshots/ when SAVE_SCREENSHOTS=1, else to a temp folder. The fixtures are exported by
tests/conftest.py, so any test module can ask for ``page``.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from django.core.handlers.wsgi import WSGIHandler

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).resolve().parents[1] / "docs" / "screenshots"
DB_LOCK = threading.RLock()


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium per test module (skips where Debian's chromium is not installed)."""
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    # Playwright's sync API runs an event loop in this thread; the ORM calls between page steps are safe.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as pw:
            chromium = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=LAUNCH_ARGS)
            yield chromium
            chromium.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def serialised(monkeypatch):
    """Run each live-server request under ``DB_LOCK``."""
    original = WSGIHandler.__call__

    def locked(self, environ, start_response):
        with DB_LOCK:
            return original(self, environ, start_response)

    monkeypatch.setattr(WSGIHandler, "__call__", locked)


@pytest.fixture
def page(browser, live_server, serialised):
    """A signed-out page of a fresh browser context on the live server."""
    context = browser.new_context(viewport={"width": 1360, "height": 1000}, base_url=live_server.url)
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


@pytest.fixture
def shots(tmp_path) -> Path:
    """Where screenshots go: docs/screenshots/ with SAVE_SCREENSHOTS=1, else a temp folder."""
    if os.environ.get("SAVE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        return SCREENSHOTS
    return tmp_path
