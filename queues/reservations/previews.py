"""Reservation previews in the background: the admin asks, a worker replays, the page polls (a status row each)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from functools import partial

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from queues.models import Reservation, ReservationPreview
from queues.policy.whatif import WhatIfTooSlow
from queues.reservations.whatif import reservation_whatif

log = logging.getLogger(__name__)
Status = ReservationPreview.Status


def _enqueue(preview_id: int) -> None:
    # By its registered name: queues.tasks imports this module, so importing the task here would be a cycle.
    current_app.tasks["queues.reservation_preview"].delay(preview_id)


@transaction.atomic
def reservation_preview_request(*, reservation: Reservation, user, now: datetime | None = None) -> ReservationPreview:
    """Record a preview of ``reservation`` and enqueue its replay after commit."""
    now = now or timezone.now()
    preview = ReservationPreview.objects.create(
        reservation=reservation, requested_by=user if getattr(user, "pk", None) else None, requested_at=now
    )
    transaction.on_commit(partial(_enqueue, preview.pk))
    return preview


def _set(preview_id: int, **fields) -> int:
    return ReservationPreview.objects.filter(pk=preview_id).update(**fields)


def reservation_preview_run(*, preview_id: int) -> ReservationPreview | None:
    """Replay a queued preview and store its result; None if it was not queued (a redelivered task)."""
    started = timezone.now()
    claimed = ReservationPreview.objects.filter(pk=preview_id, status=Status.QUEUED).update(
        status=Status.RUNNING, started_at=started, progress=0.0, progress_text="loading recorded jobs"
    )
    if not claimed:
        return None
    preview = ReservationPreview.objects.select_related(
        "reservation__team", "reservation__cluster", "reservation__flavor"
    ).get(pk=preview_id)

    def report(side: str, share: float) -> None:
        done = (0.5 if side == "proposed" else 0.0) + share / 2
        what = "with the reservation" if side == "proposed" else "as it happened"
        _set(preview_id, progress=round(done, 3), progress_text=f"replaying the history {what}")

    try:
        result = reservation_whatif(reservation=preview.reservation, now=preview.requested_at, on_progress=report)
    except WhatIfTooSlow as exc:
        _set(preview_id, status=Status.FAILED, finished_at=timezone.now(), error=str(exc))
        return ReservationPreview.objects.filter(pk=preview_id).first()
    except Exception as exc:
        log.exception("reservation preview %s failed", preview_id)
        _set(preview_id, status=Status.FAILED, finished_at=timezone.now(), error=f"{type(exc).__name__}: {exc}")
        return ReservationPreview.objects.filter(pk=preview_id).first()
    _set(preview_id, status=Status.DONE, finished_at=timezone.now(), progress=1.0, progress_text="", result=result)
    return ReservationPreview.objects.filter(pk=preview_id).first()


def reservation_previews_sweep(*, now: datetime | None = None) -> tuple[int, int]:
    """Delete old previews and fail those running past any possible end (their worker died); (pruned, failed)."""
    now = now or timezone.now()
    keep = timedelta(days=float(settings.WHATIF_PREVIEW_KEEP_DAYS))
    pruned, _ = ReservationPreview.objects.filter(requested_at__lt=now - keep).delete()
    limit = timedelta(seconds=2 * float(settings.WHATIF_MAX_SECONDS or 600) + 300)
    failed = ReservationPreview.objects.filter(status=Status.RUNNING, started_at__lt=now - limit).update(
        status=Status.FAILED,
        finished_at=now,
        error="the worker running this preview stopped before it finished; preview again",
    )
    return pruned, failed
