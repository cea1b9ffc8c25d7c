"""Reads of device health and repair: the wait box's ticket links, the fleet health map, the ticket queue with
ages and MTTR, devices out per class, effective capacity against team quotas, and what the kubernetes backend
needs (validation pinning, node directives)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, Exists, OuterRef, Prefetch, Q, QuerySet
from django.urls import reverse
from django.utils import timezone

from kernel.quantity import parse_quantity
from pools.health.directives import TAINT_EFFECT, TAINT_KEY, node_is_managed
from pools.health.nodes import node_health_causes
from pools.health.services import active_policy
from pools.models import (
    USABLE_HEALTH,
    Allocation,
    Cluster,
    Device,
    HealthState,
    Node,
    NodeHealthDirective,
    RepairTicket,
    ResourceClass,
    ResourceFlavor,
    ValidationRun,
)
from pools.ports import quota_reader
from pools.selectors import SHARING_KIND, flavor_capacity

OPEN = RepairTicket.OPEN_STATES


#: Reading the health pages (the fleet map, the repair queue, capacity, a ticket's evidence) without being staff.
HEALTH_READ_PERMISSION = "pools.view_repairticket"


def reads_health(user) -> bool:  # type: ignore[no-untyped-def]
    """Whether the user reads the pool's health pages: staff, or holds ``HEALTH_READ_PERMISSION`` (operators)."""
    if not (user.is_authenticated and user.is_active):
        return False
    return bool(user.is_staff or user.is_superuser or user.has_perm(HEALTH_READ_PERMISSION))


def duration_text(seconds: float | None) -> str:
    """A duration for people: "40 s", "45 min", "3.5 h", "2.1 d" ("" for none)."""
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{max(seconds, 0):.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


# --- the wait box --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TicketRef:
    """A ticket as the wait box links it."""

    id: int
    url: str
    state: str
    state_label: str
    node: str
    device: str
    reason: str
    opened_at: datetime
    age_seconds: int


def ticket_url(ticket_id: int) -> str:
    """The page of a ticket (readable by any signed-in user; evidence and actions for staff)."""
    return reverse("health:ticket", args=[ticket_id])


def open_tickets_for(
    *,
    node_names: Iterable[str] = (),
    device_keys: Iterable[str] = (),
    cluster: Cluster | None = None,
    now: datetime | None = None,
) -> list[TicketRef]:
    """Open repair tickets behind a ``health_blocked`` wait: on those nodes, or covering those devices.

    ``device_keys`` are Device keys or UUIDs; a MIG or time-shared unit finds its card's ticket, any device finds a
    whole-node ticket of its node. Two queries.
    """
    names = sorted(set(node_names))
    keys = sorted(set(device_keys))
    if not names and not keys:
        return []
    cond = Q(node__name__in=names) if names else Q(pk__in=[])
    if keys:
        devices = Device.objects.filter(Q(key__in=keys) | Q(uuid__in=keys), gone_at__isnull=True)
        if cluster is not None:
            devices = devices.filter(node__cluster=cluster)
        ids, nodes = set(), set()
        for pk, parent_id, node_id in devices.values_list("pk", "parent_id", "node_id"):
            ids.add(pk)
            nodes.add(node_id)
            if parent_id:
                ids.add(parent_id)
        cond |= Q(device_id__in=sorted(ids)) | Q(device__isnull=True, node_id__in=sorted(nodes))
    tickets = RepairTicket.objects.filter(cond, state__in=OPEN).select_related("node", "device").order_by("opened_at")
    if cluster is not None:
        tickets = tickets.filter(node__cluster=cluster)
    now = now or timezone.now()
    return [
        TicketRef(
            id=t.pk,
            url=ticket_url(t.pk),
            state=t.state,
            state_label=t.get_state_display(),
            node=t.node.name,
            device=t.device.key if t.device_id else "",
            reason=t.reason,
            opened_at=t.opened_at,
            age_seconds=int((now - t.opened_at).total_seconds()),
        )
        for t in tickets
    ]


#: Keys of a wait reason's details that name the nodes excluded for health (engine; Kueue message translation:
#: "no replacement for unhealthy node(s): a,b"). Only lists name nodes: the same keys may hold a count.
_NODE_KEYS = ("unhealthyNodes", "healthExcludedNodes", "nodes")
MAX_NAMED_DEVICES = 20


def health_blocked_details(
    *, cluster: Cluster, resource_class: ResourceClass | None, details: dict, now: datetime | None = None
) -> dict:
    """A ``health_blocked`` wait's details with the excluded devices named and their open repair tickets linked.

    The nodes are those the reason names; when it names none (the kubernetes path counts units only), every
    node of the class's flavors with an excluded unit of the class's resource. Two to four queries.
    """
    lists = [details.get(key) for key in _NODE_KEYS]
    names = sorted({str(n) for value in lists if isinstance(value, list | tuple) for n in value})
    units = Device.objects.filter(node__cluster=cluster, node__gone_at__isnull=True, gone_at__isnull=True).exclude(
        health__in=USABLE_HEALTH
    )
    if names:
        units = units.filter(node__name__in=names)
    elif resource_class is not None:
        units = units.filter(node__flavor__in=resource_class.flavors.all())
    if resource_class is not None:
        units = units.filter(resource_name=resource_class.resource_name)
    else:
        units = units.exclude(resource_name="")
    rows = list(
        units.order_by("node__name", "index", "key").values_list("node__name", "key", "health", "health_reason")[
            :MAX_NAMED_DEVICES
        ]
    )
    nodes = names or sorted({r[0] for r in rows})
    tickets = open_tickets_for(node_names=nodes, cluster=cluster, now=now)
    return {
        **details,
        "excludedDevices": [
            {"node": node, "device": key, "health": health, "reason": reason} for node, key, health, reason in rows
        ],
        "repairTickets": [
            {
                "id": t.id,
                "url": t.url,
                "state": t.state,
                "stateLabel": t.state_label,
                "node": t.node,
                "device": t.device,
                "reason": t.reason,
                "ageSeconds": t.age_seconds,
            }
            for t in tickets
        ],
    }


@dataclass(frozen=True)
class HealthExcludedNode:
    """A node with units of one (flavor, resource) out for health: how many, and why in words."""

    flavor: str
    resource: str
    node: str
    units: int
    causes: tuple[str, ...]


def health_excluded_nodes(*, cluster: Cluster, resource: str, kind: str) -> list[HealthExcludedNode]:
    """Per node of the cluster's flavors, its units of ``resource`` (of ``kind``) out for health — not usable, or
    on a NotReady or cordoned node — and why (``pools.health.nodes.node_health_causes``); most units first.
    Four queries."""
    units = Device.objects.filter(
        node__cluster=cluster,
        node__gone_at__isnull=True,
        node__flavor__isnull=False,
        gone_at__isnull=True,
        resource_name=resource,
        kind=kind,
    ).exclude(Q(health__in=USABLE_HEALTH, node__ready=True, node__unschedulable=False))
    counts = {
        (row["node_id"], row["node__flavor__name"]): row["n"]
        for row in units.values("node_id", "node__flavor__name").annotate(n=Count("id")).order_by()
    }
    if not counts:
        return []
    reasons: dict[int, list[str]] = defaultdict(list)
    for node_id, reason in units.exclude(health__in=USABLE_HEALTH).values_list("node_id", "health_reason").distinct():
        reasons[node_id].append(reason)
    nodes = Node.objects.in_bulk({node_id for node_id, _ in counts})
    types = tuple(active_policy().node_condition_types or ())
    out = [
        HealthExcludedNode(
            flavor=flavor,
            resource=resource,
            node=nodes[node_id].name,
            units=n,
            causes=tuple(
                node_health_causes(
                    nodes[node_id],
                    condition_types=types,
                    resource=resource,
                    device_reasons=sorted(reasons.get(node_id, [])),
                )
            ),
        )
        for (node_id, flavor), n in counts.items()
    ]
    return sorted(out, key=lambda h: (-h.units, h.node))


# --- health map ----------------------------------------------------------------------------------------------


@dataclass
class HealthCell:
    """One device square on the health map."""

    device: Device
    state: str
    busy: bool = False
    ticket_id: int | None = None
    children: list[HealthCell] = field(default_factory=list)


@dataclass
class HealthRow:
    """One node of the health map."""

    node: Node
    cells: list[HealthCell]
    counts: dict[str, int]
    tickets: list[int]


@dataclass
class HealthMap:
    """A page of the fleet's health map and fleet-wide counts per state."""

    rows: list[HealthRow]
    totals: dict[str, int]
    total_nodes: int
    page: int
    num_pages: int


def _open_ticket_index() -> tuple[dict[int, int], dict[int, int]]:
    """Open ticket id per device id and per node id (whole-node tickets)."""
    by_device, by_node = {}, {}
    for pk, device_id, node_id in RepairTicket.objects.filter(state__in=OPEN).values_list("pk", "device_id", "node_id"):
        if device_id:
            by_device[device_id] = pk
        else:
            by_node[node_id] = pk
    return by_device, by_node


def health_map(
    *, cluster: Cluster | None = None, problems_only: bool = False, page: int = 1, per_page: int = 100
) -> HealthMap:
    """Present nodes × devices coloured by health state, a page at a time, in a fixed number of queries."""
    devices = Device.objects.filter(gone_at__isnull=True, node__gone_at__isnull=True)
    if cluster is not None:
        devices = devices.filter(node__cluster=cluster)
    totals = dict(Counter(devices.exclude(resource_name="").values_list("health", flat=True)))
    nodes = Node.objects.filter(gone_at__isnull=True).select_related("cluster", "flavor")
    if cluster is not None:
        nodes = nodes.filter(cluster=cluster)
    if problems_only:
        bad = Device.objects.filter(node=OuterRef("pk"), gone_at__isnull=True).exclude(health=HealthState.HEALTHY)
        nodes = nodes.filter(Exists(bad))
    total = nodes.count()
    num_pages = max(math.ceil(total / per_page), 1)
    page = min(max(page, 1), num_pages)
    busy = Allocation.objects.filter(device=OuterRef("pk"), ended_at__isnull=True)
    present = Device.objects.filter(gone_at__isnull=True).annotate(busy=Exists(busy)).order_by("index", "key")
    page_nodes = list(
        nodes.order_by("name").prefetch_related(Prefetch("devices", queryset=present, to_attr="present"))[
            (page - 1) * per_page : page * per_page
        ]
    )
    by_device, by_node = _open_ticket_index()
    rows = []
    for node in page_nodes:
        cells: dict[int, HealthCell] = {}
        for d in node.present:
            ticket = by_device.get(d.pk) or by_device.get(d.parent_id or 0) or by_node.get(node.pk)
            cells[d.pk] = HealthCell(device=d, state=d.health, busy=d.busy, ticket_id=ticket)
        roots = []
        for d in node.present:
            if d.parent_id and d.parent_id in cells:
                cells[d.parent_id].children.append(cells[d.pk])
            else:
                roots.append(cells[d.pk])
        counts = dict(Counter(d.health for d in node.present if d.resource_name))
        tickets = sorted({c.ticket_id for c in cells.values() if c.ticket_id})
        rows.append(HealthRow(node=node, cells=roots, counts=counts, tickets=tickets))
    return HealthMap(rows=rows, totals=totals, total_nodes=total, page=page, num_pages=num_pages)


# --- ticket queue, MTTR, devices out per class ---------------------------------------------------------------


@dataclass
class TicketRow:
    """A ticket in the queue, with its age and the age of its current step."""

    ticket: RepairTicket
    age_seconds: int
    in_state_seconds: int
    classes: list[str]
    last_validation: ValidationRun | None

    @property
    def age_text(self) -> str:
        """The ticket's age for people."""
        return duration_text(self.age_seconds)

    @property
    def in_state_text(self) -> str:
        """Time in the current step for people."""
        return duration_text(self.in_state_seconds)


def _classes_by_unit_kind() -> list[tuple[ResourceClass, set[int]]]:
    out = []
    for rc in ResourceClass.objects.filter(active=True).prefetch_related("flavor_links"):
        out.append((rc, {link.flavor_id for link in rc.flavor_links.all()}))
    return [(rc, flavors) for rc, flavors in out if rc.sharing in SHARING_KIND]


def _device_classes(device: Device, flavor_id: int | None, classes) -> list[ResourceClass]:
    """Classes a unit (or, for a card, any of its units' kind) belongs to."""
    return [
        rc
        for rc, flavors in classes
        if flavor_id in flavors and rc.resource_name == device.resource_name and SHARING_KIND[rc.sharing] == device.kind
    ]


def ticket_queue(*, open_only: bool = True, now: datetime | None = None, limit: int = 200) -> list[TicketRow]:
    """Tickets oldest first (open ones), or newest first (all), each with ages and the classes it takes from."""
    now = now or timezone.now()
    tickets = RepairTicket.objects.select_related("node", "node__cluster", "device")
    tickets = tickets.filter(state__in=OPEN).order_by("opened_at") if open_only else tickets.order_by("-opened_at")
    tickets = list(tickets.prefetch_related("validation_runs")[:limit])
    classes = _classes_by_unit_kind()
    units = _units_by_ticket(tickets)
    rows = []
    for t in tickets:
        names = sorted({rc.name for u in units.get(t.pk, []) for rc in _device_classes(u, t.node.flavor_id, classes)})
        runs = list(t.validation_runs.all())
        rows.append(
            TicketRow(
                ticket=t,
                age_seconds=int(((t.closed_at or now) - t.opened_at).total_seconds()),
                in_state_seconds=int((now - t.state_changed_at).total_seconds()),
                classes=names,
                last_validation=runs[-1] if runs else None,
            )
        )
    return rows


def _units_by_ticket(tickets: Sequence[RepairTicket]) -> dict[int, list[Device]]:
    """Schedulable units per ticket (the card itself, its units, or the node's), in two queries."""
    device_ids = [t.device_id for t in tickets if t.device_id]
    node_ids = [t.node_id for t in tickets if not t.device_id]
    found = Device.objects.filter(Q(pk__in=device_ids) | Q(parent_id__in=device_ids) | Q(node_id__in=node_ids)).exclude(
        resource_name=""
    )
    by_card: dict[int, list[Device]] = defaultdict(list)
    by_node: dict[int, list[Device]] = defaultdict(list)
    for d in found:
        if d.pk in device_ids:
            by_card[d.pk].append(d)
        if d.parent_id in device_ids:
            by_card[d.parent_id].append(d)
        if d.node_id in node_ids:
            by_node[d.node_id].append(d)
    return {t.pk: (by_card[t.device_id] if t.device_id else by_node[t.node_id]) for t in tickets}


@dataclass
class ClassHealth:
    """Health and repair figures of one resource class."""

    resource_class: ResourceClass
    exists: int = 0
    out: int = 0
    out_by_state: dict[str, int] = field(default_factory=dict)
    open_tickets: int = 0
    returned: int = 0
    rma: int = 0
    mttr_seconds: float | None = None

    @property
    def effective(self) -> int:
        """Units of the class that can take work (healthy or degraded)."""
        return self.exists - self.out

    @property
    def mttr_text(self) -> str:
        """Mean time to repair for people ("" when no ticket was returned yet)."""
        return duration_text(self.mttr_seconds)


def class_health(*, cluster: Cluster | None = None, since: datetime | None = None) -> list[ClassHealth]:
    """Devices out for health, open tickets and MTTR (opened → returned) per active class."""
    classes = _classes_by_unit_kind()
    out = {rc.pk: ClassHealth(resource_class=rc) for rc, _ in classes}
    units = Device.objects.filter(gone_at__isnull=True, node__gone_at__isnull=True).exclude(resource_name="")
    if cluster is not None:
        units = units.filter(node__cluster=cluster)
    rows = units.values("node__flavor_id", "resource_name", "kind", "health").order_by()
    for row in rows.annotate(n=Count("id")):
        for rc, flavors in classes:
            if (
                row["node__flavor_id"] in flavors
                and rc.resource_name == row["resource_name"]
                and SHARING_KIND[rc.sharing] == row["kind"]
            ):
                ch = out[rc.pk]
                ch.exists += row["n"]
                if row["health"] not in USABLE_HEALTH:
                    ch.out += row["n"]
                    ch.out_by_state[row["health"]] = ch.out_by_state.get(row["health"], 0) + row["n"]
    tickets = RepairTicket.objects.select_related("node")
    if cluster is not None:
        tickets = tickets.filter(node__cluster=cluster)
    if since is not None:
        tickets = tickets.filter(Q(closed_at__isnull=True) | Q(closed_at__gte=since))
    tickets = list(tickets)
    per_ticket = _units_by_ticket(tickets)
    durations: dict[int, list[float]] = defaultdict(list)
    for t in tickets:
        hit = {rc.pk for u in per_ticket.get(t.pk, []) for rc in _device_classes(u, t.node.flavor_id, classes)}
        for pk in hit:
            ch = out[pk]
            if t.state in OPEN:
                ch.open_tickets += 1
            elif t.state == RepairTicket.State.RETURNED:
                ch.returned += 1
                durations[pk].append((t.closed_at - t.opened_at).total_seconds())
            else:
                ch.rma += 1
    for pk, values in durations.items():
        out[pk].mttr_seconds = sum(values) / len(values)
    return list(out.values())


# --- effective capacity against quotas -----------------------------------------------------------------------


@dataclass
class QuotaCoverage:
    """One (flavor, resource): healthy capacity against the nominal quota the teams were promised."""

    flavor: ResourceFlavor | None
    resource_name: str
    exists: int
    unusable: int
    nominal_total: int
    teams: list[tuple[str, int]]

    @property
    def healthy(self) -> int:
        """Units that can take work now (healthy or degraded, on a ready node)."""
        return self.exists - self.unusable

    @property
    def shortfall(self) -> int:
        """Nominal quota no longer backed by healthy capacity (0 when covered)."""
        return max(self.nominal_total - self.healthy, 0)


def quota_coverage(*, cluster: Cluster | None = None) -> list[QuotaCoverage]:
    """Per (flavor, resource): healthy capacity vs the sum of the teams' nominal quotas, and who is uncovered."""
    nominal: dict[tuple[int | None, str], list[tuple[str, int]]] = defaultdict(list)
    for share in quota_reader().quota_shares(cluster=cluster):
        try:
            qty = int(parse_quantity(share.nominal, share.resource_name))
        except ValueError:
            continue
        nominal[(share.flavor_id, share.resource_name)].append((share.team_slug, qty))
    out = []
    for cap in flavor_capacity(cluster=cluster):
        if "/" not in cap.resource_name:
            continue
        teams = sorted(nominal.get((cap.flavor.pk if cap.flavor else None, cap.resource_name), []))
        out.append(
            QuotaCoverage(
                flavor=cap.flavor,
                resource_name=cap.resource_name,
                exists=cap.exists,
                unusable=cap.unhealthy,
                nominal_total=sum(q for _, q in teams),
                teams=teams,
            )
        )
    return out


# --- the healthy capacity that backs guaranteed quotas (queues.guarantees) ----------------------------------


@dataclass(frozen=True)
class FlavorBacking:
    """One (flavor, resource) of a cluster: units present, units that can take work (healthy or degraded, on a ready
    node), and the units out by health state (``not_ready`` for usable units on a NotReady node)."""

    flavor_id: int
    resource_name: str
    exists: int
    healthy: int
    out_by_state: dict[str, int]


def healthy_capacity(*, cluster: Cluster) -> dict[tuple[int, str], FlavorBacking]:
    """Healthy capacity per (flavor, resource) of the cluster's present nodes of a flavor (one query)."""
    rows = (
        Device.objects.filter(node__cluster=cluster, node__gone_at__isnull=True, gone_at__isnull=True)
        .exclude(resource_name="")
        .exclude(node__flavor__isnull=True)
        .values("node__flavor_id", "resource_name", "health")
        .annotate(n=Count("id"), not_ready=Count("id", filter=Q(node__ready=False)))
        .order_by()
    )
    exists: dict[tuple[int, str], int] = defaultdict(int)
    healthy: dict[tuple[int, str], int] = defaultdict(int)
    out: dict[tuple[int, str], dict[str, int]] = defaultdict(dict)
    for row in rows:
        key = (row["node__flavor_id"], row["resource_name"])
        exists[key] += row["n"]
        if row["health"] in USABLE_HEALTH:
            healthy[key] += row["n"] - row["not_ready"]
            if row["not_ready"]:
                out[key]["not_ready"] = out[key].get("not_ready", 0) + row["not_ready"]
        else:
            out[key][row["health"]] = out[key].get(row["health"], 0) + row["n"]
    return {
        key: FlavorBacking(key[0], key[1], exists[key], healthy.get(key, 0), dict(out.get(key, {}))) for key in exists
    }


@dataclass(frozen=True)
class RepairBehind:
    """An open repair ticket behind units out of a (flavor, resource): how many, and when they are expected back
    (``estimated``: from the mean time to repair of past tickets, not an operator's word)."""

    ticket_id: int
    url: str
    state_label: str
    node: str
    units: int
    expected_back_at: datetime | None
    estimated: bool


def _mean_repair_seconds(cluster: Cluster) -> float | None:
    """Mean time from opened to returned of the cluster's returned tickets (None: none returned yet)."""
    spans = [
        (closed - opened).total_seconds()
        for opened, closed in RepairTicket.objects.filter(
            node__cluster=cluster, state=RepairTicket.State.RETURNED, closed_at__isnull=False
        ).values_list("opened_at", "closed_at")[:500]
    ]
    return sum(spans) / len(spans) if spans else None


def repairs_behind(*, cluster: Cluster) -> dict[tuple[int, str], list[RepairBehind]]:
    """Per (flavor, resource), the open repair tickets whose units are out, oldest first (three queries)."""
    tickets = list(
        RepairTicket.objects.filter(node__cluster=cluster, state__in=OPEN).select_related("node").order_by("opened_at")
    )
    if not tickets:
        return {}
    mttr = _mean_repair_seconds(cluster)
    units = _units_by_ticket(tickets)
    out: dict[tuple[int, str], list[RepairBehind]] = defaultdict(list)
    for t in tickets:
        counts: dict[tuple[int, str], int] = defaultdict(int)
        for unit in units.get(t.pk, []):
            if unit.resource_name and t.node.flavor_id and unit.health not in USABLE_HEALTH and unit.gone_at is None:
                counts[(t.node.flavor_id, unit.resource_name)] += 1
        expected, estimated = t.expected_back_at, False
        if expected is None and mttr is not None:
            expected, estimated = t.opened_at + timedelta(seconds=mttr), True
        for key, n in counts.items():
            out[key].append(
                RepairBehind(t.pk, ticket_url(t.pk), t.get_state_display(), t.node.name, n, expected, estimated)
            )
    return dict(out)


# --- for the kubernetes backend and the engine's other callers -----------------------------------------------


@dataclass(frozen=True)
class ValidationPinning:
    """Where a validation job must run: the node, the exact devices, and the health taint it must tolerate."""

    job_id: int
    ticket_id: int
    node_name: str
    device_uuids: tuple[str, ...]
    dra_devices: tuple[tuple[str, str, str], ...]  # (driver, pool, device)
    tolerations: tuple[dict, ...]


def validation_pinning(*, job_id: int) -> ValidationPinning | None:
    """The pinning of a validation job (None for any other job)."""
    run = ValidationRun.objects.filter(job_id=job_id).select_related("ticket__node").first()
    if run is None:
        return None
    devices = list(run.devices.order_by("index", "key"))
    return ValidationPinning(
        job_id=job_id,
        ticket_id=run.ticket_id,
        node_name=run.ticket.node.name,
        device_uuids=tuple(d.uuid for d in devices if d.uuid),
        dra_devices=tuple((d.dra_driver, d.dra_pool, d.dra_device) for d in devices if d.dra_device),
        tolerations=({"key": TAINT_KEY, "operator": "Exists", "effect": TAINT_EFFECT},),
    )


def validation_job_ids(*, cluster: Cluster | None = None) -> set[int]:
    """Ids of all validation jobs (they bypass the engine: leave them out of engine inputs)."""
    runs = ValidationRun.objects.all()
    if cluster is not None:
        runs = runs.filter(job__cluster=cluster)
    return set(runs.values_list("job_id", flat=True))


def exclude_validation_jobs(jobs: QuerySet) -> QuerySet:
    """A Job queryset without validation jobs."""
    return jobs.exclude(validation_run__isnull=False)


def degraded_node_labels(*, cluster: Cluster) -> dict[str, str | None]:
    """Per managed present node of the cluster, the degraded-devices label it should carry (None: no label).

    The value is the number of degraded cards (a card's MIG instances and replicas move with it)."""
    if not settings.HEALTH_MANAGED_NODE_LABELS:
        return {}
    degraded = Q(devices__health=HealthState.DEGRADED, devices__gone_at__isnull=True, devices__kind=Device.Kind.FULL)
    nodes = Node.objects.filter(cluster=cluster, gone_at__isnull=True).annotate(
        degraded=Count("devices", filter=degraded)
    )
    return {n.name: (str(n.degraded) if n.degraded else None) for n in nodes.order_by("name") if node_is_managed(n)}


def directives_to_apply(*, cluster: Cluster) -> list[NodeHealthDirective]:
    """Directives the kubernetes backend should apply (wanted, not yet applied)."""
    return list(
        NodeHealthDirective.objects.filter(node__cluster=cluster, released_at__isnull=True, applied_at__isnull=True)
        .select_related("node", "device")
        .order_by("pk")
    )


def directives_to_remove(*, cluster: Cluster) -> list[NodeHealthDirective]:
    """Directives no longer wanted whose effect the kubernetes backend has not removed yet."""
    return list(
        NodeHealthDirective.objects.filter(
            node__cluster=cluster, released_at__isnull=False, applied_at__isnull=False, removed_at__isnull=True
        )
        .select_related("node", "device")
        .order_by("pk")
    )
