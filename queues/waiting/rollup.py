"""The incremental wait-attribution rollup: jobs whose timeline changed are re-read and their tallies replaced.

``wait_attribution_sync(now=…)`` (Celery beat, every 5 minutes) reads the timeline events above its cursor,
recomputes the wait spans of the jobs they belong to from those jobs' whole timelines (``queues.waiting.spans``),
replaces their ``WaitTally`` rows and their ``WaitOpen`` row, and moves the ``WaitWeekly`` sums by the
difference. A run therefore costs what changed since the last one, not the history; recomputing a job is
idempotent, so events read twice (the cursor lags ``LAG`` behind, to catch late commits) change nothing.
``wait_attribution_rebuild`` recomputes every job (the reconcile, and the first run on a portal with history).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Q
from django.db.models.fields.json import KT

from kernel.errors import ValidationFailed
from queues.models import Job, JobEvent, WaitCursor, WaitOpen, WaitTally, WaitWeekly
from queues.waiting.causes import cause_of
from queues.waiting.spans import KINDS, REASON, duration_us, split_weeks, wait_spans, week_start

#: How far the cursor stays behind the newest event a run saw (a transaction open longer is healed by a rebuild).
LAG = timedelta(minutes=10)
#: Jobs recomputed per batch (one query for their events, one for their old tallies).
BATCH = 2000
EPOCH = datetime(1970, 1, 1, tzinfo=ZoneInfo("UTC"))


def attribution_tz() -> tzinfo:
    """The time zone whose Monday midnights cut the weeks: ``BILLING_TIME_ZONE`` (the cost report's days)."""
    return ZoneInfo(settings.BILLING_TIME_ZONE or settings.TIME_ZONE)


@dataclass
class WaitSyncReport:
    """What one run did: jobs recomputed, tallies written, open spans, events read, seconds taken."""

    jobs: int = 0
    tallies: int = 0
    open_spans: int = 0
    events: int = 0
    seconds: float = 0.0


def _devices(job: dict) -> int:
    """Devices the whole gang waits for (``Job.total_devices`` from values())."""
    companions = sum(int(c["count"]) * int(c["devices_per_pod"]) for c in job["companion_pod_sets"] or ())
    return job["devices_per_pod"] * job["pod_count"] + companions


def _cursor() -> WaitCursor:
    """The cursor row, locked until the transaction ends (created on first use)."""
    WaitCursor.objects.bulk_create([WaitCursor(pk=1)], ignore_conflicts=True)
    return WaitCursor.objects.select_for_update().get(pk=1)


@transaction.atomic
def wait_attribution_sync(*, now: datetime) -> WaitSyncReport:
    """Bring the wait attribution up to date with the timeline (incremental; idempotent; serialised by a row lock)."""
    if now.tzinfo is None:
        raise ValidationFailed({"now": [f"{now.isoformat()} has no time zone; give a timezone-aware time"]})
    clock = time.perf_counter()
    cursor = _cursor()
    if cursor.seen_at is not None and now - cursor.seen_at >= LAG:
        # what a run saw at least LAG ago has committed by now: no need to read it again
        cursor.checked_event_id = cursor.seen_event_id
    high = JobEvent.objects.aggregate(m=Max("pk"))["m"] or 0
    first_run = cursor.checked_event_id == 0 and not WaitTally.objects.exists() and not WaitOpen.objects.exists()
    changed = JobEvent.objects.filter(pk__gt=cursor.checked_event_id, pk__lte=high, kind__in=KINDS)
    job_ids = sorted(set(changed.values_list("job_id", flat=True)))
    report = _recompute(job_ids, fresh=first_run)
    report.events = high - cursor.checked_event_id
    if cursor.seen_at is None or now - cursor.seen_at >= LAG:
        cursor.seen_event_id, cursor.seen_at = high, now
    report.seconds = time.perf_counter() - clock
    cursor.last_run_at, cursor.last_run_jobs, cursor.last_run_seconds = now, report.jobs, report.seconds
    cursor.save()
    return report


@transaction.atomic
def wait_attribution_rebuild(*, now: datetime) -> WaitSyncReport:
    """Recompute every job's attribution from its timeline (the reconcile); the cursor restarts at the newest event."""
    clock = time.perf_counter()
    cursor = _cursor()
    high = JobEvent.objects.aggregate(m=Max("pk"))["m"] or 0
    WaitTally.objects.all().delete()
    WaitWeekly.objects.all().delete()
    WaitOpen.objects.all().delete()
    report = WaitSyncReport()
    ids = list(Job.objects.order_by("pk").values_list("pk", flat=True))
    part = _recompute(ids, fresh=True)
    report.jobs, report.tallies, report.open_spans = part.jobs, part.tallies, part.open_spans
    report.events = high
    cursor.checked_event_id = cursor.seen_event_id = high
    cursor.seen_at = now
    report.seconds = time.perf_counter() - clock
    cursor.last_run_at, cursor.last_run_jobs, cursor.last_run_seconds = now, report.jobs, report.seconds
    cursor.save()
    return report


def job_attribution(
    job: dict, events: Iterable[tuple[str, datetime, str]], tz: tzinfo
) -> tuple[dict[tuple[date, str], list[int]], WaitOpen | None]:
    """One job's closed waiting per (week, cause) as [device µs, wall µs], and its open span (unsaved)."""
    devices = _devices(job)
    tallies: dict[tuple[date, str], list[int]] = defaultdict(lambda: [0, 0])
    open_span = None
    for span in wait_spans(events):
        cause = cause_of(span.code)
        if span.end is None:
            open_span = WaitOpen(
                job_id=job["pk"],
                team_id=job["team_id"],
                resource_class_id=job["resource_class_id"],
                cause=cause,
                code=span.code,
                since=span.start,
                since_us=duration_us(EPOCH, span.start),
                since_week=week_start(span.start, tz),
                devices=devices,
            )
            continue
        for week, us in split_weeks(span.start, span.end, tz):
            cell = tallies[(week, cause)]
            cell[0] += devices * us
            cell[1] += us
    return tallies, open_span


def _recompute(job_ids: Sequence[int], *, fresh: bool = False) -> WaitSyncReport:
    """Replace the tallies and open spans of ``job_ids`` and move the weekly sums by the difference (once, at the
    end: a week's row changes once per run however many of its jobs changed).

    ``fresh``: nothing is there yet (the rebuild, the first run): nothing old to read or subtract.
    """
    report = WaitSyncReport()
    tz = attribution_tz()
    delta: dict[tuple[int, int, date, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for i in range(0, len(job_ids), BATCH):
        ids = job_ids[i : i + BATCH]
        jobs = {
            j["pk"]: j
            for j in Job.objects.filter(pk__in=ids).values(
                "pk", "team_id", "resource_class_id", "devices_per_pod", "pod_count", "companion_pod_sets"
            )
        }
        events: dict[int, list[tuple[str, datetime, str]]] = defaultdict(list)
        rows = (
            JobEvent.objects.filter(job_id__in=ids, kind__in=KINDS)
            .order_by("job_id", "at", "pk")
            .values_list("job_id", "kind", "at", KT("details__code"))
        )
        for job_id, kind, at, code in rows:
            events[job_id].append((kind, at, (code or "") if kind == REASON else ""))
        if not fresh:
            old = WaitTally.objects.filter(job_id__in=ids).values_list(
                "team_id", "resource_class_id", "week", "cause", "device_us", "wait_us"
            )
            for team_id, class_id, week, cause, device_us, wait_us in old:
                cell = delta[(team_id, class_id, week, cause)]
                cell[0] -= device_us
                cell[1] -= wait_us
                cell[2] -= 1
            WaitTally.objects.filter(job_id__in=ids).delete()
            WaitOpen.objects.filter(job_id__in=ids).delete()
        tallies: list[WaitTally] = []
        opens: list[WaitOpen] = []
        for job_id, job in jobs.items():
            per_week, open_span = job_attribution(job, events.get(job_id, ()), tz)
            for (week, cause), (device_us, wait_us) in per_week.items():
                tallies.append(
                    WaitTally(
                        job_id=job_id,
                        team_id=job["team_id"],
                        resource_class_id=job["resource_class_id"],
                        week=week,
                        cause=cause,
                        device_us=device_us,
                        wait_us=wait_us,
                    )
                )
                cell = delta[(job["team_id"], job["resource_class_id"], week, cause)]
                cell[0] += device_us
                cell[1] += wait_us
                cell[2] += 1
            if open_span is not None:
                opens.append(open_span)
        WaitTally.objects.bulk_create(tallies, batch_size=1000)
        WaitOpen.objects.bulk_create(opens, batch_size=1000)
        report.jobs += len(jobs)
        report.tallies += len(tallies)
        report.open_spans += len(opens)
    _apply_weekly(delta)
    return report


def _apply_weekly(delta: dict[tuple[int, int, date, str], list[int]]) -> None:
    """Add the differences to the weekly sums: create, update, or delete rows left with no job."""
    delta = {k: v for k, v in delta.items() if any(v)}
    if not delta:
        return
    weeks_of: dict[int, set[date]] = defaultdict(set)
    for team_id, _class_id, week, _cause in delta:
        weeks_of[team_id].add(week)
    touched = Q()
    for team_id, weeks in weeks_of.items():
        touched |= Q(team_id=team_id, week__in=sorted(weeks))
    existing = {(r.team_id, r.resource_class_id, r.week, r.cause): r for r in WaitWeekly.objects.filter(touched)}
    create, update, drop = [], [], []
    for key, (device_us, wait_us, jobs) in delta.items():
        row = existing.get(key)
        if row is None:
            create.append(
                WaitWeekly(
                    team_id=key[0],
                    resource_class_id=key[1],
                    week=key[2],
                    cause=key[3],
                    device_us=device_us,
                    wait_us=wait_us,
                    jobs=jobs,
                )
            )
            continue
        row.device_us += device_us
        row.wait_us += wait_us
        row.jobs += jobs
        (drop if row.jobs <= 0 else update).append(row)
    WaitWeekly.objects.bulk_create(create, batch_size=1000)
    WaitWeekly.objects.bulk_update(update, ["device_us", "wait_us", "jobs"], batch_size=1000)
    if drop:
        WaitWeekly.objects.filter(pk__in=[r.pk for r in drop]).delete()
