"""Health and repair pages: thin views over pools.health.selectors.

The fleet map, the ticket queue and the capacity page are for those who read the pool's health: staff and the
operators (``HEALTH_READ_PERMISSION``, which the operator group holds); a ticket's page is readable by every
signed-in user (researchers reach it from a ``health_blocked`` wait), with the evidence shown to those readers.
Acting on health (tickets, cordons) stays in the admin, for staff.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from kernel.htmx import htmx_login_required, wants_fragment
from pools.health import selectors
from pools.health.selectors import reads_health
from pools.models import Cluster, HealthState, RepairTicket

NODES_PER_PAGE = 100


def health_reader_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Signed in (else to the sign-in page) and a reader of the pool's health (else 403)."""

    @htmx_login_required
    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not reads_health(request.user):
            raise PermissionDenied("the health pages are for platform admins and operators")
        return view(request, *args, **kwargs)

    return wrapper


def _int(raw: str | None, default: int = 1) -> int:
    try:
        return max(int(raw or default), 1)
    except ValueError:
        return default


def _cluster(request: HttpRequest) -> Cluster | None:
    name = request.GET.get("cluster") or ""
    return Cluster.objects.filter(name=name).first() if name else None


@require_GET
@health_reader_required
@vary_on_headers("HX-Request")
def health_map_page(request: HttpRequest) -> HttpResponse:
    """Nodes × devices coloured by health; the grid alone for an HTMX request."""
    cluster = _cluster(request)
    problems = request.GET.get("problems") == "1"
    data = selectors.health_map(
        cluster=cluster, problems_only=problems, page=_int(request.GET.get("page")), per_page=NODES_PER_PAGE
    )
    context = {
        "map": data,
        "cluster": cluster,
        "clusters": Cluster.objects.all(),
        "problems": problems,
        "states": HealthState.choices,
        "state_counts": [(state, label, data.totals.get(state, 0)) for state, label in HealthState.choices],
        "open_tickets": RepairTicket.objects.filter(state__in=RepairTicket.OPEN_STATES).count(),
    }
    if wants_fragment(request):
        return render(request, "health/partials/health_map_grid.html", context)
    return render(request, "health/map.html", context)


@require_GET
@health_reader_required
def ticket_queue_page(request: HttpRequest) -> HttpResponse:
    """Open tickets oldest first (or all, newest first), devices out and MTTR per class."""
    show_all = request.GET.get("all") == "1"
    context = {
        "rows": selectors.ticket_queue(open_only=not show_all),
        "show_all": show_all,
        "classes": selectors.class_health(),
    }
    return render(request, "health/tickets.html", context)


@require_GET
@htmx_login_required
def ticket_page(request: HttpRequest, pk: int) -> HttpResponse:
    """One ticket: state, age and steps for everyone; evidence, transitions and runs for the health readers."""
    ticket = get_object_or_404(RepairTicket.objects.select_related("node", "device", "node__cluster"), pk=pk)
    reader = reads_health(request.user)
    context = {"ticket": ticket, "reader": reader, "now": timezone.now(), "events": ticket.events.all()}
    if reader:
        context |= {
            "transitions": ticket.transitions.select_related("device").order_by("at", "id"),
            "runs": ticket.validation_runs.select_related("job").order_by("attempt"),
            "directives": ticket.directives.all(),
        }
    return render(request, "health/ticket.html", context)


@require_GET
@health_reader_required
def capacity_page(request: HttpRequest) -> HttpResponse:
    """Effective capacity per class and the nominal quota no longer backed by healthy devices per flavor."""
    cluster = _cluster(request)
    context = {
        "classes": selectors.class_health(cluster=cluster),
        "coverage": selectors.quota_coverage(cluster=cluster),
        "cluster": cluster,
        "clusters": Cluster.objects.all(),
    }
    return render(request, "health/capacity.html", context)
