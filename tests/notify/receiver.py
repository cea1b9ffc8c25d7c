"""A local incoming-webhook receiver (what Slack or Teams would be), run in a thread for the tests.

It records every POST (its ``Idempotency-Key`` and JSON body), can answer errors for the first few, and can hold
a request open (the sender is then "mid-send") until the test releases it. ``unique()`` is what a receiver that
drops repeated keys would show.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """Webhook endpoint at ``url``; ``posts`` is the list of (key, body) received, in order."""

    def __init__(self, *, fail_first: int = 0, hold_first: bool = False) -> None:
        self.posts: list[tuple[str, dict]] = []
        self.fail_first = fail_first
        self.hold_first = hold_first
        self.first_arrived = threading.Event()
        self.release = threading.Event()
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with receiver.lock:
                    receiver.posts.append((self.headers.get("Idempotency-Key", ""), body))
                    n = len(receiver.posts)
                if n == 1 and receiver.hold_first:
                    receiver.first_arrived.set()
                    receiver.release.wait(60)  # the sender is killed while waiting for this answer
                status = 500 if n <= receiver.fail_first else 200
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"ok" if status == 200 else b"boom")

            def log_message(self, *args) -> None:  # keep the test output quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """Where to POST."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def unique(self) -> dict[str, dict]:
        """The bodies by key, each key once (a receiver that drops a repeated Idempotency-Key)."""
        with self.lock:
            return dict(self.posts)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
