"""Writes of device health: observations, signal states, device state transitions, and moving jobs off bad devices.

Every change of ``Device.health`` goes through ``device_health_set``, which refuses moves the state machine
forbids and keeps the evidence beside the transition. ``pools.health.settle`` brings a card to the state its
signals call for; a card turned unhealthy has its running jobs moved off (``jobs_protect``: checkpoint first where
the job has a policy) and, by policy, a repair ticket opened (pools.health.tickets). Ingestion lives in
pools.health.ingest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from kernel.errors import DomainError, ValidationFailed
from kernel.labels import state_words
from pools.health import policy as pol
from pools.health.catalog import XidEvent, correlate, xid_info
from pools.health.events import MAX_XID
from pools.health.ports import repair_jobs_port
from pools.health.state import check_transition
from pools.models import (
    Device,
    DeviceHealthTransition,
    HealthLevel,
    HealthObservation,
    HealthPolicy,
    HealthSignal,
    HealthState,
    Node,
    RepairTicket,
)

Source = HealthObservation.Source


class HealthInputError(DomainError):
    """Input that is not a scrape, event records or kernel log the portal can read."""


@dataclass(frozen=True)
class Actor:
    """Who acts: a user (admin actions) or a named part of the portal ("dcgm scrape", "inventory import")."""

    user: User | None = None
    label: str = "portal health"

    @classmethod
    def of(cls, user: User | None, *, label: str = "") -> Actor:
        """An actor for a user (labelled by username) or for the portal itself."""
        if user is not None and getattr(user, "is_authenticated", False):
            return cls(user=user, label=label or user.get_username())
        return cls(label=label or "portal health")


# --- report --------------------------------------------------------------------------------------------------


@dataclass
class StateChange:
    """A device whose health state changed."""

    node: str
    device: str
    before: str
    after: str
    reason: str
    ticket: int | None = None

    def __str__(self) -> str:
        """The change in words: ``node/gpu0: healthy → unhealthy``."""
        before = state_words(HealthState, self.before) if self.before else "new"
        return f"{self.node}/{self.device}: {before} → {state_words(HealthState, self.after)}"


@dataclass
class DeviceSeen:
    """A device an input spoke about: its signals as now known, and those the input said nothing about."""

    node: str
    device: str
    uuid: str
    health: str
    signals: dict[str, str] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)


@dataclass
class IngestReport:
    """What one ingestion (scrape, event file, reconcile sweep) saw and changed."""

    origin: str
    gpus: int = 0
    matched: list[DeviceSeen] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)
    not_in_input: list[str] = field(default_factory=list)
    observations: int = 0
    changes: list[StateChange] = field(default_factory=list)
    tickets_opened: list[int] = field(default_factory=list)
    jobs_protected: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return asdict(self)

    def merge(self, other: IngestReport) -> None:
        """Fold another report into this one."""
        self.gpus += other.gpus
        self.matched += other.matched
        self.unmatched += other.unmatched
        self.not_in_input += other.not_in_input
        self.observations += other.observations
        self.changes += other.changes
        self.tickets_opened += other.tickets_opened
        self.jobs_protected += other.jobs_protected
        self.notes += other.notes


# --- policy --------------------------------------------------------------------------------------------------


def active_policy() -> HealthPolicy:
    """The policy in force: the active row, else the "default" row (created with the defaults when missing)."""
    policy = HealthPolicy.objects.filter(active=True).first()
    if policy is not None:
        return policy
    policy, _ = HealthPolicy.objects.get_or_create(name="default", defaults={"active": True})
    return policy


# --- the state machine's only writer -------------------------------------------------------------------------


def device_label(device: Device) -> str:
    """``node/key`` (with the GPU index when known) for messages."""
    index = f" (gpu {device.index})" if device.index is not None and device.kind == Device.Kind.FULL else ""
    return f"{device.node.name}/{device.key}{index}"


def device_health_set(
    device: Device,
    *,
    to: str,
    reason: str,
    now: datetime,
    actor: Actor,
    evidence: Mapping | None = None,
    observation: HealthObservation | None = None,
    ticket: RepairTicket | None = None,
    report: IngestReport | None = None,
    device_reason: str | None = None,
) -> DeviceHealthTransition | None:
    """Move a device to another health state, recording the transition and its evidence; None when already there.

    ``reason`` is kept on the transition and, unless ``device_reason`` is given, as the device's health reason.
    Raises IllegalHealthTransition for a move the state machine forbids (e.g. quarantined → healthy).
    """
    before = device.health
    shown = (reason if device_reason is None else device_reason)[:300]
    if before == to:
        if shown and device.health_reason != shown:
            device.health_reason = shown
            device.save(update_fields=["health_reason"])
        return None
    check_transition(before, to, device=device_label(device))
    transition = DeviceHealthTransition.objects.create(
        device=device,
        before=before,
        after=to,
        at=now,
        reason=reason[:500],
        evidence=dict(evidence or {}),
        observation=observation,
        ticket=ticket,
        actor=actor.user,
        actor_label=actor.label[:120],
    )
    device.health = to
    device.health_reason = shown
    device.health_changed_at = now
    device.save(update_fields=["health", "health_reason", "health_changed_at"])
    if report is not None:
        report.changes.append(
            StateChange(device.node.name, device.key, str(before), str(to), reason[:300], ticket.pk if ticket else None)
        )
    return transition


def observation_record(
    *,
    source: str,
    signal: str,
    level: str,
    message: str,
    observed_at: datetime,
    device: Device | None = None,
    node: Node | None = None,
    value: float | None = None,
    evidence: Mapping | None = None,
    dedupe_key: str = "",
    report: IngestReport | None = None,
) -> tuple[HealthObservation, bool]:
    """Store one observation; with a ``dedupe_key`` a second identical event is not stored again."""
    values = {
        "device": device,
        "node": node or (device.node if device is not None else None),
        "source": source,
        "signal": signal,
        "level": level,
        "value": value,
        "message": message[:500],
        "evidence": dict(evidence or {}),
        "observed_at": observed_at,
    }
    if dedupe_key:
        obs, created = HealthObservation.objects.get_or_create(dedupe_key=dedupe_key[:200], defaults=values)
    else:
        obs, created = HealthObservation.objects.create(**values), True
    if created and report is not None:
        report.observations += 1
    return obs, created


# --- mapping inputs to devices -------------------------------------------------------------------------------


def card_of(device: Device) -> Device:
    """The physical card a unit belongs to (itself for a full card)."""
    return device.parent if device.parent is not None else device


def card_units(card: Device) -> list[Device]:
    """The card and its present units (MIG instances, time-shared replicas), card first."""
    children = list(card.children.filter(gone_at__isnull=True).select_related("node").order_by("pk"))
    return [card, *children]


# --- signals -------------------------------------------------------------------------------------------------


def state_of(row: HealthSignal | None) -> pol.SignalState:
    if row is None:
        return pol.SignalState()
    return pol.SignalState(
        level=row.level,
        value=row.value,
        message=row.message,
        since=row.since,
        observed_at=row.observed_at,
        data=dict(row.data or {}),
    )


def signals_of(card: Device) -> dict[str, HealthSignal]:
    return {s.signal: s for s in HealthSignal.objects.filter(device=card)}


def save_signal(
    card: Device,
    rows: dict[str, HealthSignal],
    name: str,
    new: pol.SignalState,
    *,
    source: str,
    now: datetime,
    evidence: Mapping | None,
    report: IngestReport,
) -> HealthObservation | None:
    """Persist a signal's new state; a change of level is an observation (returned)."""
    row = rows.get(name)
    before = row.level if row else HealthLevel.UNKNOWN
    if row is None:
        row = rows[name] = HealthSignal(device=card, signal=name)
    row.level, row.value, row.message = new.level, new.value, new.message[:500]
    row.since, row.observed_at, row.data = new.since, new.observed_at or now, new.data
    row.save()
    if new.level == before or new.level == HealthLevel.UNKNOWN:
        return None
    obs, _ = observation_record(
        source=source,
        signal=name,
        level=new.level,
        value=new.value,
        message=new.message or f"{name}: {new.level}",
        observed_at=now,
        device=card,
        evidence={"previous": before, **(evidence or {})},
        report=report,
    )
    return obs


def record_xid(
    card: Device,
    event: XidEvent,
    *,
    source: str,
    rules: pol.Rules,
    report: IngestReport,
    dedupe_key: str = "",
    evidence: Mapping | None = None,
) -> bool:
    """Store one XID event of a card as an observation (its own level, catalogue facts as evidence)."""
    if isinstance(event.xid, bool) or not isinstance(event.xid, int) or not 1 <= event.xid <= MAX_XID:
        raise HealthInputError(f"{card.node.name}/{card.key}: xid: {event.xid!r} is not an XID (1 to {MAX_XID})")
    info = xid_info(event.xid)
    _, created = observation_record(
        source=source,
        signal="xid_event",
        level=pol.xid_event_level(event.xid, rules),
        value=event.xid,
        message=f"XID {event.xid}: {info.name}" + (f" — {event.message}" if event.message else ""),
        observed_at=event.at,
        device=card,
        evidence={
            "xid": event.xid,
            "message": event.message,
            "severity": info.severity,
            "recommended_action": info.action,
            "k8s_device_plugin": info.device_plugin,
            **(evidence or {}),
        },
        dedupe_key=dedupe_key,
        report=report,
    )
    return created


def refresh_event_signals(
    card: Device, rows: dict[str, HealthSignal], *, rules: pol.Rules, now: datetime, report: IngestReport
) -> list[str]:
    """Recompute the XID and resets signals from stored events; returns the signals that turned unhealthy."""
    turned = []
    xid_row = rows.get("xid")
    reset_at = (xid_row.data or {}).get("reset_at") if xid_row else None
    floor = now - timedelta(hours=rules.xid_decay_hours) - timedelta(seconds=rules.xid_window_seconds)
    if reset_at:
        floor = max(floor, datetime.fromisoformat(reset_at))
    events = [
        XidEvent(xid=int(o.value), at=o.observed_at, message=(o.evidence or {}).get("message", ""))
        for o in HealthObservation.objects.filter(device=card, signal="xid_event", observed_at__gte=floor)
        if o.value is not None
    ]
    if events or xid_row is not None:
        chains = correlate(events, window=timedelta(seconds=rules.xid_window_seconds))
        level, message, evidence = pol.xid_signal(chains, rules, now)
        prev = state_of(xid_row)
        data = {**prev.data, "chain": evidence}
        new = pol.SignalState(
            level=level,
            value=float(evidence["xids"][0]) if evidence else None,
            message=message,
            since=prev.since if prev.level == level and prev.since else now,
            observed_at=now,
            data=data,
        )
        before = prev.level
        if save_signal(card, rows, "xid", new, source=Source.XID, now=now, evidence=evidence, report=report):
            if level == HealthLevel.UNHEALTHY and before != level:
                turned.append("xid")
    resets_row = rows.get("resets")
    day_floor = now - timedelta(days=1)
    if reset_at:
        day_floor = max(day_floor, datetime.fromisoformat(reset_at))
    resets = HealthObservation.objects.filter(device=card, signal="reset_event", observed_at__gte=day_floor).count()
    if resets or resets_row is not None:
        threshold = rules.resets_per_day_degraded
        level = HealthLevel.DEGRADED if threshold and resets >= threshold else HealthLevel.OK
        prev = state_of(resets_row)
        text = f"{resets} GPU reset(s) in the last 24 h" + (f" (threshold {threshold})" if threshold else "")
        new = pol.SignalState(
            level=level,
            value=float(resets),
            message=text,
            since=prev.since if prev.level == level and prev.since else now,
            observed_at=now,
            data=prev.data,
        )
        save_signal(card, rows, "resets", new, source=Source.NVML, now=now, evidence=None, report=report)
    return turned


# --- protecting jobs -----------------------------------------------------------------------------------------


def jobs_protect(*, devices: Sequence[Device], reason: str, now: datetime, policy: HealthPolicy) -> list[int]:
    """Move running jobs off devices that turned unhealthy: checkpoint first where they can, else evict or wait.

    Each job's timeline says what happens and its owner gets an email; validation jobs are never moved. The jobs
    move through the queues services, reached through pools.health.ports (``preempting``, which both backends
    drive: checkpoint with a policy, then requeue, after which the scheduler places them on healthy devices).
    """
    if not devices:
        return []
    return repair_jobs_port().jobs_protect(
        devices=devices,
        reason=reason,
        now=now,
        evict_without_checkpoint=policy.drain_without_checkpoint == HealthPolicy.DrainMode.EVICT,
    )


def aware_now(now: datetime | None) -> datetime:
    now = now or timezone.now()
    if timezone.is_naive(now):
        raise ValueError("now must be timezone-aware")
    return now


def lock_cards(cards: Iterable[Device]) -> None:
    """Row-lock the cards about to change, in pk order (the house lock order)."""
    ids = sorted({c.pk for c in cards})
    if ids:
        list(Device.objects.select_for_update().filter(pk__in=ids).order_by("pk").values_list("pk", flat=True))


def signals_reset_after_repair(*, devices: Iterable[Device], now: datetime) -> None:
    """Forget what the signals said before a passed validation (breach timers, levels), keeping counter memory
    (the last XID gauge value, energy counter) so an old value is not read as a new event."""
    devices = list(devices)
    stamp = now.isoformat()
    for row in HealthSignal.objects.filter(device__in=devices).exclude(signal="identity"):
        data = {k: v for k, v in (row.data or {}).items() if not k.endswith("_since") and k != "chain"}
        if "agg_last" in data:
            data["agg_baseline"] = data["agg_last"]
        if row.signal in ("xid", "resets"):
            data["reset_at"] = stamp
        row.level, row.message, row.since, row.data = HealthLevel.UNKNOWN, "reset after repair", now, data
        row.save(update_fields=["level", "message", "since", "data"])
    xid_rows = HealthSignal.objects.filter(device__in=devices, signal="xid")
    missing = {d.pk for d in devices} - set(xid_rows.values_list("device_id", flat=True))
    HealthSignal.objects.bulk_create(
        HealthSignal(device_id=pk, signal="xid", level=HealthLevel.UNKNOWN, since=now, data={"reset_at": stamp})
        for pk in sorted(missing)
    )


@transaction.atomic
def health_policy_save(*, policy: HealthPolicy, actor: Actor) -> HealthPolicy:
    """Save an edited policy (rejecting bad JSON settings); making it active deactivates the one in force."""
    errors = pol.policy_errors(
        {
            "xid_action_levels": policy.xid_action_levels,
            "xid_severity_levels": policy.xid_severity_levels,
            "xid_overrides": policy.xid_overrides,
            "throttle_reasons": policy.throttle_reasons,
            "node_condition_types": policy.node_condition_types,
            "validation_command": policy.validation_command,
        }
    )
    if errors:
        raise ValidationFailed(errors)
    if policy.active:
        HealthPolicy.objects.filter(active=True).exclude(pk=policy.pk).update(active=False)
    policy.updated_by = actor.user
    policy.save()
    return policy
