"""The portal's own middleware: request guards applied before any view, and response headers."""

from __future__ import annotations

import re
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.utils.cache import patch_cache_control

#: A NUL in a JSON body: the raw byte, or the \u0000 escape (any case).
_JSON_NUL = re.compile(rb"\x00|\\u0000", re.IGNORECASE)
_FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


class RejectNulMiddleware:
    """Answer 400 to a NUL character in the path, a query parameter or a form/JSON body field.

    No field of the portal takes one, PostgreSQL cannot store one in text (a 500 deep in a view), and forms
    that forget ``ProhibitNullCharactersValidator`` would otherwise pass it on.
    """

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        problem = self.problem(request)
        if problem:
            if request.path.startswith("/api/"):  # the API answers errors as JSON (its schema says so)
                return JsonResponse({"detail": f"Bad request: {problem}."}, status=400)
            return HttpResponseBadRequest(f"Bad request: {problem}.", content_type="text/plain; charset=utf-8")
        return self.get_response(request)

    @staticmethod
    def problem(request: HttpRequest) -> str:
        """What NUL the request carries, or "" when none."""
        if "\x00" in request.path:
            return "the path contains a NUL character"
        for key, values in request.GET.lists():
            if "\x00" in key or any("\x00" in v for v in values):
                return f"query parameter {key.replace(chr(0), '')!r} contains a NUL character"
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return ""
        content_type = request.content_type or ""
        if content_type.startswith(_FORM_TYPES):
            for key, values in request.POST.lists():
                if "\x00" in key or any("\x00" in v for v in values):
                    return f"field {key.replace(chr(0), '')!r} contains a NUL character"
        elif content_type.endswith("json") and _JSON_NUL.search(request.body):
            return "the JSON body contains a NUL character (\\u0000)"
        return ""


class PrivateCacheMiddleware:
    """``Cache-Control: private`` on every response to a signed-in user (a proxy must not serve it to another)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            patch_cache_control(response, private=True)
        return response
