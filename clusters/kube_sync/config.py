"""Push the portal's quota configuration to a cluster with server-side apply, detect drift, re-apply or adopt.

The portal is the source of truth for the Kueue objects it creates (ResourceFlavors, Topologies, Cohorts,
ClusterQueues, LocalQueues, WorkloadPriorityClasses): when its own configuration changed it applies with its
field manager and, on a field conflict, forces — those fields are the portal's. For team Namespaces it owns only
its labels and never forces.

Each push also checks that Kueue's own configuration (its manager ConfigMap, which the portal only reads) agrees
with the cluster's fair-sharing switch (:mod:`clusters.kube_sync.kueue_config`).

A live object that differs from what the portal last applied, while the portal's configuration did not change,
has *drifted* (someone edited it in the cluster): the difference is stored on its
:class:`~pools.models.KubeConfigObject` row and left alone until an admin re-applies the portal's version
(:func:`kube_config_reapply`) or adopts the live one into the portal's models (:func:`kube_config_adopt`).
An object that already existed, unmanaged, with other settings is treated the same way.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation

from django.db import transaction
from django.utils import timezone

from clusters.kube_sync.api import BY_KIND, KubeApi, KubeConflict, KubeError, KubeRejected, KubeUnavailable, list_all
from clusters.kube_sync.kueue_config import KueueConfigCheck
from clusters.kube_sync.kueue_config_write import kueue_config_push
from clusters.kube_sync.manifests import MANAGED_BY, PORTAL, desired_config, desired_hash, diff, live_view, object_key
from clusters.models import KubeConfigObject
from kernel.errors import Conflict, DomainError
from pools import state_version
from pools.models import Cluster, ResourceFlavor, Topology
from queues.models import Cohort, PriorityClass, QuotaLine, TeamQuota
from queues.reservations.overrides import cluster_quota_overrides

log = logging.getLogger(__name__)

#: Kinds whose applied fields are the portal's: conflicts on them are forced.
OWNED_KINDS = frozenset({"ResourceFlavor", "Topology", "Cohort", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass"})
CONFIG_KINDS = (
    "Namespace",
    "Topology",
    "ResourceFlavor",
    "WorkloadPriorityClass",
    "Cohort",
    "ClusterQueue",
    "LocalQueue",
)


@dataclass
class PushReport:
    """What one push did."""

    cluster: str
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: int = 0
    drifted: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    orphaned: list[str] = field(default_factory=list)
    took_over: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: Kueue's own configuration against the fair-sharing switch (None: not checked, the read failed transiently).
    kueue_config: KueueConfigCheck | None = None

    def text(self) -> str:
        """One line for logs and admin messages."""
        return (
            f"{len(self.created)} created, {len(self.updated)} updated, {self.unchanged} unchanged, "
            f"{len(self.drifted)} drifted, {len(self.conflicts)} conflicts, {len(self.orphaned)} orphaned, "
            f"{len(self.errors)} errors"
        )


def _label(key: tuple[str, str, str]) -> str:
    kind, namespace, name = key
    return f"{kind} {namespace + '/' if namespace else ''}{name}"


def _live_objects(api: KubeApi) -> dict[tuple[str, str, str], dict]:
    """Every live object of the configuration kinds (few: paged anyway)."""
    out: dict[tuple[str, str, str], dict] = {}
    for kind in CONFIG_KINDS:
        for page in list_all(api, BY_KIND[kind]):
            for item in page.items:
                out[object_key(item)] = item
    return out


def _apply(api: KubeApi, obj: dict, *, owned: bool, report: PushReport) -> tuple[dict | None, list[dict]]:
    """Apply; on a field conflict force when the portal owns the kind. Returns (live, unresolved conflicts)."""
    resource = BY_KIND[obj["kind"]]
    try:
        return api.apply(resource, obj), []
    except KubeConflict as exc:
        conflicts = exc.field_conflicts
        if not owned or not conflicts:
            return None, conflicts or [{"field": "", "manager": "", "message": exc.message}]
        live = api.apply(resource, obj, force=True)
        managers = sorted({c["manager"] for c in conflicts})
        fields = ", ".join(c["field"] for c in conflicts)
        report.took_over.append(f"{_label(object_key(obj))}: took {fields} over from {', '.join(managers)}")
        return live, []


def _save(row: KubeConfigObject, **changes) -> None:
    for name, value in changes.items():
        setattr(row, name, value)
    row.save()


@transaction.atomic
def _record(cluster: Cluster, key: tuple[str, str, str]) -> KubeConfigObject:
    kind, namespace, name = key
    row, _ = KubeConfigObject.objects.get_or_create(cluster=cluster, kind=kind, namespace=namespace, name=name)
    return row


def kube_config_push(
    *, cluster: Cluster, api: KubeApi, now: datetime | None = None, reapply_drift: bool = False
) -> PushReport:
    """Apply what changed in the portal, record drift and orphans, check Kueue's configuration; idempotent."""
    now = now or timezone.now()
    report = PushReport(cluster=cluster.name)
    desired = desired_config(cluster, now=now)
    live = _live_objects(api)
    rows = {(r.kind, r.namespace, r.name): r for r in KubeConfigObject.objects.filter(cluster=cluster)}
    wanted = set()
    for obj in desired:
        key = object_key(obj)
        wanted.add(key)
        row = rows.get(key) or _record(cluster, key)
        _push_one(api, obj, key, row, live.get(key), now=now, reapply_drift=reapply_drift, report=report)
    for key, obj in live.items():
        if key in wanted or ((obj.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY) != PORTAL:
            continue
        row = rows.get(key) or _record(cluster, key)
        if row.status != KubeConfigObject.Status.ORPHANED:
            _save(
                row,
                status=KubeConfigObject.Status.ORPHANED,
                desired={},
                live=obj.get("spec", {}),
                drift=[],
                checked_at=now,
                message="Labelled as managed by the portal, but the portal no longer wants it. Re-apply deletes it "
                "(namespaces are never deleted).",
            )
        report.orphaned.append(_label(key))
    stale = [r.pk for key, r in rows.items() if key not in wanted and key not in live]
    KubeConfigObject.objects.filter(pk__in=stale).delete()
    try:
        report.kueue_config = kueue_config_push(cluster=cluster, api=api, now=now)
    except KubeUnavailable as exc:  # the last outcome stays: nothing new is known about Kueue's configuration
        log.warning("cluster %s: Kueue's configuration not checked: %s", cluster.name, exc.message)
    else:
        if report.kueue_config.needs_attention:
            log.warning("cluster %s: %s", cluster.name, report.kueue_config.problem)
    log.info("cluster %s: configuration push: %s", cluster.name, report.text())
    return report


def _push_one(
    api: KubeApi,
    obj: dict,
    key: tuple[str, str, str],
    row: KubeConfigObject,
    live: dict | None,
    *,
    now: datetime,
    reapply_drift: bool,
    report: PushReport,
) -> None:
    h = desired_hash(obj)
    label = _label(key)
    owned = key[0] in OWNED_KINDS
    try:
        if live is None:
            applied, conflicts = _apply(api, obj, owned=owned, report=report)
            again = " (it had been deleted in the cluster)" if row.applied_hash else ""
            _in_sync(row, obj, applied or obj, h, now, message=f"created{again}")
            report.created.append(label)
            return
        delta = diff(obj, live)
        if not delta:
            if row.status != KubeConfigObject.Status.IN_SYNC or row.applied_hash != h:
                _in_sync(row, obj, live, h, now, message="in sync")
            else:
                _save(row, checked_at=now, live_resource_version=_rv(live), live_status=live.get("status") or {})
            report.unchanged += 1
            return
        ours = ((live.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY) == PORTAL
        portal_changed = bool(row.applied_hash) and row.applied_hash != h
        # A team namespace exists before the portal sees it (the deployer creates it with its Pod Security labels, and
        # the portal may not create one): the first push adds the portal's labels, as its own field manager, and
        # leaves everyone else's alone — not a drift to resolve by hand.
        first_sight_of_ours = not row.applied_hash and (ours or key[0] == "Namespace")
        if not (portal_changed or first_sight_of_ours or reapply_drift):
            if row.status != KubeConfigObject.Status.DRIFTED or row.drift != delta:
                unmanaged = "" if ours else " It existed before the portal managed it."
                _save(
                    row,
                    status=KubeConfigObject.Status.DRIFTED,
                    desired=obj,
                    live=live_view(obj, live),
                    live_status=live.get("status") or {},
                    drift=delta,
                    checked_at=now,
                    drift_detected_at=row.drift_detected_at if row.status == KubeConfigObject.Status.DRIFTED else now,
                    live_resource_version=_rv(live),
                    message=f"{len(delta)} field(s) differ from what the portal applied.{unmanaged} "
                    "Re-apply the portal's version or adopt the cluster's.",
                )
            report.drifted.append(label)
            return
        applied, conflicts = _apply(api, obj, owned=owned, report=report)
        if conflicts:
            _save(
                row,
                status=KubeConfigObject.Status.CONFLICT,
                desired=obj,
                live=live_view(obj, live),
                drift=delta,
                checked_at=now,
                message="; ".join(c["message"] or c["field"] for c in conflicts),
            )
            report.conflicts.append(label)
            return
        _in_sync(row, obj, applied or obj, h, now, message="updated")
        report.updated.append(label)
    except KubeRejected as exc:
        _save(row, status=KubeConfigObject.Status.ERROR, desired=obj, checked_at=now, message=exc.message[:2000])
        report.errors.append(f"{label}: {exc.message}")
    except KubeUnavailable:
        raise
    except KubeError as exc:
        _save(row, status=KubeConfigObject.Status.ERROR, desired=obj, checked_at=now, message=exc.message[:2000])
        report.errors.append(f"{label}: {exc.message}")


def _rv(obj: dict) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _in_sync(row: KubeConfigObject, obj: dict, live: dict, h: str, now: datetime, *, message: str) -> None:
    _save(
        row,
        status=KubeConfigObject.Status.IN_SYNC,
        desired=obj,
        live=live_view(obj, live),
        live_status=live.get("status") or {},
        drift=[],
        applied_hash=h,
        applied_at=now,
        checked_at=now,
        drift_detected_at=None,
        live_resource_version=_rv(live),
        message=message,
    )


# --- admin actions -------------------------------------------------------------------------------------------


def _desired_for(row: KubeConfigObject) -> dict | None:
    for obj in desired_config(row.cluster):
        if object_key(obj) == (row.kind, row.namespace, row.name):
            return obj
    return None


def kube_config_reapply(*, row: KubeConfigObject, api: KubeApi, now: datetime | None = None) -> KubeConfigObject:
    """Make the cluster match the portal for one object: force-apply it, or delete an orphan."""
    now = now or timezone.now()
    resource = BY_KIND[row.kind]
    obj = _desired_for(row)
    if obj is None:
        if row.kind == "Namespace":
            raise Conflict("the portal never deletes namespaces; delete it in the cluster if it is unused")
        api.delete(resource, name=row.name, namespace=row.namespace or None)
        row.delete()
        return row
    live = api.apply(resource, obj, force=True)
    _in_sync(row, obj, live, desired_hash(obj), now, message=f"re-applied by an admin at {now:%Y-%m-%d %H:%M}")
    return row


@transaction.atomic
def kube_config_adopt(*, row: KubeConfigObject, api: KubeApi, now: datetime | None = None) -> KubeConfigObject:
    """Make the portal match the cluster for one object: copy the live settings into the portal's models."""
    now = now or timezone.now()
    resource = BY_KIND[row.kind]
    live = api.get(resource, name=row.name, namespace=row.namespace or None)
    spec = live.get("spec") or {}
    adopt = _ADOPTERS.get(row.kind)
    if adopt is None:
        raise DomainError(f"a {row.kind} cannot be adopted: re-apply the portal's version instead")
    held = cluster_quota_overrides(cluster=row.cluster, at=now)
    if any(key[:2] == (row.kind, row.name) for key in held.lines) or (
        row.kind == "ClusterQueue" and row.name in held.reclaim_any
    ):
        # Its live quota is the reservation's, not the admin's: adopting it would keep the reservation for ever.
        raise Conflict(
            f"{row.kind} {row.name}'s quota is changed by a reservation in force: adopt it once the window has ended, "
            "or re-apply the portal's version"
        )
    adopt(row, live, spec)
    obj = _desired_for(row)
    if obj is None:
        raise DomainError(f"{row} is not part of the portal's configuration any more")
    delta = diff(obj, live)
    if delta:
        raise DomainError(
            f"after adopting, {len(delta)} field(s) still differ ({', '.join(d['path'] for d in delta[:5])}): "
            "the portal cannot express them"
        )
    _in_sync(row, obj, live, desired_hash(obj), now, message=f"adopted from the cluster at {now:%Y-%m-%d %H:%M}")
    return row


def _flavor_named(name: str) -> ResourceFlavor:
    flavor = ResourceFlavor.objects.filter(name=name).first()
    if flavor is None:
        raise DomainError(f"the live object uses flavor {name}, which the portal does not know: create it first")
    return flavor


def _adopt_lines(lines_qs, owner: dict, groups: list[dict]) -> None:
    """Replace quota lines with the live resourceGroups."""
    keep = []
    order = 0
    for group in groups:
        for fq in group.get("flavors") or []:
            flavor = _flavor_named(fq["name"])
            for res in fq.get("resources") or []:
                line, _ = QuotaLine.objects.update_or_create(
                    **owner,
                    flavor=flavor,
                    resource_name=res["name"],
                    defaults={
                        "flavor_order": order,
                        "nominal": str(res.get("nominalQuota", "0")),
                        "borrowing_limit": str(res["borrowingLimit"]) if "borrowingLimit" in res else "",
                        "lending_limit": str(res["lendingLimit"]) if "lendingLimit" in res else "",
                    },
                )
                keep.append(line.pk)
            order += 1
    lines_qs.exclude(pk__in=keep).delete()


def _weight(value, default: Decimal) -> Decimal:
    try:
        return Decimal(str(value)) if value is not None else default
    except InvalidOperation:
        return default


def _adopt_cluster_queue(row: KubeConfigObject, live: dict, spec: dict) -> None:
    quota = TeamQuota.objects.select_for_update().get(cluster=row.cluster, cluster_queue_name=row.name)
    preemption = spec.get("preemption") or {}
    bwc = preemption.get("borrowWithinCohort") or {}
    fungibility = spec.get("flavorFungibility") or {}
    cohort_name = spec.get("cohortName")
    quota.cohort = Cohort.objects.get_or_create(name=cohort_name)[0] if cohort_name else None
    quota.queueing_strategy = spec.get("queueingStrategy", "BestEffortFIFO")
    quota.within_cluster_queue = preemption.get("withinClusterQueue", "Never")
    quota.reclaim_within_cohort = preemption.get("reclaimWithinCohort", "Never")
    quota.borrow_within_cohort = bwc.get("policy", "Never")
    quota.borrow_within_cohort_max_priority = bwc.get("maxPriorityThreshold")
    quota.when_can_borrow = fungibility.get("whenCanBorrow", "MayStopSearch")
    quota.when_can_preempt = fungibility.get("whenCanPreempt", "TryNextFlavor")
    quota.fair_weight = _weight((spec.get("fairSharing") or {}).get("weight"), Decimal(1))
    quota.stop_policy = spec.get("stopPolicy", "None")
    quota.save()
    _adopt_lines(QuotaLine.objects.filter(team_quota=quota), {"team_quota": quota}, spec.get("resourceGroups") or [])


def _adopt_cohort(row: KubeConfigObject, live: dict, spec: dict) -> None:
    cohort = Cohort.objects.select_for_update().get(name=row.name)
    parent = spec.get("parentName")
    cohort.parent = Cohort.objects.get_or_create(name=parent)[0] if parent else None
    cohort.fair_weight = _weight((spec.get("fairSharing") or {}).get("weight"), Decimal(1))
    cohort.save()
    _adopt_lines(QuotaLine.objects.filter(cohort=cohort), {"cohort": cohort}, spec.get("resourceGroups") or [])


def _adopt_flavor(row: KubeConfigObject, live: dict, spec: dict) -> None:
    flavor = ResourceFlavor.objects.select_for_update().get(name=row.name)
    flavor.node_labels = dict(spec.get("nodeLabels") or {})
    flavor.node_taints = list(spec.get("nodeTaints") or [])
    flavor.tolerations = list(spec.get("tolerations") or [])
    topology = spec.get("topologyName")
    flavor.topology = Topology.objects.filter(name=topology).first() if topology else None
    if topology and flavor.topology is None:
        raise DomainError(f"the flavor uses topology {topology}, which the portal does not know: create it first")
    flavor.save()


def _adopt_topology(row: KubeConfigObject, live: dict, spec: dict) -> None:
    Topology.objects.filter(name=row.name).update(levels=[lv["nodeLabel"] for lv in spec.get("levels") or []])
    state_version.bump()  # update() sends no signal


def _adopt_priority_class(row: KubeConfigObject, live: dict, spec: dict) -> None:
    PriorityClass.objects.filter(name=row.name).update(
        value=int(live["value"]), description=live.get("description", "")
    )
    state_version.bump()  # update() sends no signal


def _adopt_namespace(row: KubeConfigObject, live: dict, spec: dict) -> None:
    """The portal keeps nothing of a namespace but its own labels: nothing to copy."""


_ADOPTERS = {
    "ClusterQueue": _adopt_cluster_queue,
    "Cohort": _adopt_cohort,
    "ResourceFlavor": _adopt_flavor,
    "Topology": _adopt_topology,
    "WorkloadPriorityClass": _adopt_priority_class,
    "Namespace": _adopt_namespace,
}
