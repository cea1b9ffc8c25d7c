"""Site-shell views: the home page, the liveness probe, and the sign-in guard shared by the HTMX pages."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, resolve_url
from django_htmx.http import HttpResponseClientRedirect


def htmx_login_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """``login_required`` that also works for HTMX requests.

    A poll whose session has expired must not swap the sign-in page into a fragment: the browser is
    sent to the sign-in page (``HX-Redirect``) with ``next`` pointing at the page the poll came from.
    """

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if request.user.is_authenticated:
            return view(request, *args, **kwargs)
        if getattr(request, "htmx", False):
            next_url = request.htmx.current_url_abs_path or request.get_full_path()
            login = redirect_to_login(next_url, resolve_url(settings.LOGIN_URL))
            return HttpResponseClientRedirect(login["Location"])
        return redirect_to_login(request.get_full_path(), resolve_url(settings.LOGIN_URL))

    return wrapper


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
