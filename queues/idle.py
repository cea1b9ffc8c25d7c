"""Idle GPUs are negotiated, not silently held: the idle-GPU state machine of running jobs.

A running job (any kind; sessions and services, which run until stopped, are the main case) of a class with an
idle window (``ResourceClass.idle_window_seconds``; empty: never) whose cards were all idle for that window —
every DCGM activity sample under ``NOTIFY_IDLE_PERCENT`` (pools.gpu_usage: GR engine active, else GPU
utilisation) — goes through these steps, each a timeline event (and, for the first two, a notification)::

    active  --idle for the class's window-->   warned
    warned  --IDLE_GRACE_SECONDS, still idle--> checkpointing (with a checkpoint policy) | released (without)
    checkpointing --confirmed, or its deadline--> released
    warned  --a busy sample, or the owner's one snooze--> active

The checkpoint step is the one preemption uses (the checkpoint signal or command, the same deadline:
``checkpoint_grace_seconds``); the release is the cancel path (``job_finish`` closes the allocations, the
cluster deletes the job after commit). Cards without samples are never judged idle (missing data is unknown).
:func:`idle_negotiations_scan` is the periodic pass (Celery ``queues.idle_scan``); it is idempotent: a second
run at the same instant changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from kernel.errors import Conflict, ValidationFailed
from kernel.labels import duration_words, plural
from pools.gpu_usage import DeviceUtilisation, utilisation_window
from pools.models import Allocation
from queues.models import Job, JobEvent, JobIdle
from queues.ports import cluster_port
from queues.services import checkpoint_grace_seconds, has_checkpoint_policy, job_finish, record_event

#: ``details["reason"]`` of every timeline event of the negotiation (notify maps its steps to notifications).
IDLE_REASON = "idle_gpus"
#: The phases in which the job has been told and the clock runs.
NEGOTIATING = (JobIdle.Phase.WARNED, JobIdle.Phase.CHECKPOINTING)


def _utc(at: datetime) -> str:
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def cards_idle(
    util: Mapping[int, DeviceUtilisation], cards: Iterable[int], *, start: datetime, end: datetime, threshold: float
) -> bool:
    """Whether every card stayed idle over [start, end]: at least two samples each, spanning at least half of
    the window, all under ``threshold`` percent. A card without samples is unknown, never idle."""
    cards = list(cards)
    span = (end - start) / 2
    for card in cards:
        u = util.get(card)
        if u is None or u.samples < 2 or u.high >= threshold:
            return False
        if u.first_at is None or u.last_at - u.first_at < span:
            return False
    return bool(cards)


def cards_busy(util: Mapping[int, DeviceUtilisation], cards: Iterable[int], *, threshold: float) -> float | None:
    """The busiest sample (percent) of any card at or above ``threshold``, or None when none was busy."""
    peaks = [util[c].high for c in cards if c in util and util[c].high >= threshold]
    return max(peaks) if peaks else None


def cards_scraped(util: Mapping[int, DeviceUtilisation], cards: Iterable[int]) -> bool:
    """Whether every card has at least one sample (the negotiation moves on only while it can see the cards)."""
    cards = list(cards)
    return bool(cards) and all(c in util for c in cards)


@dataclass
class IdleScanReport:
    """What one scan did: job ids per step."""

    warned: list[int] = field(default_factory=list)
    withdrawn: list[int] = field(default_factory=list)
    checkpoint_requested: list[int] = field(default_factory=list)
    released: list[int] = field(default_factory=list)


@dataclass
class _Held:
    """A running job's cards (MIG slices and time-shared replicas read their card) and when it took the last."""

    cards: set[int] = field(default_factory=set)
    since: datetime | None = None


def _held(job_ids: Iterable[int]) -> dict[int, _Held]:
    """Per job, the cards of its open allocations (one query)."""
    held: dict[int, _Held] = {}
    rows = Allocation.objects.filter(job_id__in=list(job_ids), ended_at__isnull=True).values_list(
        "job_id", "device_id", "device__parent_id", "started_at"
    )
    for job_id, device_id, parent_id, started in rows:
        h = held.setdefault(job_id, _Held())
        h.cards.add(parent_id or device_id)
        h.since = max(h.since, started) if h.since else started
    return held


def _row(job: Job, *, now: datetime) -> JobIdle:
    """The job's negotiation row, locked (created in phase active on first use)."""
    row, _ = JobIdle.objects.select_for_update().get_or_create(job=job, defaults={"changed_at": now})
    return row


def _save(row: JobIdle, *, now: datetime, **values) -> None:
    for name, value in values.items():
        setattr(row, name, value)
    row.changed_at = now
    row.save(update_fields=[*values, "changed_at"])


def _event(job: Job, kind: str, message: str, *, step: str, now: datetime, **details) -> None:
    record_event(
        job,
        kind,
        message,
        at=now,
        details={"reason": IDLE_REASON, "step": step, **details},
        source_key=f"idle:{step}:{now.isoformat()}",
    )


def _warn(job: Job, row: JobIdle, *, start: datetime, now: datetime) -> None:
    """Idle for the class's window: tell the owner what happens next, and when."""
    window = job.resource_class.idle_window_seconds
    due = now + timedelta(seconds=settings.IDLE_GRACE_SECONDS)
    then = "asked to checkpoint, then released" if has_checkpoint_policy(job) else "released (stopped)"
    snooze = "" if row.snoozed_at else " Its owner can snooze this once."
    _save(row, now=now, phase=JobIdle.Phase.WARNED, idle_since=start, warned_at=now, due_at=due)
    _event(
        job,
        JobEvent.Kind.NOTE,
        f"GPUs idle: every GPU of this job was under {settings.NOTIFY_IDLE_PERCENT:g} % busy for "
        f"{duration_words(window)} (its class's idle window). Unless they become busy, it is {then} at {_utc(due)}."
        f"{snooze}",
        step="warning",
        now=now,
        idleSince=start.isoformat(),
        dueAt=due.isoformat(),
        windowSeconds=window,
    )


def _withdraw(job: Job, row: JobIdle, *, now: datetime, why: str) -> None:
    """The GPUs were busy again (or the job restarted): back to watching."""
    _save(row, now=now, phase=JobIdle.Phase.ACTIVE, idle_since=None, warned_at=None, due_at=None)
    _event(job, JobEvent.Kind.NOTE, f"Idle warning withdrawn: {why}.", step="withdrawn", now=now)


def _checkpoint(job: Job, row: JobIdle, *, now: datetime) -> None:
    """The grace period ended with the GPUs still idle: ask for a checkpoint (the preemption's signal or command)."""
    grace = checkpoint_grace_seconds(job)
    due = now + timedelta(seconds=grace)
    how = job.checkpoint_signal or " ".join(job.checkpoint_command)
    _save(row, now=now, phase=JobIdle.Phase.CHECKPOINTING, checkpoint_requested_at=now, due_at=due)
    _event(
        job,
        JobEvent.Kind.CHECKPOINT_REQUESTED,
        f"Checkpoint requested ({how}) because its GPUs stayed idle; the job is released once it is written to "
        f"{job.checkpoint_path}, at the latest {duration_words(grace)} after the request.",
        step="checkpoint",
        now=now,
        deadline=due.isoformat(),
        graceSeconds=grace,
    )


def _release(job: Job, row: JobIdle, *, cards: int, now: datetime) -> None:
    """Stop the job through the cancel path: its allocations close now, the cluster deletes it after commit."""
    window = job.resource_class.idle_window_seconds or 0
    since = row.idle_since or row.warned_at or now
    if row.checkpoint_requested_at:
        after = "after its checkpoint was written" if _checkpoint_written(job, row) else "at its checkpoint deadline"
    else:
        after = "without a checkpoint (it has no checkpoint policy)"
    _save(row, now=now, phase=JobIdle.Phase.RELEASED, due_at=None)
    job_finish(
        job,
        state=Job.State.CANCELLED,
        now=now,
        message=f"Released for idle GPUs {after}: its {plural(cards, 'GPU')} were idle since {_utc(since)} "
        f"(class idle window {duration_words(window)}, warned at {_utc(row.warned_at or now)}); the devices are "
        "free for others.",
    )
    transaction.on_commit(lambda: cluster_port().job_cancelled(job_id=job.pk))


def _checkpoint_written(job: Job, row: JobIdle) -> bool:
    """Whether the cluster confirmed a checkpoint since the request."""
    return job.events.filter(kind=JobEvent.Kind.CHECKPOINT_DONE, at__gte=row.checkpoint_requested_at).exists()


@dataclass(frozen=True)
class _Plan:
    """What to look at for one job: the cards and the interval whose samples decide its next step."""

    job_id: int
    cards: frozenset[int]
    held_since: datetime
    running_since: datetime
    start: datetime
    end: datetime


@dataclass(frozen=True)
class _State:
    """The parts of a job's negotiation row a decision reads (the row itself, or an unlocked snapshot)."""

    phase: str = JobIdle.Phase.ACTIVE
    warned_at: datetime | None = None
    due_at: datetime | None = None
    watch_from: datetime | None = None


WARN, WITHDRAW_RESTARTED, WITHDRAW_BUSY, CHECKPOINT, RELEASE = (
    "warn", "withdraw_restarted", "withdraw_busy", "checkpoint", "release",
)  # fmt: skip


def _decide(
    state: _State,
    plan: _Plan,
    util: Mapping[int, DeviceUtilisation],
    *,
    now: datetime,
    checkpoint_policy: bool,
    checkpoint_written: bool,
) -> str | None:
    """The negotiation's next step for one job, or None (pure: the scan decides on a snapshot, then again on the
    locked row before it acts)."""
    threshold = settings.NOTIFY_IDLE_PERCENT
    if state.phase in NEGOTIATING and state.warned_at and state.warned_at < plan.running_since:
        return WITHDRAW_RESTARTED
    if state.phase not in NEGOTIATING:
        watched = [plan.running_since, plan.held_since, *([state.watch_from] if state.watch_from else [])]
        if max(watched) > plan.start:
            return None  # not running on these cards for a whole window yet (or a snooze restarted the watch)
        return WARN if cards_idle(util, plan.cards, start=plan.start, end=now, threshold=threshold) else None
    if state.phase == JobIdle.Phase.WARNED:
        if cards_busy(util, plan.cards, threshold=threshold) is not None:
            return WITHDRAW_BUSY
        if state.due_at and now >= state.due_at and cards_scraped(util, plan.cards):
            return CHECKPOINT if checkpoint_policy else RELEASE
        return None
    # checkpointing: the checkpoint itself may keep the GPUs busy, so activity no longer withdraws the warning
    return RELEASE if checkpoint_written or (state.due_at and now >= state.due_at) else None


def _plans(*, now: datetime) -> list[tuple[_Plan, _State]]:
    """Running jobs of classes with an idle window, each with the interval to judge and a snapshot of its
    negotiation (three queries)."""
    jobs = Job.objects.filter(state=Job.State.RUNNING, resource_class__idle_window_seconds__isnull=False)
    rows = {
        pk: (window, since)
        for pk, window, since in jobs.values_list(
            "pk", "resource_class__idle_window_seconds", "state_changed_at"
        ).order_by("pk")
    }
    states = {
        job_id: _State(phase, warned_at, due_at, watch_from)
        for job_id, phase, warned_at, due_at, watch_from in JobIdle.objects.filter(job_id__in=list(rows)).values_list(
            "job_id", "phase", "warned_at", "due_at", "watch_from"
        )
    }
    held = _held(rows)
    plans = []
    for job_id, (window, running_since) in rows.items():
        h = held.get(job_id)
        if h is None or h.since is None:
            continue
        state = states.get(job_id, _State())
        negotiating = state.phase in NEGOTIATING and state.warned_at
        start = state.warned_at if negotiating else now - timedelta(seconds=window)
        plans.append((_Plan(job_id, frozenset(h.cards), h.since, running_since, start, now), state))
    return plans


def _utilisation(plans: Iterable[_Plan]) -> dict[tuple[datetime, datetime], dict[int, DeviceUtilisation]]:
    """Samples per interval (one query per distinct interval: jobs of one window share it)."""
    by_interval: dict[tuple[datetime, datetime], set[int]] = {}
    for p in plans:
        by_interval.setdefault((p.start, p.end), set()).update(p.cards)
    return {
        (start, end): utilisation_window(cards, start=start, end=end) for (start, end), cards in by_interval.items()
    }


def _act(job: Job, plan: _Plan, util: Mapping[int, DeviceUtilisation], *, now: datetime, report: IdleScanReport):
    """Decide again on the locked job and row, and take the step (the caller holds the job's row lock)."""
    row = _row(job, now=now)
    state = _State(row.phase, row.warned_at, row.due_at, row.watch_from)
    written = row.phase == JobIdle.Phase.CHECKPOINTING and _checkpoint_written(job, row)
    step = _decide(state, plan, util, now=now, checkpoint_policy=has_checkpoint_policy(job), checkpoint_written=written)
    if step == WARN:
        _warn(job, row, start=plan.start, now=now)
        report.warned.append(job.pk)
    elif step == WITHDRAW_RESTARTED:
        _withdraw(job, row, now=now, why="the job was restarted since the warning")
        report.withdrawn.append(job.pk)
    elif step == WITHDRAW_BUSY:
        busiest = cards_busy(util, plan.cards, threshold=settings.NOTIFY_IDLE_PERCENT)
        _withdraw(job, row, now=now, why=f"its GPUs were busy again ({busiest:.0f} % at the busiest sample)")
        report.withdrawn.append(job.pk)
    elif step == CHECKPOINT:
        _checkpoint(job, row, now=now)
        report.checkpoint_requested.append(job.pk)
    elif step == RELEASE:
        _release(job, row, cards=len(plan.cards), now=now)
        report.released.append(job.pk)


def idle_negotiations_scan(*, now: datetime | None = None) -> IdleScanReport:
    """The periodic pass: warn, withdraw, request checkpoints and release.

    Decides on an unlocked snapshot first (a few queries for all jobs); only a job with a step to take is locked,
    decided on again and moved, each in its own transaction. Idempotent: every step depends on the job's phase,
    which the step changes, so a second scan at the same instant finds nothing to do.
    """
    now = now or timezone.now()
    report = IdleScanReport()
    plans = _plans(now=now)
    util = _utilisation(plan for plan, _ in plans)
    for plan, state in plans:
        samples = util[(plan.start, plan.end)]
        # a checkpointing job may have been confirmed: only the locked pass reads its events
        maybe = state.phase == JobIdle.Phase.CHECKPOINTING or _decide(
            state, plan, samples, now=now, checkpoint_policy=True, checkpoint_written=False
        )
        if not maybe:
            continue
        with transaction.atomic():
            job = (
                Job.objects.select_for_update(of=("self",))
                .select_related("resource_class", "team")
                .filter(pk=plan.job_id, state=Job.State.RUNNING)
                .first()
            )
            if job is None or job.resource_class.idle_window_seconds is None:
                continue  # it ended or moved since the plan was made
            _act(job, plan, samples, now=now, report=report)
    return report


@transaction.atomic
def job_idle_snooze(*, job: Job, user: AbstractBaseUser, now: datetime | None = None) -> JobIdle:
    """The owner's one snooze of an idle warning: the job is warned again only after another whole idle window.

    Refused (Conflict) when nothing is warned, once the checkpoint was requested, and the second time.
    """
    now = now or timezone.now()
    job = Job.objects.select_for_update().select_related("resource_class").get(pk=job.pk)
    if job.owner_id != user.pk:
        raise ValidationFailed({"job": ["only the job's owner can snooze its idle warning"]})
    row = JobIdle.objects.select_for_update().filter(job=job).first()
    if row is not None and row.snoozed_at is not None:
        raise Conflict(
            f"the idle warning was already snoozed once ({_utc(row.snoozed_at)}); a job can be snoozed only once: "
            "use its GPUs, or stop it"
        )
    if row is None or job.state != Job.State.RUNNING or row.phase != JobIdle.Phase.WARNED:
        what = "a checkpoint was already requested" if row and row.phase == JobIdle.Phase.CHECKPOINTING else None
        raise Conflict(f"nothing to snooze: {what or 'the job has no idle warning'}")
    window = job.resource_class.idle_window_seconds or 0
    _save(
        row,
        now=now,
        phase=JobIdle.Phase.ACTIVE,
        idle_since=None,
        warned_at=None,
        due_at=None,
        watch_from=now,
        snoozed_at=now,
        snoozed_by=user,
    )
    _event(
        job,
        JobEvent.Kind.NOTE,
        f"Idle warning snoozed by {user.get_username()}: the job is warned again only if its GPUs stay idle for "
        f"another {duration_words(window)}; it cannot be snoozed again.",
        step="snoozed",
        now=now,
    )
    return row


@dataclass(frozen=True)
class IdleNotice:
    """The job page's banner: what was found, what happens next and when, whether the viewer may snooze."""

    phase: str
    message: str
    due_at: datetime | None
    can_snooze: bool
    snoozed: bool


def job_idle_notice(job: Job, *, user: AbstractBaseUser) -> IdleNotice | None:
    """The banner of a job under negotiation, or None (one query; none for a job that is not running)."""
    if job.state != Job.State.RUNNING:
        return None
    row = JobIdle.objects.filter(job=job, phase__in=NEGOTIATING).first()
    if row is None:
        return None
    window = duration_words(job.resource_class.idle_window_seconds or 0)
    if row.phase == JobIdle.Phase.WARNED:
        then = "asked to checkpoint, then released" if has_checkpoint_policy(job) else "released (stopped)"
        message = (
            f"Its GPUs have been idle since {_utc(row.idle_since or row.warned_at)} (class idle window {window}). "
            f"Unless they become busy, this job is {then} at {_utc(row.due_at)}."
        )
    else:
        message = (
            f"Its GPUs stayed idle: a checkpoint was requested at {_utc(row.checkpoint_requested_at)}; the job is "
            f"released once it is written, at the latest at {_utc(row.due_at)}."
        )
    return IdleNotice(
        phase=row.phase,
        message=message,
        due_at=row.due_at,
        can_snooze=row.phase == JobIdle.Phase.WARNED and row.snoozed_at is None and job.owner_id == user.pk,
        snoozed=row.snoozed_at is not None,
    )
