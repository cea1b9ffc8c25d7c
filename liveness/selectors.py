"""Reads of liveness: the state of each component, each periodic entry, and whether the pages' live data is live.

One predicate, :func:`live_data_status`, decides whether the pages that show live cluster data may say "updated …;
refreshes every N s" or must say that their data is paused and since when (the ``live_note`` template tag renders
it, on every such page and fragment); :func:`liveness_status` is what ``/status.json``, the status page and the
metrics read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from celery.schedules import crontab
from django.conf import settings
from django.db import DatabaseError, connection
from django.db.models import Min, Q
from django.utils import timezone

from liveness.broker import broker_check, broker_check_cached
from liveness.celery_hooks import CHILD_SEPARATOR
from liveness.models import PeriodicTaskState, ProcessHeartbeat

#: The beat entries whose runs move the live cluster data (job states, allocations): when one of them (or a task
#: it sends) stops running, the pages say that their live data is paused.
LIVE_DATA_ENTRIES = ("simulated-clusters-tick", "kube-sync-clusters")
#: Heartbeats listed on the status page: the processes heard from within this window.
RECENT_PROCESSES = timedelta(days=1)


@dataclass(frozen=True)
class Component:
    """One component's state: ok, when it was last heard from (processes), and why not ok (in words)."""

    ok: bool
    last_seen: datetime | None = None
    detail: str = ""


@dataclass(frozen=True)
class EntryStatus:
    """One beat entry (or the tasks an entry's runs send, ``"<entry> › <task>"``) as the status shows it."""

    entry: str
    task: str
    interval_seconds: float | None
    last_sent: datetime | None
    last_run: datetime | None
    lag_seconds: float | None
    last_success: datetime | None
    last_failure: datetime | None
    last_error: str
    runs: int
    failures: int
    late: int
    overdue: bool
    failing: bool

    @property
    def ok(self) -> bool:
        """Neither overdue nor failing since its last success."""
        return not (self.overdue or self.failing)

    @property
    def is_child(self) -> bool:
        """A task sent by an entry's runs, not an entry of the schedule."""
        return CHILD_SEPARATOR in self.entry


@dataclass(frozen=True)
class Liveness:
    """Every component at ``now``: database, broker, worker, beat, the periodic tasks, and the recent processes."""

    now: datetime
    database: Component
    broker: Component
    worker: Component
    beat: Component
    entries: list[EntryStatus]
    processes: list[ProcessHeartbeat] = field(default_factory=list)

    @property
    def tasks(self) -> Component:
        """The periodic tasks together: ok when none is overdue or failing."""
        bad = [e.entry for e in self.entries if not e.ok]
        return Component(ok=not bad, detail=", ".join(bad))

    @property
    def ok(self) -> bool:
        """Every component ok."""
        return all(c.ok for c in (self.database, self.broker, self.worker, self.beat, self.tasks))


@dataclass(frozen=True)
class LiveData:
    """Whether the live cluster data is live; when not, since when and why, as one sentence for the pages."""

    live: bool
    since: datetime | None = None
    reason: str = ""

    @property
    def message(self) -> str:
        """ "Live data paused since 00:01: the background worker is not running. Job states are as of then." """
        if self.live:
            return ""
        when = timezone.localtime(self.since).strftime("%H:%M") if self.since else "the start"
        if self.since and timezone.localtime(self.since).date() != timezone.localdate():
            when = timezone.localtime(self.since).strftime("%Y-%m-%d %H:%M")
        return f"Live data paused since {when}: {self.reason}. Job states are as of then."


def _stale_before(now: datetime) -> datetime:
    return now - timedelta(seconds=settings.HEARTBEAT_STALE_SECONDS)


def process_component(kind: str, *, now: datetime) -> Component:
    """The newest heartbeat of ``kind``: ok when heard from within ``HEARTBEAT_STALE_SECONDS`` (one query)."""
    last = ProcessHeartbeat.objects.filter(kind=kind).order_by("-last_seen_at").first()
    name = "worker" if kind == ProcessHeartbeat.Kind.WORKER else "scheduler (beat)"
    if last is None:
        return Component(ok=False, detail=f"no {name} has ever run")
    if last.stopped_at is not None:
        return Component(ok=False, last_seen=last.last_seen_at, detail=f"the {name} was stopped")
    if last.last_seen_at < _stale_before(now):
        return Component(ok=False, last_seen=last.last_seen_at, detail=f"the {name} has not been heard from")
    return Component(ok=True, last_seen=last.last_seen_at)


def _beat_up_since(now: datetime) -> datetime | None:
    """When the running beat started (None: no beat heard from lately)."""
    return (
        ProcessHeartbeat.objects.filter(kind=ProcessHeartbeat.Kind.BEAT, last_seen_at__gte=_stale_before(now))
        .aggregate(first=Min("started_at"))
        .get("first")
    )


def crontab_due_after(schedule: crontab, last: datetime) -> datetime:
    """When a crontab entry is next due after ``last`` (whatever the clock says now: Celery's ``remaining_estimate``
    is that time less the wall clock's now, not a span from ``last``)."""
    start, delta, _now = schedule.remaining_delta(last)
    return start + delta


def _overdue(schedule, row: PeriodicTaskState | None, *, since: datetime | None, now: datetime) -> bool:
    """Whether the entry should have run and has not: two periods plus the late margin since its last start (or
    since beat started, for an entry never run); a crontab entry, its next due time plus the margin."""
    margin = timedelta(seconds=settings.PERIODIC_TASK_LATE_SECONDS)
    last = row.last_started_at if row and row.last_started_at else since
    if last is None:
        return False
    if isinstance(schedule, crontab):
        return now > crontab_due_after(schedule, last) + margin
    seconds = schedule if isinstance(schedule, int | float) else schedule.run_every.total_seconds()
    return now > last + timedelta(seconds=2 * seconds) + margin


def _failing(row: PeriodicTaskState) -> bool:
    failed, succeeded = row.last_failed_at, row.last_succeeded_at
    return failed is not None and (succeeded is None or failed > succeeded)


def periodic_status(*, now: datetime) -> list[EntryStatus]:
    """Every entry of ``CELERY_BEAT_SCHEDULE`` (run or not), then the tasks their runs sent (two queries)."""
    rows = {row.entry: row for row in PeriodicTaskState.objects.all()}
    since = _beat_up_since(now)
    out = []
    for name, spec in sorted(settings.CELERY_BEAT_SCHEDULE.items()):
        row = rows.pop(name, None)
        schedule = spec["schedule"]
        out.append(_entry_status(name, spec["task"], row, overdue=_overdue(schedule, row, since=since, now=now)))
    for name, row in sorted(rows.items()):
        if CHILD_SEPARATOR in name:  # entries no longer in the schedule are left out
            out.append(_entry_status(name, row.task, row, overdue=False))
    return out


def _entry_status(name: str, task: str, row: PeriodicTaskState | None, *, overdue: bool) -> EntryStatus:
    if row is None:
        return EntryStatus(name, task, None, None, None, None, None, None, "", 0, 0, 0, overdue, False)
    return EntryStatus(
        entry=name,
        task=task,
        interval_seconds=row.interval_seconds,
        last_sent=row.last_sent_at,
        last_run=row.last_started_at,
        lag_seconds=row.last_lag_seconds,
        last_success=row.last_succeeded_at,
        last_failure=row.last_failed_at,
        last_error=row.last_error,
        runs=row.runs,
        failures=row.failures,
        late=row.late,
        overdue=overdue,
        failing=_failing(row),
    )


def database_component() -> Component:
    """Whether the database answers a query now."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:
        return Component(ok=False, detail=f"{type(exc).__name__}: {exc}")
    return Component(ok=True)


def liveness_status(*, now: datetime | None = None, processes: bool = False) -> Liveness:
    """Every component now (the broker checked now, the database queried); with ``processes``, the heartbeats of
    the last day for the status page."""
    now = now or timezone.now()
    broker_ok, broker_detail = broker_check()
    recent = []
    if processes:
        recent = list(ProcessHeartbeat.objects.filter(last_seen_at__gte=now - RECENT_PROCESSES)[:50])
    return Liveness(
        now=now,
        database=database_component(),
        broker=Component(ok=broker_ok, detail=broker_detail),
        worker=process_component(ProcessHeartbeat.Kind.WORKER, now=now),
        beat=process_component(ProcessHeartbeat.Kind.BEAT, now=now),
        entries=periodic_status(now=now),
        processes=recent,
    )


def _live_entry_rows(now: datetime) -> list[EntryStatus]:
    """The entries that move the live data, and the tasks their runs sent (one query, two for an entry never run)."""
    wanted = Q(entry__in=LIVE_DATA_ENTRIES)
    for name in LIVE_DATA_ENTRIES:
        wanted |= Q(entry__startswith=f"{name}{CHILD_SEPARATOR}")
    rows = {row.entry: row for row in PeriodicTaskState.objects.filter(wanted)}
    out = []
    for name in LIVE_DATA_ENTRIES:
        spec = settings.CELERY_BEAT_SCHEDULE.get(name)
        if spec is None:
            continue
        row = rows.pop(name, None)
        since = None if row is not None and row.last_started_at else _beat_up_since(now)
        overdue = _overdue(spec["schedule"], row, since=since, now=now)
        out.append(_entry_status(name, spec["task"], row, overdue=overdue))
    return out + [_entry_status(name, row.task, row, overdue=False) for name, row in sorted(rows.items())]


def live_data_status(*, now: datetime | None = None) -> LiveData:
    """Whether the pages' live cluster data is live: worker and beat heard from, and the entries that move it
    (``LIVE_DATA_ENTRIES`` and the tasks they send) neither overdue nor failing. When not: since when (the last
    time it was) and why, in words."""
    now = now or timezone.now()
    for kind, reason in (
        (ProcessHeartbeat.Kind.WORKER, "the background worker is not running"),
        (ProcessHeartbeat.Kind.BEAT, "the scheduler (Celery beat) is not running"),
    ):
        component = process_component(kind, now=now)
        if not component.ok:
            return LiveData(live=False, since=component.last_seen, reason=reason)
    for status in _live_entry_rows(now):
        if status.overdue:
            broker_ok, _detail = broker_check_cached()
            reason = (
                "the background worker cannot reach its message broker"
                if not broker_ok
                else f"the background task {status.entry} has not run since then"
            )
            return LiveData(live=False, since=status.last_success or status.last_run, reason=reason)
        if status.failing:
            error = status.last_error.split(":", 1)[0] or "an error"
            return LiveData(
                live=False,
                since=status.last_success,
                reason=f"the background task {status.entry} fails ({error})",
            )
    return LiveData(live=True)
