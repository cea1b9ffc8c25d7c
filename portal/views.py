"""Site-shell views: the home page and the liveness probe."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.views import defaults


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """Send a researcher to the class catalogue; platform admins (staff) to the pool overview."""
    if request.user.is_staff:
        return redirect("pools:overview")
    return redirect("queues:classes")


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness/readiness probe: the process answers and the database is reachable."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """404: JSON under /api/ (what the API documents for every answer), the portal's page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)
