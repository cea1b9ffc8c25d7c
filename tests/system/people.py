"""People using a running portal (tests/system/portals.py) in Chromium, as the system journeys need them.

A :class:`Person` is a signed-in browser context on one portal: the production shape's headers go with every
request (the tests play the TLS-terminating ingress), every console error, uncaught script error and 5xx answer is
recorded (a journey fails on any), and :meth:`Person.finish` screenshots the journey's last page at 1366 px and at
390 px. :class:`Ingress` plays the same ingress for clients other than a browser (the ``gpupool`` CLI).

Screenshots go to ``SYSTEM_TEST_SHOTS`` when set (a directory), else under the session's directory.
"""

from __future__ import annotations

import http.server
import os
import threading
from pathlib import Path

import requests
from playwright.sync_api import Browser, Page

from tests.system.portals import DEMO_PASSWORD, Portal
from tests.system.processes import free_port

#: The widths a journey's last page is looked at: a laptop and a phone.
WIDTHS = (1366, 390)


def shots_dir(default: Path) -> Path:
    """Where the journeys' screenshots go."""
    path = Path(os.environ.get("SYSTEM_TEST_SHOTS") or default / "shots")
    path.mkdir(parents=True, exist_ok=True)
    return path


class Person:
    """One signed-in person in Chromium on a portal; ``problems`` lists what went wrong in the browser."""

    def __init__(self, browser: Browser, portal: Portal, username: str, *, shots: Path) -> None:
        self.portal = portal
        self.username = username
        self.shots = shots
        self.problems: list[str] = []
        self.context = browser.new_context(
            base_url=portal.base_url,
            viewport={"width": WIDTHS[0], "height": 900},
            extra_http_headers=portal.headers,
            accept_downloads=True,
        )
        self.page: Page = self.context.new_page()
        self.page.set_default_timeout(30_000)
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda e: self.problems.append(f"script error: {e}"))
        self.page.on("response", self._response)
        self.sign_in()

    def _console(self, message) -> None:
        if message.type == "error":
            self.problems.append(f"console error on {self.page.url}: {message.text}")

    def _response(self, response) -> None:
        if response.status >= 500:
            self.problems.append(f"HTTP {response.status} for {response.url}")

    def sign_in(self) -> None:
        """Through the sign-in page, as a person does."""
        page = self.page
        page.goto("/accounts/login/")
        page.fill("input[name=username]", self.username)
        page.fill("input[name=password]", DEMO_PASSWORD)
        page.click("[type=submit]")
        page.wait_for_load_state("load")
        if "/accounts/login/" in page.url:
            raise AssertionError(f"{self.username} could not sign in on the {self.portal.shape} portal")

    def goto(self, path: str) -> Page:
        """Open a page and let its first htmx loads finish."""
        self.page.goto(path)
        self.settle()
        return self.page

    def settle(self) -> None:
        """Wait for the network to go quiet (the polls leave gaps), without failing when it does not."""
        try:
            self.page.wait_for_load_state("networkidle", timeout=10_000)
        except Exception:  # a page that polls fast never goes idle: that is fine here
            pass

    def finish(self, journey: str) -> list[Path]:
        """Screenshot the page as it is at 1366 px and at 390 px; then fail on any problem seen in the browser."""
        taken = []
        for width in WIDTHS:
            self.page.set_viewport_size({"width": width, "height": 900 if width > 500 else 844})
            self.page.reload()
            self.settle()
            path = self.shots / f"{self.portal.shape}-{journey}-{width}.png"
            self.page.screenshot(path=str(path), full_page=True)
            taken.append(path)
        self.page.set_viewport_size({"width": WIDTHS[0], "height": 900})
        self.context.close()
        assert self.problems == [], f"{journey} on the {self.portal.shape} portal:\n" + "\n".join(self.problems)
        return taken


class Ingress(http.server.ThreadingHTTPServer):
    """A local reverse proxy that plays the portal's TLS-terminating ingress for a client that is not a browser:
    it adds ``portal.headers`` to each request (the production shape) and passes everything else through."""

    daemon_threads = True

    def __init__(self, portal: Portal) -> None:
        self.portal = portal
        super().__init__(("127.0.0.1", free_port()), _Forward)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Stop serving."""
        self.shutdown()
        self.server_close()


class _Forward(http.server.BaseHTTPRequestHandler):
    server: Ingress

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "connection")}
        headers.update(self.server.portal.headers)
        answer = requests.request(
            self.command,
            self.server.portal.url(self.path),
            headers=headers,
            data=body,
            allow_redirects=False,
            timeout=120,
        )
        self.send_response(answer.status_code)
        for key, value in answer.headers.items():
            if key.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

    def log_message(self, format, *args) -> None:
        """Quiet: the portal's own logs have every request."""
