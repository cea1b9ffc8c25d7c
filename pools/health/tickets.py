"""Repair tickets: opened → draining → in repair → validating → returned | RMA, each step timed and attributed.

Ticket states drive device states: opened/draining ↔ unhealthy (excluded, jobs leaving), in repair ↔
quarantined, validating ↔ validating (only the ticket's burn-in job may use the device), returned ↔ healthy,
RMA ↔ retired. A device returns to the pool only when a validation job, submitted through the normal job path
(queues.services.job_submit) in the platform validation team and pinned to the ticket's devices, has passed.
The steps that act on jobs (moving them off, evicting, submitting and cancelling the burn-in job) go through
pools.health.ports, which the cluster integration implements with the queues services.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from kernel.errors import Conflict, ValidationFailed
from kernel.labels import plural, state_words, states_words
from pools.health import directives
from pools.health.ports import JobOutcome, ValidationJobRequest, repair_jobs_port
from pools.health.services import (
    Actor,
    IngestReport,
    active_policy,
    aware_now,
    card_units,
    device_health_set,
    device_label,
    jobs_protect,
    signals_reset_after_repair,
)
from pools.models import (
    USABLE_HEALTH,
    Allocation,
    Cluster,
    Device,
    HealthState,
    Node,
    RepairTicket,
    RepairTicketEvent,
    ResourceClass,
    ValidationRun,
)
from pools.selectors import SHARING_KIND

log = logging.getLogger(__name__)

T = RepairTicket.State
#: Legal ticket moves. RMA is possible from every open state (a card known dead need not be validated).
TICKET_MOVES: dict[str, frozenset[str]] = {
    T.OPENED: frozenset({T.DRAINING, T.RMA}),
    T.DRAINING: frozenset({T.IN_REPAIR, T.RMA}),
    T.IN_REPAIR: frozenset({T.VALIDATING, T.RMA}),
    T.VALIDATING: frozenset({T.RETURNED, T.IN_REPAIR, T.RMA}),
    T.RETURNED: frozenset(),
    T.RMA: frozenset(),
}
#: The device state each ticket state keeps its devices in.
DEVICE_STATE = {
    T.OPENED: HealthState.UNHEALTHY,
    T.DRAINING: HealthState.UNHEALTHY,
    T.IN_REPAIR: HealthState.QUARANTINED,
    T.VALIDATING: HealthState.VALIDATING,
    T.RETURNED: HealthState.HEALTHY,
    T.RMA: HealthState.RETIRED,
}
STAMP = {
    T.DRAINING: ("draining_at", "draining_by"),
    T.IN_REPAIR: ("in_repair_at", "in_repair_by"),
    T.VALIDATING: ("validating_at", "validating_by"),
    T.RETURNED: ("closed_at", "closed_by"),
    T.RMA: ("closed_at", "closed_by"),
}


@dataclass(frozen=True)
class TicketChange:
    """A ticket that moved."""

    ticket: int
    before: str
    after: str
    note: str

    def __str__(self) -> str:
        before = state_words(T, self.before) if self.before else "new"
        return f"ticket #{self.ticket}: {before} → {state_words(T, self.after)} ({self.note})"


# --- which devices a ticket holds ----------------------------------------------------------------------------


def ticket_devices(ticket: RepairTicket) -> list[Device]:
    """Every device whose state the ticket drives: the card and its units, or all present devices of the node."""
    if ticket.device_id:
        return card_units(Device.objects.select_related("node").get(pk=ticket.device_id))
    return list(
        Device.objects.filter(node_id=ticket.node_id, gone_at__isnull=True).select_related("node").order_by("pk")
    )


def ticket_units(ticket: RepairTicket, devices: Sequence[Device] | None = None) -> list[Device]:
    """The schedulable units among the ticket's devices (what jobs hold and what validation runs on)."""
    return [d for d in (devices if devices is not None else ticket_devices(ticket)) if d.resource_name]


def open_ticket_of(device: Device) -> RepairTicket | None:
    """The open ticket covering a device: its own, its card's, or its node's."""
    open_states = RepairTicket.OPEN_STATES
    ids = [device.pk] + ([device.parent_id] if device.parent_id else [])
    return (
        RepairTicket.objects.filter(state__in=open_states)
        .filter(Q(device_id__in=ids) | Q(node_id=device.node_id, device__isnull=True))
        .order_by("pk")
        .first()
    )


def _busy(units: Sequence[Device], ticket: RepairTicket) -> list[int]:
    """Jobs other than the ticket's own validation jobs that still hold one of the units."""
    return sorted(
        set(
            Allocation.objects.filter(device__in=list(units), ended_at__isnull=True)
            .exclude(job__validation_run__ticket=ticket)
            .values_list("job_id", flat=True)
        )
    )


# --- moving a ticket -----------------------------------------------------------------------------------------


def _event(
    ticket: RepairTicket, *, before: str, after: str, now: datetime, actor: Actor, note: str, details=None
) -> None:
    RepairTicketEvent.objects.create(
        ticket=ticket,
        at=now,
        from_state=before,
        to_state=after,
        actor=actor.user,
        actor_label=actor.label[:120],
        note=note,
        details=dict(details or {}),
    )


def _move(
    ticket: RepairTicket,
    to: str,
    *,
    now: datetime,
    actor: Actor,
    note: str,
    details=None,
    report: IngestReport | None = None,
) -> TicketChange:
    """Move a ticket (refusing an illegal move), stamp the step, and bring its devices to the matching state."""
    before = ticket.state
    if to not in TICKET_MOVES[before]:
        allowed = states_words(T, sorted(TICKET_MOVES[before])) or "none (the ticket is closed)"
        was, to_words = state_words(T, before), state_words(T, to)
        raise Conflict(f"ticket #{ticket.pk} is {was}: it cannot go to {to_words} (allowed: {allowed})")
    ticket.state = to
    ticket.state_changed_at = now
    fields = ["state", "state_changed_at"]
    if to in STAMP:
        at_field, by_field = STAMP[to]
        setattr(ticket, at_field, now)
        setattr(ticket, by_field, actor.user)
        fields += [at_field, by_field]
    ticket.save(update_fields=fields)
    _event(ticket, before=before, after=to, now=now, actor=actor, note=note, details=details)
    target = DEVICE_STATE[to]
    reason = f"repair ticket #{ticket.pk} {T(to).label.lower()}: {note}"[:300]
    for device in ticket_devices(ticket):
        if device.health in (target, HealthState.RETIRED) or _owned_elsewhere(device, ticket):
            continue
        if target == HealthState.QUARANTINED and device.health in USABLE_HEALTH:
            # Marked usable again while the ticket drained: it is excluded (unhealthy) before it is quarantined.
            device_health_set(
                device,
                to=HealthState.UNHEALTHY,
                reason=reason,
                now=now,
                actor=actor,
                evidence={"ticket": ticket.pk, "ticket_state": to},
                ticket=ticket,
            )
        device_health_set(
            device,
            to=target,
            reason=reason,
            now=now,
            actor=actor,
            evidence={"ticket": ticket.pk, "ticket_state": to, **(details or {})},
            ticket=ticket,
            report=report,
            # the device shows its ticket and the original cause, not the step's note
            device_reason=""
            if to == T.RETURNED
            else f"repair ticket #{ticket.pk} ({T(to).label.lower()}): {ticket.reason}",
        )
    if to in RepairTicket.CLOSED_STATES:
        directives.directives_release(ticket=ticket, now=now)
    return TicketChange(ticket.pk, before, to, note)


def _owned_elsewhere(device: Device, ticket: RepairTicket) -> bool:
    """Whether another open ticket (the device's own, inside a node ticket) drives this device."""
    if ticket.device_id:
        return False
    other = open_ticket_of(device)
    return other is not None and other.pk != ticket.pk


# --- opening and draining ------------------------------------------------------------------------------------


@transaction.atomic
def ticket_open(
    *,
    reason: str,
    actor: Actor,
    device: Device | None = None,
    node: Node | None = None,
    now: datetime | None = None,
    evidence: dict | None = None,
    recommended_action: str = "",
    report: IngestReport | None = None,
) -> RepairTicket:
    """Open a ticket for a device (its card) or a whole node and start draining; an open ticket is reused.

    The devices become unhealthy at once (excluded from new placement), running jobs are moved off, and when
    nothing runs on them any more the ticket goes to repair and the devices to quarantine.
    """
    now = aware_now(now)
    if device is None and node is None:
        raise Conflict("a repair ticket needs a device or a node")
    if device is not None:
        device = device.parent if device.parent_id else device
        node = device.node
        existing = open_ticket_of(device)
    else:
        existing = RepairTicket.objects.filter(
            node=node, device__isnull=True, state__in=RepairTicket.OPEN_STATES
        ).first()
    if existing is not None:
        ticket_note(ticket=existing, note=f"Reported again: {reason}", actor=actor, now=now, details=evidence)
        return existing
    devices = card_units(device) if device is not None else list(Device.objects.filter(node=node, gone_at__isnull=True))
    retired = [d for d in devices if d.health == HealthState.RETIRED]
    if devices and len(retired) == len(devices):
        raise Conflict(f"{device_label(devices[0])}: the device is retired (RMA); it cannot be repaired again")
    ticket = RepairTicket.objects.create(
        node=node,
        device=device,
        state=T.OPENED,
        reason=reason[:500],
        recommended_action=recommended_action,
        evidence=dict(evidence or {}),
        opened_at=now,
        opened_by=actor.user,
        state_changed_at=now,
    )
    _event(ticket, before="", after=T.OPENED, now=now, actor=actor, note=reason, details=evidence)
    policy = active_policy()
    devices = ticket_devices(ticket)
    moved = []
    for d in devices:
        if d.health in USABLE_HEALTH and not _owned_elsewhere(d, ticket):
            device_health_set(
                d,
                to=HealthState.UNHEALTHY,
                reason=f"repair ticket #{ticket.pk}: {reason}",
                now=now,
                actor=actor,
                evidence=evidence,
                ticket=ticket,
                report=report,
            )
            moved.append(d)
        elif d.health == HealthState.UNHEALTHY:
            device_health_set(
                d, to=HealthState.UNHEALTHY, reason=f"repair ticket #{ticket.pk}: {reason}", now=now, actor=actor
            )
    protected = jobs_protect(devices=moved, reason=reason, now=now, policy=policy) if moved else []
    if report is not None:
        report.jobs_protected += protected
    directives.directives_for_ticket(ticket=ticket, units=ticket_units(ticket, devices), now=now)
    busy = _busy(ticket_units(ticket, devices), ticket)
    note = f"waiting for {len(busy)} job(s) to leave: {', '.join(map(str, busy))}" if busy else "nothing runs on it"
    _move(ticket, T.DRAINING, now=now, actor=actor, note=note, details={"jobs": busy}, report=report)
    _finish_drain(ticket, now=now, actor=actor, report=report)
    return ticket


def _finish_drain(
    ticket: RepairTicket, *, now: datetime, actor: Actor, report: IngestReport | None = None
) -> TicketChange | None:
    """Move a draining ticket to repair once no job holds its devices."""
    if ticket.state != T.DRAINING:
        return None
    if _busy(ticket_units(ticket), ticket):
        return None
    return _move(ticket, T.IN_REPAIR, now=now, actor=actor, note="drained: no job holds the device", report=report)


@transaction.atomic
def ticket_drain_now(*, ticket: RepairTicket, actor: Actor, now: datetime | None = None) -> list[int]:
    """Evict every job still holding the ticket's devices (checkpoint first where they can); returns the job ids."""
    now = aware_now(now)
    ticket = RepairTicket.objects.select_for_update().get(pk=ticket.pk)
    if ticket.state != T.DRAINING:
        raise Conflict(f"ticket #{ticket.pk} is {state_words(T, ticket.state)}, not draining")
    units = ticket_units(ticket)
    evicted = repair_jobs_port().jobs_drain(
        job_ids=_busy(units, ticket), ticket_id=ticket.pk, actor_label=actor.label, now=now
    )
    held = Allocation.objects.filter(device__in=units, ended_at__isnull=True).count()
    ticket_note(
        ticket=ticket, note=f"Drain forced: {len(evicted)} job(s) evicted ({held} device(s) held)", actor=actor, now=now
    )
    return evicted


def ticket_note(
    *, ticket: RepairTicket, note: str, actor: Actor, now: datetime | None = None, details: dict | None = None
) -> None:
    """Add a note (more evidence, an operator's remark) to a ticket's history."""
    now = aware_now(now)
    _event(ticket, before=ticket.state, after="", now=now, actor=actor, note=note, details=details)


@transaction.atomic
def ticket_expect_back(
    *, ticket: RepairTicket, at: datetime | None, actor: Actor, now: datetime | None = None
) -> RepairTicket:
    """Record when the ticket's devices are expected back in the pool (None: no estimate; pages then estimate it
    from past repairs); a note on the ticket says who set it."""
    now = aware_now(now)
    if at is not None and at.tzinfo is None:
        raise ValidationFailed({"expected_back_at": ["give a time with its time zone"]})
    if ticket.state in RepairTicket.CLOSED_STATES:
        raise Conflict(f"ticket #{ticket.pk} is closed ({ticket.get_state_display().lower()}): nothing comes back")
    RepairTicket.objects.filter(pk=ticket.pk).update(expected_back_at=at)
    ticket.expected_back_at = at
    when = f"{timezone.localtime(at):%Y-%m-%d %H:%M}" if at is not None else "unknown (estimated from past repairs)"
    _event(ticket, before=ticket.state, after="", now=now, actor=actor, note=f"Expected back: {when}.")
    return ticket


@transaction.atomic
def ticket_mark_rma(*, ticket: RepairTicket, actor: Actor, now: datetime | None = None, note: str = "") -> RepairTicket:
    """Send the device to RMA: it is retired for good (a replacement card is a new device)."""
    now = aware_now(now)
    ticket = RepairTicket.objects.select_for_update().get(pk=ticket.pk)
    for run in ticket.validation_runs.filter(result=ValidationRun.Result.PENDING):
        repair_jobs_port().validation_cancel(job_id=run.job_id, now=now, message=f"ticket #{ticket.pk} sent to RMA")
        run.result, run.finished_at, run.message = ValidationRun.Result.FAILED, now, "cancelled: RMA"
        run.save(update_fields=["result", "finished_at", "message"])
    _move(ticket, T.RMA, now=now, actor=actor, note=note or f"sent to RMA by {actor.label}")
    return ticket


# --- validation ----------------------------------------------------------------------------------------------


def _validation_shape(units: Sequence[Device], node: Node) -> tuple[ResourceClass, int, int]:
    """A class and (devices per pod, pods) that cover exactly the units: one pod with all, else one pod each."""
    if not units:
        raise Conflict("the ticket has no schedulable device to validate")
    kinds = {(u.resource_name, u.kind) for u in units}
    if len(kinds) != 1:
        raise Conflict(
            "the devices are of several resources ("
            + ", ".join(sorted(r for r, _ in kinds))
            + "): validate them by hand or open one ticket per card"
        )
    resource, kind = kinds.pop()
    if node.flavor_id is None:
        raise Conflict(f"node {node.name} matches no resource flavor, so no class can place a validation job there")
    candidates = [
        rc
        for rc in ResourceClass.objects.filter(active=True, resource_name=resource, flavor_links__flavor=node.flavor_id)
        .distinct()
        .order_by("display_order", "pk")
        if SHARING_KIND[rc.sharing] == kind
    ]
    n = len(units)
    for rc in candidates:
        if n in (rc.allowed_counts or []):
            return rc, n, 1
    for rc in candidates:
        if 1 in (rc.allowed_counts or []):
            return rc, 1, n
    raise Conflict(
        f"no active resource class offers {n} (or 1) {resource} on flavor {node.flavor.name}: "
        "add the count to a class, or a class for validation"
    )


@transaction.atomic
def ticket_start_validation(*, ticket: RepairTicket, actor: Actor, now: datetime | None = None) -> ValidationRun:
    """Repair is done: submit the burn-in job pinned to the ticket's devices, which go to ``validating``."""
    now = aware_now(now)
    ticket = (
        RepairTicket.objects.select_for_update(of=("self",))
        .select_related("node__cluster", "node__flavor")
        .get(pk=ticket.pk)
    )
    if ticket.state != T.IN_REPAIR:
        raise Conflict(f"ticket #{ticket.pk} is {state_words(T, ticket.state)}: validation starts from in repair")
    policy = active_policy()
    units = ticket_units(ticket)
    rc, per_pod, pods = _validation_shape(units, ticket.node)
    attempt = ticket.validation_runs.count() + 1
    outcome = str(settings.HEALTH_SIMULATED_VALIDATION_OUTCOME or "pass")
    env = {
        "PORTAL_VALIDATION_TICKET": str(ticket.pk),
        "PORTAL_VALIDATION_NODE": ticket.node.name,
        "PORTAL_VALIDATION_DEVICES": ",".join(u.uuid or u.key for u in units),
        # GPU indexes on the node, for e.g. ``dcgmi diag -r 3 -i $PORTAL_VALIDATION_GPU_INDEXES``
        "PORTAL_VALIDATION_GPU_INDEXES": ",".join(str(u.index) for u in units if u.index is not None),
        "PORTAL_VALIDATION_GPUS": str(per_pod),
    }
    simulated = ticket.node.cluster.backend == Cluster.Backend.SIMULATED
    request = ValidationJobRequest(
        cluster=ticket.node.cluster,
        team_slug=policy.validation_team_slug,
        user=actor.user,
        name=f"validate-t{ticket.pk}-{attempt}",
        image=policy.validation_image,
        resource_class=rc,
        devices_per_pod=per_pod,
        pod_count=pods,
        command=list(policy.validation_command),
        env=env,
        max_runtime_seconds=policy.validation_max_runtime_seconds,
        sim_runtime_seconds=policy.validation_sim_runtime_seconds,
        sim_fails=simulated and outcome.lower() == "fail",
    )
    _move(ticket, T.VALIDATING, now=now, actor=actor, note=f"burn-in attempt {attempt} on {len(units)} device(s)")
    job_id = repair_jobs_port().validation_submit(request=request, now=now)
    run = ValidationRun.objects.create(ticket=ticket, job_id=job_id, attempt=attempt, started_at=now)
    run.devices.set(units)
    ticket_note(
        ticket=ticket,
        note=f"Validation job #{job_id} submitted ({plural(pods, 'pod')} with {plural(per_pod, 'device')} of "
        f"{rc.name})",
        actor=actor,
        now=now,
        details={"job": job_id, "image": request.image, "command": request.command},
    )
    return run


def validation_abort(*, ticket: RepairTicket, reason: str, now: datetime, actor: Actor) -> None:
    """New bad evidence while a device is validating: the running validation fails now."""
    port = repair_jobs_port()
    for run in ticket.validation_runs.filter(result=ValidationRun.Result.PENDING).order_by("pk"):
        port.validation_cancel(job_id=run.job_id, now=now, message=reason)
        outcome = port.job_outcomes(job_ids=[run.job_id])[run.job_id]
        _settle_run(run, outcome, now=now, actor=actor, failure=reason)


def _settle_run(
    run: ValidationRun, outcome: JobOutcome, *, now: datetime, actor: Actor, failure: str = ""
) -> TicketChange | None:
    """Record a finished validation's result and move its ticket: returned on a pass, repair or RMA on a failure."""
    if not outcome.ended and not failure:
        return None
    ticket = RepairTicket.objects.select_for_update().get(pk=run.ticket_id)
    passed = not failure and outcome.succeeded
    text = failure or outcome.last_message or outcome.state
    run.result = ValidationRun.Result.PASSED if passed else ValidationRun.Result.FAILED
    run.finished_at = outcome.finished_at or now
    run.message = f"job #{outcome.job_id} {outcome.state}: {text}"[:500]
    run.save(update_fields=["result", "finished_at", "message"])
    if ticket.state != T.VALIDATING:
        return None
    details = {"job": outcome.job_id, "job_state": outcome.state, "attempt": run.attempt}
    if passed:
        devices = ticket_devices(ticket)
        change = _move(
            ticket, T.RETURNED, now=now, actor=actor, note=f"validation passed ({run.message})", details=details
        )
        signals_reset_after_repair(devices=devices, now=now)
        return change
    ticket.validation_failures += 1
    ticket.save(update_fields=["validation_failures"])
    policy = active_policy()
    if ticket.validation_failures >= max(policy.validation_failures_before_rma, 1):
        note = f"validation failed {ticket.validation_failures} time(s) ({run.message}): RMA"
        return _move(ticket, T.RMA, now=now, actor=actor, note=note, details=details)
    note = f"validation failed ({run.message}): back to repair"
    return _move(ticket, T.IN_REPAIR, now=now, actor=actor, note=note, details=details)


@transaction.atomic
def repair_tickets_advance(*, cluster=None, now: datetime | None = None) -> list[TicketChange]:
    """Advance tickets that can move by themselves: drains that finished, validations whose job ended."""
    now = aware_now(now)
    actor = Actor(label="repair workflow")
    changes = []
    draining = RepairTicket.objects.filter(state__in=(T.OPENED, T.DRAINING))
    runs = ValidationRun.objects.filter(result=ValidationRun.Result.PENDING)
    if cluster is not None:
        draining = draining.filter(node__cluster=cluster)
        runs = runs.filter(job__cluster=cluster)
    for ticket in draining.select_for_update().order_by("pk"):
        if ticket.state == T.OPENED:
            changes.append(_move(ticket, T.DRAINING, now=now, actor=actor, note="draining"))
        change = _finish_drain(ticket, now=now, actor=actor)
        if change:
            changes.append(change)
    runs = list(runs.order_by("pk"))
    outcomes = repair_jobs_port().job_outcomes(job_ids=[r.job_id for r in runs]) if runs else {}
    for run in runs:
        change = _settle_run(run, outcomes[run.job_id], now=now, actor=actor)
        if change:
            changes.append(change)
    return changes
