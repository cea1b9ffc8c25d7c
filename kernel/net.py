"""The client's address as the portal's own proxies saw it (sign-in lockout and API throttles key on it)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def client_ip(request: HttpRequest) -> str:
    """The address that connected to the outermost trusted proxy (``TRUSTED_PROXY_COUNT`` hops), else REMOTE_ADDR.

    Each trusted proxy appends the address it saw to ``X-Forwarded-For``; what the client wrote there itself
    stands further left and is never read.
    """
    remote = request.META.get("REMOTE_ADDR", "")
    hops = settings.TRUSTED_PROXY_COUNT
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if hops <= 0 or not forwarded:
        return remote
    addresses = [a.strip() for a in forwarded.split(",") if a.strip()]
    if not addresses:
        return remote
    return addresses[-min(hops, len(addresses))]
