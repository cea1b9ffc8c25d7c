"""The sync's inventory side: Node and ResourceSlice events (and relists) into the portal's nodes and devices.

A mixin of :class:`clusters.kube_sync.sync.ClusterSync`; it relies on the ``cluster``, ``api``, ``report``,
``mark_dirty`` and ``save_bookmark`` that class provides.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from django.db import transaction

from clusters.kube_sync.api import NODES, RESOURCE_SLICES, KubeApi, KubeNotFound, WatchEvent, list_all
from clusters.kube_sync.batches import chunks
from clusters.kube_sync.conf import kube_setting
from clusters.models import KubeJobState
from pools.health.nodes import health_nodes_reconcile
from pools.health.services import Actor
from pools.inventory.parse import QUARANTINE_ANNOTATION, parse_inventory
from pools.inventory.records import InventoryError
from pools.inventory.service import NODE_FIELDS, SUSPECT_NODE_LIST, MassRemovalRefused, inventory_import
from pools.models import Allocation, Cluster, Node
from queues.models import Job

log = logging.getLogger(__name__)

#: ``Cluster.last_sync_error`` of a sync that refused a node listing; kept until a relist is accepted.
SUSPECT_PREFIX = SUSPECT_NODE_LIST


def node_fields(obj: dict) -> dict:
    """The fields of a Node the inventory reads (of the annotations, only NVSentinel's quarantine event)."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k == QUARANTINE_ANNOTATION}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": meta.get("name"), "labels": meta.get("labels") or {}, "annotations": annotations},
        "spec": {k: v for k, v in (obj.get("spec") or {}).items() if k in ("taints", "unschedulable")},
        "status": {k: status[k] for k in ("capacity", "allocatable", "conditions") if k in status},
    }


if TYPE_CHECKING:
    from clusters.kube_sync.sync import SyncReport


class InventoryEvents:
    """Nodes and ResourceSlices: relist, watch events, the inventory import."""

    # What this part of ClusterSync uses of the rest of it (set and defined there).
    cluster: Cluster
    api: KubeApi
    clock: Callable[[], datetime]
    report: SyncReport
    _slices_served: bool | None

    if TYPE_CHECKING:

        def mark_dirty(self, job_ids: Iterable[int]) -> None: ...
        def save_bookmark(self, kind: str, rv: str) -> None: ...

    def slices_served(self) -> bool:
        """Whether the cluster serves DRA ResourceSlices (resource.k8s.io/v1)."""
        if self._slices_served is None:
            self._slices_served = self.api.serves("resource.k8s.io/v1")
        return self._slices_served

    def relist_inventory(self) -> None:
        """Every Node (and ResourceSlice) into one complete inventory import; nodes missing are marked gone."""
        size = int(kube_setting("KUBE_LIST_PAGE_SIZE"))
        objects: list[dict] = []
        rvs: dict[str, str] = {}
        for page in list_all(self.api, NODES, limit=size):
            rvs.setdefault("nodes", page.resource_version)
            objects += [node_fields(n) for n in page.items]
        if self.slices_served():
            try:
                for page in list_all(self.api, RESOURCE_SLICES, limit=size):
                    rvs.setdefault("resourceslices", page.resource_version)
                    objects += page.items
            except KubeNotFound:
                self._slices_served = False
        try:
            touched = self.inventory_apply(objects, complete=True)
        except MassRemovalRefused as exc:
            self.mark_suspect(exc)
            return
        with transaction.atomic():
            self.mark_dirty(touched)
            for kind, rv in rvs.items():
                self.save_bookmark(kind, rv)
        self.report.relisted.append("inventory")

    def mark_suspect(self, exc: MassRemovalRefused) -> None:
        """A node list far shorter than what is known: keep the last good state, say the sync is stale, relist next.

        A control plane under repair, a lister with reduced RBAC or an API server answering from an empty cache
        can list no or few nodes; marking them gone would requeue every running job. The error stays on the
        cluster (the pool page shows it, :meth:`mark_reachable` keeps it) until a relist is accepted.
        """
        now = self.clock()
        message = f"{SUSPECT_PREFIX}{exc.reason}; the next sync lists the nodes again"[:2000]
        self.report.suspect = message
        self.report.errors.append(f"inventory: {exc}")
        with transaction.atomic():
            cluster = Cluster.objects.select_for_update().get(pk=self.cluster.pk)
            marks = {k: v for k, v in (cluster.sync_bookmarks or {}).items() if k not in ("nodes", "resourceslices")}
            Cluster.objects.filter(pk=cluster.pk).update(
                sync_bookmarks=marks, last_sync_error=message, last_sync_error_at=now
            )
        self.cluster.sync_bookmarks, self.cluster.last_sync_error, self.cluster.last_sync_error_at = marks, message, now
        log.warning("cluster %s: %s", self.cluster.name, message)

    def inventory_apply(self, objects: list[dict], *, complete: bool) -> set[int]:
        """Run the inventory import; returns the jobs holding devices that left capacity."""
        before = self.clock()
        try:
            result = inventory_import(cluster=self.cluster, objects=objects, complete=complete, now=before)
        except MassRemovalRefused:
            raise
        except InventoryError as exc:
            self.report.errors.append(f"inventory: {exc}")
            log.warning("cluster %s: inventory import refused: %s", self.cluster.name, exc)
            return set()
        self.report.inventory.append(f"nodes {result.nodes.text()}; devices {result.devices.text()}")
        touched = self.node_health(objects, complete=complete, now=before)
        if not result.orphaned_allocations:
            return touched
        return touched | set(
            Allocation.objects.filter(job__cluster=self.cluster, ended_at__isnull=True, device__gone_at__isnull=False)
            .values_list("job_id", flat=True)
            .distinct()
        )

    def node_health(self, objects: list[dict], *, complete: bool, now: datetime) -> set[int]:
        """What the imported Nodes say about their devices, read into the health model by pools' health services
        (conditions the health policy names, health taints, the import's own health marks: transitions, jobs
        moved off, repair tickets). When a device changed state, the cluster's waiting jobs are returned to be
        evaluated again: their reasons weigh free against health-excluded capacity."""
        names = None if complete else [o["metadata"]["name"] for o in objects if o.get("kind") == "Node"]
        if names == []:
            return set()
        health = health_nodes_reconcile(
            cluster=self.cluster, node_names=names, now=now, actor=Actor(label="kube sync (node health)")
        )
        if health.changes:
            self.report.inventory.append(f"health: {len(health.changes)} device state change(s)")
        if not health.changes:
            return set()
        return set(
            KubeJobState.objects.filter(cluster=self.cluster, job__state=Job.State.PENDING).values_list(
                "job_id", flat=True
            )
        )

    def node_events(self, events: list[WatchEvent]) -> tuple[set[int], bool]:
        if any(e.type == "DELETED" for e in events):
            return set(), True  # only a complete listing can say which nodes are gone
        latest = {e.object["metadata"]["name"]: node_fields(e.object) for e in events}
        known = {n.name: n for n in Node.objects.filter(cluster=self.cluster, name__in=list(latest))}
        changed = []
        for name, obj in latest.items():
            node = known.get(name)
            if node is not None and node.gone_at is None and self.node_unchanged(node, obj):
                continue
            changed.append(name)
        touched: set[int] = set()
        for names in chunks(changed, 50):
            objects = [latest[n] for n in names]
            if self.slices_served():
                for name in names:
                    objects += self.slices_of(name)
            touched |= self.inventory_apply(objects, complete=False)
        return touched, False

    @staticmethod
    def node_unchanged(node: Node, obj: dict) -> bool:
        """Whether a Node event changes nothing the inventory keeps (most are kubelet heartbeats)."""
        try:
            parsed = parse_inventory([obj]).nodes[0]
        except (InventoryError, IndexError):
            return False
        return all(getattr(node, f) == getattr(parsed, f) for f in NODE_FIELDS)

    def slices_of(self, node_name: str) -> list[dict]:
        out: list[dict] = []
        for page in list_all(self.api, RESOURCE_SLICES, field_selector=f"spec.nodeName={node_name}"):
            out += page.items
        return out

    def slice_events(self, events: list[WatchEvent]) -> tuple[set[int], bool]:
        nodes = set()
        for event in events:
            name = (event.object.get("spec") or {}).get("nodeName")
            if not name:
                return set(), True  # a pool-wide slice: relist
            nodes.add(name)
        touched: set[int] = set()
        for names in chunks(sorted(nodes), 50):
            objects: list[dict] = []
            for name in names:
                try:
                    objects.append(node_fields(self.api.get(NODES, name=name)))
                except KubeNotFound:
                    continue
                objects += self.slices_of(name)
            touched |= self.inventory_apply(objects, complete=False)
        return touched, False
