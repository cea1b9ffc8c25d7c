"""``GET /status.json`` (any signed-in user) and the status page (admins and operators): the liveness of the
database, the broker, the worker, beat and every periodic task (liveness.selectors.liveness_status).

The JSON holds no team data: component states, times, task names and counts (error texts, which may name a job or
a team, are on the page only). A database that cannot be reached answers 503 with ``Retry-After``: without it
no session can be checked, so the answer says only that.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from kernel.htmx import htmx_login_required, wants_fragment
from liveness.selectors import EntryStatus, Liveness, liveness_status
from queues.visibility import sees_every_team

#: Seconds a client should wait before asking again when the database is down.
RETRY_AFTER_SECONDS = 30


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def _entry(entry: EntryStatus) -> dict:
    return {
        "ok": entry.ok,
        "last_run": _iso(entry.last_run),
        "lag_seconds": round(entry.lag_seconds, 3) if entry.lag_seconds is not None else None,
        "last_failure": _iso(entry.last_failure),
    }


def status_document(status: Liveness) -> dict:
    """The body of ``/status.json``: ``{"ok", "components": {database, broker, worker, beat, tasks}}``."""
    return {
        "ok": status.ok,
        "components": {
            "database": {"ok": status.database.ok},
            "broker": {"ok": status.broker.ok},
            "worker": {"ok": status.worker.ok, "last_seen": _iso(status.worker.last_seen)},
            "beat": {"ok": status.beat.ok, "last_seen": _iso(status.beat.last_seen)},
            "tasks": {
                "ok": status.tasks.ok,
                "overdue": [e.entry for e in status.entries if e.overdue],
                "failing": [e.entry for e in status.entries if e.failing],
                "entries": {e.entry: _entry(e) for e in status.entries},
            },
        },
    }


def _database_down() -> JsonResponse:
    body = {"ok": False, "components": {"database": {"ok": False}}, "detail": "The database cannot be reached."}
    response = JsonResponse(body, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


@require_GET
def status_json(request: HttpRequest) -> JsonResponse:
    """The liveness of every component, for any signed-in user (401 otherwise)."""
    try:
        if not request.user.is_authenticated:
            return JsonResponse({"detail": "Sign in to read the status."}, status=401)
        status = liveness_status()
    except DatabaseError:
        return _database_down()
    response = JsonResponse(status_document(status))
    response["Cache-Control"] = "no-store"
    return response


@require_GET
@htmx_login_required
def status_page(request: HttpRequest) -> HttpResponse:
    """The status page (admins and operators): components, processes, every periodic task; its fragment polls."""
    if not sees_every_team(request.user):
        raise PermissionDenied("The status page is for platform admins and operators.")
    status = liveness_status(processes=True)
    context = {
        "status": status,
        "entries": [e for e in status.entries if not e.is_child],
        "children": [e for e in status.entries if e.is_child],
        "late_seconds": int(settings.PERIODIC_TASK_LATE_SECONDS),
    }
    response = render(request, _template(request), context)
    response["Vary"] = "HX-Request"
    return response


def _template(request: HttpRequest) -> str:
    return "portal/partials/status_components.html" if wants_fragment(request) else "portal/status.html"
