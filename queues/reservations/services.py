"""The only writers of reservations: a lead's request, an admin's approval or refusal, a cancellation, and the edges of
the windows applied to the clusters.

Every write takes the flavor's row lock, then the team's (that order), so two requests for the same hardware, or two
of the same team, are checked one after the other: two overlapping approvals can never exceed the capacity together.
A window's edges reach a cluster through the same path as an admin's policy change — an audited ``PolicyPush`` row,
handed to the cluster integration after commit (``queues.policy.pushes``), drift-checked there — pushed
``RESERVATION_LEAD_SECONDS`` ahead of the start (``reservation_edges_apply``, run by a beat task every
``RESERVATION_EDGE_SECONDS`` and at once when a decision or a cancellation touches an open window).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from kernel.errors import Conflict, DomainError, ValidationFailed
from pools.models import Cluster, ResourceClass, ResourceFlavor
from queues import selectors as sel
from queues.engine.reservations import hold_quota, in_force
from queues.engine_input import live_policy_rows, policy_state
from queues.models import Membership, Reservation, Team, TeamQuota
from queues.policy.pushes import policy_push_request
from queues.reservations.holds import cluster_holds, hold_name, hold_window, lead
from queues.reservations.rules import Request, check, describe, reservation_policy

#: A start this far in the past is still taken as "now" (a form filled in a minute ago).
START_GRACE = timedelta(minutes=5)
MAX_PURPOSE = 200


class ReservationForbidden(DomainError):
    """The user may not do this to the reservation (the API answers 403, the pages say why)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="forbidden")


def is_lead(user: AbstractBaseUser, team: Team) -> bool:
    """Whether ``user`` leads ``team``."""
    return Membership.objects.filter(team=team, user_id=user.pk, role=Membership.Role.LEAD).exists()


def may_request(user: AbstractBaseUser, team: Team) -> bool:
    """Team leads request reservations for their team; platform admins for any team."""
    return bool(getattr(user, "is_staff", False)) or is_lead(user, team)


def may_decide(user: AbstractBaseUser) -> bool:
    """Platform admins approve and refuse reservations."""
    return bool(getattr(user, "is_staff", False))


def may_cancel(user: AbstractBaseUser, reservation: Reservation) -> bool:
    """Who asked, a lead of the team, or a platform admin."""
    return (
        may_decide(user)
        or (reservation.requested_by_id is not None and reservation.requested_by_id == user.pk)
        or is_lead(user, reservation.team)
    )


def _lock(flavor: ResourceFlavor, team: Team) -> None:
    """The flavor's row, then the team's: requests for the same hardware or of the same team run one at a time."""
    ResourceFlavor.objects.select_for_update().filter(pk=flavor.pk).first()
    Team.objects.select_for_update().filter(pk=team.pk).first()


def _input_errors(
    *, count: int, starts_at: datetime, ends_at: datetime, purpose: str, now: datetime
) -> dict[str, list[str]]:
    policy = reservation_policy()
    errors: dict[str, list[str]] = defaultdict(list)
    if count < 1:
        errors["count"].append("Reserve at least 1 device.")
    for name, value in (("starts_at", starts_at), ("ends_at", ends_at)):
        if timezone.is_naive(value):
            errors[name].append("Give a time with its time zone.")
    if errors:
        return dict(errors)
    if starts_at < now - START_GRACE:
        errors["starts_at"].append(
            f"The window starts in the past ({starts_at:%Y-%m-%d %H:%M %Z}): pick a later start."
        )
    if ends_at <= starts_at:
        errors["ends_at"].append("The window must end after it starts.")
    else:
        length = ends_at - starts_at
        if length < timedelta(minutes=policy.min_window_minutes):
            errors["ends_at"].append(f"A window lasts at least {policy.min_window_minutes} minutes.")
        if length > timedelta(hours=policy.max_window_hours):
            errors["ends_at"].append(
                f"A window lasts at most {policy.max_window_hours} hours (this one {length.total_seconds() / 3600:g})."
            )
    purpose = (purpose or "").strip()
    if not purpose:
        errors["purpose"].append("Say what it is for (shown to the admins and on the calendar).")
    elif len(purpose) > MAX_PURPOSE:
        errors["purpose"].append(f"At most {MAX_PURPOSE} characters.")
    return dict(errors)


def _candidate_flavors(
    *, team: Team, cluster: Cluster, resource_class: ResourceClass, flavor: ResourceFlavor | None
) -> list[ResourceFlavor]:
    """The class's flavors the team's queue has quota lines for, in the class's order (only ``flavor`` if given)."""
    flavors = [link.flavor for link in resource_class.flavor_links.select_related("flavor").order_by("order", "pk")]
    if flavor is not None:
        if flavor.pk not in {f.pk for f in flavors}:
            raise ValidationFailed({"flavor": [f"{flavor.name} is not hardware of class {resource_class.slug}."]})
        flavors = [flavor]
    lined = set(
        TeamQuota.objects.filter(team=team, cluster=cluster, lines__resource_name=resource_class.resource_name)
        .values_list("lines__flavor_id", flat=True)
        .distinct()
    )
    return [f for f in flavors if f.pk in lined] or flavors


@transaction.atomic
def reservation_request(
    *,
    team: Team,
    user: AbstractBaseUser,
    resource_class: ResourceClass,
    count: int,
    starts_at: datetime,
    ends_at: datetime,
    purpose: str,
    flavor: ResourceFlavor | None = None,
    now: datetime | None = None,
) -> Reservation:
    """Record a lead's request: refused at once with the reasons when a rule forbids it, approved at once within the
    automatic limits, else waiting for an admin. Bad input raises ``ValidationFailed`` (nothing is recorded)."""
    now = now or timezone.now()
    if not may_request(user, team):
        raise ReservationForbidden(f"Only a lead of {team.name} (or a platform admin) may reserve for it.")
    errors = _input_errors(count=count, starts_at=starts_at, ends_at=ends_at, purpose=purpose, now=now)
    cluster = sel.team_cluster(team)
    if cluster is None:
        errors.setdefault("team", []).append(f"{team.name} has no queue on any cluster.")
    if errors:
        raise ValidationFailed(errors)
    assert cluster is not None
    if not sel.classes_for_team(team, cluster).filter(pk=resource_class.pk).exists():
        raise ValidationFailed({"resource_class": [f"{team.name} has no quota for class {resource_class.slug}."]})
    starts_at = max(starts_at, now)
    policy = reservation_policy()
    candidates = _candidate_flavors(team=team, cluster=cluster, resource_class=resource_class, flavor=flavor)
    chosen, verdict = None, None
    for candidate in candidates:
        _lock(candidate, team)
        request = Request(team, cluster, candidate, resource_class.resource_name, count, starts_at, ends_at)
        found = check(request, policy=policy, now=now)
        if chosen is None or (verdict is not None and verdict.refusals and not found.refusals):
            chosen, verdict = candidate, found
        if not found.refusals:
            break
    if chosen is None or verdict is None:
        raise ValidationFailed({"resource_class": [f"Class {resource_class.slug} has no hardware to reserve."]})
    row = Reservation(
        team=team,
        cluster=cluster,
        resource_class=resource_class,
        flavor=chosen,
        resource_name=resource_class.resource_name,
        count=count,
        starts_at=starts_at,
        ends_at=ends_at,
        purpose=purpose.strip(),
        requested_by=user if getattr(user, "pk", None) else None,
        requested_at=now,
    )
    if verdict.refusals:
        row.state, row.decision, row.decided_at, row.reasons = (
            Reservation.State.REFUSED,
            Reservation.Decision.RULES,
            now,
            verdict.refusals,
        )
    elif verdict.needs_admin:
        row.state, row.reasons = Reservation.State.REQUESTED, verdict.needs_admin
    else:
        row.state, row.decision, row.decided_at = Reservation.State.APPROVED, Reservation.Decision.AUTO, now
    row.save()
    if row.state == Reservation.State.APPROVED and reservation_edges_apply(now=now, cluster=cluster):
        row.refresh_from_db()
    return row


def _state(row: Reservation) -> str:
    return row.get_state_display().lower()


def _locked(reservation: Reservation) -> Reservation:
    _lock(reservation.flavor, reservation.team)
    return Reservation.objects.select_for_update().select_related("team", "cluster", "flavor").get(pk=reservation.pk)


@transaction.atomic
def reservation_approve(
    *, reservation: Reservation, user: AbstractBaseUser, note: str = "", now: datetime | None = None
) -> Reservation:
    """An admin approves a waiting request; the rules that refuse are checked again (``Conflict`` with the reasons if
    one now does: it stays waiting, to be refused)."""
    now = now or timezone.now()
    if not may_decide(user):
        raise ReservationForbidden("Only a platform admin approves reservations.")
    row = _locked(reservation)
    if row.state != Reservation.State.REQUESTED:
        raise Conflict(f"Reservation {hold_name(row)} is {_state(row)}: only a waiting one can be approved.")
    if row.ends_at <= now:
        raise Conflict(f"Reservation {hold_name(row)}'s window is over.")
    verdict = check(Request.of(row), policy=reservation_policy(), now=now)
    if verdict.refusals:
        raise Conflict(" ".join(verdict.refusals))
    row.state, row.decision, row.decided_by, row.decided_at = (
        Reservation.State.APPROVED,
        Reservation.Decision.ADMIN,
        user,
        now,
    )
    row.decision_note = note.strip()[:300]
    row.save(update_fields=["state", "decision", "decided_by", "decided_at", "decision_note"])
    if reservation_edges_apply(now=now, cluster=row.cluster):
        row.refresh_from_db()
    return row


@transaction.atomic
def reservation_refuse(
    *, reservation: Reservation, user: AbstractBaseUser, note: str, now: datetime | None = None
) -> Reservation:
    """An admin refuses a waiting request, saying why."""
    now = now or timezone.now()
    if not may_decide(user):
        raise ReservationForbidden("Only a platform admin refuses reservations.")
    note = (note or "").strip()
    if not note:
        raise ValidationFailed({"note": ["Say why it is refused (the team lead reads it)."]})
    row = _locked(reservation)
    if row.state != Reservation.State.REQUESTED:
        raise Conflict(f"Reservation {hold_name(row)} is {_state(row)}: only a waiting one can be refused.")
    row.state, row.decision, row.decided_by, row.decided_at = (
        Reservation.State.REFUSED,
        Reservation.Decision.ADMIN,
        user,
        now,
    )
    row.decision_note = note[:300]
    row.reasons = [*row.reasons, f"Refused by an admin: {note[:300]}"]
    row.save(update_fields=["state", "decision", "decided_by", "decided_at", "decision_note", "reasons"])
    return row


@transaction.atomic
def reservation_cancel(*, reservation: Reservation, user: AbstractBaseUser, now: datetime | None = None) -> Reservation:
    """Cancel a waiting or approved reservation whose window has not ended; an open window closes now (its quota
    returns at once). The team pays for the time it held capacity, not for the rest."""
    now = now or timezone.now()
    if not may_cancel(user, reservation):
        raise ReservationForbidden("Only who asked, a lead of the team or a platform admin may cancel it.")
    row = _locked(reservation)
    if row.state not in (Reservation.State.REQUESTED, Reservation.State.APPROVED):
        raise Conflict(f"Reservation {hold_name(row)} is {_state(row)}: nothing to cancel.")
    if row.ends_at <= now:
        raise Conflict(f"Reservation {hold_name(row)}'s window is over: nothing to cancel.")
    row.state, row.cancelled_at, row.cancelled_by = Reservation.State.CANCELLED, now, user
    row.save(update_fields=["state", "cancelled_at", "cancelled_by"])
    if reservation_edges_apply(now=now, cluster=row.cluster):
        row.refresh_from_db()
    return row


# --------------------------------------------------------------------------- the windows' edges


@dataclass(frozen=True)
class EdgeChange:
    """One edge applied: the reservation, ``opens`` / ``closes``, and when."""

    reservation_id: int
    cluster_id: int
    edge: str
    at: datetime


def _shifts(reservation: Reservation, *, now: datetime) -> list[dict]:
    """What the reservation moves now (with the holds in force before it), by queue and team."""
    cluster = reservation.cluster
    policy, _ = policy_state(live_policy_rows(cluster))
    holds = in_force(
        cluster_holds(cluster=cluster, start=now, end=now + timedelta(seconds=1), now=now), now.timestamp()
    )
    name = hold_name(reservation)
    outcomes = hold_quota(policy.cluster_queues, policy.cohorts, holds).outcomes
    outcome = next((o for o in outcomes if o.hold.name == name), None)
    if outcome is None:
        return []
    teams = dict(TeamQuota.objects.filter(cluster=cluster).values_list("cluster_queue_name", "team_id"))
    out: list[dict] = [
        {"kind": s.kind, "name": s.name, "team_id": teams.get(s.name) if s.kind == "ClusterQueue" else None}
        | {"delta": s.delta}
        for s in outcome.shifts
    ]
    if outcome.problem:
        out.append({"problem": outcome.problem})
    return out


@transaction.atomic
def reservation_edges_apply(*, now: datetime | None = None, cluster: Cluster | None = None) -> list[EdgeChange]:
    """Apply every edge due (a window opening ``RESERVATION_LEAD_SECONDS`` ahead, a window ending or cancelled): record
    it on the reservation and push the cluster's queue configuration once per cluster. Idempotent: a second run
    finds nothing due."""
    now = now or timezone.now()
    rows = Reservation.objects.filter(state__in=(Reservation.State.APPROVED, Reservation.State.CANCELLED))
    rows = rows.filter(closed_at__isnull=True, decided_at__isnull=False, starts_at__lte=now + lead())
    if cluster is not None:
        rows = rows.filter(cluster=cluster)
    changes: list[EdgeChange] = []
    reasons: dict[int, list[str]] = defaultdict(list)
    clusters: dict[int, Cluster] = {}
    for row in rows.select_for_update().select_related("team", "cluster", "flavor").order_by("pk"):
        window = hold_window(row)
        holding = window is not None and window[0] <= now < window[1]
        if holding and row.opened_at is None:
            row.opened_at, row.shifts = now, _shifts(row, now=now)
            row.save(update_fields=["opened_at", "shifts"])
            changes.append(EdgeChange(row.pk, row.cluster_id, "opens", now))
            reasons[row.cluster_id].append(f"reservation {describe(row)} opens")
        elif not holding and (window is None or now >= window[1]):
            row.closed_at = now
            row.save(update_fields=["closed_at"])
            if row.opened_at is not None:
                changes.append(EdgeChange(row.pk, row.cluster_id, "closes", now))
                reasons[row.cluster_id].append(f"reservation {describe(row)} closes")
        clusters[row.cluster_id] = row.cluster
    for cluster_id, lines in reasons.items():
        policy_push_request(clusters=[clusters[cluster_id]], reason="; ".join(lines), now=now)
    return changes


__all__ = [
    "EdgeChange",
    "ReservationForbidden",
    "is_lead",
    "may_cancel",
    "may_decide",
    "may_request",
    "reservation_approve",
    "reservation_cancel",
    "reservation_edges_apply",
    "reservation_refuse",
    "reservation_request",
]
