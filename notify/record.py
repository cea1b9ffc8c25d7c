"""Writing the outbox: one :class:`notify.models.Event` per change worth telling, in the change's own transaction.

Job changes arrive through queues' ``JobEventListener`` port (every timeline event queues writes passes here);
budget thresholds come from billing's budget check (the threshold detection is billing's, once per period); the
periodic scans (:mod:`notify.scans`) add "first in line" and "idle GPUs". Each event's key names the change it
reports (job, kind, the timeline event or transition), and the database keeps one row per recipient and key, so
a retried or replayed change is recorded once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from django.contrib.auth import get_user_model
from django.db.models import Q
from django.utils import timezone

from notify.kinds import Kind, kind_for_event
from notify.models import Event
from queues.guarantees.services import shortfall_sentence
from queues.models import Job, JobEvent, Membership, QuotaShortfall, Team
from queues.privacy import may_need_redaction, redactors_for
from queues.services import checkpoint_grace_seconds


@dataclass(frozen=True)
class Pending:
    """An event to record (see :func:`events_record`)."""

    recipient_id: int
    kind: str
    key: str
    title: str
    message: str
    at: datetime
    job: Job | None = None
    team: Team | None = None
    details: dict = field(default_factory=dict)


def _for_recipient(pending: list[Pending]) -> list[Pending]:
    """Each event as its recipient may read it: another team's job named by its team only, no Kueue UIDs or cohort
    paths, no other jobs' ids in the details (queues.privacy). The text is written for one person here, and the
    digest, the email and the webhook copy it: this is where the privacy rule is applied."""
    needing = {p.recipient_id for p in pending if may_need_redaction(p.title) or may_need_redaction(p.message)}
    needing |= {p.recipient_id for p in pending if p.details}
    if not needing:
        return pending
    redactors = redactors_for(needing)
    out = []
    for p in pending:
        redactor = redactors.get(p.recipient_id)
        if redactor is None:
            out.append(p)
            continue
        out.append(
            replace(
                p, title=redactor.text(p.title), message=redactor.text(p.message), details=redactor.details(p.details)
            )
        )
    return out


def events_record(pending: Iterable[Pending]) -> int:
    """Write events into the outbox inside the caller's transaction, each as its recipient may read it; a key
    already recorded for that recipient is left as it is (one ``INSERT … ON CONFLICT DO NOTHING``). Returns how
    many were offered."""
    now = timezone.now()
    rows = [
        Event(
            recipient_id=p.recipient_id,
            kind=p.kind,
            key=p.key[:200],
            job=p.job,
            team=p.team,
            title=p.title[:200],
            message=p.message,
            details=p.details,
            created_at=p.at,
            recorded_at=now,
        )
        for p in _for_recipient(list(pending))
    ]
    Event.objects.bulk_create(rows, ignore_conflicts=True, batch_size=500)
    return len(rows)


TITLES = {
    Kind.ADMITTED: "admitted",
    Kind.RECLAIM: "borrowed GPUs will be reclaimed: checkpoint now",
    Kind.PREEMPTED: "preempted",
    Kind.HEALTH: "moved off a failing GPU",
    Kind.FINISHED: "finished",
    Kind.FAILED: "failed",
    Kind.IDLE: "GPUs idle",
}


def _job_pending(event: JobEvent, job: Job, kind: str) -> Pending:
    """The outbox row for a job timeline event that calls for notification ``kind``."""
    what = TITLES[kind]
    if kind == Kind.ADMITTED and event.kind != JobEvent.Kind.ADMITTED:
        what = "resumed" if event.kind == JobEvent.Kind.RESUMED else "started"
    elif kind == Kind.FINISHED and event.kind == JobEvent.Kind.CANCELLED:
        what = "cancelled"
    elif kind == Kind.FAILED and event.kind == JobEvent.Kind.TIMED_OUT:
        what = "timed out"
    title = f"{job.team.slug}/{job.name}: {what}"
    message, details = event.message, {}
    key = f"job:{job.pk}:{kind}:{event.pk}"
    if kind == Kind.RECLAIM:
        grace = checkpoint_grace_seconds(job)
        if grace:
            deadline = event.at + timedelta(seconds=grace)
            details = {"deadline": deadline.isoformat(), "graceSeconds": grace}
            message += (
                f" The GPUs it borrowed from the cohort are taken back: checkpoint now; it is evicted once its "
                f"checkpoint is written, at the latest {grace} s after {event.at.astimezone(UTC):%H:%M:%S} UTC."
            )
        else:
            message += " It has no checkpoint policy: it is evicted now and the work since its start is lost."
    elif kind == Kind.HEALTH:
        # health writes a move and its explanation at the same instant: one notification for both
        devices = ",".join(str(d) for d in sorted(event.details.get("devices") or []))
        key = f"job:{job.pk}:health:{event.at.isoformat()}:{devices}"
    return Pending(job.owner_id, kind, key, title, message, event.at, job=job, team=job.team, details=details)


class JobEventRecorder:
    """queues' ``JobEventListener``: records the notification a timeline event calls for, in its transaction."""

    def job_event_recorded(self, *, event: JobEvent) -> None:
        """Record the event's notification, if it calls for one (most do not)."""
        job = event.job
        kind = kind_for_event(event_kind=event.kind, details=event.details or {}, borrowing=job.borrowing)
        if kind is not None:
            events_record([_job_pending(event, job, kind)])


def reservation_unused_record(
    *, notification_id: int, team: Team, lead_ids: Iterable[int], title: str, message: str, at: datetime
) -> int:
    """Tell the team's leads that a reservation's window ended partly unused and what that unused part cost (billing
    detected it, once per reservation: its ``Notification`` row is the key). Called in billing's transaction."""
    return events_record(
        Pending(lead, Kind.RESERVATION_UNUSED, f"reservation-unused:{notification_id}", title, message, at, team=team)
        for lead in lead_ids
    )


def budget_threshold_record(
    *, notification_id: int, team: Team, lead_ids: Iterable[int], message: str, at: datetime, threshold: int
) -> int:
    """Tell the team's leads that a budget threshold was crossed (billing detected it, once per period: its
    ``Notification`` row is the key). Called in billing's transaction."""
    title = f"{team.name}: {threshold} % of the budget used"
    return events_record(
        Pending(lead, Kind.BUDGET, f"budget:{notification_id}", title, message, at, team=team) for lead in lead_ids
    )


class ShortfallRecorder:
    """queues' ``ShortfallListener``: tells the platform admins, and the leads of the teams whose guarantee is
    reduced, when a cohort's guaranteed quotas stop being backed by healthy devices, change, or are backed again."""

    def shortfall_changed(self, *, shortfall: QuotaShortfall, change: str) -> None:
        """Record one notification per recipient for this change of the shortfall (in its transaction)."""
        admins = set(
            get_user_model()
            .objects.filter(Q(is_staff=True) | Q(is_superuser=True), is_active=True)
            .values_list("pk", flat=True)
        )
        slugs = {r.get("team") for r in shortfall.reductions or () if r.get("team")}
        leads = set(
            Membership.objects.filter(
                team__slug__in=slugs, role=Membership.Role.LEAD, user__is_active=True
            ).values_list("user_id", flat=True)
        )
        group = f"cohort {shortfall.cohort.name}" if shortfall.cohort_id else f"queue {shortfall.team_quota}"
        flavor = shortfall.flavor.label
        if change == "closed":
            title = f"{group}: {flavor} guarantees backed again"
            message = (
                f"Healthy devices back every guarantee of {group} on {flavor} ({shortfall.cluster.name}) again; "
                "the guaranteed quotas are restored."
            )
        else:
            short = shortfall.guaranteed - shortfall.backed
            title = f"{group}: {short} of {shortfall.guaranteed} guaranteed {flavor} not backed"
            message = shortfall_sentence(shortfall, flavor_label=flavor)
        key = f"shortfall:{shortfall.pk}:{change}:{shortfall.changed_at.isoformat()}"
        events_record(
            Pending(user_id, Kind.SHORTFALL, key, title, message, shortfall.changed_at)
            for user_id in sorted(admins | leads)
        )
