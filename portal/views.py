"""Site-shell views: the home page and the liveness probe."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect


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
