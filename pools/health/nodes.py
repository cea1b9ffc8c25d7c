"""Health seen from the node: what the inventory import stored of a Node, read into the health model.

A node tells of broken accelerators in three ways (docs/health.md, *Sources*): the device plugin lowers its
allocatable count below capacity, a fault-management controller (NVSentinel's fault quarantine) taints it, or a
health monitor (NVSentinel's platform connector) sets a node condition True. The inventory import
(pools.inventory) already marks devices unhealthy for the first two and stores the node's conditions and taints;
this module turns all three into health-model facts through pools.health.services and settle:

* health changes the import wrote are adopted (a transition with the node's evidence, jobs moved off, a repair
  ticket by policy), or undone where the repair workflow owns the device;
* a True condition the policy names and a health taint are per-card signals (``node_condition``, ``node_taint``):
  a signal turning unhealthy settles the card. One that clears while the card's repair ticket is open is noted
  on the ticket: the repair workflow owns the card, which comes back through validation, not by the node alone.
  A card without a ticket (``auto_open_ticket`` off) comes back when no signal holds it out any more — as the
  import returns a device whose allocatable or taint it had marked.

``health_nodes_reconcile`` does this for some nodes (the Kubernetes sync, after importing them) or all of a
cluster's (the health sweep). ``node_health_causes`` says in words why a node's devices are out, for wait reasons.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import OuterRef, Subquery

from kernel.errors import DomainError
from pools.health import policy as pol
from pools.health import tickets
from pools.health.directives import TAINT_KEY as PORTAL_TAINT_KEY
from pools.health.services import (
    Actor,
    IngestReport,
    Source,
    active_policy,
    aware_now,
    card_of,
    card_units,
    device_health_set,
    jobs_protect,
    lock_cards,
    observation_record,
    save_signal,
    signals_of,
    state_of,
)
from pools.health.settle import settle_card
from pools.health.state import check_transition
from pools.inventory.dra import taint_text
from pools.inventory.parse import HEALTH_TAINT_EFFECTS, HEALTH_TAINTS
from pools.models import USABLE_HEALTH, Cluster, Device, DeviceHealthTransition, HealthSignal, HealthState, Node

NODE_CONDITION_SIGNAL = "node_condition"
NODE_TAINT_SIGNAL = "node_taint"
#: How NVSentinel's platform connector names a GPU in a condition message: ``ErrorCode:79 GPU:0 … ;`` (by index).
_GPU_INDEX = re.compile(r"\bGPU:(\d+)\b")
#: Longest condition message quoted in a wait reason.
CAUSE_MESSAGE_MAX = 160
#: How the inventory import words a fault-quarantine cordon in a device's health reason.
QUARANTINE_REASON = "node quarantined ("


# --- reading a node ------------------------------------------------------------------------------------------


def failing_conditions(node: Node, types: Iterable[str]) -> list[dict[str, Any]]:
    """The node's conditions of the named types whose status is True (a fault, in NVSentinel's convention)."""
    wanted = set(types)
    return [c for c in node.conditions or [] if c.get("type") in wanted and str(c.get("status")) == "True"]


def condition_text(condition: Mapping[str, Any], *, limit: int = 300) -> str:
    """``GpuXidError=True: ErrorCode:79 GPU:0 Recommended Action=RESTART_BM`` (the message, else the reason)."""
    said = str(condition.get("message") or condition.get("reason") or "").strip().rstrip(";")
    head = f"{condition.get('type')}=True"
    if not said:
        return head
    if len(said) > limit:
        said = said[: limit - 1] + "…"
    return f"{head}: {said}"


def health_taints(node: Node, vendor: str | None = None) -> list[dict[str, Any]]:
    """The node's NoSchedule/NoExecute taints that say its accelerators (of ``vendor``, if given) are broken."""
    return [
        t
        for t in node.taints or []
        if t.get("key") in HEALTH_TAINTS
        and t.get("effect") in HEALTH_TAINT_EFFECTS
        and (vendor is None or HEALTH_TAINTS[t["key"]] == vendor)
    ]


def _taint_by(key: str) -> str:
    if key == PORTAL_TAINT_KEY:
        return "the portal's repair workflow"
    if key in HEALTH_TAINTS:
        return "NVSentinel's fault quarantine"
    return ""


def node_health_causes(
    node: Node,
    *,
    condition_types: Iterable[str],
    resource: str = "",
    device_reasons: Sequence[str] = (),
) -> list[str]:
    """Why a node's devices are out for health, in words, most telling first: NotReady, health taints (who put
    them), True conditions the policy names, a cordon, the device plugin's allocatable below capacity; when the
    node itself says nothing, the excluded devices' own reasons (DCGM, an operator, a repair ticket)."""
    causes = []
    if not node.ready:
        causes.append("NotReady")
    for taint in node.taints or []:
        key = str(taint.get("key", ""))
        if taint.get("effect") in HEALTH_TAINT_EFFECTS and (key in HEALTH_TAINTS or key == PORTAL_TAINT_KEY):
            causes.append(f"tainted {taint_text(taint)} by {_taint_by(key)}")
    for condition in failing_conditions(node, condition_types):
        causes.append(f"condition {condition_text(condition, limit=CAUSE_MESSAGE_MAX)}")
    if node.unschedulable:
        quarantine = next((r for r in device_reasons if QUARANTINE_REASON in r), "")
        if quarantine:  # "node quarantined (NVSentinel fault quarantine: GpuXidError 79 …)", as the import wrote it
            detail = quarantine.split(QUARANTINE_REASON, 1)[1].removesuffix(")")
            causes.append(f"cordoned by {detail}"[:CAUSE_MESSAGE_MAX])
        else:
            causes.append("cordoned")
    if resource:
        capacity = str((node.capacity or {}).get(resource, ""))
        allocatable = str((node.allocatable or {}).get(resource, ""))
        if capacity.isdigit() and allocatable.isdigit() and int(allocatable) < int(capacity):
            causes.append(f"the device plugin reports capacity {capacity}, allocatable {allocatable}")
    if not causes:
        causes += list(dict.fromkeys(r for r in device_reasons if r))[:2]
    return causes


#: Health reasons that say the node itself reported the fault (its conditions, health taints, a quarantine cordon).
NODE_REPORT_PREFIXES = ("node condition ", "node taint ", "node quarantined ")
#: How a repair ticket prefixes the cause it carries: ``repair ticket #12: …`` or ``repair ticket #12 (in repair): …``.
_TICKET_PREFIX = re.compile(r"^repair ticket #\d+(?: \([^)]*\))?: ")


def is_node_report_reason(reason: str) -> bool:
    """Whether a device's health reason is a node's own report (also once a repair ticket carries it)."""
    return _TICKET_PREFIX.sub("", reason or "").startswith(NODE_REPORT_PREFIXES)


# --- node signals --------------------------------------------------------------------------------------------


def _names(condition: Mapping[str, Any], card: Device) -> bool:
    """Whether a condition's message names this card: by UUID, or as ``GPU:<index>`` (NVSentinel's form)."""
    message = str(condition.get("message", ""))
    if card.uuid and card.uuid in message:
        return True
    return card.index is not None and str(card.index) in _GPU_INDEX.findall(message)


def _conditions_of(card: Device, failing: Sequence[dict], cards: Sequence[Device]) -> list[dict]:
    """The failing conditions that concern a card: those naming it, else those naming no card of the node."""
    named = [c for c in failing if _names(c, card)]
    return named or [c for c in failing if not any(_names(c, d) for d in cards)]


def _set_signal(
    card: Device,
    rows: dict,
    name: str,
    faults: Sequence[str],
    *,
    evidence: dict,
    cleared: str,
    now: datetime,
    actor: Actor,
    report: IngestReport,
) -> None:
    """A node signal of one card: unhealthy while ``faults`` are present, ok once they are gone."""
    if not faults and name not in rows:
        return
    prev = state_of(rows.get(name))
    level, text = (pol.UNHEALTHY, "; ".join(faults)) if faults else (pol.OK, cleared)
    new = pol.SignalState(
        level=level,
        message=text[:500],
        since=prev.since if prev.level == level and prev.since else now,
        observed_at=now,
    )
    obs = save_signal(card, rows, name, new, source=Source.NODE_CONDITION, now=now, evidence=evidence, report=report)
    if obs is None:
        return
    if level == pol.UNHEALTHY:
        settle_card(card, now=now, actor=actor, report=report, turned_unhealthy=[name], observation=obs)
        return
    if card.health in USABLE_HEALTH or prev.level != pol.UNHEALTHY:
        return
    ticket = tickets.open_ticket_of(card)
    if ticket is not None:  # the repair workflow owns the card: it returns through validation
        tickets.ticket_note(
            ticket=ticket,
            note=f"The node no longer reports it ({prev.message[:200]}); the devices return to the pool once a "
            "validation job passes.",
            actor=actor,
            now=now,
            details=evidence,
        )
    elif card.health == HealthState.UNHEALTHY and _all_clear(rows):
        # No ticket (auto_open_ticket off) and nothing else against it: the node said it, the node unsaid it.
        for unit in card_units(card):
            if unit.health == HealthState.UNHEALTHY:
                device_health_set(
                    unit,
                    to=HealthState.HEALTHY,
                    reason=f"the node no longer reports it ({prev.message[:200]})",
                    now=now,
                    actor=actor,
                    evidence=evidence,
                    observation=obs,
                    report=report,
                )


def _all_clear(rows: Mapping[str, Any]) -> bool:
    """Whether no signal of a card is degraded or unhealthy."""
    return all(r.level in (pol.OK, pol.UNKNOWN) for name, r in rows.items() if name != "identity")


def node_signals(
    node: Node,
    cards: Sequence[Device],
    *,
    rules: pol.Rules,
    now: datetime,
    actor: Actor,
    report: IngestReport,
    with_rows: set[int] | None = None,
) -> None:
    """The node's True conditions named by the policy and its health taints as signals of its cards.

    NVIDIA cards only (NVSentinel's conditions and taints are about NVIDIA GPUs); a condition whose message names
    cards (UUID or ``GPU:<index>``) concerns those only. ``with_rows``: the cards known to have a node signal
    already (None: unknown); a card without one, on a node that reports nothing against it, is not read at all.
    """
    failing = failing_conditions(node, rules.node_condition_types)
    nvidia = [c for c in cards if c.vendor == Device.Vendor.NVIDIA]
    taints = health_taints(node, Device.Vendor.NVIDIA)
    for card in nvidia:
        mine = _conditions_of(card, failing, nvidia)
        if not mine and not taints and with_rows is not None and card.pk not in with_rows:
            continue
        rows = signals_of(card)
        _set_signal(
            card,
            rows,
            NODE_CONDITION_SIGNAL,
            [f"node condition {condition_text(c)}" for c in mine],
            evidence={"conditions": mine},
            cleared="no failing node condition",
            now=now,
            actor=actor,
            report=report,
        )
        _set_signal(
            card,
            rows,
            NODE_TAINT_SIGNAL,
            [f"node taint {taint_text(t)}" for t in taints],
            evidence={"taints": taints},
            cleared="no health taint on the node",
            now=now,
            actor=actor,
            report=report,
        )


# --- what the inventory import wrote ----------------------------------------------------------------------------


def adopt_external(device: Device, *, now: datetime, report: IngestReport) -> None:
    """Record a health change someone else wrote (the inventory import), or undo one the state machine forbids."""
    last = device.health_transitions.order_by("-at", "-id").first()
    recorded = last.after if last else HealthState.HEALTHY
    if device.health == recorded:
        return
    node = device.node
    evidence = {
        "health_reason": device.health_reason,
        "node_taints": node.taints,
        "capacity": node.capacity,
        "allocatable": node.allocatable,
        "device_taints": device.taints,
        "conditions": [c for c in node.conditions or [] if str(c.get("status")) != "False"][:10],
    }
    external, reason = device.health, device.health_reason or f"set to {device.health} by the inventory import"
    if not _legal(recorded, external):
        # An illegal external write (e.g. unhealthy over quarantined): the repair workflow's state stands.
        if _legal(external, recorded):
            device_health_set(
                device,
                to=recorded,
                reason=(last.reason if last else "") or recorded,
                now=now,
                actor=Actor(label="portal health (restored)"),
                evidence={"overwritten_by_inventory": external, **evidence},
                ticket=tickets.open_ticket_of(card_of(device)),
                report=report,
            )
        else:
            _force(device, recorded, last)
        return
    obs, _ = observation_record(
        source=Source.NODE_CONDITION,
        signal="inventory",
        level=pol.UNHEALTHY if external == HealthState.UNHEALTHY else pol.OK,
        message=reason,
        observed_at=device.health_changed_at or now,
        device=device,
        evidence=evidence,
        report=report,
    )
    device.health = recorded
    device_health_set(
        device,
        to=external,
        reason=reason,
        now=device.health_changed_at or now,
        actor=Actor(label="inventory import"),
        evidence=evidence,
        observation=obs,
        report=report,
    )
    if external == HealthState.UNHEALTHY:
        policy = active_policy()
        report.jobs_protected += jobs_protect(devices=[device], reason=reason, now=now, policy=policy)
        if policy.auto_open_ticket:
            ticket = tickets.ticket_open(
                device=device, reason=reason, actor=Actor(label="inventory import"), now=now, evidence=evidence
            )
            if ticket.pk not in report.tickets_opened:
                report.tickets_opened.append(ticket.pk)


def _legal(before: str, after: str) -> bool:
    try:
        check_transition(before, after)
    except DomainError:
        return False
    return True


def _force(device: Device, state: str, last: DeviceHealthTransition | None) -> None:
    """Put back a state without a transition (the external write was not one the machine knows)."""
    device.health = state
    device.health_reason = (last.reason if last else "")[:300]
    device.save(update_fields=["health", "health_reason"])


# --- the entry point -------------------------------------------------------------------------------------------


@transaction.atomic
def health_nodes_reconcile(
    *,
    cluster: Cluster,
    node_names: Iterable[str] | None = None,
    now: datetime | None = None,
    report: IngestReport | None = None,
    actor: Actor | None = None,
) -> IngestReport:
    """Read these present nodes of a cluster (all of them when ``node_names`` is None) into the health model:
    health changes the inventory import wrote, node conditions the policy names, health taints. Idempotent.

    Locks the cluster row first (the inventory import's order), then the cards in pk order.
    """
    now = aware_now(now)
    report = report or IngestReport(origin=f"nodes of {cluster.name}")
    actor = actor or Actor(label="node conditions")
    Cluster.objects.select_for_update().filter(pk=cluster.pk).first()
    nodes = Node.objects.filter(cluster=cluster, gone_at__isnull=True).order_by("pk")
    if node_names is not None:
        nodes = nodes.filter(name__in=sorted(set(node_names)))
    nodes = list(nodes)
    devices = list(
        Device.objects.filter(node__in=nodes, gone_at__isnull=True).select_related("node", "parent").order_by("pk")
    )
    lock_cards(devices)
    rules = pol.Rules.from_policy(active_policy())
    cards: dict[int, list[Device]] = {}
    for device in devices:
        if device.parent_id is None:
            cards.setdefault(device.node_id, []).append(device)
    with_rows = set(
        HealthSignal.objects.filter(
            device__in=[d.pk for d in devices], signal__in=(NODE_CONDITION_SIGNAL, NODE_TAINT_SIGNAL)
        ).values_list("device_id", flat=True)
    )
    # Signals first: a card the import already marked unhealthy only gains evidence here, and its move is then
    # recorded once, by adopt_external, with the node's evidence (signals second would note it on the new ticket).
    for node in nodes:
        node_signals(
            node, cards.get(node.pk, []), rules=rules, now=now, actor=actor, report=report, with_rows=with_rows
        )
    # One query for every device's state and last recorded move; only those that differ are adopted.
    last = DeviceHealthTransition.objects.filter(device=OuterRef("pk")).order_by("-at", "-id").values("after")[:1]
    current = {
        pk: rest
        for pk, *rest in Device.objects.filter(pk__in=[d.pk for d in devices])
        .annotate(recorded=Subquery(last))
        .values_list("pk", "health", "health_reason", "health_changed_at", "recorded")
    }
    for device in devices:
        device.health, device.health_reason, device.health_changed_at, recorded = current[device.pk]
        if device.health != (recorded or HealthState.HEALTHY):
            adopt_external(device, now=now, report=report)
    return report
