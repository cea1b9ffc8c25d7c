"""Drift between the portal's Kueue configuration and the cluster: what admins see, and what they can do about it.

The configuration push (:mod:`clusters.kube_sync.config`) records, per object, what the portal applies and what the
cluster has at the portal's paths. This module reads those rows for the admin pages — a field-by-field table and
a unified YAML diff of the fields the portal manages, and what "adopt" would write where — and runs the admin's
choice against the cluster: *re-apply* (the portal wins: force-apply its version, delete an orphan) or *adopt*
(the cluster wins: copy its values into the portal's models, e.g. a nominal quota edited with kubectl).

Cluster calls run on the **worker**, never in the web process (whose service account may not change a cluster, and
in deploy/ cannot): the admin's button sends :func:`drift_action_run` to the worker (``clusters.kube_drift_action``)
and the page waits a few seconds for its messages (:mod:`clusters.drift_replies`). An adopt the portal cannot
express is refused and says why; an unreachable cluster is reported as such and changes nothing.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml
from django.db.models import QuerySet

from clusters.backends import backend_for
from clusters.kube_sync.api import KubeApi, KubeError, KubeUnavailable
from clusters.kube_sync.config import PushReport, kube_config_adopt, kube_config_push, kube_config_reapply
from clusters.models import KubeConfigObject
from kernel.errors import DomainError
from pools.models import Cluster

#: What adopting each kind writes into the portal ("" = nothing to adopt: the object derives from other rows).
ADOPT_TARGETS = {
    "ClusterQueue": "the team's quota: cohort, queueing strategy, preemption, flavor fungibility, fair-sharing "
    "weight, stop policy and the quota lines (nominal, borrowing and lending limits per flavor and resource)",
    "Cohort": "the cohort: parent, fair-sharing weight and its own quota lines",
    "ResourceFlavor": "the resource flavor: node labels, node taints, tolerations and topology",
    "Topology": "the topology's levels",
    "WorkloadPriorityClass": "the priority class: value and description",
    "LocalQueue": "",
    "Namespace": "",
}
NOT_ADOPTABLE = {
    "LocalQueue": "a LocalQueue only points at its team's ClusterQueue: re-apply it",
    "Namespace": "the portal owns only its own labels on a team namespace: re-apply them",
}
#: Rows an admin has to look at.
ATTENTION = (
    KubeConfigObject.Status.DRIFTED,
    KubeConfigObject.Status.CONFLICT,
    KubeConfigObject.Status.ORPHANED,
    KubeConfigObject.Status.ERROR,
)


@dataclass(frozen=True)
class DriftField:
    """One differing field: its path, the portal's value and the cluster's, as short text."""

    path: str
    portal: str
    live: str
    change: str  # changed | missing in the cluster | added in the cluster


def _text(value: Any) -> str:
    if value is None:
        return "(absent)"
    if isinstance(value, str):
        return value
    return yaml.safe_dump(value, default_flow_style=True, sort_keys=True, width=1000).strip()


def drift_fields(row: KubeConfigObject) -> list[DriftField]:
    """The differing fields of a row, in the order the push found them."""
    out = []
    for entry in row.drift or []:
        portal, live = entry.get("portal"), entry.get("live")
        if portal is None:
            change = "added in the cluster"
        elif live is None:
            change = "missing in the cluster"
        else:
            change = "changed"
        out.append(DriftField(path=str(entry.get("path", "")), portal=_text(portal), live=_text(live), change=change))
    return out


def _managed(obj: dict) -> dict:
    """The parts of an object the portal manages, without identity noise."""
    return {k: v for k, v in (obj or {}).items() if k not in ("apiVersion", "kind", "status")}


def drift_yaml_diff(row: KubeConfigObject) -> str:
    """A unified diff (portal → cluster) of the portal-managed fields as YAML; "" when they agree."""
    if row.status == KubeConfigObject.Status.ORPHANED:
        portal_text = ""
        live_text = yaml.safe_dump({"spec": row.live}, sort_keys=True) if row.live else ""
    else:
        portal_text = yaml.safe_dump(_managed(row.desired), sort_keys=True) if row.desired else ""
        live_text = yaml.safe_dump(_managed(row.live), sort_keys=True) if row.live else ""
    if portal_text == live_text:
        return ""
    lines = difflib.unified_diff(
        portal_text.splitlines(), live_text.splitlines(), fromfile="portal", tofile="cluster", lineterm="", n=2
    )
    return "\n".join(lines)


def adopt_target(row: KubeConfigObject) -> str:
    """What adopting this row writes into the portal, or why it cannot be adopted."""
    if row.status == KubeConfigObject.Status.ORPHANED:
        return "nothing: the portal no longer wants this object (re-apply deletes it; namespaces are kept)"
    if row.kind in NOT_ADOPTABLE:
        return f"nothing: {NOT_ADOPTABLE[row.kind]}"
    return ADOPT_TARGETS.get(row.kind) or "nothing"


def can_adopt(row: KubeConfigObject) -> bool:
    """Whether adopt applies to this row at all."""
    return bool(ADOPT_TARGETS.get(row.kind)) and row.status in (
        KubeConfigObject.Status.DRIFTED,
        KubeConfigObject.Status.CONFLICT,
    )


def drifted_objects(*, cluster: Cluster | None = None) -> QuerySet[KubeConfigObject]:
    """Configuration objects that need an admin (drifted, conflicting, orphaned, failed), oldest drift first."""
    qs = KubeConfigObject.objects.filter(status__in=ATTENTION).select_related("cluster")
    if cluster is not None:
        qs = qs.filter(cluster=cluster)
    return qs.order_by("cluster__name", "drift_detected_at", "kind", "namespace", "name")


def kueue_config_outcomes() -> QuerySet[Cluster]:
    """Kubernetes clusters with the outcome of the last check of Kueue's own configuration, by name."""
    return Cluster.objects.filter(backend=Cluster.Backend.KUBERNETES).order_by("name")


# --- actions ---------------------------------------------------------------------------------------------------------


def _cluster_error(row_or_cluster: object, exc: KubeError) -> DomainError:
    if isinstance(exc, KubeUnavailable):
        return DomainError(f"{row_or_cluster}: the cluster cannot be reached ({exc.message}); nothing was changed")
    return DomainError(f"{row_or_cluster}: the cluster refused: {exc.message}")


def kube_drift_reapply(*, row_id: int, api: KubeApi | None = None) -> KubeConfigObject:
    """The portal wins for one object: force-apply the portal's version (or delete an orphan)."""
    row = KubeConfigObject.objects.select_related("cluster").get(pk=row_id)
    try:
        return kube_config_reapply(row=row, api=api) if api else backend_for(row.cluster).drift_reapply(row=row)
    except KubeError as exc:
        raise _cluster_error(row, exc) from exc


def kube_drift_adopt(*, row_id: int, api: KubeApi | None = None) -> KubeConfigObject:
    """The cluster wins for one object: copy its values into the portal's models (refused where they do not map)."""
    row = KubeConfigObject.objects.select_related("cluster").get(pk=row_id)
    if not can_adopt(row):
        raise DomainError(f"{row}: cannot be adopted: {adopt_target(row)}")
    try:
        return kube_config_adopt(row=row, api=api) if api else backend_for(row.cluster).drift_adopt(row=row)
    except KubeError as exc:
        raise _cluster_error(row, exc) from exc


def kube_drift_check(*, cluster_id: int, api: KubeApi | None = None) -> PushReport:
    """Push the portal's changes and look for drift now (what the beat entry does), for one cluster."""
    cluster = Cluster.objects.get(pk=cluster_id)
    try:
        return kube_config_push(cluster=cluster, api=api) if api else backend_for(cluster).drift_check()
    except KubeError as exc:
        raise _cluster_error(f"cluster {cluster.name}", exc) from exc


# --- the admin's actions, run on the worker -------------------------------------------------------------------------

#: (level, text) of one outcome for the admin's page; level is "success", "warning", "error" or "info".
DriftMessage = tuple[str, str]
ACTIONS = ("check", "reapply", "adopt")


def _row_messages(ids: list[int], service: Callable[..., object], done: str) -> list[DriftMessage]:
    out: list[DriftMessage] = []
    for row_id in ids:
        row = KubeConfigObject.objects.filter(pk=row_id).first()
        if row is None:
            continue
        label = str(row)
        try:
            service(row_id=row_id)
        except DomainError as exc:
            out.append(("error", str(exc)))
            continue
        out.append(("success", f"{label}: {done}"))
    return out


def _check_messages(cluster_ids: list[int]) -> list[DriftMessage]:
    out: list[DriftMessage] = []
    for cluster in Cluster.objects.filter(pk__in=cluster_ids).order_by("name"):
        try:
            report = kube_drift_check(cluster_id=cluster.pk)
        except DomainError as exc:
            out.append(("error", str(exc)))
            continue
        level = "warning" if report.drifted or report.conflicts or report.errors else "success"
        out.append((level, f"Cluster {cluster.name}: {report.text()}"))
        if report.kueue_config is not None and report.kueue_config.added:
            out.append(("info", f"Cluster {cluster.name}: added to Kueue's configuration: {report.kueue_config.added}"))
        if report.kueue_config is not None and report.kueue_config.needs_attention:
            out.append(("warning", f"Cluster {cluster.name}: {report.kueue_config.problem}"))
    return out


def drift_action_run(*, action: str, ids: list[int]) -> list[DriftMessage]:
    """Run an admin's drift action — ``check`` (push and look for drift in these clusters), ``reapply`` or ``adopt``
    (these configuration objects) — and say what happened, one message per cluster or object."""
    if action == "check":
        return _check_messages(ids)
    if action == "reapply":
        return _row_messages(ids, kube_drift_reapply, "re-applied the portal's version")
    if action == "adopt":
        return _row_messages(ids, kube_drift_adopt, "adopted the cluster's values")
    raise ValueError(f"unknown drift action {action!r} (one of {', '.join(ACTIONS)})")
