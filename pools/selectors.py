"""Reads of the pool: capacity per class, per flavor and per node, aggregated in SQL."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db.models import Count, Exists, OuterRef, Prefetch, Q, QuerySet

from pools.inventory.versions import version_at_least
from pools.models import (
    USABLE_HEALTH,
    Allocation,
    Cluster,
    Device,
    HealthState,
    Node,
    ResourceClass,
    ResourceFlavor,
)
from pools.ports import quota_reader, waiting_reader


@dataclass
class Counts:
    """Exists / in use / available / unhealthy / cordoned for a set of schedulable units."""

    exists: int = 0
    in_use: int = 0
    unhealthy: int = 0
    cordoned: int = 0

    @property
    def available(self) -> int:
        """Units a new job could get now: healthy, free, on a ready and schedulable node."""
        return max(self.exists - self.in_use - self.unhealthy - self.cordoned, 0)

    def add(self, *, n: int, in_use: int, unhealthy: int, cordoned: int) -> None:
        """Accumulate one aggregated group."""
        self.exists += n
        self.in_use += in_use
        self.unhealthy += unhealthy
        self.cordoned += cordoned


@dataclass
class FlavorCapacity(Counts):
    """Capacity of one (flavor, resource name)."""

    flavor: ResourceFlavor | None = None
    resource_name: str = ""
    teams_allowed: list[str] = field(default_factory=list)


@dataclass
class ClassCapacity(Counts):
    """Capacity behind one resource class, over its flavors and software constraints."""

    resource_class: ResourceClass | None = None
    resource_name: str = ""
    flavors: list[ResourceFlavor] = field(default_factory=list)
    teams_allowed: list[str] = field(default_factory=list)


@dataclass
class DeviceCell:
    """One square of a node's device grid."""

    device: Device
    state: str
    job_label: str = ""
    children: list[DeviceCell] = field(default_factory=list)


@dataclass
class NodeCapacity(Counts):
    """Capacity and device grid of one node."""

    node: Node | None = None
    devices: list[DeviceCell] = field(default_factory=list)


@dataclass
class NodePage:
    """One page of nodes: ``total_nodes`` match the filters, out of ``scope_nodes`` present (in the cluster)."""

    nodes: list[NodeCapacity]
    total_nodes: int
    page: int
    num_pages: int
    scope_nodes: int = 0

    @property
    def narrowed(self) -> bool:
        """Whether the filters leave nodes out."""
        return self.total_nodes != self.scope_nodes


def present_units(*, cluster: Cluster | None = None) -> QuerySet[Device]:
    """Schedulable units on present nodes, annotated with ``busy`` (an open allocation holds them)."""
    qs = Device.objects.filter(gone_at__isnull=True, node__gone_at__isnull=True).exclude(resource_name="")
    if cluster is not None:
        qs = qs.filter(node__cluster=cluster)
    open_alloc = Allocation.objects.filter(device=OuterRef("pk"), ended_at__isnull=True)
    return qs.annotate(busy=Exists(open_alloc))


def node_filter(
    *, flavor: ResourceFlavor | None = None, resource_class: ResourceClass | None = None, problems_only: bool = False
) -> Q | None:
    """The pool overview's node filters as one condition on Node (None: no filter)."""
    match = Q()
    if flavor is not None:
        match &= Q(flavor=flavor)
    if resource_class is not None:
        units = Device.objects.filter(
            node=OuterRef("pk"), gone_at__isnull=True, resource_name=resource_class.resource_name
        )
        match &= Q(flavor__in=resource_class.flavors.all()) & Q(Exists(units))
    if problems_only:
        bad_device = Device.objects.filter(node=OuterRef("pk"), gone_at__isnull=True).exclude(health__in=USABLE_HEALTH)
        match &= Q(ready=False) | Q(unschedulable=True) | Q(Exists(bad_device))
    return match or None


def _filtered_units(
    *,
    cluster: Cluster | None,
    flavor: ResourceFlavor | None = None,
    resource_class: ResourceClass | None = None,
    problems_only: bool = False,
) -> QuerySet[Device]:
    """Present units on the nodes the filters keep; with a class, only the units of its resource and kind."""
    units = present_units(cluster=cluster)
    match = node_filter(flavor=flavor, resource_class=resource_class, problems_only=problems_only)
    if match is not None:
        units = units.filter(node__in=Node.objects.filter(match))
    if resource_class is not None:
        units = units.filter(resource_name=resource_class.resource_name, kind=SHARING_KIND[resource_class.sharing])
    return units


def _grouped_counts(*, cluster: Cluster | None, **filters) -> list[dict]:
    """Unit counts (on the nodes the filters keep) grouped by everything the capacity views split on; one query."""
    return list(
        _filtered_units(cluster=cluster, **filters)
        .values("node__flavor_id", "resource_name", "kind", "driver_version", "cuda_version", "health", "busy")
        .annotate(
            n=Count("id"),
            not_ready=Count("id", filter=Q(node__ready=False)),
            cordoned=Count("id", filter=Q(node__ready=True, node__unschedulable=True)),
        )
        .order_by()
    )


def _classify(row: dict) -> dict[str, int]:
    """Split an aggregated row into in use / unhealthy / cordoned (a unit counts once, busy first)."""
    n = row["n"]
    if row["busy"]:
        return {"n": n, "in_use": n, "unhealthy": 0, "cordoned": 0}
    if row["health"] not in USABLE_HEALTH:
        return {"n": n, "in_use": 0, "unhealthy": n, "cordoned": 0}
    return {"n": n, "in_use": 0, "unhealthy": row["not_ready"], "cordoned": row["cordoned"]}


def teams_allowed_by_flavor(*, cluster: Cluster | None = None) -> dict[tuple[int, str], list[str]]:
    """Team slugs holding a quota line per (flavor id, resource name) (the quotas are read through pools.ports)."""
    allowed: dict[tuple[int, str], set[str]] = defaultdict(set)
    for share in quota_reader().quota_shares(cluster=cluster):
        allowed[(share.flavor_id, share.resource_name)].add(share.team_slug)
    return {key: sorted(slugs) for key, slugs in allowed.items()}


def flavor_capacity(
    *,
    cluster: Cluster | None = None,
    flavor: ResourceFlavor | None = None,
    resource_class: ResourceClass | None = None,
    problems_only: bool = False,
) -> list[FlavorCapacity]:
    """Capacity per (flavor, resource name) over the nodes the filters keep (with a class: the units that back it);
    units on nodes of no flavor are grouped under flavor None."""
    flavors = {f.pk: f for f in ResourceFlavor.objects.all()}
    allowed = teams_allowed_by_flavor(cluster=cluster)
    out: dict[tuple[int | None, str], FlavorCapacity] = {}
    rows = _grouped_counts(cluster=cluster, flavor=flavor, resource_class=resource_class, problems_only=problems_only)
    for row in rows:
        if resource_class is not None and not class_matches_software(
            resource_class, driver_version=row["driver_version"], cuda_version=row["cuda_version"]
        ):
            continue
        key = (row["node__flavor_id"], row["resource_name"])
        if key not in out:
            out[key] = FlavorCapacity(
                flavor=flavors.get(key[0]),
                resource_name=key[1],
                teams_allowed=allowed.get(key, []),  # type: ignore[arg-type]
            )
        out[key].add(**_classify(row))
    return sorted(out.values(), key=lambda c: (c.flavor.name if c.flavor else "~", c.resource_name))


#: The only device kind each sharing mode may hand out: a dedicated class never gets a time-shared replica.
SHARING_KIND: dict[str, Device.Kind] = {
    ResourceClass.Sharing.DEDICATED: Device.Kind.FULL,
    ResourceClass.Sharing.MIG: Device.Kind.MIG,
    ResourceClass.Sharing.TIME_SHARED: Device.Kind.SHARED,
}


def class_matches_software(rc: ResourceClass, *, driver_version: str, cuda_version: str) -> bool:
    """Whether a unit's driver/CUDA versions meet the class's minimums (numeric comparison)."""
    if rc.min_driver_version and not version_at_least(driver_version, rc.min_driver_version):
        return False
    return not (rc.min_cuda_version and not version_at_least(cuda_version, rc.min_cuda_version))


def class_capacity(
    *,
    cluster: Cluster | None = None,
    classes: Iterable[ResourceClass] | None = None,
    flavor: ResourceFlavor | None = None,
    resource_class: ResourceClass | None = None,
    problems_only: bool = False,
) -> list[ClassCapacity]:
    """Capacity behind each active resource class (``classes``): units of its resource on its flavors that meet its
    minimums, on the nodes the filters keep."""
    if classes is None:
        classes = ResourceClass.objects.filter(active=True)
    classes = list(classes.prefetch_related("flavor_links__flavor") if isinstance(classes, QuerySet) else classes)
    rows = _grouped_counts(cluster=cluster, flavor=flavor, resource_class=resource_class, problems_only=problems_only)
    allowed = teams_allowed_by_flavor(cluster=cluster)
    out = []
    for rc in classes:
        flavors = [link.flavor for link in rc.flavor_links.all()]
        flavor_ids = {f.pk for f in flavors}
        cap = ClassCapacity(resource_class=rc, resource_name=rc.resource_name, flavors=flavors)
        for row in rows:
            if (
                row["node__flavor_id"] in flavor_ids
                and row["resource_name"] == rc.resource_name
                and row["kind"] == SHARING_KIND[rc.sharing]
            ):
                if class_matches_software(rc, driver_version=row["driver_version"], cuda_version=row["cuda_version"]):
                    cap.add(**_classify(row))
        cap.teams_allowed = sorted({s for f in flavors for s in allowed.get((f.pk, rc.resource_name), [])})
        out.append(cap)
    return out


def _cell_state(device: Device, node: Node, busy: bool) -> str:
    """The colour of a device's square."""
    if busy:
        return "in-use"
    if device.health in (HealthState.UNHEALTHY, HealthState.QUARANTINED, HealthState.VALIDATING, HealthState.RETIRED):
        return device.health
    if not node.ready:
        return "not-ready"
    if node.unschedulable:
        return "cordoned"
    if device.health == HealthState.DEGRADED:
        return "degraded"
    return "free"


def node_capacity_page(
    *,
    cluster: Cluster | None = None,
    flavor: ResourceFlavor | None = None,
    resource_class: ResourceClass | None = None,
    problems_only: bool = False,
    page: int = 1,
    per_page: int = 50,
    job_teams: frozenset[str] | None = frozenset(),
) -> NodePage:
    """One page of present nodes with their counts and device grids, in a bounded number of queries; how many nodes
    match the filters and how many there are (in the cluster) come from one aggregate. A device's job is named
    (team/name) for the ``job_teams`` only (``None``: every team), else by its team alone (tenant privacy)."""
    nodes = Node.objects.filter(gone_at__isnull=True).select_related("cluster", "flavor")
    if cluster is not None:
        nodes = nodes.filter(cluster=cluster)
    match = node_filter(flavor=flavor, resource_class=resource_class, problems_only=problems_only)
    counts = nodes.aggregate(scope=Count("id"), matching=Count("id", filter=match))
    if match is not None:
        nodes = nodes.filter(match)
    total = counts["matching"]
    num_pages = max(math.ceil(total / per_page), 1)
    page = min(max(page, 1), num_pages)
    open_allocs = Allocation.objects.filter(ended_at__isnull=True).select_related("job__team")
    devices = Device.objects.filter(gone_at__isnull=True).prefetch_related(
        Prefetch("allocations", queryset=open_allocs, to_attr="open_allocations")
    )
    page_nodes = list(
        nodes.order_by("name").prefetch_related(Prefetch("devices", queryset=devices, to_attr="present_devices"))[
            (page - 1) * per_page : page * per_page
        ]
    )
    return NodePage(
        nodes=[_node_capacity(n, job_teams=job_teams) for n in page_nodes],
        total_nodes=total,
        page=page,
        num_pages=num_pages,
        scope_nodes=counts["scope"],
    )


def _job_label(job, job_teams: frozenset[str] | None) -> str:
    """``team/name`` of a job holding a device, or only its team for a viewer outside it (tenant privacy)."""
    if job_teams is None or job.team.slug in job_teams:
        return f"{job.team.slug}/{job.name}"
    return f"a job of team {job.team.slug}"


def _node_capacity(node: Node, *, job_teams: frozenset[str] | None) -> NodeCapacity:
    """Counts and grid of one node from its prefetched devices; job names of the ``job_teams`` only (None: all)."""
    cap = NodeCapacity(node=node)
    cells: dict[int, DeviceCell] = {}
    for device in node.present_devices:
        allocs = device.open_allocations
        busy = bool(allocs)
        label = _job_label(allocs[0].job, job_teams) if allocs else ""
        cells[device.pk] = DeviceCell(device=device, state=_cell_state(device, node, busy), job_label=label)
        if device.resource_name:
            unusable = device.health not in USABLE_HEALTH or not node.ready
            cap.add(
                n=1,
                in_use=int(busy),
                unhealthy=int(not busy and unusable),
                cordoned=int(not busy and not unusable and node.unschedulable),
            )
    roots = []
    for device in node.present_devices:
        cell = cells[device.pk]
        if device.parent_id and device.parent_id in cells:
            cells[device.parent_id].children.append(cell)
        else:
            roots.append(cell)
    cap.devices = roots
    return cap


@dataclass
class HardwareUse:
    """One flavor's hardware: its schedulable units and the physical cards behind them, and what is in use."""

    flavor: ResourceFlavor | None
    kind: str  # the units' kind: full cards, MIG slices, time-shared replicas
    units: int = 0
    units_in_use: int = 0
    cards: int = 0
    cards_in_use: int = 0
    #: pending jobs that could land here, by reason: (label, jobs, is a quota reason) (through pools.ports)
    waiting: list[tuple[str, int, bool]] = field(default_factory=list)

    @property
    def units_free(self) -> int:
        """Units not in use (healthy or not: the capacity tables say which are usable)."""
        return self.units - self.units_in_use

    @property
    def waiting_on_quota(self) -> int:
        """Pending jobs for this hardware that wait on their team's quota (free units do not start them)."""
        return sum(n for _, n, quota in self.waiting if quota)


@dataclass
class UtilisationAccount:
    """How the pool's utilisation is counted: units (a slice or a replica counts like a card) and cards."""

    rows: list[HardwareUse]

    @property
    def units(self) -> int:
        """Schedulable units."""
        return sum(r.units for r in self.rows)

    @property
    def units_in_use(self) -> int:
        """Units in use."""
        return sum(r.units_in_use for r in self.rows)

    @property
    def cards(self) -> int:
        """Physical cards behind the units (a partitioned or shared card once)."""
        return sum(r.cards for r in self.rows)

    @property
    def cards_in_use(self) -> int:
        """Cards with at least one unit in use."""
        return sum(r.cards_in_use for r in self.rows)

    @property
    def shares_cards(self) -> bool:
        """Whether some units are slices or replicas of a card (then units and cards differ)."""
        return any(r.kind != Device.Kind.FULL for r in self.rows)


def utilisation_account(
    *,
    cluster: Cluster | None = None,
    flavor: ResourceFlavor | None = None,
    resource_class: ResourceClass | None = None,
    problems_only: bool = False,
) -> UtilisationAccount:
    """Units and physical cards in use per flavor over the nodes the filters keep, with the pending jobs that could
    land there by reason (two queries): why "33 %" of units may be many more cards, and why free cards may not
    start a waiting job (its team's quota, not the hardware)."""
    units = _filtered_units(cluster=cluster, flavor=flavor, resource_class=resource_class, problems_only=problems_only)
    rows: dict[tuple[int | None, str], HardwareUse] = {}
    flavors = {f.pk: f for f in ResourceFlavor.objects.all()}
    grouped = units.values("node__flavor_id", "kind", "parent_id", "busy").annotate(n=Count("id")).order_by()
    parents: dict[tuple[int | None, str], dict[int, bool]] = defaultdict(dict)
    for r in grouped:
        key = (r["node__flavor_id"], r["kind"])
        row = rows.setdefault(key, HardwareUse(flavor=flavors.get(r["node__flavor_id"]), kind=r["kind"]))
        row.units += r["n"]
        row.units_in_use += r["n"] if r["busy"] else 0
        if r["parent_id"] is None:  # a whole card is its own unit
            row.cards += r["n"]
            row.cards_in_use += r["n"] if r["busy"] else 0
        else:
            seen = parents[key]
            seen[r["parent_id"]] = seen.get(r["parent_id"], False) or bool(r["busy"])
    for key, seen in parents.items():
        rows[key].cards += len(seen)
        rows[key].cards_in_use += sum(1 for busy in seen.values() if busy)
    waiting: dict[int, list[tuple[str, int, bool]]] = defaultdict(list)
    for share in waiting_reader().waiting_by_flavor(cluster=cluster):
        waiting[share.flavor_id].append((share.label, share.jobs, share.quota))
    for (flavor_id, _), row in rows.items():
        row.waiting = sorted(waiting.get(flavor_id, []), key=lambda w: -w[1])
    order = {Device.Kind.FULL: 0, Device.Kind.MIG: 1, Device.Kind.SHARED: 2}
    return UtilisationAccount(
        rows=sorted(rows.values(), key=lambda r: (order.get(r.kind, 9), r.flavor.name if r.flavor else ""))
    )
