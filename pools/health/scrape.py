"""Fetch a dcgm-exporter endpoint over HTTP, through the egress guard (kernel.egress): a timeout always, no redirect,
only the networks ``HEALTH_SCRAPE_ALLOWED_NETWORKS`` allows (the private ranges by default)."""

from __future__ import annotations

from django.conf import settings

from kernel.egress import EgressPolicy, EgressRefused, EgressUnavailable, egress_request

MAX_BYTES = 32 * 1024 * 1024


class ScrapeUnavailable(Exception):
    """The endpoint could not be read now (network, timeout, HTTP 5xx): worth retrying."""


class ScrapeRefused(Exception):
    """The endpoint answered but not with a scrape (HTTP 3xx/4xx, too large), or may not be called: retrying will
    not help."""


def scrape_policy() -> EgressPolicy:
    """Where scrapes may go: any host the admin configured, on the networks ``HEALTH_SCRAPE_ALLOWED_NETWORKS``
    lists (public addresses too)."""
    return EgressPolicy.from_settings(networks=settings.HEALTH_SCRAPE_ALLOWED_NETWORKS, what="scrapes")


def fetch(url: str, *, timeout: float) -> str:
    """GET ``url`` and return its text; raises ScrapeUnavailable / ScrapeRefused."""
    headers = {"Accept": "text/plain; version=0.0.4", "User-Agent": "gpu-pool-portal"}
    try:
        response = egress_request("GET", url, policy=scrape_policy(), timeout=timeout, headers=headers,
                                  max_bytes=MAX_BYTES)  # fmt: skip
    except EgressRefused as exc:
        raise ScrapeRefused(f"{url}: {exc.message}") from None
    except EgressUnavailable as exc:
        raise ScrapeUnavailable(f"{url}: {exc.message}") from None
    if response.status >= 500:
        raise ScrapeUnavailable(f"{url}: HTTP {response.status}")
    if response.status >= 300:
        raise ScrapeRefused(f"{url}: HTTP {response.status}")
    if response.truncated:
        raise ScrapeRefused(f"{url}: more than {MAX_BYTES} bytes")
    charset = _charset(response.headers.get("Content-Type", ""))
    return response.body.decode(charset, errors="replace")


def _charset(content_type: str) -> str:
    """The charset a Content-Type names (utf-8 when none, or an unknown one)."""
    for part in content_type.split(";")[1:]:
        name, _, value = part.strip().partition("=")
        if name.lower() == "charset" and value.strip('"'):
            charset = value.strip('"')
            try:
                "".encode(charset)
            except LookupError:
                return "utf-8"
            return charset
    return "utf-8"
