"""The writes of liveness: heartbeats and periodic-task records (each one or two statements, never a long lock)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F

from liveness.models import PeriodicTaskState, ProcessHeartbeat

#: Longest stored error text (the class name and the start of the message).
ERROR_CHARS = 500
#: Heartbeats of processes not heard from for this long are deleted (the status page lists the last day's).
HEARTBEAT_KEEP = timedelta(days=7)


def heartbeat_record(*, kind: str, hostname: str, pid: int, started_at: datetime, now: datetime) -> None:
    """Say that the process (``kind`` worker or beat) is alive at ``now``."""
    key = {"kind": kind, "hostname": hostname, "pid": pid, "started_at": started_at}
    if ProcessHeartbeat.objects.filter(**key).update(last_seen_at=now, stopped_at=None):
        return
    try:
        with transaction.atomic():
            ProcessHeartbeat.objects.create(**key, last_seen_at=now)
    except IntegrityError:  # a racing write of the same process
        ProcessHeartbeat.objects.filter(**key).update(last_seen_at=now)


def heartbeat_stopped(*, kind: str, hostname: str, pid: int, started_at: datetime, now: datetime) -> None:
    """Say that the process shut down cleanly at ``now``."""
    ProcessHeartbeat.objects.filter(kind=kind, hostname=hostname, pid=pid, started_at=started_at).update(
        last_seen_at=now, stopped_at=now
    )


def heartbeats_prune(*, now: datetime) -> int:
    """Delete the heartbeats of processes not heard from for :data:`HEARTBEAT_KEEP`; how many."""
    deleted, _ = ProcessHeartbeat.objects.filter(last_seen_at__lt=now - HEARTBEAT_KEEP).delete()
    return deleted


def _entry_update(entry: str, task: str, updates: dict[str, Any], create: Callable[[], dict[str, Any]]) -> None:
    """Apply ``updates`` (F expressions allowed) to the entry's row, creating it with ``create()`` when missing."""
    if PeriodicTaskState.objects.filter(entry=entry).update(**updates):
        return
    try:
        with transaction.atomic():
            PeriodicTaskState.objects.create(entry=entry, task=task, **create())
    except IntegrityError:  # created by another process meanwhile
        PeriodicTaskState.objects.filter(entry=entry).update(**updates)


def periodic_sent(*, entry: str, task: str, interval_seconds: float | None, now: datetime) -> None:
    """Beat sent the entry's task at ``now``."""
    _entry_update(
        entry,
        task,
        {"last_sent_at": now, "sent": F("sent") + 1, "interval_seconds": interval_seconds, "task": task},
        lambda: {"last_sent_at": now, "sent": 1, "interval_seconds": interval_seconds},
    )


def periodic_started(
    *, entry: str, task: str, sent_at: datetime | None, interval_seconds: float | None, now: datetime
) -> float | None:
    """A worker started a run of the entry sent at ``sent_at``; the lag in seconds (None when unknown)."""
    lag = max((now - sent_at).total_seconds(), 0.0) if sent_at is not None else None
    late = int(lag is not None and lag > settings.PERIODIC_TASK_LATE_SECONDS)
    _entry_update(
        entry,
        task,
        {"last_started_at": now, "last_lag_seconds": lag, "runs": F("runs") + 1, "late": F("late") + late},
        lambda: {
            "last_started_at": now,
            "last_lag_seconds": lag,
            "runs": 1,
            "late": late,
            "interval_seconds": interval_seconds,
        },
    )
    return lag


def periodic_finished(*, entry: str, task: str, error: BaseException | None, now: datetime) -> None:
    """A run of the entry ended: a success, or a failure with ``error`` (after its retries)."""
    if error is None:
        _entry_update(entry, task, {"last_succeeded_at": now}, lambda: {"last_succeeded_at": now})
        return
    text = f"{type(error).__name__}: {error}"[:ERROR_CHARS]
    _entry_update(
        entry,
        task,
        {"last_failed_at": now, "last_error": text, "failures": F("failures") + 1},
        lambda: {"last_failed_at": now, "last_error": text, "failures": 1},
    )


def periodic_expired(*, entry: str, task: str, now: datetime) -> None:
    """A send of the entry expired before a worker could start it (counted as late)."""
    _entry_update(entry, task, {"late": F("late") + 1}, lambda: {"late": 1})
