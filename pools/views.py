"""Pool pages."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    """The pool overview (built out by the pool-page work)."""
    return render(request, "pools/overview.html", {})
