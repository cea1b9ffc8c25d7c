"""DCGM scrapes go through the egress guard (issue 33): the admin's endpoints are reached only on the networks
``HEALTH_SCRAPE_ALLOWED_NETWORKS`` allows (private ranges by default), never loopback or cloud metadata unless
listed, and a redirect is not followed. A real exporter stand-in listens on loopback."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pools.health.scrape import ScrapeRefused, fetch


class _Hits(BaseHTTPRequestHandler):
    hits: list[str] = []
    location = ""

    def do_GET(self) -> None:
        type(self).hits.append(self.path)
        self.send_response(302 if self.location else 200)
        if self.location:
            self.send_header("Location", self.location)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.end_headers()
        self.wfile.write(b"# scrape\n")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def exporter():
    _Hits.hits, _Hits.location = [], ""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hits)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_loopback_endpoint_is_refused_unless_its_network_is_allowed(exporter, settings):
    assert "127.0.0.0/8" not in settings.HEALTH_SCRAPE_ALLOWED_NETWORKS  # the default: private ranges only
    with pytest.raises(ScrapeRefused, match=r"127.0.0.1 is a loopback address"):
        fetch(f"{exporter}/metrics", timeout=2)
    assert _Hits.hits == []
    settings.HEALTH_SCRAPE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    assert fetch(f"{exporter}/metrics", timeout=2) == "# scrape\n"
    assert _Hits.hits == ["/metrics"]


def test_cloud_metadata_is_refused_even_with_the_private_ranges_allowed():
    with pytest.raises(ScrapeRefused, match=r"169.254.169.254 is a link-local address"):
        fetch("http://169.254.169.254/latest/meta-data/", timeout=2)
    with pytest.raises(ScrapeRefused, match="four decimal numbers"):
        fetch("http://2852039166/latest/meta-data/", timeout=2)  # 169.254.169.254 in decimal


def test_a_redirect_is_not_followed(exporter, settings):
    settings.HEALTH_SCRAPE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    _Hits.location = f"{exporter}/elsewhere"
    with pytest.raises(ScrapeRefused, match="HTTP 302"):
        fetch(f"{exporter}/metrics", timeout=2)
    assert _Hits.hits == ["/metrics"]
