"""HTMX helpers shared by every app's pages: the one test for "answer with the fragment", the stop-polling
status, the sign-in guard that works for polls, and the 304 a poll gets while its fragment's tag holds."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, HttpResponseNotModified
from django.shortcuts import resolve_url
from django.utils.http import parse_etags
from django_htmx.http import HttpResponseClientRedirect

STOP_POLLING = 286  # htmx stops an every-N-seconds poll when the answer has this status


def wants_fragment(request: HttpRequest) -> bool:
    """Whether to answer with the page's fragment: an HTMX request that is neither boosted nor a history restore."""
    htmx = getattr(request, "htmx", None)
    return bool(htmx) and not htmx.boosted and not htmx.history_restore_request


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


def not_modified(request: HttpRequest, tag: str | None) -> HttpResponse | None:
    """A bodiless 304 when the request's ``If-None-Match`` holds ``tag`` (a poll whose fragment has not changed)."""
    if tag is None or tag not in parse_etags(request.headers.get("If-None-Match", "")):
        return None
    return validated(HttpResponseNotModified(), tag)


def validated(response: HttpResponse, tag: str | None) -> HttpResponse:
    """``response`` with ``tag`` as its ETag, to be revalidated by the browser on every request (polls send it back
    in ``If-None-Match``)."""
    if tag is not None:
        response["ETag"] = tag
        response["Cache-Control"] = "private, no-cache"
    return response
