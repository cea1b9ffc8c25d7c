"""What the portal sends to a cluster: the Kueue configuration objects (a submission's objects are built by
:mod:`clusters.kube_sync.workload_manifests`).

Pure functions of the portal's rows (reads only, no writes, no cluster calls).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.utils import timezone

from clusters.kube_sync.api import KUEUE, KUEUE_VERSION
from clusters.kube_sync.labels import (
    CLASS_LABEL,
    JOB_ID_LABEL,
    JOB_UID_LABEL,
    MANAGED_BY,
    PORTAL,
    PORTAL_JOBS_SELECTOR,
    PREFERRED_TOPOLOGY,
    PREFIX,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    REQUIRED_TOPOLOGY,
    TEAM_LABEL,
    managed_labels,
)
from clusters.kube_sync.protection import protected_priority_class, protected_priority_value, protection_offered
from kernel.quantity import format_quantity, parse_quantity
from pools.models import Cluster, ResourceFlavor, Topology
from queues.engine.reservations import CLUSTER_QUEUE, COHORT
from queues.guarantees.selectors import applied_lines, cluster_guarantees
from queues.models import Cohort, PriorityClass, QuotaLine, TeamQuota
from queues.reservations.holds import QuotaOverrides
from queues.reservations.overrides import cluster_quota_overrides

__all__ = [
    "CLASS_LABEL",
    "JOB_ID_LABEL",
    "JOB_UID_LABEL",
    "MANAGED_BY",
    "PORTAL",
    "PORTAL_JOBS_SELECTOR",
    "PREFERRED_TOPOLOGY",
    "PREFIX",
    "PRIORITY_LABEL",
    "QUEUE_LABEL",
    "REQUIRED_TOPOLOGY",
    "TEAM_LABEL",
    "desired_config",
    "desired_hash",
    "diff",
    "live_view",
    "object_key",
]

KUEUE_API = f"{KUEUE}/{KUEUE_VERSION}"


def quantity(value: str | int, resource: str) -> str:
    """A quantity as Kueue prints it (the API server normalises to the same text)."""
    return format_quantity(parse_quantity(value, resource), resource)


def _weight(value: Decimal | float | int) -> str:
    """A fair-sharing weight as a quantity string ("1", "0.5")."""
    return format(Decimal(value).normalize(), "f")


# --- the Kueue configuration ---------------------------------------------------------------------------------


def object_key(obj: dict) -> tuple[str, str, str]:
    """(kind, namespace, name) of an object."""
    meta = obj.get("metadata") or {}
    return obj["kind"], meta.get("namespace", "") or "", meta["name"]


def desired_hash(obj: dict) -> str:
    """A stable digest of what the portal would apply."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def _resource_groups(
    lines: Iterable[QuotaLine],
    *,
    with_borrowing: bool,
    owner: tuple[str, str] = ("", ""),
    held: QuotaOverrides | None = None,
) -> list[dict]:
    """Quota lines as Kueue resourceGroups, in flavor order.

    Kueue wants every resource in exactly one group, every flavor in one group, and each flavor of a group to
    list every resource the group covers. Flavors that share a resource therefore share a group (connected
    components), and a flavor without a line for one of its group's resources gets a nominal quota of 0 for it —
    what "no quota line" means there (the flavor cannot give that resource). ``held``: the reservations in force, whose
    nominal quota and lending limit replace the lines' for ``owner`` (kind, name) where they change them.
    """
    by_flavor: dict[str, dict[str, QuotaLine]] = defaultdict(dict)
    order: dict[str, tuple[int, str]] = {}
    for line in lines:
        name = line.flavor.name
        by_flavor[name][line.resource_name] = line
        order[name] = min(order.get(name, (1 << 30, name)), (line.flavor_order, name))
    flavors = sorted(by_flavor, key=lambda f: order[f])
    parent = {f: f for f in flavors}

    def root(f: str) -> str:
        while parent[f] != f:
            parent[f] = parent[parent[f]]
            f = parent[f]
        return f

    first_with: dict[str, str] = {}
    for flavor in flavors:
        for resource in by_flavor[flavor]:
            if resource in first_with:
                parent[root(flavor)] = root(first_with[resource])
            else:
                first_with[resource] = flavor
    groups: dict[str, list[str]] = {}
    for flavor in flavors:
        groups.setdefault(root(flavor), []).append(flavor)
    out = []
    for members in groups.values():
        covered = sorted({r for f in members for r in by_flavor[f]})
        entries = []
        for flavor in members:
            resources = []
            for name in covered:
                ln = by_flavor[flavor].get(name)
                if ln is None:
                    resources.append({"name": name, "nominalQuota": quantity(0, name)})
                    continue
                nominal: str | int = ln.nominal
                lending: str | int | None = ln.lending_limit or None
                override = held.lines.get((*owner, flavor, name)) if held else None
                if override is not None:
                    nominal, lending = override
                entry: dict[str, Any] = {"name": name, "nominalQuota": quantity(nominal, name)}
                if ln.borrowing_limit and with_borrowing:
                    entry["borrowingLimit"] = quantity(ln.borrowing_limit, name)
                if lending is not None and with_borrowing:
                    entry["lendingLimit"] = quantity(lending, name)
                resources.append(entry)
            entries.append({"name": flavor, "resources": resources})
        out.append({"coveredResources": covered, "flavors": entries})
    return out


#: The ClusterQueue's admission scope under a cohort with fairness that remembers (Kueue's admission fair sharing,
#: beta since v0.15, the first release the portal's v1beta2 API reaches). Kueue orders by it only the LocalQueues
#: of one ClusterQueue; the portal's ordering of teams of a cohort has no Kueue field (docs/kubernetes.md).
USAGE_BASED_SCOPE = {"admissionMode": "UsageBasedAdmissionFairSharing"}


def _remembers(cohort: Cohort | None, cohorts: dict[int, Cohort]) -> bool:
    """Whether a cohort on the path up from ``cohort`` has fairness that remembers (``usage_half_life``)."""
    seen: set[int] = set()
    while cohort is not None and cohort.pk not in seen:
        seen.add(cohort.pk)
        if cohort.usage_half_life:
            return True
        cohort = cohorts.get(cohort.parent_id) if cohort.parent_id else None
    return False


def _cluster_queue(
    quota: TeamQuota, lines: list[QuotaLine], held: QuotaOverrides | None = None, *, usage_based: bool = False
) -> dict:
    reclaim = quota.reclaim_within_cohort
    if held and quota.cluster_queue_name in held.reclaim_any:
        reclaim = "Any"  # a reservation's holder reclaims its reserved units whatever the borrowers' priority
    owner = (CLUSTER_QUEUE, quota.cluster_queue_name)
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": quota.team.namespace}},
        "queueingStrategy": quota.queueing_strategy,
        "resourceGroups": _resource_groups(lines, with_borrowing=bool(quota.cohort_id), owner=owner, held=held),
        "preemption": {
            "withinClusterQueue": quota.within_cluster_queue,
            "reclaimWithinCohort": reclaim,
        },
        "flavorFungibility": {"whenCanBorrow": quota.when_can_borrow, "whenCanPreempt": quota.when_can_preempt},
        "fairSharing": {"weight": _weight(quota.fair_weight)},
        "stopPolicy": quota.stop_policy,
    }
    if quota.cohort is not None:
        spec["cohortName"] = quota.cohort.name
    if quota.borrow_within_cohort != "Never" and reclaim != "Never":
        bwc: dict[str, Any] = {"policy": quota.borrow_within_cohort}
        if quota.borrow_within_cohort_max_priority is not None:
            bwc["maxPriorityThreshold"] = quota.borrow_within_cohort_max_priority
        spec["preemption"]["borrowWithinCohort"] = bwc
    if usage_based:
        spec["admissionScope"] = dict(USAGE_BASED_SCOPE)
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": quota.cluster_queue_name, "labels": managed_labels(**{TEAM_LABEL: quota.team.slug})},
        "spec": spec,
    }


def _flavor(flavor: ResourceFlavor) -> dict:
    spec: dict[str, Any] = {}
    if flavor.node_labels:
        spec["nodeLabels"] = dict(flavor.node_labels)
    if flavor.node_taints:
        spec["nodeTaints"] = [
            {k: v for k, v in t.items() if k in ("key", "value", "effect") and v not in (None, "")}
            for t in flavor.node_taints
        ]
    if flavor.tolerations:
        spec["tolerations"] = [{k: v for k, v in t.items() if v not in (None, "")} for t in flavor.tolerations]
    if flavor.topology is not None and flavor.node_labels:
        spec["topologyName"] = flavor.topology.name
    return {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": {"name": flavor.name, "labels": managed_labels()},
        "spec": spec,
    }


def desired_config(cluster: Cluster, *, now: datetime | None = None) -> list[dict]:
    """Every object the portal owns in a cluster, in apply order (namespaces and flavors before queues); the quotas
    as applied (queues.guarantees: a guarantee less its part of a shortfall of healthy capacity), with what the
    reservations in force at ``now`` (default: the wall clock) give and take (``queues.reservations``)."""
    held = cluster_quota_overrides(cluster=cluster, at=now or timezone.now())
    quotas = list(
        TeamQuota.objects.filter(cluster=cluster).select_related("team", "cohort").order_by("cluster_queue_name")
    )
    lines = list(
        QuotaLine.objects.filter(team_quota__cluster=cluster).select_related("flavor").order_by("flavor_order")
    )
    cohorts = {c.pk: c for c in Cohort.objects.select_related("parent")}
    all_cohort_lines = list(QuotaLine.objects.filter(cohort__isnull=False).select_related("flavor"))
    # The quotas as applied: each guarantee less its part of a shortfall of healthy capacity (queues.guarantees).
    guarantees = cluster_guarantees(cluster, quotas=quotas, lines=[*lines, *all_cohort_lines], cohorts=cohorts.values())
    lines = applied_lines(lines, guarantees)
    all_cohort_lines = applied_lines(all_cohort_lines, guarantees)
    by_quota: dict[int | None, list[QuotaLine]] = defaultdict(list)
    for line in lines:
        by_quota[line.team_quota_id].append(line)
    cohort_names: set[str] = set()
    for quota in quotas:
        cohort = cohorts.get(quota.cohort_id) if quota.cohort_id else None
        while cohort is not None and cohort.name not in cohort_names:
            cohort_names.add(cohort.name)
            cohort = cohorts.get(cohort.parent_id) if cohort.parent_id else None
    cohort_lines: dict[int | None, list[QuotaLine]] = defaultdict(list)
    for line in all_cohort_lines:
        if line.cohort_id is not None and cohorts[line.cohort_id].name in cohort_names:
            cohort_lines[line.cohort_id].append(line)
    flavor_names = {ln.flavor.name for ln in lines} | {ln.flavor.name for ls in cohort_lines.values() for ln in ls}
    flavors = list(ResourceFlavor.objects.filter(name__in=flavor_names).select_related("topology").order_by("name"))
    topology_ids = {f.topology_id for f in flavors if f.topology_id}
    out: list[dict] = []
    for team in sorted({q.team for q in quotas}, key=lambda t: t.namespace):
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": team.namespace, "labels": managed_labels(**{TEAM_LABEL: team.slug})},
            }
        )
    for topology in Topology.objects.filter(pk__in=topology_ids).order_by("name"):
        out.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "Topology",
                "metadata": {"name": topology.name, "labels": managed_labels()},
                "spec": {"levels": [{"nodeLabel": level} for level in topology.levels]},
            }
        )
    out += [_flavor(f) for f in flavors]
    for pc in PriorityClass.objects.order_by("-value", "name"):
        wpc: dict[str, Any] = {
            "apiVersion": KUEUE_API,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": pc.name, "labels": managed_labels()},
            "value": pc.value,
        }
        if pc.description:
            wpc["description"] = pc.description
        out.append(wpc)
    if protection_offered():
        out.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": protected_priority_class(), "labels": managed_labels()},
                "value": protected_priority_value(),
                "description": "Raised by the portal while a job's protection from preemption holds",
            }
        )
    for cohort in sorted((c for c in cohorts.values() if c.name in cohort_names), key=lambda c: c.name):
        spec: dict[str, Any] = {"fairSharing": {"weight": _weight(cohort.fair_weight)}}
        if cohort.parent_id:
            spec["parentName"] = cohorts[cohort.parent_id].name
        groups = _resource_groups(
            cohort_lines.get(cohort.pk, []), with_borrowing=True, owner=(COHORT, cohort.name), held=held
        )
        if groups:
            spec["resourceGroups"] = groups
        out.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "Cohort",
                "metadata": {"name": cohort.name, "labels": managed_labels()},
                "spec": spec,
            }
        )
    out += [
        _cluster_queue(
            q,
            by_quota[q.pk],
            held,
            usage_based=_remembers(cohorts.get(q.cohort_id) if q.cohort_id else None, cohorts),
        )
        for q in quotas
    ]
    for quota in quotas:
        lq_spec: dict[str, Any] = {"clusterQueue": quota.cluster_queue_name}
        out.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "LocalQueue",
                "metadata": {
                    "name": quota.team.local_queue_name,
                    "namespace": quota.team.namespace,
                    "labels": managed_labels(**{TEAM_LABEL: quota.team.slug}),
                },
                "spec": lq_spec,
            }
        )
    return out


# --- comparing with the live object ---------------------------------------------------------------------------

QUANTITY_KEYS = {"nominalQuota", "borrowingLimit", "lendingLimit", "weight"}
LIST_KEYS = ("name", "nodeLabel", "key", "type")


def _norm(value: Any, key: str = "", resource: str = "") -> Any:
    """Quantities as canonical ints, so "16" and 16 and "16.0" compare equal."""
    if key in QUANTITY_KEYS and isinstance(value, (str, int, float)):
        try:
            return parse_quantity(value, resource or ("cpu" if key == "weight" else resource))
        except ValueError:
            return value
    return value


def diff(desired: Any, live: Any, path: str = "", resource: str = "") -> list[dict[str, Any]]:
    """The paths where the live object differs from what the portal applies (only the portal's fields)."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return [{"path": path or ".", "portal": desired, "live": live}]
        out: list[dict[str, Any]] = []
        res = desired.get("name", resource) if "nominalQuota" in desired else resource
        for key, value in desired.items():
            sub = f"{path}.{key}" if path else key
            if key in QUANTITY_KEYS:
                a, b = _norm(value, key, res), _norm(live.get(key), key, res)
                if a != b:
                    out.append({"path": sub, "portal": value, "live": live.get(key)})
                continue
            out += diff(value, live.get(key), sub, res)
        return out
    if isinstance(desired, list) and desired and all(isinstance(d, dict) for d in desired):
        key = next((k for k in LIST_KEYS if all(k in d for d in desired)), None)
        if key is not None and isinstance(live, list) and all(isinstance(x, dict) for x in live):
            live_by = {x.get(key): x for x in live}
            out = []
            for item in desired:
                ident = item[key]
                sub = f"{path}[{key}={ident}]"
                if ident not in live_by:
                    out.append({"path": sub, "portal": item, "live": None})
                else:
                    out += diff(item, live_by[ident], sub, resource)
            wanted = {d[key] for d in desired}
            out += [
                {"path": f"{path}[{key}={x.get(key)}]", "portal": None, "live": x}
                for x in live
                if x.get(key) not in wanted
            ]
            order_desired = [d[key] for d in desired]
            order_live = [x.get(key) for x in live if x.get(key) in wanted]
            if not out and order_desired != order_live:
                out.append({"path": f"{path} (order)", "portal": order_desired, "live": order_live})
            return out
        if isinstance(live, list) and len(live) == len(desired):
            out = []
            for i, (a, b) in enumerate(zip(desired, live, strict=True)):
                out += diff(a, b, f"{path}[{i}]", resource)
            return out
        return [{"path": path, "portal": desired, "live": live}]
    if desired != live:
        return [{"path": path, "portal": desired, "live": live}]
    return []


def live_view(desired: Any, live: Any) -> Any:
    """The live object's values at the portal's paths (what the admin compares side by side)."""
    if isinstance(desired, dict) and isinstance(live, dict):
        return {k: live_view(v, live.get(k)) for k, v in desired.items() if k in live}
    return live
