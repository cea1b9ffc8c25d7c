"""Fetch a dcgm-exporter endpoint over HTTP (standard library only; a timeout always)."""

from __future__ import annotations

import urllib.error
import urllib.request

MAX_BYTES = 32 * 1024 * 1024


class ScrapeUnavailable(Exception):
    """The endpoint could not be read now (network, timeout, HTTP 5xx): worth retrying."""


class ScrapeRefused(Exception):
    """The endpoint answered but not with a scrape (HTTP 4xx, too large): retrying will not help."""


def fetch(url: str, *, timeout: float) -> str:
    """GET ``url`` and return its text; raises ScrapeUnavailable / ScrapeRefused."""
    if not url.startswith(("http://", "https://")):
        raise ScrapeRefused(f"{url}: only http(s) endpoints are scraped")
    headers = {"Accept": "text/plain; version=0.0.4", "User-Agent": "gpu-pool-portal"}
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # the scheme was checked above
            body = response.read(MAX_BYTES + 1)
            charset = response.headers.get_content_charset() or "utf-8"
    except urllib.error.HTTPError as exc:
        if exc.code >= 500:
            raise ScrapeUnavailable(f"{url}: HTTP {exc.code}") from None
        raise ScrapeRefused(f"{url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise ScrapeUnavailable(f"{url}: {getattr(exc, 'reason', exc)}") from None
    if len(body) > MAX_BYTES:
        raise ScrapeRefused(f"{url}: more than {MAX_BYTES} bytes")
    return body.decode(charset, errors="replace")
