"""Reading a cluster back: list + watch with resourceVersion bookmarks, into the inventory and the jobs.

Per kind (nodes, resourceslices, jobs, the workload kinds' objects — jobsets, pytorchjobs, rayjobs, deployments,
leaderworkersets —, pods, workloads, clusterqueues, events) the portal keeps the last
resourceVersion it processed in ``Cluster.sync_bookmarks``. A pass watches from there (cost grows with the
changes, not with the cluster); without a bookmark, or when the server answers 410 Gone, it relists in pages of
``KUBE_LIST_PAGE_SIZE`` (memory stays at one page; the inventory alone needs the whole node listing, reduced to
the fields it reads). Every batch of events is processed, its jobs re-evaluated and the bookmark advanced in one
transaction, so a crash replays the batch (idempotently) and loses nothing.

A cluster that cannot be reached keeps its data: ``last_sync_error``/``last_sync_error_at`` are set, and after
``KUBE_STALE_AFTER_SECONDS`` its pending jobs say ``cluster_unreachable`` ("as of" the last good sync). A node
relist that would mark gone more than ``INVENTORY_MAX_REMOVAL_SHARE`` of the known nodes (or lists none) is
refused as suspect: the inventory stays as it was, the cluster is marked stale with the reason, and the next pass
relists again.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from clusters.kube_sync.api import (
    CLUSTER_QUEUES,
    DEPLOYMENTS,
    EVENTS,
    JOBS,
    JOBSETS,
    LEADER_WORKER_SETS,
    NODES,
    PODS,
    PYTORCH_JOBS,
    RAY_JOBS,
    RESOURCE_SLICES,
    WORKLOADS,
    KubeApi,
    KubeGone,
    KubeUnavailable,
    Resource,
    WatchEvent,
    list_all,
)
from clusters.kube_sync.batches import BATCH, chunks
from clusters.kube_sync.conf import kube_setting
from clusters.kube_sync.eval_context import EvalContext
from clusters.kube_sync.evaluate import evaluate_job
from clusters.kube_sync.manifests import PORTAL_JOBS_SELECTOR
from clusters.kube_sync.sync_inventory import SUSPECT_PREFIX, InventoryEvents
from clusters.kube_sync.sync_objects import TOP_SYNC_KEY_OF_KIND, JobObjectEvents
from clusters.models import KubeConfigObject, KubeJobState
from kernel.db import fresh_statistics, update_rows
from pools.models import Cluster
from queues import job_sync
from queues import kueue_messages as km
from queues import services as job_services
from queues.models import Job

log = logging.getLogger(__name__)

#: The top-level objects of the workload kinds other than batch Jobs and sessions (whose Pod the pods watch reads),
#: each watched as its own sync kind where the cluster serves it.
TOP_RESOURCES = (JOBSETS, PYTORCH_JOBS, RAY_JOBS, DEPLOYMENTS, LEADER_WORKER_SETS)
TOP_SYNC_KINDS = {r.key: r for r in TOP_RESOURCES}


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
    #: Set when a node relist was refused as suspect (see ``InventoryEvents.mark_suspect``).
    suspect: str = ""

    def text(self) -> str:
        """One line for logs."""
        parts = [f"relisted {', '.join(self.relisted) or 'nothing'}", f"{sum(self.events.values())} events"]
        parts.append(f"{self.evaluated} jobs evaluated")
        if self.actions:
            parts.append(", ".join(f"{k}×{v}" for k, v in sorted(self.actions.items())))
        if self.unreachable:
            parts.append(f"UNREACHABLE: {self.unreachable}")
        if self.suspect:
            parts.append(f"SUSPECT: {self.suspect}")
        return "; ".join(parts)


class ClusterSync(InventoryEvents, JobObjectEvents):
    """One cluster's list/watch state machine (see the module docstring)."""

    #: Write the wait reasons an evaluation chunk sets together (``WaitReasonBatch``) rather than job by job.
    batch_wait_reasons = True

    def __init__(self, cluster: Cluster, api: KubeApi, *, clock: Callable[[], datetime] = timezone.now) -> None:
        self.cluster = cluster
        self.api = api
        self.clock = clock
        self.report = SyncReport(cluster=cluster.name)
        self._slices_served: bool | None = None
        self._kinds_served: list[str] | None = None
        #: Batch Jobs carrying a portal job-id label the portal does not know (reported by the reconciler).
        self.foreign_jobs: list[str] = []

    # --- bookmarks ---------------------------------------------------------------------------------------------

    def bookmark(self, kind: str) -> str:
        """The last resourceVersion processed for a kind ("" when none)."""
        marks = Cluster.objects.filter(pk=self.cluster.pk).values_list("sync_bookmarks", flat=True).first() or {}
        return str(marks.get(kind) or "")

    def save_bookmark(self, kind: str, rv: str) -> None:
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
            watched = ("jobs", *self.workload_kinds_in_use(), "pods", "workloads")
            job_kinds = [k for k in watched if full or not self.bookmark(k)]
            if job_kinds:
                self.relist_jobs(job_kinds)
            for kind in watched:
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
        """Record a good sync; after an outage re-read every live job (their reasons said "unreachable").

        A refused node listing (``SUSPECT_PREFIX``) keeps the cluster stale until an inventory relist is accepted.
        """
        now = self.clock()
        error = Cluster.objects.filter(pk=self.cluster.pk).values_list("last_sync_error", flat=True).first() or ""
        if self.report.suspect or (error.startswith(SUSPECT_PREFIX) and "inventory" not in self.report.relisted):
            return
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
        job_sync.jobs_set_wait_reason(
            job_ids=pending.values_list("pk", flat=True),
            code=km.CLUSTER_UNREACHABLE,
            message=text,
            details={"asOf": last.isoformat() if last else None, "error": message},
            now=now,
        )
        log.warning("cluster %s: unreachable: %s", self.cluster.name, message)

    # --- generic list and watch ----------------------------------------------------------------------------------

    def workload_kinds_served(self) -> list[str]:
        """The sync kinds of the workload kinds' top-level objects (JobSets, PyTorchJobs …) this cluster serves:
        a cluster without an operator's CRD is not asked for its objects (no job of that kind can run there)."""
        if self._kinds_served is None:
            self._kinds_served = [r.key for r in TOP_RESOURCES if self.api.serves(r.api_version)]
        return self._kinds_served

    def workload_kinds_in_use(self) -> list[str]:
        """The served workload kinds a pass reads: those of the cluster's jobs that are not final (each watch of a
        pass waits for its stream to drain; a kind nobody runs has nothing to say, and when a job of it comes, the
        pass reads from the old bookmark or relists)."""
        live = Job.objects.filter(cluster=self.cluster).exclude(state__in=Job.FINAL_STATES).order_by()
        keys = {TOP_SYNC_KEY_OF_KIND.get(kind) for kind in live.values_list("kind", flat=True).distinct()}
        return [k for k in self.workload_kinds_served() if k in keys]

    def _resource(self, kind: str) -> tuple[Resource, str]:
        if kind in TOP_SYNC_KINDS:
            return TOP_SYNC_KINDS[kind], PORTAL_JOBS_SELECTOR
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
        if kind in ("jobs", "pods", "workloads", *TOP_SYNC_KINDS):
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
            self.save_bookmark(kind, list_rv)
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
            self.mark_dirty(touched)
            self.save_bookmark(kind, rv)
        if relist_inventory:
            self.relist_inventory()

    def _apply(self, kind: str, events: list[WatchEvent]) -> tuple[set[int], bool]:
        """Process events of a kind; returns (jobs to evaluate, whether the inventory needs a full relist)."""
        if not events:
            return set(), False
        if kind == "nodes":
            return self.node_events(events)
        if kind == "resourceslices":
            return self.slice_events(events)
        if kind == "jobs" or kind in TOP_SYNC_KINDS:
            return self.job_events(events), False
        if kind == "pods":
            return self.pod_events(events), False
        if kind == "workloads":
            return self.workload_events(events), False
        if kind == "clusterqueues":
            self._cluster_queue_events(events)
            return set(), False
        if kind == "events":
            return self.kube_events(events), False
        raise ValueError(kind)

    # --- inventory -------------------------------------------------------------------------------------------------

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
                fresh_statistics(KubeJobState)  # a relist loads the snapshots in bulk: plan the next pages for them
                for item in page.items:
                    meta = item.get("metadata") or {}
                    seen.add((meta.get("namespace", ""), meta.get("name", "")))
            self.report.relisted.append(kind)
        # what vanished, for every kind listed, in one pass over the snapshots (each kind against its own list)
        with transaction.atomic():
            self._lock_cluster()
            touched |= self.jobs_vanished(seen_by_kind, started, rvs)
        with transaction.atomic():
            for kind, rv in rvs.items():
                self.save_bookmark(kind, rv)

    def states(self, job_ids: Iterable[int], fields: tuple[str, ...]) -> dict[int, KubeJobState]:
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

    def portal_jobs(self, job_ids: Iterable[int]) -> dict[int, Job]:
        """Portal jobs of this cluster among the ids (others are foreign or belong to another cluster)."""
        return {
            j.pk: j
            for j in Job.objects.filter(pk__in=set(job_ids), cluster=self.cluster).only(
                "pk", "k8s_namespace", "k8s_name", "k8s_uid", "workload_name", "state", "kind"
            )
        }

    def save_states(self, states: Iterable[KubeJobState], fields: list[str]) -> None:
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

    # --- evaluation ----------------------------------------------------------------------------------------------

    def mark_dirty(self, job_ids: Iterable[int]) -> None:
        """Jobs to re-evaluate (their snapshot changed, or something they hold did)."""
        ids = sorted(set(job_ids))
        for chunk in chunks(ids):
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
        for chunk in chunks(ids):
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
        self.mark_dirty(job_ids)
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
        jobs = job_sync.jobs_locked(
            Job.objects.filter(pk__in=ids, cluster=self.cluster)
            .exclude(state__in=Job.FINAL_STATES)
            .select_related("team", "owner", "resource_class", "priority_class")
            .prefetch_related("resource_class__flavor_links__flavor")
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
        evaluated, actions = 0, Counter[str]()
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


def kube_sync_run(
    *, cluster: Cluster, api: KubeApi, full: bool = False, watch_seconds: int | None = None
) -> SyncReport:
    """One sync pass of a cluster (the beat task and ``backend.sync()``)."""
    return ClusterSync(cluster, api).run(full=full, watch_seconds=watch_seconds)
