"""Inventory import: make the pool's nodes and devices match a set of Kubernetes objects, idempotently."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from pools import state_version
from pools.inventory.parse import load_file, parse_inventory
from pools.inventory.records import (
    HEALTHY,
    UNHEALTHY,
    Document,
    InventoryError,
    ParsedDevice,
    ParsedNode,
    is_source_reason,
)
from pools.matching import match_flavor
from pools.models import Allocation, Cluster, Device, HealthState, Node, ResourceFlavor

BATCH = 500
#: Health states the repair workflow owns: no report from the source (healthy or unhealthy) changes them.
REPAIR_STATES = (HealthState.QUARANTINED, HealthState.VALIDATING, HealthState.RETIRED)
NODE_FIELDS = ("labels", "taints", "conditions", "ready", "unschedulable", "capacity", "allocatable")
DEVICE_FIELDS = (
    "uuid",
    "vendor",
    "product",
    "index",
    "memory_bytes",
    "architecture",
    "driver_version",
    "cuda_version",
    "kind",
    "resource_name",
    "mig_profile",
    "replica_index",
    "source",
    "dra_driver",
    "dra_pool",
    "dra_device",
    "attributes",
    "taints",
)


@dataclass
class KindCounts:
    """What an import did to one kind of row; ``returned`` counts rows un-gone (also counted as updated)."""

    created: int = 0
    updated: int = 0
    unchanged: int = 0
    gone: int = 0
    returned: int = 0

    def text(self) -> str:
        """'3 created, 1 updated, 20 unchanged, 0 gone'."""
        out = f"{self.created} created, {self.updated} updated, {self.unchanged} unchanged, {self.gone} gone"
        return out + (f" ({self.returned} returned)" if self.returned else "")


@dataclass(frozen=True)
class HealthChange:
    """A device whose health state changed (``before`` is None for a device created in that state)."""

    node: str
    key: str
    before: str | None
    after: str
    reason: str


@dataclass
class ImportReport:
    """The outcome of one import."""

    cluster: str
    complete: bool
    nodes: KindCounts = field(default_factory=KindCounts)
    devices: KindCounts = field(default_factory=KindCounts)
    health_changes: list[HealthChange] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    ignored: dict[str, int] = field(default_factory=dict)
    #: Open allocations on devices that left capacity in this import (the reconciler closes them).
    orphaned_allocations: int = 0

    @property
    def changed(self) -> bool:
        """Whether the import changed any row (last-seen times aside)."""
        return any((c.created or c.updated or c.gone) for c in (self.nodes, self.devices)) or bool(self.health_changes)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return asdict(self)


#: ``Cluster.last_sync_error`` of a kube sync that refused a node listing as suspect (kept until one is accepted).
SUSPECT_NODE_LIST = "Node list suspect, last good inventory kept: "


class MassRemovalRefused(InventoryError):
    """A complete listing that would mark too much of the pool gone: refused, nothing changed.

    ``reason`` says what the listing would do; the message adds the likely causes and the command's way out.
    """

    def __init__(self, cluster: str, reason: str, causes: str, *, live: int, removing: int) -> None:
        self.reason = reason
        self.live = live
        self.removing = removing
        problem = f"{reason}. Nothing changed ({causes}). Use --allow-mass-removal if the nodes really left"
        super().__init__(f'cluster "{cluster}"', "", problem)


def removal_guard(*, cluster: str, live: int, listed_nodes: int, removing: int) -> None:
    """Refuse a complete listing that holds no Node, or that would mark gone more than the allowed share.

    ``live``: nodes of the cluster not gone now; ``listed_nodes``: nodes the listing describes (Nodes, or
    ResourceSlices of a node); ``removing``: live nodes the listing leaves out. One node may always go (a node
    lost is ordinary); more than ``INVENTORY_MAX_REMOVAL_SHARE`` of the live nodes is refused, as is a listing
    with no Node at all (even into an empty pool: such a listing is a mistake, not a description of a cluster).
    """
    if listed_nodes == 0:
        effect = f"it would mark all {live} nodes gone" if live else "a complete listing must hold the cluster's nodes"
        raise MassRemovalRefused(
            cluster,
            f"the listing holds no Node (nor ResourceSlice): {effect}",
            "an empty file, a listing of other kinds, the wrong context?",
            live=live,
            removing=removing,
        )
    share = float(settings.INVENTORY_MAX_REMOVAL_SHARE)
    if removing > max(1, share * live):
        raise MassRemovalRefused(
            cluster,
            f"the listing would mark {removing} of {live} nodes gone, more than "
            f"INVENTORY_MAX_REMOVAL_SHARE={share:.0%} of the pool",
            "a truncated listing or the wrong cluster?",
            live=live,
            removing=removing,
        )


@dataclass(frozen=True)
class ClusterChoice:
    """The cluster an import goes to and why that one."""

    cluster: Cluster
    note: str


def inventory_target_cluster(*, name: str | None = None) -> ClusterChoice:
    """The named cluster; else the first simulated one; else "default" (created when no cluster exists)."""
    if name:
        cluster = Cluster.objects.filter(name=name).first()
        if cluster is None:
            known = ", ".join(Cluster.objects.values_list("name", flat=True)) or "none"
            raise InventoryError(f'cluster "{name}"', "", f"no such cluster (clusters: {known})")
        return ClusterChoice(cluster, "as asked")
    simulated = list(Cluster.objects.filter(backend=Cluster.Backend.SIMULATED).order_by("name")[:2])
    if simulated:
        how = "the only simulated cluster" if len(simulated) == 1 else "the first simulated cluster by name"
        return ClusterChoice(simulated[0], how)
    cluster, created = Cluster.objects.get_or_create(
        name="default", defaults={"display_name": "Default", "backend": Cluster.Backend.SIMULATED}
    )
    return ClusterChoice(cluster, "created: no cluster existed" if created else 'the cluster named "default"')


def inventory_import_files(
    *,
    cluster: Cluster,
    paths: Sequence[str | Path],
    now: datetime | None = None,
    complete: bool = True,
    allow_mass_removal: bool = False,
) -> ImportReport:
    """Import YAML/JSON files (multi-document YAML, ``kind: List``) as one input: all of them or nothing."""
    documents: list[Document] = []
    for path in paths:
        documents += load_file(path)
    return inventory_import(
        cluster=cluster, objects=documents, now=now, complete=complete, allow_mass_removal=allow_mass_removal
    )


@transaction.atomic
def inventory_import(
    *,
    cluster: Cluster,
    objects: Iterable[Any],
    now: datetime | None = None,
    complete: bool = True,
    allow_mass_removal: bool = False,
) -> ImportReport:
    """Make the cluster's nodes and devices match ``objects``, all validated first; idempotent, all or nothing."""
    # complete: the objects list the whole cluster, so a node missing from them is marked gone (never deleted)
    # and its devices leave capacity; otherwise only the given nodes are touched. A complete listing that would
    # empty the pool or remove a large share of it is refused (see removal_guard) unless allow_mass_removal.
    inventory = parse_inventory(objects)
    now = now or timezone.now()
    if timezone.is_naive(now):
        raise ValueError("now must be timezone-aware")
    Cluster.objects.select_for_update().filter(pk=cluster.pk).first()  # one import per cluster at a time
    if complete and not allow_mass_removal:
        listed = {p.name for p in inventory.nodes}
        live = list(Node.objects.filter(cluster=cluster, gone_at__isnull=True).values_list("name", flat=True))
        removal_guard(
            cluster=cluster.name,
            live=len(live),
            listed_nodes=len(inventory.nodes),
            removing=sum(1 for name in live if name not in listed),
        )
    report = ImportReport(
        cluster=cluster.name, complete=complete, warnings=list(inventory.warnings), ignored=dict(inventory.ignored)
    )
    flavors = list(ResourceFlavor.objects.all())
    nodes = _sync_nodes(cluster, inventory.nodes, flavors, now, complete, report)
    devices_by_node = inventory.devices_by_node()
    stale_device_nodes = _sync_devices(nodes, inventory.nodes, devices_by_node, now, report)
    _touch(nodes, stale_device_nodes, now)
    return report


def _sync_nodes(
    cluster: Cluster,
    parsed: list[ParsedNode],
    flavors: list[ResourceFlavor],
    now: datetime,
    complete: bool,
    report: ImportReport,
) -> dict[str, Node]:
    """Create, update and (for a complete listing) retire nodes; returns the input's nodes by name."""
    existing = {n.name: n for n in Node.objects.filter(cluster=cluster)}
    to_create, to_update, changed_fields = [], [], set()
    out: dict[str, Node] = {}
    for p in parsed:
        node = existing.get(p.name)
        flavor = match_flavor(p.labels, flavors) if p.observed else None
        if node is None:
            node = Node(
                cluster=cluster,
                name=p.name,
                flavor=flavor,
                first_seen_at=now,
                last_seen_at=now,
                **{f: getattr(p, f) for f in NODE_FIELDS},
            )
            to_create.append(node)
        else:
            changes = {f: getattr(p, f) for f in NODE_FIELDS if getattr(node, f) != getattr(p, f)} if p.observed else {}
            if p.observed and node.flavor_id != (flavor.pk if flavor else None):
                changes["flavor_id"] = flavor.pk if flavor else None
            if node.gone_at is not None:
                changes["gone_at"] = None
                report.nodes.returned += 1
            if changes:
                for name, value in changes.items():
                    setattr(node, name, value)
                node.last_seen_at = now
                changed_fields |= {*changes, "last_seen_at"}
                to_update.append(node)
            else:
                report.nodes.unchanged += 1
        out[p.name] = node
    Node.objects.bulk_create(to_create, batch_size=BATCH)
    report.nodes.created = len(to_create)
    report.nodes.updated = len(to_update)
    if complete:
        leaving = [n for name, n in existing.items() if name not in out and n.gone_at is None]
        for node in leaving:
            node.gone_at = now
            to_update.append(node)
        changed_fields |= {"gone_at"} if leaving else set()
        report.nodes.gone = len(leaving)
        gone_ids = [n.pk for n in leaving]
        for i in range(0, len(gone_ids), BATCH):
            devices = Device.objects.filter(node_id__in=gone_ids[i : i + BATCH], gone_at__isnull=True)
            report.orphaned_allocations += _open_allocations(devices.values("pk"))
            report.devices.gone += devices.update(gone_at=now)
    if to_update:
        fields = sorted(f.removesuffix("_id") for f in changed_fields)
        Node.objects.bulk_update(to_update, fields, batch_size=BATCH)
    if to_create or to_update:  # bulk writes send no signal: count the change of the engine's view
        state_version.bump_for_nodes(n.pk for n in [*to_create, *to_update])
    return out


def _open_allocations(device_ids) -> int:
    """Open allocations on a set of devices (ids, or a ``values("pk")`` queryset)."""
    if isinstance(device_ids, list):
        return sum(
            Allocation.objects.filter(device_id__in=device_ids[i : i + BATCH], ended_at__isnull=True).count()
            for i in range(0, len(device_ids), BATCH)
        )
    return Allocation.objects.filter(device_id__in=device_ids, ended_at__isnull=True).count()


def _next_health(device: Device, p: ParsedDevice) -> tuple[str, str]:
    """The health a device takes from the source, respecting the repair workflow and other observers."""
    if p.health == UNHEALTHY:
        if device.health in REPAIR_STATES:
            return device.health, device.health_reason  # the repair workflow already keeps it out of the pool
        return HealthState.UNHEALTHY, p.health_reason
    if device.health == HealthState.UNHEALTHY and is_source_reason(device.health_reason):
        return HealthState.HEALTHY, ""  # the source set it, the source clears it
    return device.health, device.health_reason


def _sync_devices(
    nodes: dict[str, Node],
    parsed_nodes: list[ParsedNode],
    parsed: dict[str, list[ParsedDevice]],
    now: datetime,
    report: ImportReport,
) -> set[int]:
    """Create, update and retire the devices of the input's nodes; parents are written before their units.

    Returns the ids of nodes with devices seen but not written, whose last_seen_at is behind ``now``.
    """
    node_ids = [n.pk for n in nodes.values()]
    existing: dict[tuple[int, str], Device] = {}
    for i in range(0, len(node_ids), BATCH):
        for device in Device.objects.filter(node_id__in=node_ids[i : i + BATCH]):
            existing[(device.node_id, device.key)] = device
    pk_of = {key: d.pk for key, d in existing.items()}
    levels: dict[int, list[tuple[Node, ParsedDevice]]] = {}
    for name, node in nodes.items():
        keyed = {p.key: p for p in parsed.get(name, [])}
        for p in keyed.values():
            depth, up = 0, p
            while up.parent_key:
                up, depth = keyed[up.parent_key], depth + 1
            levels.setdefault(depth, []).append((node, p))
    to_update: list[Device] = []
    to_create: list[Device] = []
    changed_fields: set[str] = set()
    for depth in sorted(levels):
        to_create = []
        for node, p in levels[depth]:
            parent_id = pk_of[(node.pk, p.parent_key)] if p.parent_key else None
            device = existing.get((node.pk, p.key))
            if device is None:
                device = Device(
                    node=node,
                    key=p.key,
                    parent_id=parent_id,
                    health=p.health,
                    health_reason=p.health_reason,
                    health_changed_at=now if p.health != HEALTHY else None,
                    first_seen_at=now,
                    last_seen_at=now,
                    **{f: getattr(p, f) for f in DEVICE_FIELDS},
                )
                to_create.append(device)
                if p.health != HEALTHY:
                    report.health_changes.append(HealthChange(node.name, p.key, None, p.health, p.health_reason))
                continue
            changes = {f: getattr(p, f) for f in DEVICE_FIELDS if getattr(device, f) != getattr(p, f)}
            if device.parent_id != parent_id:
                changes["parent_id"] = parent_id
            if device.gone_at is not None:
                changes["gone_at"] = None
                report.devices.returned += 1
            health, reason = _next_health(device, p)
            if health != device.health:
                report.health_changes.append(HealthChange(node.name, p.key, device.health, health, reason))
                changes.update(health=health, health_reason=reason, health_changed_at=now)
            elif reason != device.health_reason:
                changes["health_reason"] = reason
            if changes:
                for name, value in changes.items():
                    setattr(device, name, value)
                device.last_seen_at = now
                changed_fields |= {*changes, "last_seen_at"}
                to_update.append(device)
            else:
                report.devices.unchanged += 1
        Device.objects.bulk_create(to_create, batch_size=BATCH)
        report.devices.created += len(to_create)
        pk_of.update({(d.node_id, d.key): d.pk for d in to_create})
    report.devices.updated = len(to_update)

    names = {n.pk: name for name, n in nodes.items()}
    observed = {p.name for p in parsed_nodes if p.observed}
    described = {(nodes[name].pk, p.vendor) for name, devices in parsed.items() for p in devices}
    seen = {(nodes[name].pk, p.key) for name, devices in parsed.items() for p in devices}
    vanished = []
    for (node_pk, key), device in existing.items():
        if device.gone_at is not None or (node_pk, key) in seen:
            continue
        if (
            names[node_pk] not in observed
            and device.source != Device.Source.DRA
            and (node_pk, device.vendor) not in described
        ):
            continue  # a node known here only from its slices: devices of vendors they do not describe stay
        device.gone_at = now
        vanished.append(device)
    if vanished:
        changed_fields.add("gone_at")
        report.orphaned_allocations += _open_allocations([d.pk for d in vanished])
    report.devices.gone += len(vanished)
    if to_update or vanished:
        fields = sorted(f.removesuffix("_id") for f in changed_fields)
        Device.objects.bulk_update(to_update + vanished, fields, batch_size=BATCH)
    if to_create or to_update or vanished:  # bulk writes send no signal: count the change of the engine's view
        state_version.bump_for_nodes(d.node_id for d in [*to_create, *to_update, *vanished])
    return {node_pk for (node_pk, key), d in existing.items() if (node_pk, key) in seen and d.last_seen_at < now}


def _touch(nodes: dict[str, Node], stale_device_nodes: set[int], now: datetime) -> None:
    """Advance last_seen_at of what the input showed, in a few set-based updates (none when already current)."""
    stale = [n.pk for n in nodes.values() if n.last_seen_at < now]
    for i in range(0, len(stale), BATCH):
        Node.objects.filter(pk__in=stale[i : i + BATCH]).update(last_seen_at=now)
    stale = sorted(stale_device_nodes)
    for i in range(0, len(stale), BATCH):
        Device.objects.filter(node_id__in=stale[i : i + BATCH], gone_at__isnull=True, last_seen_at__lt=now).update(
            last_seen_at=now
        )


@transaction.atomic
def inventory_import_into(
    *,
    cluster_name: str | None,
    paths: Sequence[str | Path],
    complete: bool = True,
    now: datetime | None = None,
    allow_mass_removal: bool = False,
) -> tuple[ClusterChoice, ImportReport]:
    """Choose the target cluster (see :func:`inventory_target_cluster`) and import files into it, all or nothing."""
    choice = inventory_target_cluster(name=cluster_name)
    report = inventory_import_files(
        cluster=choice.cluster, paths=paths, now=now, complete=complete, allow_mass_removal=allow_mass_removal
    )
    return choice, report
