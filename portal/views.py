"""Site-shell views: the home page, the readiness probe and the error pages."""

from __future__ import annotations

import sys

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.template import loader
from django.views import defaults

from kernel.outages import RETRY_AFTER_SECONDS, outage_of


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """Send a researcher to the class catalogue; platform admins (staff) to the pool overview."""
    if request.user.is_staff:
        return redirect("pools:overview")
    return redirect("queues:classes")


def healthz(request: HttpRequest) -> JsonResponse:
    """Readiness probe: the process answers and the database is reachable: what a web process needs, and nothing
    else (a web pod must stay in service while the worker, beat or broker is down; /status.json says so)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """404: JSON under /api/ (what the API documents for every answer), the portal's page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)


def _json_path(request: HttpRequest) -> bool:
    return request.path.startswith("/api/") or request.path == "/status.json"


def server_error(request: HttpRequest) -> HttpResponse:
    """500, or 503 with ``Retry-After`` when a dependency is down (the database restarting, the broker or the cache
    unreachable); JSON under /api/, a page elsewhere rendered without the database."""
    dependency = outage_of(sys.exc_info()[1])
    if not dependency:
        if _json_path(request):
            return JsonResponse({"detail": "Server error."}, status=500)
        return defaults.server_error(request)
    text = f"The portal's {dependency} cannot be reached right now. Try again in a minute."
    if _json_path(request):
        response = JsonResponse({"detail": text, "unavailable": dependency}, status=503)
    else:
        page = loader.get_template("503.html").render({"message": text})  # no request: no context processor runs
        response = HttpResponse(page, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response
