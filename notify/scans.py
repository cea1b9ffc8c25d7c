"""Periodic notifications no single job change causes: "first in line" and "your GPUs are idle".

Both are recorded through the outbox with a key that names the episode (the job's queueing since ``queued_at``,
its run since ``started_at``), so a scan that runs every minute tells each once.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from notify.kinds import Kind
from notify.record import Pending, events_record
from pools.gpu_usage import utilisation_window
from pools.models import Allocation
from queues.engine.wait_codes import never_fits
from queues.models import Job
from queues.selectors import QUEUE_ORDER


def queue_heads() -> list[Job]:
    """The first pending job of every team's queue on every cluster, in queues' order (one query per queue)."""
    pending = Job.objects.filter(state=Job.State.PENDING)
    queues = pending.values_list("team_id", "cluster_id").distinct().order_by()
    heads = (
        pending.filter(team_id=t, cluster_id=c).select_related("team").order_by(*QUEUE_ORDER).first() for t, c in queues
    )
    return [h for h in heads if h is not None]


def first_in_line_scan(*, now: datetime) -> int:
    """Tell the owner of each queue's head job (priority, then queue time) that it is next, once per queueing,
    when it has waited ``NOTIFY_FIRST_IN_LINE_SECONDS`` (a job admitted at once is not told). Returns how many."""
    found = []
    for head in queue_heads():
        waited = now - head.queued_at >= timedelta(seconds=settings.NOTIFY_FIRST_IN_LINE_SECONDS)
        if waited and not never_fits(head.wait_reason):
            found.append(
                Pending(
                    head.owner_id,
                    Kind.FIRST_IN_LINE,
                    f"job:{head.pk}:first_in_line:{head.queued_at.isoformat()}",
                    f"{head.team.slug}/{head.name}: first in line",
                    "Your job is now first in line in its team's queue: it starts as soon as capacity frees up"
                    f"{' (' + head.wait_message.rstrip('.') + ')' if head.wait_message else ''}.",
                    now,
                    job=head,
                    team=head.team,
                )
            )
    with transaction.atomic():
        return events_record(found)


def idle_scan(*, now: datetime) -> int:
    """Warn the owner of each job (of a class without an idle window) that has run ``NOTIFY_IDLE_MINUTES`` with its
    cards' mean DCGM utilisation over that window under ``NOTIFY_IDLE_PERCENT`` (at least 3 samples per card;
    unscraped cards say nothing), once per run. Returns how many jobs were found idle."""
    window = timedelta(minutes=settings.NOTIFY_IDLE_MINUTES)
    since = now - window
    # Jobs of classes with an idle window are negotiated instead (queues.idle): warned, then released.
    allocations = Allocation.objects.filter(
        ended_at__isnull=True,
        job__state=Job.State.RUNNING,
        job__started_at__lte=since,
        job__resource_class__idle_window_seconds__isnull=True,
    ).values_list("job_id", "device_id", "device__parent_id")
    cards: dict[int, set[int]] = {}
    for job_id, device_id, parent_id in allocations:
        cards.setdefault(job_id, set()).add(parent_id or device_id)
    if not cards:
        return 0
    util = utilisation_window({card for job_cards in cards.values() for card in job_cards}, start=since, end=now)
    idle = []
    for job_id, job_cards in cards.items():
        seen = [util[c] for c in job_cards if c in util and util[c].samples >= 3]
        if len(seen) == len(job_cards) and max(u.average for u in seen) < settings.NOTIFY_IDLE_PERCENT:
            idle.append((job_id, max(u.average for u in seen)))
    jobs = Job.objects.select_related("team").in_bulk([j for j, _ in idle])
    found = [
        Pending(
            job.owner_id,
            Kind.IDLE,
            f"job:{job.pk}:idle:{job.started_at.isoformat()}",
            f"{job.team.slug}/{job.name}: GPUs idle",
            f"For the last {settings.NOTIFY_IDLE_MINUTES} minutes its GPUs were at most {busiest:.0f} % busy on "
            "average (DCGM). If it is stuck or done, cancel it to free them for others.",
            now,
            job=job,
            team=job.team,
        )
        for job_id, busiest in idle
        if (job := jobs.get(job_id)) is not None
    ]
    with transaction.atomic():
        return events_record(found)
