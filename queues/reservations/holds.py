"""Reservations as the engine's holds: when each is in force on its cluster, and what it does to the queue policy.

A reservation holds capacity from ``RESERVATION_LEAD_SECONDS`` before its start — the portal pushes the window's
opening ahead of time, so the borrowers are reclaimed (and checkpointed) before the first minute of the window — to
its end, or to when it was cancelled. The same holds reach both backends: the engine input of a simulated cluster
(the engine applies those in force at its time) and the Kueue objects the portal pushes to a Kubernetes cluster
(``quota_overrides``); ``queues.engine.reservations`` holds the rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from pools.models import Cluster
from queues.engine import model as m
from queues.engine.reservations import CLUSTER_QUEUE, HeldQuota, hold_quota, in_force
from queues.models import Reservation, TeamQuota

#: Reservation states that held (or hold) capacity: approved ones, and cancelled ones until their cancellation.
HOLDING_STATES = (Reservation.State.APPROVED, Reservation.State.CANCELLED)


def lead() -> timedelta:
    """How long before its start a window's opening is applied (``RESERVATION_LEAD_SECONDS``)."""
    return timedelta(seconds=float(settings.RESERVATION_LEAD_SECONDS))


def hold_window(reservation: Reservation) -> tuple[datetime, datetime] | None:
    """When ``reservation`` holds capacity on its cluster: [start − lead, end or cancellation); None: never."""
    if reservation.state not in HOLDING_STATES or reservation.decided_at is None:
        return None
    begin = reservation.starts_at - lead()
    end = reservation.ends_at
    if reservation.cancelled_at is not None:
        end = min(end, reservation.cancelled_at)
    return (begin, end) if end > begin else None


def charged_window(reservation: Reservation) -> tuple[datetime, datetime] | None:
    """The window the team pays for: from its start to its end, or to its cancellation; None: nothing."""
    if reservation.state not in HOLDING_STATES or reservation.decided_at is None:
        return None
    end = reservation.window_end
    return (reservation.starts_at, end) if end > reservation.starts_at else None


def hold_name(reservation: Reservation) -> str:
    """The hold's name in the engine and in wait reasons."""
    return f"#{reservation.pk}"


def until_text(when: datetime, *, now: datetime | None = None) -> str:
    """A window's end as a sentence says it: "17:00 UTC" today, else "Thu 4 Dec 17:00 UTC"."""
    local = timezone.localtime(when)
    today = timezone.localtime(now or timezone.now()).date()
    stamp = local.strftime("%H:%M") if local.date() == today else f"{local:%a} {local.day} {local:%b %H:%M}"
    return f"{stamp} {local.tzname()}"


def holding_reservations(*, cluster: Cluster, start: datetime, end: datetime | None = None) -> list[Reservation]:
    """The cluster's reservations that hold capacity at some time in [start, end) (``end`` None: from ``start`` on)."""
    rows = Reservation.objects.filter(cluster=cluster, state__in=HOLDING_STATES, decided_at__isnull=False)
    rows = rows.filter(ends_at__gt=start).filter(Q(cancelled_at__isnull=True) | Q(cancelled_at__gt=start - lead()))
    if end is not None:
        rows = rows.filter(starts_at__lt=end + lead())
    return [r for r in rows.select_related("team", "flavor").order_by("starts_at", "pk") if hold_window(r)]


def cluster_holds(
    *, cluster: Cluster, start: datetime, end: datetime | None = None, now: datetime | None = None
) -> tuple[m.QuotaHold, ...]:
    """The engine's holds of the cluster's reservations that hold capacity in [start, end) (see ``hold_window``)."""
    rows = holding_reservations(cluster=cluster, start=start, end=end)
    if not rows:
        return ()
    queues = dict(
        TeamQuota.objects.filter(cluster=cluster, team_id__in={r.team_id for r in rows}).values_list(
            "team_id", "cluster_queue_name"
        )
    )
    out = []
    for row in rows:
        window = hold_window(row)
        queue = queues.get(row.team_id)
        if window is None or queue is None:
            continue
        out.append(
            m.QuotaHold(
                name=hold_name(row),
                cluster_queue=queue,
                flavor=row.flavor.name,
                resource=row.resource_name,
                count=row.count,
                start=window[0].timestamp(),
                end=window[1].timestamp(),
                holder=row.team.name,
                until=until_text(window[1], now=now),
            )
        )
    return tuple(out)


@dataclass
class QuotaOverrides:
    """What the holds in force change in a cluster's Kueue objects: per (kind, name, flavor, resource) the nominal
    quota and lending limit, and the ClusterQueues whose ``reclaimWithinCohort`` becomes ``Any``."""

    lines: dict[tuple[str, str, str, str], tuple[int, int | None]] = field(default_factory=dict)
    reclaim_any: set[str] = field(default_factory=set)
    held: HeldQuota | None = None

    def __bool__(self) -> bool:
        return bool(self.lines or self.reclaim_any)


def _quota_lines(owners, kind: str) -> dict[tuple[str, str, str, str], tuple[int, int | None]]:
    return {
        (kind, owner.name, fq.name, rq.name): (rq.nominal, rq.lending_limit)
        for owner in owners
        for g in owner.resource_groups
        for fq in g.flavors
        for rq in fq.resources
    }


def quota_overrides(*, policy: m.ClusterState, holds: tuple[m.QuotaHold, ...], at: datetime) -> QuotaOverrides:
    """The changes the holds in force at ``at`` make to ``policy`` (the cluster's policy without them)."""
    active = in_force(holds, at.timestamp())
    if not active:
        return QuotaOverrides()
    held = hold_quota(policy.cluster_queues, policy.cohorts, active)
    before = {**_quota_lines(policy.cluster_queues, CLUSTER_QUEUE), **_quota_lines(policy.cohorts, "Cohort")}
    after = {**_quota_lines(held.cluster_queues, CLUSTER_QUEUE), **_quota_lines(held.cohorts, "Cohort")}
    lines = {key: value for key, value in after.items() if before.get(key) != value}
    old = {cq.name: cq.preemption.reclaim_within_cohort for cq in policy.cluster_queues}
    reclaim = {cq.name for cq in held.cluster_queues if cq.preemption.reclaim_within_cohort != old.get(cq.name)}
    return QuotaOverrides(lines=lines, reclaim_any=reclaim, held=held)


__all__ = [
    "HOLDING_STATES",
    "QuotaOverrides",
    "charged_window",
    "cluster_holds",
    "hold_name",
    "hold_window",
    "holding_reservations",
    "lead",
    "quota_overrides",
    "until_text",
]
