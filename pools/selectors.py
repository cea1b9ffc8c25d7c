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
from pools.ports import quota_reader


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
