"""Desired node taints / cordons / DRA device taints for health, for the kubernetes backend to apply.

The portal never talks to a cluster from here: it records what it wants (NodeHealthDirective rows) and the
kubernetes backend makes the cluster match. Rows are written only for kubernetes clusters and only on nodes the
settings let the portal manage (``HEALTH_MANAGED_NODE_LABELS``: every label must match; empty: manage none).
A DRA device gets a device taint (a DeviceTaintRule selecting exactly it); a device-plugin GPU can only be kept
off through its node: a node taint (``HEALTH_NODE_ACTION=taint``, default), a cordon (``cordon``) or nothing
(``none``). In simulated clusters nothing is needed: the engine already leaves unhealthy devices out.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.conf import settings
from django.db.models import Q

from pools.models import Cluster, Device, Node, NodeHealthDirective, RepairTicket

#: The taint key the portal puts on nodes and devices it excludes for health (the engine knows it as a health taint).
TAINT_KEY = "portal.gpu/unhealthy"
TAINT_EFFECT = "NoSchedule"
Kind = NodeHealthDirective.Kind


def node_is_managed(node: Node) -> bool:
    """Whether the settings let the portal taint or cordon this node."""
    wanted = dict(settings.HEALTH_MANAGED_NODE_LABELS or {})
    if not wanted:
        return False
    labels = node.labels or {}
    return all(labels.get(k) == v for k, v in wanted.items())


def directives_for_ticket(*, ticket: RepairTicket, units: Sequence[Device], now: datetime) -> list[NodeHealthDirective]:
    """Record the taints / cordon that keep new pods off the ticket's devices (kubernetes, managed nodes only)."""
    node = ticket.node
    backend = Cluster.objects.filter(pk=node.cluster_id).values_list("backend", flat=True).first()
    if backend != Cluster.Backend.KUBERNETES or not node_is_managed(node):
        return []
    out = []
    reason = f"repair ticket #{ticket.pk}: {ticket.reason}"[:500]
    plugin_units = [u for u in units if u.source != Device.Source.DRA]
    for unit in units:
        if unit.source == Device.Source.DRA:
            row, _ = NodeHealthDirective.objects.get_or_create(
                node=node,
                device=unit,
                kind=Kind.DEVICE_TAINT,
                key=TAINT_KEY,
                released_at__isnull=True,
                defaults={
                    "value": f"ticket-{ticket.pk}",
                    "effect": TAINT_EFFECT,
                    "reason": reason,
                    "ticket": ticket,
                    "created_at": now,
                },
            )
            out.append(row)
    action = str(settings.HEALTH_NODE_ACTION or "taint")
    if plugin_units and action in ("taint", "cordon"):
        kind = Kind.NODE_TAINT if action == "taint" else Kind.CORDON
        row, _ = NodeHealthDirective.objects.get_or_create(
            node=node,
            device=None,
            kind=kind,
            key=TAINT_KEY if kind == Kind.NODE_TAINT else "",
            released_at__isnull=True,
            defaults={
                "effect": TAINT_EFFECT if kind == Kind.NODE_TAINT else "",
                "reason": reason,
                "ticket": ticket,
                "created_at": now,
            },
        )
        out.append(row)
    return out


def directives_release(*, ticket: RepairTicket, now: datetime) -> int:
    """Stop wanting what a closed ticket asked for (a node-wide row only once no open ticket on the node needs it).

    A retired (RMA) device keeps its device taint until the inventory sees it gone.
    """
    released = 0
    mine = NodeHealthDirective.objects.filter(ticket=ticket, released_at__isnull=True, kind=Kind.DEVICE_TAINT)
    if ticket.state == RepairTicket.State.RMA:
        mine = mine.filter(device__gone_at__isnull=False)
    released += mine.update(released_at=now)
    still_open = RepairTicket.objects.filter(node=ticket.node, state__in=RepairTicket.OPEN_STATES).exclude(pk=ticket.pk)
    if not still_open.exists():
        node_wide = NodeHealthDirective.objects.filter(
            node=ticket.node, device__isnull=True, released_at__isnull=True
        ).filter(Q(kind=Kind.NODE_TAINT) | Q(kind=Kind.CORDON))
        released += node_wide.update(released_at=now)
    return released


def directive_mark_applied(*, directive_id: int, now: datetime, error: str = "") -> None:
    """Called by the kubernetes backend after applying a row (or failing to: ``error``)."""
    fields = {"last_error": error} if error else {"applied_at": now, "last_error": ""}
    NodeHealthDirective.objects.filter(pk=directive_id).update(**fields)


def directive_mark_removed(*, directive_id: int, now: datetime, error: str = "") -> None:
    """Called by the kubernetes backend after removing what a released row asked for."""
    fields = {"last_error": error} if error else {"removed_at": now, "last_error": ""}
    NodeHealthDirective.objects.filter(pk=directive_id).update(**fields)
