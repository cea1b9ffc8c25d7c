"""Reads for the policy admin: the cohort tree with quota and live usage, team figures, audit records."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, F, Q, Sum
from django.utils import timezone

from kernel.quantity import is_device_resource, parse_quantity
from pools.models import Allocation, Device, ResourceClass
from queues.engine_input import HOLDING_STATES
from queues.models import Cohort, Job, PolicyPreview, QuotaLine, Team, TeamQuota
from queues.policy.whatif import percentile

FR = tuple[int, str]  # (flavor id, resource name)


def _nominal(line: QuotaLine) -> int:
    """A line's nominal quota in units (0 when unparsable: validation keeps such lines out)."""
    try:
        return parse_quantity(line.nominal, line.resource_name)
    except ValueError:
        return 0


def _lending(line: QuotaLine) -> int | None:
    """A line's lending limit in units, None when unlimited."""
    if not line.lending_limit:
        return None
    try:
        return parse_quantity(line.lending_limit, line.resource_name)
    except ValueError:
        return None


def live_usage() -> dict[tuple[int, int], dict[FR, int]]:
    """Device units held now per (team, cluster) and (flavor, resource), summed in SQL over quota-holding jobs."""
    rows = (
        Job.objects.filter(state__in=HOLDING_STATES)
        .values("team_id", "cluster_id", "assigned_flavor_id", "resource_class__resource_name")
        .annotate(units=Sum(F("devices_per_pod") * F("pod_count")))
        .order_by()
    )
    out: dict[tuple[int, int], dict[FR, int]] = defaultdict(lambda: defaultdict(int))
    for row in rows:
        out[(row["team_id"], row["cluster_id"])][(row["assigned_flavor_id"], row["resource_class__resource_name"])] += (
            row["units"] or 0
        )
    return out


@dataclass
class QueueFigures:
    """One team's ClusterQueue now: nominal, used, borrowed and lent device units (summed over resources)."""

    quota: TeamQuota
    nominal: int = 0
    used: int = 0
    borrowed: int = 0
    lent: float = 0.0
    borrowed_fr: dict[FR, int] = field(default_factory=dict)
    lendable_fr: dict[FR, int] = field(default_factory=dict)


def queue_figures() -> list[QueueFigures]:
    """Per team quota: nominal, used and borrowed device units now; lent = the cohort's borrowing shared out.

    Borrowing is per (flavor, resource): units in use above the line's nominal. What the borrowers of a
    cohort tree take of a (flavor, resource) comes from its members' unused quota of it; it is attributed
    to the lenders in proportion to what each could lend (unused nominal, capped by its lending limit).
    """
    usage = live_usage()
    quotas = list(TeamQuota.objects.select_related("team", "cluster", "cohort").order_by("cluster__name", "team__name"))
    lines: dict[int, list[QuotaLine]] = defaultdict(list)
    for line in QuotaLine.objects.filter(team_quota__isnull=False):
        lines[line.team_quota_id].append(line)
    figures = []
    for quota in quotas:
        used_fr = dict(usage.get((quota.team_id, quota.cluster_id), {}))
        for (flavor_id, resource), units in list(used_fr.items()):
            # A job whose flavor is not recorded counts against the queue's first line of its resource.
            first = next((ln for ln in lines[quota.pk] if ln.resource_name == resource), None)
            if flavor_id is None and first is not None:
                del used_fr[(flavor_id, resource)]
                used_fr[(first.flavor_id, resource)] = used_fr.get((first.flavor_id, resource), 0) + units
        fig = QueueFigures(quota=quota)
        for line in lines[quota.pk]:
            if not is_device_resource(line.resource_name):
                continue
            fr = (line.flavor_id, line.resource_name)
            nominal, used = _nominal(line), used_fr.pop(fr, 0)
            fig.nominal += nominal
            fig.used += used
            fig.borrowed_fr[fr] = max(0, used - nominal)
            unused = max(0, nominal - used)
            limit = _lending(line)
            fig.lendable_fr[fr] = unused if limit is None else min(unused, limit)
        for fr, used in used_fr.items():  # usage on a flavor the queue has no line for (moved quota)
            if is_device_resource(fr[1] or ""):
                fig.used += used
                fig.borrowed_fr[fr] = fig.borrowed_fr.get(fr, 0) + used
        fig.borrowed = sum(fig.borrowed_fr.values())
        figures.append(fig)
    root = _roots()
    borrowed: dict[tuple, int] = defaultdict(int)
    lendable: dict[tuple, int] = defaultdict(int)
    for fig in figures:
        if fig.quota.cohort_id:
            tree = (fig.quota.cluster_id, root.get(fig.quota.cohort_id))
            for fr, units in fig.borrowed_fr.items():
                borrowed[(*tree, fr)] += units
            for fr, units in fig.lendable_fr.items():
                lendable[(*tree, fr)] += units
    for fig in figures:
        if fig.quota.cohort_id:
            tree = (fig.quota.cluster_id, root.get(fig.quota.cohort_id))
            fig.lent = sum(
                min(units, borrowed[(*tree, fr)] * units / lendable[(*tree, fr)])
                for fr, units in fig.lendable_fr.items()
                if units
            )
    return figures


def _roots() -> dict[int, int]:
    """Root cohort of every cohort (borrowing happens within a tree)."""
    parent = dict(Cohort.objects.values_list("pk", "parent_id"))
    out = {}
    for pk in parent:
        node, seen = pk, set()
        while parent.get(node) is not None and node not in seen:
            seen.add(node)
            node = parent[node]
        out[pk] = node
    return out


@dataclass
class TreeNode:
    """A cohort or a team's queue in the cohort tree, with quota and usage summed over its subtree."""

    name: str
    kind: str  # "cohort" or "queue"
    parent: str | None
    own: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    nominal: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    used: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    children: list[TreeNode] = field(default_factory=list)
    depth: int = 0
    pk: int | None = None

    @property
    def nominal_total(self) -> int:
        """Device units of nominal quota in the subtree."""
        return sum(self.nominal.values())

    @property
    def used_total(self) -> int:
        """Device units in use in the subtree."""
        return sum(self.used.values())

    @property
    def own_summary(self) -> str:
        """``nvidia.com/gpu 16 · amd.com/gpu 8``: the quota this node itself declares, or a dash."""
        return " · ".join(f"{r} {n}" for r, n in sorted(self.own.items())) or "–"

    @property
    def summary(self) -> str:
        """``nvidia.com/gpu 8/16 · amd.com/gpu 0/8`` (used/nominal per resource)."""
        return " · ".join(f"{r} {self.used.get(r, 0)}/{n}" for r, n in sorted(self.nominal.items())) or "no quota"


def cohort_tree() -> list[TreeNode]:
    """Root nodes of the cohort tree: cohorts with their child cohorts and team queues, quota summed upwards.

    A queue's node is named ``cluster/queue``; team queues outside any cohort are roots of their own.
    """
    cohorts = {c.pk: c for c in Cohort.objects.all()}
    nodes: dict[str, TreeNode] = {}
    for c in cohorts.values():
        nodes[f"cohort:{c.pk}"] = TreeNode(name=c.name, kind="cohort", parent=None, pk=c.pk)
    for line in QuotaLine.objects.filter(cohort__isnull=False):
        if is_device_resource(line.resource_name):
            nodes[f"cohort:{line.cohort_id}"].own[line.resource_name] += _nominal(line)
    usage = live_usage()
    queue_lines: dict[int, list[QuotaLine]] = defaultdict(list)
    for line in QuotaLine.objects.filter(team_quota__isnull=False):
        queue_lines[line.team_quota_id].append(line)
    roots: list[TreeNode] = []
    for quota in TeamQuota.objects.select_related("cluster").order_by("cluster__name", "cluster_queue_name"):
        node = TreeNode(name=f"{quota.cluster.name}/{quota.cluster_queue_name}", kind="queue", parent=None, pk=quota.pk)
        for line in queue_lines[quota.pk]:
            if is_device_resource(line.resource_name):
                node.own[line.resource_name] += _nominal(line)
        for (_, resource), units in usage.get((quota.team_id, quota.cluster_id), {}).items():
            if resource and is_device_resource(resource):
                node.used[resource] += units
        key = f"cohort:{quota.cohort_id}" if quota.cohort_id else None
        if key in nodes:
            nodes[key].children.append(node)
            node.parent = nodes[key].name
        else:
            roots.append(node)
    for c in sorted(cohorts.values(), key=lambda c: c.name):
        node = nodes[f"cohort:{c.pk}"]
        if c.parent_id and f"cohort:{c.parent_id}" in nodes and not _is_cycle(cohorts, c):
            nodes[f"cohort:{c.parent_id}"].children.insert(0, node)
            node.parent = cohorts[c.parent_id].name
        else:
            roots.insert(0, node)

    def total(node: TreeNode, depth: int) -> None:
        node.depth = depth
        node.children.sort(key=lambda n: (n.kind != "cohort", n.name))
        for resource, units in node.own.items():
            node.nominal[resource] += units
        for child in node.children:
            total(child, depth + 1)
            for resource, units in child.nominal.items():
                node.nominal[resource] += units
            for resource, units in child.used.items():
                node.used[resource] += units

    roots.sort(key=lambda n: (n.kind != "cohort", n.name))
    for root in roots:
        total(root, 0)
    return roots


def _is_cycle(cohorts: dict[int, Cohort], cohort: Cohort) -> bool:
    """Whether following parents from ``cohort`` comes back to it (never saved by the admin; guard anyway)."""
    seen, node = set(), cohort.parent_id
    while node is not None:
        if node == cohort.pk or node in seen:
            return True
        seen.add(node)
        node = cohorts[node].parent_id if node in cohorts else None
    return False


def flatten(roots: Iterable[TreeNode]) -> list[TreeNode]:
    """Depth-first list of tree nodes (for tables and charts)."""
    out: list[TreeNode] = []

    def walk(node: TreeNode) -> None:
        out.append(node)
        for child in node.children:
            walk(child)

    for root in roots:
        walk(root)
    return out


def class_utilisation(*, start: datetime, end: datetime, bucket: timedelta) -> dict[str, list[tuple[datetime, float]]]:
    """Share of each active class's devices held by jobs per time bucket (allocation intervals, clipped)."""
    classes = list(ResourceClass.objects.filter(active=True).prefetch_related("flavor_links"))
    units = {
        (row["resource_name"], row["node__flavor_id"]): row["n"]
        for row in Device.objects.filter(gone_at__isnull=True, node__gone_at__isnull=True)
        .exclude(resource_name="")
        .values("resource_name", "node__flavor_id")
        .annotate(n=Count("id"))
        .order_by()
    }
    capacity = {
        rc.pk: sum(units.get((rc.resource_name, link.flavor_id), 0) for link in rc.flavor_links.all()) for rc in classes
    }
    n = max(1, int((end - start) / bucket))
    held: dict[int, list[float]] = {rc.pk: [0.0] * n for rc in classes}
    rows = (
        Allocation.objects.filter(started_at__lt=end)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
        .values_list("job__resource_class_id", "started_at", "ended_at")
    )
    size = bucket.total_seconds()
    for class_id, began, ended in rows:
        if class_id not in held:
            continue
        a = max(began, start)
        b = min(ended or end, end)
        i = int((a - start).total_seconds() // size)
        while i < n and a < b:
            bucket_end = start + bucket * (i + 1)
            held[class_id][i] += (min(b, bucket_end) - a).total_seconds()
            a = bucket_end
            i += 1
    out = {}
    for rc in classes:
        cap = capacity[rc.pk]
        out[rc.name] = [(start + bucket * i, round(held[rc.pk][i] / (cap * size), 4) if cap else 0.0) for i in range(n)]
    return out


@dataclass
class TeamQueue:
    """A team's queue now: jobs pending, how long they have waited, and the recent time to admission."""

    team: str
    pending: int
    oldest_wait_hours: float
    recent_wait_p50_hours: float | None


def team_queues(*, now: datetime | None = None, days: int = 7) -> list[TeamQueue]:
    """Pending jobs per team now, and the median time to admission of jobs admitted in the last ``days``."""
    now = now or timezone.now()
    out = []
    pending: dict[int, list[datetime]] = defaultdict(list)
    for team_id, queued in Job.objects.filter(state=Job.State.PENDING).values_list("team_id", "queued_at"):
        pending[team_id].append(queued)
    waits: dict[int, list[float]] = defaultdict(list)
    for team_id, submitted, admitted in Job.objects.filter(
        admitted_at__gte=now - timedelta(days=days), admitted_at__lte=now
    ).values_list("team_id", "submitted_at", "admitted_at"):
        waits[team_id].append((admitted - submitted).total_seconds() / 3600)
    for team in Team.objects.order_by("name"):
        queued = pending.get(team.pk, [])
        p50 = percentile(waits.get(team.pk, []), 0.5)
        out.append(
            TeamQueue(
                team=team.name,
                pending=len(queued),
                oldest_wait_hours=round(max(((now - q).total_seconds() / 3600 for q in queued), default=0.0), 2),
                recent_wait_p50_hours=round(p50, 2) if p50 is not None else None,
            )
        )
    return out


def previews_visible_to(user, *, model_label: str = "", object_id: str | None = None) -> list[PolicyPreview]:
    """Recent what-if previews of the models ``user`` may change (newest first, at most 50), optionally of one object.

    A preview page needs the change permission on the model it changes, so a preview of another model is left out.
    """
    present = PolicyPreview.objects.order_by().values_list("model_label", flat=True).distinct()
    labels = [label for label in present if user.has_perm(_change_perm(label))]
    if model_label:
        labels = [label for label in labels if label == model_label]
    rows = PolicyPreview.objects.filter(model_label__in=labels).select_related("requested_by")
    if object_id is not None:
        rows = rows.filter(object_id=object_id)
    return list(rows.order_by("-requested_at", "-id")[:50])


def _change_perm(model_label: str) -> str:
    app_label, model_name = model_label.split(".", 1)
    return f"{app_label}.change_{model_name}"
