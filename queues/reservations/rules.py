"""The rules a reservation is checked against: what refuses it at once, and what leaves it to an admin.

Refused at once, with the reason (``refusals``):

* more than the healthy capacity of that hardware on the cluster (devices of the flavor and resource that are
  healthy or degraded, on ready, schedulable nodes), alone or together with the approved reservations that overlap
  it ("together with #4 …, 20 H100 GPUs would be reserved from Tue 10:00 to 11:00: the cluster has 16 healthy");
* more quota than the rest of the team's cohort tree holds in that flavor (no capacity is invented:
  ``queues.engine.reservations``), also counting the overlapping approved reservations;
* the team's weekly limit (``ReservationPolicy.max_hours_per_week``: hours of window, its live reservations of each
  week touched counted) and how far ahead a window may start (``max_days_ahead``);
* a team without a queue in a cohort, or without quota of that flavor, on the cluster.

Within the rules, a request is approved at once when automatic approval is on and it stays within the automatic
limits (devices, hours in each week, days ahead; ``auto_blockers``); otherwise it waits for an admin, who approves
it (the refusal rules are checked again then) or refuses it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from itertools import pairwise

from django.db.models import Q
from django.utils import timezone

from kernel.quantity import format_quantity
from pools.models import Cluster, ResourceFlavor
from queues.engine import model as m
from queues.engine.messages import noun
from queues.engine.reservations import hold_quota
from queues.engine_input import live_policy_rows, policy_state
from queues.models import Reservation, ReservationPolicy, Team, TeamQuota
from queues.reservations.capacity import healthy_capacity
from queues.reservations.holds import hold_name, lead, until_text


def reservation_policy() -> ReservationPolicy:
    """The reservation rules (the one row; created with the defaults when missing)."""
    policy, _ = ReservationPolicy.objects.get_or_create(pk=1)
    return policy


@dataclass(frozen=True)
class Request:
    """What a reservation asks for (a request not yet recorded, or a recorded one checked again)."""

    team: Team
    cluster: Cluster
    flavor: ResourceFlavor
    resource_name: str
    count: int
    starts_at: datetime
    ends_at: datetime
    pk: int | None = None

    @classmethod
    def of(cls, reservation: Reservation) -> Request:
        """A recorded reservation as a request (to check it again on approval)."""
        return cls(
            team=reservation.team,
            cluster=reservation.cluster,
            flavor=reservation.flavor,
            resource_name=reservation.resource_name,
            count=reservation.count,
            starts_at=reservation.starts_at,
            ends_at=reservation.ends_at,
            pk=reservation.pk,
        )

    @property
    def label(self) -> str:
        """ "8 H100 GPUs"."""
        return noun(self.resource_name, self.count, self.flavor.display_name or self.flavor.name)


@dataclass
class Verdict:
    """The rules' answer: reasons to refuse (none: it may be approved) and reasons it needs an admin."""

    refusals: list[str] = field(default_factory=list)
    needs_admin: list[str] = field(default_factory=list)


def _when(start: datetime, end: datetime) -> str:
    """ "Tue 10:00 to 11:00" or "Tue 10:00 to Wed 02:00"."""
    a, b = timezone.localtime(start), timezone.localtime(end)
    tail = f"{b:%H:%M}" if a.date() == b.date() else f"{b:%a} {b.day} {b:%b %H:%M}"
    return f"{a:%a} {a.day} {a:%b %H:%M} to {tail} {b.tzname()}"


def describe(reservation: Reservation) -> str:
    """ "#4 (Vision, 8 H100 GPUs, Tue 2 Dec 09:00 to 12:00 UTC)"."""
    flavor = reservation.flavor
    what = noun(reservation.resource_name, reservation.count, flavor.display_name or flavor.name)
    when = _when(reservation.starts_at, reservation.ends_at)
    return f"{hold_name(reservation)} ({reservation.team.name}, {what}, {when})"


def _overlapping(request: Request) -> list[Reservation]:
    """Approved reservations of the same cluster and flavor whose windows overlap the request's."""
    rows = (
        Reservation.objects.filter(
            cluster=request.cluster,
            flavor=request.flavor,
            resource_name=request.resource_name,
            state=Reservation.State.APPROVED,
            starts_at__lt=request.ends_at,
            ends_at__gt=request.starts_at,
        )
        .filter(Q(cancelled_at__isnull=True) | Q(cancelled_at__gt=request.starts_at))
        .select_related("team", "flavor")
        .order_by("starts_at", "pk")
    )
    return [r for r in rows if r.pk != request.pk and r.window_end > request.starts_at]


def _stretches(request: Request, others: list[Reservation]) -> list[tuple[datetime, datetime, list[Reservation]]]:
    """The request's window cut where the set of overlapping reservations changes: (from, to, those in force)."""
    cuts = {request.starts_at, request.ends_at}
    for other in others:
        cuts.update(t for t in (other.starts_at, other.window_end) if request.starts_at < t < request.ends_at)
    points = sorted(cuts)
    out = []
    for a, b in pairwise(points):
        out.append((a, b, [o for o in others if o.starts_at < b and o.window_end > a]))
    return out


def _capacity_refusals(request: Request, others: list[Reservation]) -> list[str]:
    healthy = healthy_capacity(cluster=request.cluster, flavor=request.flavor, resource_name=request.resource_name)
    label = request.flavor.display_name or request.flavor.name
    units = noun(request.resource_name, healthy, label)
    if request.count > healthy:
        return [
            f"{request.label} are more than the healthy capacity of that hardware: cluster {request.cluster.name} has "
            f"{units} that can run jobs."
        ]
    worst = None
    for a, b, live in _stretches(request, others):
        total = request.count + sum(o.count for o in live)
        if total > healthy and (worst is None or total > worst[0]):
            worst = (total, a, b, live)
    if worst is None:
        return []
    total, a, b, live = worst
    return [
        f"Together with {', '.join(describe(o) for o in live)}, {noun(request.resource_name, total, label)} would be "
        f"reserved from {_when(a, b)}: more than the {units} of cluster {request.cluster.name} that can run jobs."
    ]


def _hold(request: Request, queue: str, *, name: str = "request") -> m.QuotaHold:
    return m.QuotaHold(
        name=name,
        cluster_queue=queue,
        flavor=request.flavor.name,
        resource=request.resource_name,
        count=request.count,
        start=request.starts_at.timestamp(),
        end=request.ends_at.timestamp(),
    )


def _quota_refusals(request: Request, quota: TeamQuota, others: list[Reservation]) -> list[str]:
    """What the cohort tree cannot give, in the stretch where it gives least (the overlapping approved holds first)."""
    policy, _ = policy_state(live_policy_rows(request.cluster))
    queues = dict(
        TeamQuota.objects.filter(cluster=request.cluster, team_id__in={o.team_id for o in others}).values_list(
            "team_id", "cluster_queue_name"
        )
    )
    for a, b, live in _stretches(request, others):
        holds = [
            m.QuotaHold(
                name=hold_name(o),
                cluster_queue=queues.get(o.team_id, ""),
                flavor=o.flavor.name,
                resource=o.resource_name,
                count=o.count,
                start=o.starts_at.timestamp(),
                end=o.window_end.timestamp(),
            )
            for o in live
        ]
        # the request applies after the holds already approved (a start just after theirs)
        mine = replace(_hold(request, quota.cluster_queue_name), start=_after(holds))
        outcome = hold_quota(policy.cluster_queues, policy.cohorts, [*holds, mine]).outcomes[-1]
        if outcome.problem:
            given = format_quantity(outcome.moved, request.resource_name)
            context = f" (with {', '.join(describe(o) for o in live)} in force)" if live else ""
            return [
                f"The rest of cohort {quota.cohort.name if quota.cohort_id else '-'}'s teams cannot give "
                f"{request.label} of their quota from {_when(a, b)}{context}: only {given} can move to "
                f"{request.team.name} ({outcome.problem}). No capacity is invented: ask for fewer, or ask an admin to "
                f"lower another team's quota."
            ]
    return []


def _after(holds: list[m.QuotaHold]) -> float:
    return max((h.start for h in holds), default=0.0) + 1.0


def _week_start(when: datetime) -> datetime:
    local = timezone.localtime(when)
    monday = local - timedelta(days=local.weekday())
    return monday.replace(hour=0, minute=0, second=0, microsecond=0)


def week_hours(request: Request) -> list[tuple[datetime, float]]:
    """Per week the request's window touches (its Monday, local time): hours of the team's live reservations in it,
    the request's own included."""
    others = Reservation.objects.filter(
        team=request.team,
        state__in=(Reservation.State.REQUESTED, Reservation.State.APPROVED),
        starts_at__lt=_week_start(request.ends_at) + timedelta(days=7),
        ends_at__gt=_week_start(request.starts_at),
    )
    windows = [(o.starts_at, o.window_end) for o in others if o.pk != request.pk]
    windows.append((request.starts_at, request.ends_at))
    out = []
    week = _week_start(request.starts_at)
    while week < request.ends_at:
        nxt = week + timedelta(days=7)
        hours = sum(max((min(b, nxt) - max(a, week)).total_seconds(), 0) for a, b in windows) / 3600
        out.append((week, hours))
        week = nxt
    return out


def _weekly(request: Request, limit: int, *, what: str) -> list[str]:
    out = []
    for week, hours in week_hours(request):
        if hours > limit + 1e-9:
            out.append(
                f"{request.team.name} would have {hours:g} h of reservations in the week of {week:%a} {week.day} "
                f"{week:%b}: {what} {limit} h a week."
            )
    return out


def check(request: Request, *, policy: ReservationPolicy, now: datetime) -> Verdict:
    """Every rule on ``request`` (see the module's docstring): reasons to refuse it, and reasons it needs an admin."""
    verdict = Verdict()
    quota = TeamQuota.objects.filter(team=request.team, cluster=request.cluster).select_related("cohort").first()
    if quota is None:
        verdict.refusals.append(f"{request.team.name} has no queue on cluster {request.cluster.name}.")
        return verdict
    if quota.cohort_id is None:
        verdict.refusals.append(
            f"{request.team.name}'s queue on cluster {request.cluster.name} is in no cohort: no other team's quota "
            "can move to it while the window is open. An admin can put it in one."
        )
        return verdict
    if not quota.lines.filter(flavor=request.flavor, resource_name=request.resource_name).exists():
        verdict.refusals.append(
            f"{request.team.name}'s queue has no quota line for {request.flavor.display_name or request.flavor.name} "
            f"({request.resource_name}): an admin must add one (a nominal of 0 is enough)."
        )
        return verdict
    ahead = request.starts_at - now
    if ahead > timedelta(days=policy.max_days_ahead):
        verdict.refusals.append(
            f"The window starts {ahead.days} days ahead: reservations may start at most {policy.max_days_ahead} days "
            "ahead."
        )
    verdict.refusals += _weekly(request, policy.max_hours_per_week, what="a team may reserve at most")
    others = _overlapping(request)
    verdict.refusals += _capacity_refusals(request, others)
    if not verdict.refusals:
        verdict.refusals += _quota_refusals(request, quota, others)
    if verdict.refusals:
        return verdict
    if not policy.auto_approve:
        verdict.needs_admin.append("Automatic approval is off: an admin decides every reservation.")
    if request.count > policy.auto_max_devices:
        verdict.needs_admin.append(
            f"{request.label} are more than the {policy.auto_max_devices} approved automatically."
        )
    if ahead > timedelta(days=policy.auto_max_days_ahead):
        verdict.needs_admin.append(
            f"The window starts more than {policy.auto_max_days_ahead} days ahead, the most approved automatically."
        )
    verdict.needs_admin += _weekly(request, policy.auto_max_hours_per_week, what="approved automatically up to")
    return verdict


def overlapping(reservations: Iterable[Reservation], start: datetime, end: datetime) -> list[Reservation]:
    """Those of ``reservations`` holding capacity at some time in [start, end)."""
    return [r for r in reservations if r.starts_at < end and r.window_end > start]


__all__ = [
    "Request",
    "Verdict",
    "check",
    "describe",
    "healthy_capacity",
    "lead",
    "overlapping",
    "reservation_policy",
    "until_text",
    "week_hours",
]
