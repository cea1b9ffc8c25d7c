"""Settling a card: bring it (and its units) to the state its signals call for, and an operator's own mark.

A usable card whose worst signal is unhealthy goes unhealthy (its jobs are moved off and, by policy, a repair
ticket opens); degraded and recovered cards follow their signals; a card already out of the pool only adds
evidence to its open ticket (or, while it validates, fails the validation).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from pools.health import policy as pol
from pools.health import tickets
from pools.health.services import (
    Actor,
    HealthInputError,
    IngestReport,
    Source,
    active_policy,
    aware_now,
    card_of,
    card_units,
    device_health_set,
    jobs_protect,
    lock_cards,
    save_signal,
    signals_of,
    state_of,
)
from pools.models import (
    USABLE_HEALTH,
    Device,
    DeviceHealthTransition,
    HealthLevel,
    HealthObservation,
    HealthPolicy,
    HealthSignal,
    HealthState,
    RepairTicket,
)


def _bad_signals(rows: Mapping[str, HealthSignal]) -> tuple[str, list[HealthSignal]]:
    """The card's worst known level and the signals at it."""
    known = [r for r in rows.values() if r.signal != "identity" and r.level != HealthLevel.UNKNOWN]
    target = pol.worst(r.level for r in known)
    return target, [r for r in known if r.level == target and target in (pol.DEGRADED, pol.UNHEALTHY)]


def _evidence_of(rows: Sequence[HealthSignal]) -> dict[str, Any]:
    return {
        r.signal: {
            "level": r.level,
            "value": r.value,
            "message": r.message,
            "since": r.since.isoformat() if r.since else None,
            **({"chain": r.data["chain"]} if r.signal == "xid" and r.data.get("chain") else {}),
        }
        for r in rows
    }


@dataclass
class _Verdict:
    """What a card's signals say, and what a transition records of it."""

    card: Device
    rows: dict[str, HealthSignal]
    target: str
    bad: list[HealthSignal]
    reason: str
    evidence: dict[str, Any]
    observation: HealthObservation | None
    now: datetime
    actor: Actor
    report: IngestReport


def _verdict(
    card: Device, *, now: datetime, actor: Actor, report: IngestReport, observation: HealthObservation | None
) -> _Verdict:
    """Read the card's signals; the observation kept is the one that raised the worst signal."""
    rows = signals_of(card)
    target, bad = _bad_signals(rows)
    if bad and (observation is None or observation.signal not in {r.signal for r in bad}):
        observation = (
            HealthObservation.objects.filter(device=card, signal__in=[r.signal for r in bad], level=target)
            .order_by("-observed_at", "-id")
            .first()
        ) or observation
    reason = "; ".join(r.message for r in bad)[:300]
    return _Verdict(card, rows, target, bad, reason, _evidence_of(bad), observation, now, actor, report)


def _set(v: _Verdict, unit: Device, to: str, *, reason: str, evidence: Mapping | None):
    """Move one unit, recording the verdict's observation and report."""
    return device_health_set(
        unit,
        to=to,
        reason=reason,
        now=v.now,
        actor=v.actor,
        evidence=evidence,
        observation=v.observation,
        report=v.report,
    )


def _turn_unhealthy(v: _Verdict, units: Sequence[Device], policy: HealthPolicy) -> None:
    """Exclude the card's usable units, move their jobs off and, by policy, open (or reuse) a repair ticket."""
    moved, transitions = [], []
    for u in units:
        if u.health not in USABLE_HEALTH:
            continue
        transition = _set(v, u, HealthState.UNHEALTHY, reason=v.reason, evidence=v.evidence)
        if transition is not None:
            moved.append(u)
            transitions.append(transition.pk)
    v.report.jobs_protected += jobs_protect(devices=moved, reason=v.reason, now=v.now, policy=policy)
    if policy.auto_open_ticket:
        _ticket_for(v, moved, transitions)


def _ticket_for(v: _Verdict, moved: Sequence[Device], transitions: Sequence[int]) -> None:
    """Open the card's ticket; the moves that caused it belong to its history (and the report says so)."""
    rows = v.rows
    action = (rows["xid"].data.get("chain") or {}).get("action", "") if "xid" in rows else ""
    ticket = tickets.ticket_open(
        device=v.card,
        reason=v.reason,
        actor=v.actor,
        now=v.now,
        evidence=v.evidence,
        recommended_action=action if any(r.signal == "xid" for r in v.bad) else "",
        report=v.report,
    )
    if ticket.pk not in v.report.tickets_opened:
        v.report.tickets_opened.append(ticket.pk)
    DeviceHealthTransition.objects.filter(pk__in=list(transitions), ticket__isnull=True).update(ticket=ticket)
    keys = {(u.node.name, u.key) for u in moved}
    for change in v.report.changes:
        if change.ticket is None and change.after == HealthState.UNHEALTHY and (change.node, change.device) in keys:
            change.ticket = ticket.pk


def _degrade(v: _Verdict, units: Sequence[Device]) -> None:
    """Healthy units go degraded; degraded ones keep the new reason."""
    for unit in units:
        if unit.health == HealthState.HEALTHY:
            _set(v, unit, HealthState.DEGRADED, reason=v.reason, evidence=v.evidence)
        elif unit.health == HealthState.DEGRADED:
            device_health_set(unit, to=HealthState.DEGRADED, reason=v.reason, now=v.now, actor=v.actor)


def _recover(v: _Verdict, units: Sequence[Device]) -> None:
    """Degraded units whose signals are all ok again go back to healthy."""
    for unit in units:
        if unit.health == HealthState.DEGRADED:
            _set(v, unit, HealthState.HEALTHY, reason="", evidence={"recovered": _evidence_of(list(v.rows.values()))})


def _more_evidence(v: _Verdict, turned_unhealthy: Iterable[str]) -> None:
    """A card already out of the pool: new unhealthy signals go to its ticket, or fail its running validation."""
    rows = v.rows
    turned = [s for s in turned_unhealthy if s in rows and rows[s].level == pol.UNHEALTHY]
    if not turned:
        return
    ticket = tickets.open_ticket_of(v.card)
    if ticket is None:
        return
    text = "; ".join(rows[s].message for s in turned)
    if ticket.state == RepairTicket.State.VALIDATING:
        reason = f"new evidence during validation: {text}"
        tickets.validation_abort(ticket=ticket, reason=reason, now=v.now, actor=v.actor)
    else:
        tickets.ticket_note(ticket=ticket, note=f"More evidence: {text}", actor=v.actor, now=v.now, details=v.evidence)


def settle_card(
    card: Device,
    *,
    now: datetime,
    actor: Actor,
    report: IngestReport,
    turned_unhealthy: Iterable[str] = (),
    observation: HealthObservation | None = None,
) -> None:
    """Bring a card (and its units) to the state its signals call for, within what the state machine allows."""
    policy = active_policy()
    v = _verdict(card, now=now, actor=actor, report=report, observation=observation)
    if card.health not in USABLE_HEALTH:
        _more_evidence(v, turned_unhealthy)
        return
    units = card_units(card)
    if v.target == pol.UNHEALTHY:
        _turn_unhealthy(v, units, policy)
    elif v.target == pol.DEGRADED:
        _degrade(v, units)
    elif v.target == pol.OK and card.health == HealthState.DEGRADED:
        _recover(v, units)


@transaction.atomic
def health_mark(*, device: Device, level: str, note: str, actor: Actor, now: datetime | None = None) -> IngestReport:
    """An operator's own observation of a card (degraded, unhealthy, or ok to clear an earlier one)."""
    now = aware_now(now)
    if level not in pol.LEVELS:
        raise HealthInputError(f"level must be one of {', '.join(pol.LEVELS)}, not {level!r}")
    card = card_of(device)
    lock_cards([card])
    report = IngestReport(origin=f"manual ({actor.label})")
    rows = signals_of(card)
    prev = state_of(rows.get("manual"))
    new = pol.SignalState(
        level=level,
        message=f"{actor.label}: {note}" if note else f"marked {level} by {actor.label}",
        since=now if prev.level != level else prev.since,
        observed_at=now,
    )
    obs = save_signal(card, rows, "manual", new, source=Source.MANUAL, now=now, evidence={"note": note}, report=report)
    turned = ["manual"] if level == pol.UNHEALTHY and prev.level != pol.UNHEALTHY else []
    settle_card(card, now=now, actor=actor, report=report, turned_unhealthy=turned, observation=obs)
    return report
