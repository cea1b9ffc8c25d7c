"""API throttles (DRF): anonymous calls and forged tokens by address, token calls by token, session calls by user.

Rates come from ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`` (portal/settings.py, from the environment), read at
each call; counts live in the default cache (one per process with the local-memory cache: set ``CACHE_URL`` to a
Redis in production so that every web worker counts together).

When the cache cannot be reached the throttles **fail closed**: the call is refused with 503, ``Retry-After`` and
a JSON body rather than served uncounted (an outage of the cache must not lift the limits on guessing tokens or
flooding the API; the pages, which no throttle guards, stay up).
"""

from __future__ import annotations

import logging

from rest_framework import exceptions
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

from kernel.net import client_ip
from kernel.outages import CACHE_ERRORS, RETRY_AFTER_SECONDS
from queues.models import ApiToken

log = logging.getLogger(__name__)


class ThrottleUnavailable(exceptions.APIException):
    """The cache that holds the throttles' counts cannot be reached: 503 with ``Retry-After``."""

    status_code = 503
    default_detail = "The API cannot count calls right now (its cache is unreachable): try again shortly."
    default_code = "throttle_unavailable"

    def __init__(self) -> None:
        super().__init__()
        self.wait = RETRY_AFTER_SECONDS  # DRF's handler turns it into Retry-After


def _refuse(exc: Exception) -> ThrottleUnavailable:
    log.warning("API throttle: the cache is unreachable, call refused (fail closed): %s: %s", type(exc).__name__, exc)
    return ThrottleUnavailable()


class PortalRateThrottle(SimpleRateThrottle):
    """A rate read from the settings at each call, keyed by the address the trusted proxies saw."""

    def get_rate(self) -> str | None:
        """This scope's rate now (``None``: not throttled)."""
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)

    def get_ident(self, request) -> str:
        """The client's address (kernel.net.client_ip)."""
        return client_ip(request)

    def key_for(self, ident: object) -> str:
        """The cache key of one client of this scope."""
        return self.cache_format % {"scope": self.scope, "ident": ident}

    def allow_request(self, request, view) -> bool:
        """DRF's count, refusing the call (503) when the cache is unreachable."""
        try:
            return super().allow_request(request, view)
        except CACHE_ERRORS as exc:
            raise _refuse(exc) from exc


class AnonymousThrottle(PortalRateThrottle):
    """Calls without credentials, by address (``anon``)."""

    scope = "anon"

    def get_cache_key(self, request, view) -> str | None:
        """Only anonymous calls count."""
        if request.user and request.user.is_authenticated:
            return None
        return self.key_for(self.get_ident(request))


class TokenThrottle(PortalRateThrottle):
    """Calls with an API token, by token (``token``)."""

    scope = "token"

    def get_cache_key(self, request, view) -> str | None:
        """Only token calls count, each token on its own."""
        return self.key_for(request.auth.pk) if isinstance(request.auth, ApiToken) else None


class SessionUserThrottle(PortalRateThrottle):
    """Calls from a signed-in browser session, by user (``user``)."""

    scope = "user"

    def get_cache_key(self, request, view) -> str | None:
        """Only session calls of a signed-in user count."""
        if isinstance(request.auth, ApiToken) or not (request.user and request.user.is_authenticated):
            return None
        return self.key_for(request.user.pk)


class BadTokenThrottle(PortalRateThrottle):
    """Failed token authentications, by address (``bad_token``): past the rate the address's invalid keys are
    answered 429 (queues.api.authentication), so that guessing keys does not pay; a valid key is never refused
    for the bad ones others sent from the same address (a shared NAT, a CI runner)."""

    scope = "bad_token"

    def __init__(self) -> None:
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)

    def _load(self, request) -> bool:
        if self.rate is None:
            return False
        self.key = self.key_for(self.get_ident(request))
        self.history = self.cache.get(self.key, [])
        self.now = self.timer()
        while self.history and self.history[-1] <= self.now - self.duration:
            self.history.pop()
        return True

    def exceeded(self, request) -> bool:
        """Whether this address has failed too often within the window (503 when the cache is unreachable)."""
        try:
            return self._load(request) and len(self.history) >= self.num_requests
        except CACHE_ERRORS as exc:
            raise _refuse(exc) from exc

    def record_failure(self, request) -> None:
        """Count one failed authentication of this address."""
        try:
            if self._load(request):
                self.throttle_success()
        except CACHE_ERRORS as exc:
            raise _refuse(exc) from exc
