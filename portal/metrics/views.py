"""``GET /metrics``: Prometheus' scrape target; a bearer token guards it when ``METRICS_TOKEN`` is set, and without a
token it is refused where ``METRICS_REQUIRE_TOKEN`` (production's default): it fails closed."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from portal.metrics.collector import metrics_text


def _authorized(request: HttpRequest, token: str) -> bool:
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """The portal's metrics; 401 without the right ``Authorization: Bearer`` token when one is configured, 403 when
    none is and one is required."""
    token = settings.METRICS_TOKEN
    if not token and settings.METRICS_REQUIRE_TOKEN:
        return HttpResponse(
            "/metrics is turned off: set METRICS_TOKEN (and send it as 'Authorization: Bearer <token>').\n",
            status=403,
            content_type="text/plain; charset=utf-8",
        )
    if token and not _authorized(request, token):
        response = HttpResponse("A valid 'Authorization: Bearer <METRICS_TOKEN>' header is required.\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        response["Content-Type"] = "text/plain; charset=utf-8"
        return response
    return HttpResponse(metrics_text(), content_type=CONTENT_TYPE_LATEST)
