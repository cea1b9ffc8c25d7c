"""Reading a cluster back: list + watch with resourceVersion bookmarks, into the inventory and the jobs.

Per kind (nodes, resourceslices, jobs, pods, workloads, clusterqueues, events) the portal keeps the last
resourceVersion it processed in ``Cluster.sync_bookmarks``. A pass watches from there (cost grows with the
changes, not with the cluster); without a bookmark, or when the server answers 410 Gone, it relists in pages of
``KUBE_LIST_PAGE_SIZE`` (memory stays at one page; the inventory alone needs the whole node listing, reduced to
the fields it reads). Every batch of events is processed, its jobs re-evaluated and the bookmark advanced in one
transaction, so a crash replays the batch (idempotently) and loses nothing.

A cluster that cannot be reached keeps its data: ``last_sync_error``/``last_sync_error_at`` are set, and after
``KUBE_STALE_AFTER_SECONDS`` its pending jobs say ``cluster_unreachable`` ("as of" the last good sync).
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import DatabaseError, close_old_connections, transaction
from django.db.models import Q
from django.utils import timezone

from clusters.kube_sync.api import (
    CLUSTER_QUEUES,
    EVENTS,
    JOBS,
    NODES,
    PODS,
    RESOURCE_SLICES,
    WORKLOADS,
    KubeApi,
    KubeError,
    KubeGone,
    KubeNotFound,
    KubeUnavailable,
    Resource,
    WatchEvent,
    list_all,
)
from clusters.kube_sync.conf import kube_setting
from clusters.kube_sync.evaluate import EvalContext, evaluate_job
from clusters.kube_sync.jobs import jobs_set_cluster_refs
from clusters.kube_sync.manifests import PORTAL_JOBS_SELECTOR
from clusters.kube_sync.observe import (
    compact_batch_job,
    compact_pod,
    compact_workload,
    job_id_of,
    parse_time,
    workload_owner,
)
from clusters.models import KubeConfigObject, KubeJobState
from kernel.db import update_rows
from pools.inventory.parse import parse_inventory
from pools.inventory.records import InventoryError
from pools.inventory.service import NODE_FIELDS, inventory_import
from pools.models import Allocation, Cluster, Node
from queues import kueue_messages as km
from queues import services as job_services
from queues.models import Job, JobEvent

log = logging.getLogger(__name__)

BATCH = 500
#: Warning reasons Kueue repeats on every failed scheduling attempt; the wait reason already carries them.
NOISY_WORKLOAD_REASONS = frozenset(km.REASON_HINTS) | {"Pending"}
#: Job events that only say a pod was created or deleted.
NOISY_JOB_REASONS = frozenset({"SuccessfulCreate", "SuccessfulDelete"})


@dataclass
class SyncReport:
    """What one pass did."""

    cluster: str
    relisted: list[str] = field(default_factory=list)
    events: Counter = field(default_factory=Counter)
    evaluated: int = 0
    actions: Counter = field(default_factory=Counter)
    inventory: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    unreachable: str = ""

    def text(self) -> str:
        """One line for logs."""
        parts = [f"relisted {', '.join(self.relisted) or 'nothing'}", f"{sum(self.events.values())} events"]
        parts.append(f"{self.evaluated} jobs evaluated")
        if self.actions:
            parts.append(", ".join(f"{k}×{v}" for k, v in sorted(self.actions.items())))
        if self.unreachable:
            parts.append(f"UNREACHABLE: {self.unreachable}")
        return "; ".join(parts)


def _chunks(items: list, size: int = BATCH) -> Iterable[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _strip_node(obj: dict) -> dict:
    """The fields of a Node the inventory reads."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": meta.get("name"), "labels": meta.get("labels") or {}},
        "spec": {k: v for k, v in (obj.get("spec") or {}).items() if k in ("taints", "unschedulable")},
        "status": {k: status[k] for k in ("capacity", "allocatable", "conditions") if k in status},
    }


class ClusterSync:
    """One cluster's list/watch state machine (see the module docstring)."""

    #: Write the wait reasons an evaluation chunk sets together (``WaitReasonBatch``) rather than job by job.
    batch_wait_reasons = True

    def __init__(self, cluster: Cluster, api: KubeApi, *, clock: Callable[[], datetime] = timezone.now) -> None:
        self.cluster = cluster
        self.api = api
        self.clock = clock
        self.report = SyncReport(cluster=cluster.name)
        self._slices_served: bool | None = None
        #: Batch Jobs carrying a portal job-id label the portal does not know (reported by the reconciler).
        self.foreign_jobs: list[str] = []

    # --- bookmarks ---------------------------------------------------------------------------------------------

    def bookmark(self, kind: str) -> str:
        """The last resourceVersion processed for a kind ("" when none)."""
        marks = Cluster.objects.filter(pk=self.cluster.pk).values_list("sync_bookmarks", flat=True).first() or {}
        return str(marks.get(kind) or "")

    def _save_bookmark(self, kind: str, rv: str) -> None:
        """Advance a bookmark (caller's transaction); other kinds' bookmarks are untouched."""
        if not rv:
            return
        cluster = Cluster.objects.select_for_update().get(pk=self.cluster.pk)
        marks = dict(cluster.sync_bookmarks or {})
        if marks.get(kind) == rv:
            return
        marks[kind] = rv
        cluster.sync_bookmarks = marks
        cluster.save(update_fields=["sync_bookmarks"])
        self.cluster.sync_bookmarks = marks

    def _lock_cluster(self) -> None:
        """Lock the cluster row (caller's transaction): taken first by every write of the sync, so flushes and
        evaluations of one cluster run one at a time and always lock in the same order."""
        Cluster.objects.select_for_update().filter(pk=self.cluster.pk).values_list("pk", flat=True).first()

    def forget_bookmarks(self) -> None:
        """Relist everything on the next pass."""
        Cluster.objects.filter(pk=self.cluster.pk).update(sync_bookmarks={})

    # --- a pass --------------------------------------------------------------------------------------------------

    def run(self, *, watch_seconds: int | None = None, full: bool = False) -> SyncReport:
        """One pass over every kind: watch deltas, or relist where needed; marks the cluster reachable or not."""
        seconds = int(watch_seconds if watch_seconds is not None else kube_setting("KUBE_SYNC_WATCH_SECONDS"))
        was_stale = bool(self.cluster.last_sync_error)
        try:
            if full or not self.bookmark("nodes"):
                self.relist_inventory()
            else:
                self.watch_kind("nodes", seconds, catch_up=True)
                if self.slices_served():
                    self.watch_kind("resourceslices", seconds, catch_up=True)
            # ClusterQueue status first: the wait reasons of the jobs read its reservation figures
            if full or not self.bookmark("clusterqueues"):
                self.relist("clusterqueues")
            else:
                self.watch_kind("clusterqueues", seconds, catch_up=True)
            job_kinds = [k for k in ("jobs", "pods", "workloads") if full or not self.bookmark(k)]
            if job_kinds:
                self.relist_jobs(job_kinds)
            for kind in ("jobs", "pods", "workloads"):
                if kind not in job_kinds:
                    self.watch_kind(kind, seconds, catch_up=True)
            if full or not self.bookmark("events"):
                self.relist("events")
            else:
                self.watch_kind("events", seconds, catch_up=True)
        except KubeUnavailable as exc:
            self.evaluate_dirty()  # what was read before the failure is applied; nothing else changes
            self.mark_unreachable(exc)
            return self.report
        self.evaluate_dirty()
        self.mark_reachable(reevaluate=was_stale)
        log.info("cluster %s: sync: %s", self.cluster.name, self.report.text())
        return self.report

    def mark_reachable(self, *, reevaluate: bool = False) -> None:
        """Record a good sync; after an outage re-read every live job (their reasons said "unreachable")."""
        now = self.clock()
        Cluster.objects.filter(pk=self.cluster.pk).update(last_synced_at=now, last_sync_error="")
        self.cluster.last_synced_at, self.cluster.last_sync_error = now, ""
        if reevaluate:
            KubeJobState.objects.filter(cluster=self.cluster).exclude(job__state__in=Job.FINAL_STATES).update(
                dirty=True
            )
            self.evaluate_dirty()

    def mark_unreachable(self, exc: Exception) -> None:
        """Keep everything; say since when the data is stale; past the threshold, tell waiting jobs."""
        now = self.clock()
        message = str(getattr(exc, "message", exc))[:2000]
        self.report.unreachable = message
        Cluster.objects.filter(pk=self.cluster.pk).update(last_sync_error=message, last_sync_error_at=now)
        self.cluster.last_sync_error, self.cluster.last_sync_error_at = message, now
        last = Cluster.objects.filter(pk=self.cluster.pk).values_list("last_synced_at", flat=True).first()
        stale_after = timedelta(seconds=int(kube_setting("KUBE_STALE_AFTER_SECONDS")))
        if last is not None and now - last < stale_after:
            return
        as_of = f"as of {last:%Y-%m-%d %H:%M:%S %Z}" if last else "never synced"
        text = f"The portal cannot reach cluster {self.cluster}; what you see is {as_of}."
        pending = Job.objects.filter(cluster=self.cluster, state=Job.State.PENDING).exclude(
            wait_reason=km.CLUSTER_UNREACHABLE
        )
        for ids in _chunks(list(pending.values_list("pk", flat=True))):
            with transaction.atomic():
                for job in Job.objects.select_for_update().filter(pk__in=ids).order_by("pk"):
                    job_services.job_set_wait_reason(
                        job,
                        code=km.CLUSTER_UNREACHABLE,
                        message=text,
                        details={"asOf": last.isoformat() if last else None, "error": message},
                        now=now,
                    )
        log.warning("cluster %s: unreachable: %s", self.cluster.name, message)

    # --- generic list and watch ----------------------------------------------------------------------------------

    def _resource(self, kind: str) -> tuple[Resource, str]:
        return {
            "nodes": (NODES, ""),
            "resourceslices": (RESOURCE_SLICES, ""),
            "jobs": (JOBS, PORTAL_JOBS_SELECTOR),
            "pods": (PODS, PORTAL_JOBS_SELECTOR),
            "workloads": (WORKLOADS, ""),
            "clusterqueues": (CLUSTER_QUEUES, ""),
            "events": (EVENTS, ""),
        }[kind]

    def relist(self, kind: str) -> None:
        """List a kind in pages and process every object, then bookmark the list's resourceVersion."""
        if kind in ("nodes", "resourceslices"):
            self.relist_inventory()
            return
        if kind in ("jobs", "pods", "workloads"):
            self.relist_jobs([kind])
            return
        resource, selector = self._resource(kind)
        list_rv = ""
        for page in list_all(
            self.api, resource, label_selector=selector, limit=int(kube_setting("KUBE_LIST_PAGE_SIZE"))
        ):
            list_rv = list_rv or page.resource_version
            with transaction.atomic():
                self._lock_cluster()
                self._apply(kind, [WatchEvent("ADDED", item) for item in page.items])
        with transaction.atomic():
            self._save_bookmark(kind, list_rv)
        self.report.relisted.append(kind)

    def watch_kind(
        self, kind: str, seconds: int, *, stop: Callable[[], bool] | None = None, catch_up: bool = False
    ) -> None:
        """Watch from the bookmark for ``seconds``; flush at every pause of the stream; relist on 410.

        ``catch_up`` (a sync pass): stop as soon as the stream is drained — at the first BOOKMARK (the server says
        every change up to its version was sent) or after ``KUBE_SYNC_IDLE_SECONDS`` without a byte — instead of
        holding the connection for ``seconds``.
        """
        resource, selector = self._resource(kind)
        rv = self.bookmark(kind)
        if not rv:
            self.relist(kind)
            return
        buffer: list[WatchEvent] = []
        last = rv
        try:
            idle = float(kube_setting("KUBE_SYNC_IDLE_SECONDS")) if catch_up else None
            for event in self.api.watch(
                resource, resource_version=rv, label_selector=selector, timeout_seconds=seconds, idle_timeout=idle
            ):
                if event.type == "IDLE":
                    if buffer or last != rv:
                        self._flush(kind, buffer, last)
                        buffer, rv = [], last
                    if stop is not None and stop():
                        break
                    continue
                last = event.resource_version or last
                if event.type == "BOOKMARK":
                    if catch_up:
                        break
                    continue
                buffer.append(event)
                self.report.events[kind] += 1
                if len(buffer) >= BATCH:
                    self._flush(kind, buffer, last)
                    buffer, rv = [], last
        except KubeGone:
            log.info("cluster %s: %s watch expired (410); relisting", self.cluster.name, kind)
            if buffer:
                self._flush(kind, buffer, last)
            self.relist(kind)
            return
        if buffer or last != rv:
            self._flush(kind, buffer, last)

    def _flush(self, kind: str, events: list[WatchEvent], rv: str) -> None:
        """Snapshots and bookmark in one transaction; the jobs are marked dirty for :meth:`evaluate_dirty`."""
        with transaction.atomic():
            # one flush per cluster at a time, and the cluster row locked first: the same lock order everywhere
            self._lock_cluster()
            touched, relist_inventory = self._apply(kind, events)
            self._mark_dirty(touched)
            self._save_bookmark(kind, rv)
        if relist_inventory:
            self.relist_inventory()

    def _apply(self, kind: str, events: list[WatchEvent]) -> tuple[set[int], bool]:
        """Process events of a kind; returns (jobs to evaluate, whether the inventory needs a full relist)."""
        if not events:
            return set(), False
        if kind == "nodes":
            return self._node_events(events)
        if kind == "resourceslices":
            return self._slice_events(events)
        if kind == "jobs":
            return self._job_events(events), False
        if kind == "pods":
            return self._pod_events(events), False
        if kind == "workloads":
            return self._workload_events(events), False
        if kind == "clusterqueues":
            self._cluster_queue_events(events)
            return set(), False
        if kind == "events":
            return self._event_events(events), False
        raise ValueError(kind)

    # --- inventory -------------------------------------------------------------------------------------------------

    def slices_served(self) -> bool:
        """Whether the cluster serves DRA ResourceSlices (resource.k8s.io/v1)."""
        if self._slices_served is None:
            self._slices_served = self.api.serves("resource.k8s.io/v1")
        return self._slices_served

    def relist_inventory(self) -> None:
        """Every Node (and ResourceSlice) into one complete inventory import; nodes missing are marked gone."""
        size = int(kube_setting("KUBE_LIST_PAGE_SIZE"))
        objects: list[dict] = []
        rvs = {}
        for page in list_all(self.api, NODES, limit=size):
            rvs.setdefault("nodes", page.resource_version)
            objects += [_strip_node(n) for n in page.items]
        if self.slices_served():
            try:
                for page in list_all(self.api, RESOURCE_SLICES, limit=size):
                    rvs.setdefault("resourceslices", page.resource_version)
                    objects += page.items
            except KubeNotFound:
                self._slices_served = False
        touched = self._import(objects, complete=True)
        with transaction.atomic():
            self._mark_dirty(touched)
            for kind, rv in rvs.items():
                self._save_bookmark(kind, rv)
        self.report.relisted.append("inventory")

    def _import(self, objects: list[dict], *, complete: bool) -> set[int]:
        """Run the inventory import; returns the jobs holding devices that left capacity."""
        before = self.clock()
        try:
            result = inventory_import(cluster=self.cluster, objects=objects, complete=complete, now=before)
        except InventoryError as exc:
            self.report.errors.append(f"inventory: {exc}")
            log.warning("cluster %s: inventory import refused: %s", self.cluster.name, exc)
            return set()
        self.report.inventory.append(f"nodes {result.nodes.text()}; devices {result.devices.text()}")
        if not result.orphaned_allocations:
            return set()
        return set(
            Allocation.objects.filter(job__cluster=self.cluster, ended_at__isnull=True, device__gone_at__isnull=False)
            .values_list("job_id", flat=True)
            .distinct()
        )

    def _node_events(self, events: list[WatchEvent]) -> tuple[set[int], bool]:
        if any(e.type == "DELETED" for e in events):
            return set(), True  # only a complete listing can say which nodes are gone
        latest = {e.object["metadata"]["name"]: _strip_node(e.object) for e in events}
        known = {n.name: n for n in Node.objects.filter(cluster=self.cluster, name__in=list(latest))}
        changed = []
        for name, obj in latest.items():
            node = known.get(name)
            if node is not None and node.gone_at is None and self._node_unchanged(node, obj):
                continue
            changed.append(name)
        touched: set[int] = set()
        for names in _chunks(changed, 50):
            objects = [latest[n] for n in names]
            if self.slices_served():
                for name in names:
                    objects += self._slices_of(name)
            touched |= self._import(objects, complete=False)
        return touched, False

    @staticmethod
    def _node_unchanged(node: Node, obj: dict) -> bool:
        """Whether a Node event changes nothing the inventory keeps (most are kubelet heartbeats)."""
        try:
            parsed = parse_inventory([obj]).nodes[0]
        except (InventoryError, IndexError):
            return False
        return all(getattr(node, f) == getattr(parsed, f) for f in NODE_FIELDS)

    def _slices_of(self, node_name: str) -> list[dict]:
        out: list[dict] = []
        for page in list_all(self.api, RESOURCE_SLICES, field_selector=f"spec.nodeName={node_name}"):
            out += page.items
        return out

    def _slice_events(self, events: list[WatchEvent]) -> tuple[set[int], bool]:
        nodes = set()
        for event in events:
            name = (event.object.get("spec") or {}).get("nodeName")
            if not name:
                return set(), True  # a pool-wide slice: relist
            nodes.add(name)
        touched: set[int] = set()
        for names in _chunks(sorted(nodes), 50):
            objects: list[dict] = []
            for name in names:
                try:
                    objects.append(_strip_node(self.api.get(NODES, name=name)))
                except KubeNotFound:
                    continue
                objects += self._slices_of(name)
            touched |= self._import(objects, complete=False)
        return touched, False

    # --- jobs, pods, workloads -------------------------------------------------------------------------------------

    def relist_jobs(self, kinds: list[str]) -> None:
        """Relist Jobs / Pods / Workloads into the snapshots (the jobs that changed are left dirty)."""
        started = self.clock()
        touched: set[int] = set()
        size = int(kube_setting("KUBE_LIST_PAGE_SIZE"))
        rvs: dict[str, str] = {}
        seen_by_kind: dict[str, set[tuple[str, str]]] = {}
        for kind in kinds:
            resource, selector = self._resource(kind)
            seen = seen_by_kind[kind] = set()
            for page in list_all(self.api, resource, label_selector=selector, limit=size):
                rvs.setdefault(kind, page.resource_version)
                with transaction.atomic():
                    self._lock_cluster()
                    touched |= self._apply(kind, [WatchEvent("ADDED", item) for item in page.items])[0]
                for item in page.items:
                    meta = item.get("metadata") or {}
                    seen.add((meta.get("namespace", ""), meta.get("name", "")))
            self.report.relisted.append(kind)
        # what vanished, for every kind listed, in one pass over the snapshots (each kind against its own list)
        with transaction.atomic():
            self._lock_cluster()
            touched |= self._vanished(seen_by_kind, started, rvs)
        with transaction.atomic():
            for kind, rv in rvs.items():
                self._save_bookmark(kind, rv)

    def _states(self, job_ids: Iterable[int], fields: tuple[str, ...]) -> dict[int, KubeJobState]:
        """Snapshots of these jobs with only ``fields`` read (new, unsaved ones where missing).

        A kind's events touch their own column only: reading and writing just it keeps the other JSON columns
        out of the round trip.
        """
        ids = sorted(set(job_ids))
        states = {s.job_id: s for s in KubeJobState.objects.filter(job_id__in=ids).only("job", "observed_at", *fields)}
        now = self.clock()
        for i in ids:
            if i not in states:
                states[i] = KubeJobState(job_id=i, cluster=self.cluster, observed_at=now)
        return states

    def _portal_jobs(self, job_ids: Iterable[int]) -> dict[int, Job]:
        """Portal jobs of this cluster among the ids (others are foreign or belong to another cluster)."""
        return {
            j.pk: j
            for j in Job.objects.filter(pk__in=set(job_ids), cluster=self.cluster).only(
                "pk", "k8s_namespace", "k8s_name", "k8s_uid", "workload_name", "state"
            )
        }

    def _save_states(self, states: Iterable[KubeJobState], fields: list[str]) -> None:
        """Write changed snapshots, marked dirty: the listed columns of existing rows in one ``UPDATE`` per batch;
        new rows inserted whole (one written meanwhile by another process is updated instead)."""
        rows = list(states)
        for row in rows:
            row.dirty = True
        columns = [*fields, "observed_at", "dirty"]
        update_rows(KubeJobState, [r for r in rows if r.pk is not None], columns, batch_size=BATCH)
        new = [r for r in rows if r.pk is None]
        if new:
            KubeJobState.objects.bulk_create(
                new, batch_size=BATCH, update_conflicts=True, unique_fields=["job"], update_fields=columns
            )

    def _job_events(self, events: list[WatchEvent]) -> set[int]:
        latest: dict[int, WatchEvent] = {}
        for event in events:
            job_id = job_id_of(event.object)
            if job_id is not None:
                latest[job_id] = event
        jobs = self._portal_jobs(latest)
        states = self._states(jobs, ("batch_job", "job_deleted_at"))
        now = self.clock()
        changed = []
        refs: list[tuple[Job, str, str]] = []
        for job_id, event in latest.items():
            job, st = jobs.get(job_id), states.get(job_id)
            meta = event.object.get("metadata") or {}
            if job is None or st is None:
                if event.type != "DELETED":
                    self.foreign_jobs.append(f"{meta.get('namespace')}/{meta.get('name')} (job-id {job_id})")
                continue
            if (meta.get("namespace"), meta.get("name")) != (job.k8s_namespace, job.k8s_name):
                continue  # a job-id label on something that is not this job's batch Job
            if job.k8s_uid and meta.get("uid") and meta["uid"] != job.k8s_uid:
                continue  # an older incarnation
            compact = compact_batch_job(event.object)
            if event.type == "DELETED":
                compact["deleted"] = True
                st.job_deleted_at = parse_time(meta.get("deletionTimestamp")) or now
            elif (st.batch_job.get("metadata") or {}).get("resourceVersion") == meta.get("resourceVersion"):
                continue
            if not job.k8s_uid and meta.get("uid"):
                refs.append((job, meta["uid"], ""))
            st.batch_job = compact
            st.observed_at = now
            changed.append(st)
        jobs_set_cluster_refs(refs)
        self._save_states(changed, ["batch_job", "job_deleted_at"])
        return {s.job_id for s in changed}

    def _pod_events(self, events: list[WatchEvent]) -> set[int]:
        by_job: dict[int, list[WatchEvent]] = {}
        for event in events:
            job_id = job_id_of(event.object)
            if job_id is not None:
                by_job.setdefault(job_id, []).append(event)
        jobs = self._portal_jobs(by_job)
        states = self._states(jobs, ("pods",))
        now = self.clock()
        changed = []
        for job_id, job_events in by_job.items():
            st = states.get(job_id)
            if st is None or job_id not in jobs:
                continue
            pods = dict(st.pods or {})
            dirty = False
            for event in job_events:
                name = event.object["metadata"]["name"]
                compact = compact_pod(event.object)
                if event.type == "DELETED":
                    compact = {**pods.get(name, {}), **compact, "deleted": True}
                    compact.setdefault("deletedAt", _iso(now))
                elif (pods.get(name) or {}).get("rv") == compact["rv"]:
                    continue
                pods[name] = compact
                dirty = True
            if dirty:
                st.pods, st.observed_at = pods, now
                changed.append(st)
        self._save_states(changed, ["pods"])
        return {s.job_id for s in changed}

    def _workload_events(self, events: list[WatchEvent]) -> set[int]:
        latest: dict[tuple[str, str], WatchEvent] = {}
        for event in events:
            owner = workload_owner(event.object)
            if owner is not None:
                latest[owner] = event
        if not latest:
            return set()
        names = {name for _, name in latest}
        jobs = {
            (j.k8s_namespace, j.k8s_name): j
            for j in Job.objects.filter(cluster=self.cluster, k8s_name__in=names).only(
                "pk", "k8s_namespace", "k8s_name", "k8s_uid", "workload_name"
            )
        }
        matched = {key: jobs[key] for key in latest if key in jobs}
        states = self._states((j.pk for j in matched.values()), ("workload",))
        now = self.clock()
        changed = []
        refs: list[tuple[Job, str, str]] = []
        for key, job in matched.items():
            event, st = latest[key], states.get(job.pk)
            if st is None:
                continue
            meta = event.object.get("metadata") or {}
            owner_uid = next((o.get("uid") for o in meta.get("ownerReferences") or [] if o.get("kind") == "Job"), "")
            if job.k8s_uid and owner_uid and owner_uid != job.k8s_uid:
                continue
            compact = compact_workload(event.object)
            if event.type == "DELETED":
                compact["deleted"] = True
            elif (st.workload.get("metadata") or {}).get("resourceVersion") == meta.get("resourceVersion"):
                continue
            if job.workload_name != meta.get("name"):
                refs.append((job, "", meta.get("name", "")))
            st.workload, st.observed_at = compact, now
            changed.append(st)
        jobs_set_cluster_refs(refs)
        self._save_states(changed, ["workload"])
        return {s.job_id for s in changed}

    def _vanished(
        self, seen_by_kind: dict[str, set[tuple[str, str]]], started: datetime, rvs: dict[str, str]
    ) -> set[int]:
        """After a relist: what the snapshots hold but the cluster no longer has ended when it was last seen.

        ``seen_by_kind``: the (namespace, name) pairs each relisted kind's list returned; ``rvs``: each list's
        resourceVersion. The snapshots of the jobs not final are read once for all the kinds. An object is only
        taken as gone when the portal saw it at a version its kind's list already covered (or, where versions do
        not compare, a minute before the list began): one created while the list ran is not.
        """
        if not seen_by_kind:
            return set()
        grace = started - timedelta(seconds=60)

        def covered(meta: dict, list_rv: str) -> bool:
            rv = str(meta.get("resourceVersion") or "")
            if rv.isdigit() and list_rv.isdigit():
                return int(rv) <= int(list_rv)
            created = parse_time(meta.get("creationTimestamp"))
            return created is None or created <= grace

        holding = Q()
        if "jobs" in seen_by_kind:
            holding |= Q(job_deleted_at__isnull=True) & ~Q(batch_job={})
        if "pods" in seen_by_kind:
            holding |= ~Q(pods={})
        if "workloads" in seen_by_kind:
            holding |= ~Q(workload={})
        live_jobs = Job.objects.filter(cluster=self.cluster).exclude(state__in=Job.FINAL_STATES)
        states = (
            KubeJobState.objects.filter(job__in=live_jobs)
            .filter(holding)
            .select_related("job")
            .only(*(f.name for f in KubeJobState._meta.concrete_fields), "job__k8s_namespace", "job__k8s_name")
        )
        changed: dict[tuple[str, ...], list[KubeJobState]] = defaultdict(list)
        for st in states.iterator(chunk_size=BATCH):
            job, fields = st.job, []
            seen = seen_by_kind.get("jobs")
            if (
                seen is not None
                and st.job_deleted_at is None
                and st.batch_job
                and (job.k8s_namespace, job.k8s_name) not in seen
                and not st.batch_job.get("deleted")
                and covered(st.batch_job.get("metadata") or {}, rvs.get("jobs", ""))
            ):
                st.batch_job = {**st.batch_job, "deleted": True}
                st.job_deleted_at = st.observed_at
                fields += ["batch_job", "job_deleted_at"]
            seen = seen_by_kind.get("pods")
            if seen is not None and st.pods:
                gone = [
                    n
                    for n, p in st.pods.items()
                    if not p.get("deleted")
                    and (job.k8s_namespace, n) not in seen
                    and covered(
                        {"resourceVersion": p.get("rv"), "creationTimestamp": p.get("created")}, rvs.get("pods", "")
                    )
                ]
                if gone:
                    pods = dict(st.pods)
                    for name in gone:
                        pods[name] = {**pods[name], "deleted": True, "deletedAt": _iso(st.observed_at)}
                    st.pods = pods
                    fields.append("pods")
            seen = seen_by_kind.get("workloads")
            if seen is not None and st.workload and not st.workload.get("deleted"):
                meta = st.workload.get("metadata") or {}
                if (meta.get("namespace", ""), meta.get("name", "")) not in seen and covered(
                    meta, rvs.get("workloads", "")
                ):
                    st.workload = {**st.workload, "deleted": True}
                    fields.append("workload")
            if fields:
                changed[tuple(fields)].append(st)
        for fields, rows in changed.items():
            self._save_states(rows, list(fields))
        return {st.job_id for rows in changed.values() for st in rows}

    # --- evaluation ----------------------------------------------------------------------------------------------

    def _mark_dirty(self, job_ids: Iterable[int]) -> None:
        """Jobs to re-evaluate (their snapshot changed, or something they hold did)."""
        ids = sorted(set(job_ids))
        for chunk in _chunks(ids):
            KubeJobState.objects.filter(job_id__in=chunk).update(dirty=True)

    def evaluate_dirty(self) -> int:
        """Evaluate every job whose snapshot changed since its last evaluation; returns how many."""
        ids = list(
            KubeJobState.objects.filter(cluster=self.cluster, dirty=True)
            .order_by("job_id")
            .values_list("job_id", flat=True)
        )
        if not ids:
            return 0
        ctx = EvalContext(self.cluster, now=self.clock())
        for chunk in _chunks(ids):
            started = self.clock()
            with transaction.atomic():
                # the cluster row first, as in a flush: evaluation (jobs, then snapshots) and a flush (snapshots,
                # then job references) of the same cluster never interleave, so they cannot deadlock
                self._lock_cluster()
                self._evaluate_chunk(chunk, ctx)
                # a snapshot written after this evaluation began stays dirty for the next round
                KubeJobState.objects.filter(job_id__in=chunk, observed_at__lte=started).update(
                    dirty=False, evaluated_at=started
                )
        return len(ids)

    def evaluate(self, job_ids: list[int]) -> None:
        """Evaluate these jobs now."""
        self._mark_dirty(job_ids)
        self.evaluate_dirty()

    def _evaluate_chunk(self, ids: list[int], ctx: EvalContext) -> None:
        """Evaluate a chunk in one savepoint; if any job fails, redo the chunk with a savepoint per job (a
        savepoint per job always would cost a tenth of a full sync)."""
        jobs, states = self._chunk_rows(ids)
        try:
            with transaction.atomic():
                evaluated, actions = self._evaluate_jobs(jobs, states, ctx, one_by_one=False)
        except Exception:
            log.info("cluster %s: a job of the chunk failed; evaluating it job by job", self.cluster.name)
            ctx.forget()  # what it read may include the rolled-back writes
            jobs, states = self._chunk_rows(ids)  # the in-memory rows carry them too
            evaluated, actions = self._evaluate_jobs(jobs, states, ctx, one_by_one=True)
        self.report.evaluated += evaluated
        self.report.actions.update(actions)

    def _chunk_rows(self, ids: list[int]) -> tuple[list[Job], dict[int, KubeJobState]]:
        """The chunk's live jobs, locked, and their snapshots."""
        jobs = list(
            Job.objects.select_for_update(of=("self",))
            .filter(pk__in=ids, cluster=self.cluster)
            .exclude(state__in=Job.FINAL_STATES)
            .select_related("team", "owner", "resource_class", "priority_class")
            .prefetch_related("resource_class__flavor_links__flavor")
            .order_by("pk")
        )
        return jobs, {s.job_id: s for s in KubeJobState.objects.filter(job_id__in=[j.pk for j in jobs])}

    def _evaluate_jobs(
        self, jobs: list[Job], states: dict[int, KubeJobState], ctx: EvalContext, *, one_by_one: bool
    ) -> tuple[int, Counter]:
        """Evaluate the jobs, ``one_by_one`` each in its own savepoint (a failure leaves that job dirty and goes
        on); returns how many were evaluated and their actions."""
        # wait reasons (most of a full sync: every pending job) are written together after the loop, in the
        # caller's transaction, while the chunk's row locks are held
        ctx.waits = job_services.WaitReasonBatch() if self.batch_wait_reasons else None
        ctx.prefetch(jobs, states)
        evaluated, actions = 0, Counter()
        for job in jobs:
            st = states.get(job.pk)
            if st is None:
                continue
            if not one_by_one:
                outcome = evaluate_job(job, st, ctx)
            else:
                try:
                    with transaction.atomic():
                        outcome = evaluate_job(job, st, ctx)
                except Exception as exc:  # one odd job must not stop the others; it stays dirty for the next pass
                    if ctx.waits is not None:
                        ctx.waits.discard(job)
                    log.exception("cluster %s: evaluating job %s failed", self.cluster.name, job.pk)
                    self.report.errors.append(f"job {job.pk}: {exc}")
                    KubeJobState.objects.filter(pk=st.pk).update(observed_at=self.clock())
                    continue
            evaluated += 1
            actions.update(action.split(":")[0] for action in outcome.actions)
        waits, ctx.waits = ctx.waits, None
        if waits is not None:
            waits.flush()
        return evaluated, actions

    # --- cluster queues and events -------------------------------------------------------------------------------

    def _cluster_queue_events(self, events: list[WatchEvent]) -> None:
        latest = {e.object["metadata"]["name"]: e for e in events}
        rows = KubeConfigObject.objects.filter(cluster=self.cluster, kind="ClusterQueue", name__in=list(latest))
        for row in rows:
            event = latest[row.name]
            status = {} if event.type == "DELETED" else (event.object.get("status") or {})
            if row.live_status != status:
                row.live_status = status
                row.save(update_fields=["live_status"])

    def _event_events(self, events: list[WatchEvent]) -> set[int]:
        """Cluster Events about portal jobs onto their timelines, once each (key: event uid + count)."""
        wanted = []
        for event in events:
            if event.type == "DELETED":
                continue
            obj = event.object
            involved = obj.get("involvedObject") or obj.get("regarding") or {}
            kind, reason = involved.get("kind"), obj.get("reason", "")
            if kind == "Workload" and obj.get("type") == "Warning" and reason in NOISY_WORKLOAD_REASONS:
                continue
            if kind == "Job" and reason in NOISY_JOB_REASONS:
                continue
            if kind == "Pod" and obj.get("type") != "Warning":
                continue
            if kind in ("Job", "Workload", "Pod"):
                wanted.append(
                    (
                        kind,
                        involved.get("namespace") or (obj.get("metadata") or {}).get("namespace", ""),
                        involved.get("name", ""),
                        obj,
                    )
                )
        if not wanted:
            return set()
        jobs = self._jobs_for_objects([(k, ns, n) for k, ns, n, _ in wanted])
        for kind, namespace, name, obj in wanted:
            job = jobs.get((kind, namespace, name))
            if job is None:
                continue
            meta = obj.get("metadata") or {}
            series = obj.get("series") or {}
            count = series.get("count") or obj.get("count") or 1
            at = (
                parse_time(series.get("lastObservedTime"))
                or parse_time(obj.get("lastTimestamp"))
                or parse_time(obj.get("eventTime"))
                or parse_time(obj.get("firstTimestamp"))
                or parse_time(meta.get("creationTimestamp"))
                or self.clock()
            )
            reason = obj.get("reason", "")
            message = obj.get("message") or obj.get("note") or ""
            job_services.record_event(
                job,
                JobEvent.Kind.NOTE,
                f"{kind} {reason}: {message}" if message else f"{kind} {reason}",
                at=at,
                details={
                    "source": "kubernetes",
                    "type": obj.get("type", ""),
                    "reason": reason,
                    "object": f"{kind}/{name}",
                    "count": count,
                },
                source_key=f"{meta.get('uid', '')}:{count}"[:200],
            )
            if reason == "WorkloadPriorityClassNotFound" and job.state == Job.State.PENDING:
                t = km.translate(message)
                job_services.job_set_wait_reason(
                    job, code=km.MISCONFIGURED, message=t.message, kueue_message=message, details=t.details, now=at
                )
        return set()  # events change timelines, not states

    def _jobs_for_objects(self, keys: list[tuple[str, str, str]]) -> dict[tuple[str, str, str], Job]:
        """Portal jobs behind Events' involved objects (a Job by name, a Workload by name, a Pod by its prefix)."""
        out: dict[tuple[str, str, str], Job] = {}
        base = Job.objects.filter(cluster=self.cluster).select_related("team")
        job_names = {n for k, _, n in keys if k == "Job"}
        wl_names = {n for k, _, n in keys if k == "Workload"}
        pod_prefixes = set()
        for k, _, n in keys:
            if k == "Pod":
                parts = n.split("-")
                pod_prefixes |= {"-".join(parts[:i]) for i in range(1, len(parts))}
        by_name = {(j.k8s_namespace, j.k8s_name): j for j in base.filter(k8s_name__in=job_names | pod_prefixes)}
        by_wl = {(j.k8s_namespace, j.workload_name): j for j in base.filter(workload_name__in=wl_names)}
        for kind, namespace, name in keys:
            if kind == "Job":
                job = by_name.get((namespace, name))
            elif kind == "Workload":
                job = by_wl.get((namespace, name))
            else:
                parts = name.split("-")
                job = next(
                    (
                        by_name[(namespace, "-".join(parts[:i]))]
                        for i in range(len(parts) - 1, 0, -1)
                        if (namespace, "-".join(parts[:i])) in by_name
                    ),
                    None,
                )
            if job is not None:
                out[(kind, namespace, name)] = job
        return out


def kube_sync_run(
    *, cluster: Cluster, api: KubeApi, full: bool = False, watch_seconds: int | None = None
) -> SyncReport:
    """One sync pass of a cluster (the beat task and ``backend.sync()``)."""
    return ClusterSync(cluster, api).run(full=full, watch_seconds=watch_seconds)


#: Kinds the ``kube_watch`` process watches, one loop each.
WATCHED_KINDS = ("nodes", "resourceslices", "clusterqueues", "jobs", "pods", "workloads", "events")


def kube_watch_loop(
    *,
    cluster: Cluster,
    api: KubeApi,
    kind: str,
    stop: Callable[[], bool],
    timeout_seconds: int | None = None,
) -> None:
    """Watch one kind of a cluster until ``stop()`` (the ``kube_watch`` process runs one loop per kind).

    Every batch is committed with its bookmark, so the loop can be killed at any point and resumes where the
    last commit left it. An unreachable cluster is marked stale and retried with backoff (up to a minute); a
    database error (a deadlock, a lost connection) drops the batch, which the next watch replays.
    """
    seconds = int(timeout_seconds or kube_setting("KUBE_WATCH_TIMEOUT_SECONDS"))
    backoff = 1.0
    while not stop():
        close_old_connections()
        sync = ClusterSync(cluster, api)
        try:
            sync = ClusterSync(Cluster.objects.get(pk=cluster.pk), api)
            if kind == "resourceslices" and not sync.slices_served():
                _sleep_unless(stop, seconds)  # served later after a DRA driver is installed: look again
                continue
            if kind in ("jobs", "pods", "workloads") and not sync.bookmark(kind):
                sync.relist_jobs([kind])
            sync.watch_kind(kind, seconds, stop=stop)
            if sync.cluster.last_sync_error:
                sync.mark_reachable(reevaluate=True)
            backoff = 1.0
        except KubeUnavailable as exc:
            sync.mark_unreachable(exc)
            _sleep_unless(stop, backoff)
            backoff = min(backoff * 2, 60.0)
        except (KubeError, DatabaseError) as exc:
            log.warning("cluster %s: watch of %s failed (%s); retrying in %.0fs", cluster.name, kind, exc, backoff)
            _sleep_unless(stop, backoff)
            backoff = min(backoff * 2, 60.0)


def kube_evaluate_loop(*, cluster: Cluster, api: KubeApi, stop: Callable[[], bool], interval: float = 0.2) -> None:
    """Apply what the watchers stored: evaluate dirty jobs every ``interval`` seconds until ``stop()``."""
    while not stop():
        close_old_connections()
        try:
            sync = ClusterSync(Cluster.objects.get(pk=cluster.pk), api)
            evaluated = sync.evaluate_dirty()
        except DatabaseError as exc:
            log.warning("cluster %s: evaluation failed (%s); retrying", cluster.name, exc)
            evaluated = 0
        if not evaluated:
            _sleep_unless(stop, interval)


def _sleep_unless(stop: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stop():
        time.sleep(min(0.05, seconds))
