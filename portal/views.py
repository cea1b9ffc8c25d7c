"""Site-shell views: the home page and the liveness probe."""

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """Send a signed-in user to the pool overview (the catalogue takes this place once it exists)."""
    return redirect("pools:overview")


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness/readiness probe: the process answers and the database is reachable."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})
