"""Make a kubernetes cluster match the health directives: node taints, cordons and DRA DeviceTaintRules.

The repair workflow records what it wants (pools.health.directives: NodeHealthDirective rows, written only for
nodes the settings let the portal manage); this module applies new rows and undoes released ones, then marks
each row applied / removed (or keeps the error for the next sweep). It touches only what it owns:

* a node taint with the portal's key (``portal.gpu/unhealthy``), added beside the node's other taints and removed
  alone — by a JSON merge patch carrying the node's resourceVersion, so a concurrent change is a 409, retried;
* a cordon, with an annotation saying why; a node someone else had cordoned before stays cordoned on release;
* a ``resource.k8s.io/v1alpha3`` DeviceTaintRule per DRA device, named after the row (feature gate
  DRADeviceTaints; when the cluster does not serve the API the row keeps that error);
* the label ``gpu-pool-portal.io/degraded-devices`` (the number of degraded cards) on managed nodes with degraded
  devices, removed when none are left: the portal's Jobs prefer nodes without it. No row records it: each pass
  compares the devices' health with the labels the cluster has and patches the difference.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.utils import timezone

from clusters.kube_sync.api import DEVICE_TAINT_RULES, NODES, KubeConflict, KubeError, Obj, list_all
from pools.health.directives import directive_mark_applied, directive_mark_removed
from pools.health.selectors import degraded_node_labels, directives_to_apply, directives_to_remove
from pools.models import Cluster, NodeHealthDirective
from queues.engine.model import DEGRADED_DEVICES_LABEL

CORDON_ANNOTATION = "portal.gpu/cordoned-for"
#: Suffix of the cordon annotation when the node was already cordoned by someone else (left cordoned on release).
ALREADY_CORDONED = ";already-cordoned"
Kind = NodeHealthDirective.Kind


@dataclass
class DirectiveSync:
    """What one pass applied, removed, and could not do."""

    applied: list[int] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)
    labelled: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def rule_name(directive: NodeHealthDirective) -> str:
    """The DeviceTaintRule's name for a device-taint row."""
    return f"portal-health-{directive.pk}"


def _node(api, name: str) -> Obj:
    return api.get(NODES, name=name)


def _patch_node(api, node: Obj, *, spec: dict | None = None, annotations: dict | None = None) -> None:
    """A merge patch guarded by the node's resourceVersion (a concurrent writer gets us a 409)."""
    meta: dict = {"resourceVersion": node["metadata"].get("resourceVersion", "")}
    if annotations:
        meta["annotations"] = annotations
    body: dict = {"metadata": meta}
    if spec:
        body["spec"] = spec
    api.patch(NODES, name=node["metadata"]["name"], body=body)


def _apply(api, d: NodeHealthDirective, now: datetime) -> None:
    if d.kind == Kind.NODE_TAINT:
        node = _node(api, d.node.name)
        taints = list((node.get("spec") or {}).get("taints") or [])
        if any(t.get("key") == d.key and t.get("effect") == d.effect for t in taints):
            return
        taint = {"key": d.key, "effect": d.effect, "timeAdded": now.strftime("%Y-%m-%dT%H:%M:%SZ")}
        if d.value:
            taint["value"] = d.value
        _patch_node(api, node, spec={"taints": [*taints, taint]})
    elif d.kind == Kind.CORDON:
        node = _node(api, d.node.name)
        mine = ((node.get("metadata") or {}).get("annotations") or {}).get(CORDON_ANNOTATION)
        if mine:
            return
        already = bool((node.get("spec") or {}).get("unschedulable"))
        why = f"ticket-{d.ticket_id}" + (ALREADY_CORDONED if already else "")
        _patch_node(api, node, spec={"unschedulable": True}, annotations={CORDON_ANNOTATION: why})
    elif d.kind == Kind.DEVICE_TAINT:
        device = d.device
        if device is None or not device.dra_device:
            raise KubeError(f"directive {d.pk}: a device taint needs a DRA device")
        if not api.serves(DEVICE_TAINT_RULES.api_version):
            raise KubeError(
                f"the cluster does not serve {DEVICE_TAINT_RULES.api_version} DeviceTaintRule "
                "(enable the DRADeviceTaints feature gate), so device taints cannot be applied"
            )
        rule_taint: dict = {"key": d.key, "effect": d.effect}
        if d.value:
            rule_taint["value"] = d.value
        body = {
            "apiVersion": DEVICE_TAINT_RULES.api_version,
            "kind": DEVICE_TAINT_RULES.kind,
            "metadata": {"name": rule_name(d), "labels": {"app.kubernetes.io/managed-by": "gpu-pool-portal"}},
            "spec": {
                "deviceSelector": {"driver": device.dra_driver, "pool": device.dra_pool, "device": device.dra_device},
                "taint": rule_taint,
            },
        }
        try:
            api.create(DEVICE_TAINT_RULES, body)
        except KubeConflict:
            return  # created by an earlier pass whose answer was lost


def _still_wanted(d: NodeHealthDirective) -> bool:
    """Whether another live row wants the same node-wide taint or cordon."""
    return (
        NodeHealthDirective.objects.filter(node_id=d.node_id, kind=d.kind, key=d.key, released_at__isnull=True)
        .exclude(pk=d.pk)
        .exists()
    )


def _remove(api, d: NodeHealthDirective) -> None:
    if d.kind == Kind.DEVICE_TAINT:
        api.delete(DEVICE_TAINT_RULES, name=rule_name(d))
        return
    if _still_wanted(d):
        return
    node = _node(api, d.node.name)
    if d.kind == Kind.NODE_TAINT:
        taints = list((node.get("spec") or {}).get("taints") or [])
        kept = [t for t in taints if not (t.get("key") == d.key and t.get("effect") == d.effect)]
        if len(kept) != len(taints):
            _patch_node(api, node, spec={"taints": kept or None})
    elif d.kind == Kind.CORDON:
        mine = ((node.get("metadata") or {}).get("annotations") or {}).get(CORDON_ANNOTATION)
        if mine is None:
            return  # not cordoned by the portal (or already undone)
        spec = None if mine.endswith(ALREADY_CORDONED) else {"unschedulable": None}
        _patch_node(api, node, spec=spec, annotations={CORDON_ANNOTATION: None})


def _sync_degraded_labels(api, cluster: Cluster, out: DirectiveSync) -> None:
    """Set, update or remove the degraded-devices label on managed nodes where the cluster differs from the portal."""
    wanted = degraded_node_labels(cluster=cluster)
    if not wanted:
        return
    try:
        present = {
            obj["metadata"]["name"]: obj["metadata"]["labels"][DEGRADED_DEVICES_LABEL]
            for page in list_all(api, NODES, label_selector=DEGRADED_DEVICES_LABEL)
            for obj in page.items
        }
    except KubeError as exc:
        out.errors.append(f"degraded-devices labels: {exc}")
        return
    for name, value in wanted.items():
        if present.get(name) == value:
            continue
        try:
            # A merge patch of one label key: nothing else of the node is sent, so no resourceVersion guard is needed.
            api.patch(NODES, name=name, body={"metadata": {"labels": {DEGRADED_DEVICES_LABEL: value}}})
        except KubeError as exc:
            out.errors.append(f"{name}: {exc}")
        else:
            out.labelled.append(name)


def health_directives_sync(*, cluster: Cluster, api, now: datetime | None = None) -> DirectiveSync:
    """Apply wanted directives and undo released ones on a kubernetes cluster, then bring the degraded-devices labels
    in step; idempotent, errors kept per row."""
    now = now or timezone.now()
    out = DirectiveSync()
    for d in directives_to_apply(cluster=cluster):
        try:
            _apply(api, d, now)
        except KubeError as exc:
            directive_mark_applied(directive_id=d.pk, now=now, error=str(exc)[:500])
            out.errors.append(f"{d.node.name}: {exc}")
        else:
            directive_mark_applied(directive_id=d.pk, now=now)
            out.applied.append(d.pk)
    for d in directives_to_remove(cluster=cluster):
        try:
            _remove(api, d)
        except KubeError as exc:
            directive_mark_removed(directive_id=d.pk, now=now, error=str(exc)[:500])
            out.errors.append(f"{d.node.name}: {exc}")
        else:
            directive_mark_removed(directive_id=d.pk, now=now)
            out.removed.append(d.pk)
    _sync_degraded_labels(api, cluster, out)
    return out
