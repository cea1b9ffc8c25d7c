"""Reservation pages: the list with the request form, a reservation (its decision, use, preview and actions), and the
week calendar of a class. Thin: parse, authorize, call one service or selector, render (HTMX fragments where a part
refreshes: the calendar's week, a preview's progress)."""

from __future__ import annotations

from datetime import date, timedelta

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from kernel.errors import Conflict, ValidationFailed
from kernel.htmx import STOP_POLLING, htmx_login_required, wants_fragment
from pools.models import Cluster, ResourceClass
from queues import selectors as sel
from queues.models import Reservation, ReservationPreview
from queues.reservations import selectors as rsel
from queues.reservations.forms import ReservationDecisionForm, ReservationRequestForm
from queues.reservations.holds import lead
from queues.reservations.previews import reservation_preview_request
from queues.reservations.rules import reservation_policy
from queues.reservations.services import (
    ReservationForbidden,
    may_cancel,
    may_decide,
    reservation_approve,
    reservation_cancel,
    reservation_refuse,
    reservation_request,
)

#: Reservations listed whose window ended at most this long ago.
RECENT = timedelta(days=30)


def _common() -> dict:
    return {"lead_minutes": lead().total_seconds() / 60, "policy": reservation_policy()}


@require_http_methods(["GET", "POST"])
@htmx_login_required
def reservation_list(request: HttpRequest) -> HttpResponse:
    """The reservations the user sees (upcoming and recent), those waiting for an admin, and the request form."""
    leads = rsel.lead_teams(request.user)
    may_request = leads.exists()
    initial = {k: request.GET[k] for k in ("resource_class", "count", "starts_at", "ends_at") if k in request.GET}
    form = ReservationRequestForm(request.POST or None, teams=leads, initial=initial)
    if request.method == "POST":
        if not may_request:
            raise PermissionDenied("only team leads and platform admins request reservations")
        if form.is_valid():
            data = form.cleaned_data
            try:
                row = reservation_request(
                    team=data["team"],
                    user=request.user,
                    resource_class=data["resource_class"],
                    count=data["count"],
                    starts_at=data["starts_at"],
                    ends_at=data["ends_at"],
                    purpose=data["purpose"],
                )
            except ValidationFailed as exc:
                for field, problems in exc.errors.items():
                    for problem in problems:
                        form.add_error(field if field in form.fields else None, problem)
            except ReservationForbidden as exc:
                raise PermissionDenied(exc.message) from None
            else:
                if row.state == Reservation.State.APPROVED:
                    messages.success(request, f"Reservation #{row.pk} is approved.")
                elif row.state == Reservation.State.REQUESTED:
                    messages.info(request, f"Reservation #{row.pk} waits for an admin: {' '.join(row.reasons)}")
                else:
                    messages.error(request, f"Reservation #{row.pk} is refused: {' '.join(row.reasons)}")
                return redirect("queues:reservation_detail", pk=row.pk)
    now = timezone.now()
    visible = list(rsel.reservations_visible_to(request.user).filter(ends_at__gt=now - RECENT).order_by("starts_at"))
    waiting = []
    if may_decide(request.user):
        waiting = list(
            Reservation.objects.filter(state=Reservation.State.REQUESTED, ends_at__gt=now)
            .select_related("team", "flavor")
            .order_by("starts_at", "pk")
        )
    return render(
        request,
        "queues/reservations/reservation_list.html",
        {
            **_common(),
            "form": form if may_request else None,
            "current": [r for r in visible if r.is_live and r.window_end > now],
            "past": [r for r in reversed(visible) if not (r.is_live and r.window_end > now)],
            "waiting": waiting,
            "classes": ResourceClass.objects.filter(active=True).order_by("display_order", "name"),
            "now": now,
        },
    )


def _visible(request: HttpRequest, pk: int) -> Reservation:
    return get_object_or_404(rsel.reservations_visible_to(request.user), pk=pk)


def _preview_context(request: HttpRequest, reservation: Reservation, preview: ReservationPreview | None) -> dict:
    return {"reservation": reservation, "preview": preview, "result": (preview.result or {}) if preview else {}}


@require_GET
@htmx_login_required
def reservation_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One reservation: what was asked, the rules' answer or the admin's, its window's edges and use, and the actions
    (approve / refuse with a preview for admins; cancel for who asked, the team's leads and admins)."""
    reservation = _visible(request, pk)
    now = timezone.now()
    preview = reservation.previews.order_by("-requested_at", "-pk").first() if may_decide(request.user) else None
    return render(
        request,
        "queues/reservations/reservation_detail.html",
        {
            **_common(),
            **_preview_context(request, reservation, preview),
            "use": rsel.window_use(reservation, now=now) if reservation.starts_at <= now else None,
            "purpose_shown": rsel.purpose_visible(request.user, reservation),
            "can_decide": may_decide(request.user) and reservation.state == Reservation.State.REQUESTED,
            "can_cancel": may_cancel(request.user, reservation) and reservation.is_live and reservation.ends_at > now,
            "decision_form": ReservationDecisionForm(),
            "now": now,
        },
    )


def _act(request: HttpRequest, pk: int, action) -> HttpResponse:
    reservation = _visible(request, pk)
    try:
        done = action(reservation)
    except ReservationForbidden as exc:
        raise PermissionDenied(exc.message) from None
    except (Conflict, ValidationFailed) as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Reservation #{done.pk} is {done.get_state_display().lower()}.")
    return redirect("queues:reservation_detail", pk=reservation.pk)


@require_POST
@htmx_login_required
def reservation_approve_view(request: HttpRequest, pk: int) -> HttpResponse:
    """An admin approves a waiting reservation."""
    note = request.POST.get("note", "")
    return _act(request, pk, lambda r: reservation_approve(reservation=r, user=request.user, note=note))


@require_POST
@htmx_login_required
def reservation_refuse_view(request: HttpRequest, pk: int) -> HttpResponse:
    """An admin refuses a waiting reservation, saying why."""
    note = request.POST.get("note", "")
    return _act(request, pk, lambda r: reservation_refuse(reservation=r, user=request.user, note=note))


@require_POST
@htmx_login_required
def reservation_cancel_view(request: HttpRequest, pk: int) -> HttpResponse:
    """Who asked, a lead of the team or an admin cancels it (an open window closes now)."""
    return _act(request, pk, lambda r: reservation_cancel(reservation=r, user=request.user))


@require_POST
@htmx_login_required
def reservation_preview_view(request: HttpRequest, pk: int) -> HttpResponse:
    """An admin asks for a what-if of the reservation (recent history replayed with it in place)."""
    reservation = _visible(request, pk)
    if not may_decide(request.user):
        raise PermissionDenied("previews are for the platform admins who decide reservations")
    reservation_preview_request(reservation=reservation, user=request.user)
    return redirect("queues:reservation_detail", pk=reservation.pk)


@require_GET
@htmx_login_required
def reservation_preview_part(request: HttpRequest, pk: int, preview_pk: int) -> HttpResponse:
    """A preview's progress or result (polled while it runs; 286 once it has finished)."""
    reservation = _visible(request, pk)
    if not may_decide(request.user):
        raise PermissionDenied("previews are for the platform admins who decide reservations")
    preview = get_object_or_404(ReservationPreview.objects.filter(reservation=reservation), pk=preview_pk)
    response = render(
        request,
        "queues/reservations/partials/reservation_preview.html",
        _preview_context(request, reservation, preview),
    )
    if preview.is_finished and wants_fragment(request):
        response.status_code = STOP_POLLING
    return response


def _week(request: HttpRequest) -> date | None:
    raw = request.GET.get("week", "")
    try:
        return date.fromisoformat(raw) if raw else None
    except ValueError:
        return None


@require_GET
@htmx_login_required
@vary_on_headers("HX-Request")
def reservation_calendar(request: HttpRequest, slug: str) -> HttpResponse:
    """The week view of a class: reservations (and how much of them was used), capacity and what is free per hour."""
    rc = get_object_or_404(ResourceClass.objects.filter(active=True), slug=slug)
    teams = list(sel.teams_of(request.user))
    cluster = None
    wanted = request.GET.get("cluster", "")
    if wanted:
        cluster = Cluster.objects.filter(name=wanted).first()
    if cluster is None and teams:
        cluster = sel.team_cluster(teams[0])
    if cluster is None:
        with_hardware = Cluster.objects.filter(nodes__flavor__class_links__resource_class=rc).distinct()
        cluster = with_hardware.order_by("name").first()
    calendar = rsel.week_calendar(resource_class=rc, cluster=cluster, week=_week(request), user=request.user)
    context = {
        **_common(),
        "calendar": calendar,
        "classes": ResourceClass.objects.filter(active=True).order_by("display_order", "name"),
        "may_request": rsel.lead_teams(request.user).exists(),
        "today": timezone.localdate(),
        "hours": range(24),
    }
    if wants_fragment(request):
        return render(request, "queues/reservations/partials/reservation_week.html", context)
    return render(request, "queues/reservations/reservation_calendar.html", context)
