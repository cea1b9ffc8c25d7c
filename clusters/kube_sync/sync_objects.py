"""The sync's workload side: each job's top-level object (a batch Job or its kind's), Pod, Workload and Event
objects into the portal jobs' snapshots.

A mixin of :class:`clusters.kube_sync.sync.ClusterSync`; it relies on the ``cluster``, ``clock``, ``foreign_jobs``,
``states``, ``portal_jobs`` and ``save_states`` that class provides.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.db.models import Q

from clusters.kube_sync.api import WatchEvent
from clusters.kube_sync.batches import BATCH, iso_time
from clusters.kube_sync.eval_context import EvalContext
from clusters.kube_sync.observe import (
    TOP_KINDS,
    compact_pod,
    compact_top,
    compact_workload,
    is_top_object,
    job_id_of,
    owner_candidates,
    owner_uid,
    parse_time,
    workload_owner,
)
from clusters.kube_sync.workload_manifests import kind_resource
from clusters.models import KubeJobState
from pools.workload_kinds import WorkloadKind
from queues import job_sync
from queues import kueue_messages as km
from queues import services as job_services
from queues.models import Job, JobEvent

log = logging.getLogger(__name__)

#: The sync kind whose list holds each workload kind's top-level object.
TOP_SYNC_KEY_OF_KIND = {kind: kind_resource(kind).key for kind in WorkloadKind.values}

#: Warning reasons Kueue repeats on every failed scheduling attempt; the wait reason already carries them.
NOISY_WORKLOAD_REASONS = frozenset(km.REASON_HINTS) | {"Pending"}
#: Job events that only say a pod was created or deleted.
NOISY_JOB_REASONS = frozenset({"SuccessfulCreate", "SuccessfulDelete"})


if TYPE_CHECKING:
    from clusters.kube_sync.sync import SyncReport
    from pools.models import Cluster


class JobObjectEvents:
    """Batch Jobs, Pods, Workloads and Events: what changed, stored per job; the jobs it touched."""

    # What this part of ClusterSync uses of the rest of it (set and defined there).
    cluster: Cluster
    clock: Callable[[], datetime]
    report: SyncReport
    foreign_jobs: list[str]

    if TYPE_CHECKING:

        def states(self, job_ids: Iterable[int], fields: tuple[str, ...]) -> dict[int, KubeJobState]: ...
        def portal_jobs(self, job_ids: Iterable[int]) -> dict[int, Job]: ...
        def save_states(self, states: Iterable[KubeJobState], fields: list[str]) -> None: ...

    def job_events(self, events: list[WatchEvent]) -> set[int]:
        """Top-level objects of any kind (batch Jobs, JobSets, PyTorchJobs, RayJobs, Deployments, LeaderWorkerSets)
        into their jobs' snapshots, in the batch Job's form (:func:`compact_top`)."""
        by_job: dict[int, list[WatchEvent]] = {}
        for event in events:
            job_id = job_id_of(event.object)
            if job_id is not None:
                by_job.setdefault(job_id, []).append(event)
        jobs = self.portal_jobs(by_job)
        states = self.states(jobs, ("batch_job", "job_deleted_at"))
        now = self.clock()
        changed = []
        refs: list[tuple[Job, str, str]] = []
        for job_id, job_events in by_job.items():
            job, st = jobs.get(job_id), states.get(job_id)
            if job is None or st is None:
                meta = job_events[-1].object.get("metadata") or {}
                if job_events[-1].type != "DELETED":
                    self.foreign_jobs.append(f"{meta.get('namespace')}/{meta.get('name')} (job-id {job_id})")
                continue
            # only the job's own object: a JobSet's child Jobs carry the job-id label too
            own = [e for e in job_events if is_top_object(job, e.object)]
            if own and self._top_event(job, st, own[-1], now, refs):
                changed.append(st)
        job_sync.jobs_set_cluster_refs(refs)
        self.save_states(changed, ["batch_job", "job_deleted_at"])
        return {s.job_id for s in changed}

    def _top_event(
        self, job: Job, st: KubeJobState, event: WatchEvent, now: datetime, refs: list[tuple[Job, str, str]]
    ) -> bool:
        """One event of a job's top-level object into its snapshot; whether the snapshot changed."""
        meta = event.object.get("metadata") or {}
        if job.k8s_uid and meta.get("uid") and meta["uid"] != job.k8s_uid:
            return False  # an older incarnation
        compact = compact_top(event.object)
        if event.type == "DELETED":
            compact["deleted"] = True
            st.job_deleted_at = parse_time(meta.get("deletionTimestamp")) or now
        elif (st.batch_job.get("metadata") or {}).get("resourceVersion") == meta.get("resourceVersion"):
            return False
        if not job.k8s_uid and meta.get("uid"):
            refs.append((job, meta["uid"], ""))
        st.batch_job = compact
        st.observed_at = now
        return True

    def pod_events(self, events: list[WatchEvent]) -> set[int]:
        by_job: dict[int, list[WatchEvent]] = {}
        for event in events:
            job_id = job_id_of(event.object)
            if job_id is not None:
                by_job.setdefault(job_id, []).append(event)
        jobs = self.portal_jobs(by_job)
        states = self.states(jobs, ("pods", "batch_job", "job_deleted_at"))
        now = self.clock()
        changed = []
        tops: set[int] = set()  # sessions whose Pod (their top-level object) changed
        refs: list[tuple[Job, str, str]] = []
        for job_id, job_events in by_job.items():
            st = states.get(job_id)
            if st is None or job_id not in jobs:
                continue
            pods = dict(st.pods or {})
            # a development session's Pod is its job's top-level object too
            own = [e for e in job_events if is_top_object(jobs[job_id], e.object)]
            dirty = bool(own) and self._top_event(jobs[job_id], st, own[-1], now, refs)
            if dirty:
                tops.add(job_id)
            for event in job_events:
                name = event.object["metadata"]["name"]
                compact = compact_pod(event.object)
                if event.type == "DELETED":
                    compact = {**pods.get(name, {}), **compact, "deleted": True}
                    compact.setdefault("deletedAt", iso_time(now))
                elif (pods.get(name) or {}).get("rv") == compact["rv"]:
                    continue
                pods[name] = compact
                dirty = True
            if dirty:
                st.pods, st.observed_at = pods, now
                changed.append(st)
        job_sync.jobs_set_cluster_refs(refs)
        self.save_states([s for s in changed if s.job_id not in tops], ["pods"])
        self.save_states([s for s in changed if s.job_id in tops], ["pods", "batch_job", "job_deleted_at"])
        return {s.job_id for s in changed}

    def workload_events(self, events: list[WatchEvent]) -> set[int]:
        latest: dict[tuple[str, str], WatchEvent] = {}
        for event in events:
            owner = workload_owner(event.object)
            if owner is not None:
                latest[owner] = event
        if not latest:
            return set()
        names = {c for _, name in latest for c in owner_candidates(name)}
        jobs = {
            (j.k8s_namespace, j.k8s_name): j
            for j in Job.objects.filter(cluster=self.cluster, k8s_name__in=names).only(
                "pk", "k8s_namespace", "k8s_name", "k8s_uid", "workload_name", "kind"
            )
        }
        matched: dict[tuple[str, str], Job] = {}
        for ns, name in latest:
            job = next((jobs[(ns, c)] for c in owner_candidates(name) if (ns, c) in jobs), None)
            if job is not None:
                matched[(ns, name)] = job
        states = self.states((j.pk for j in matched.values()), ("workload",))
        now = self.clock()
        changed = []
        refs: list[tuple[Job, str, str]] = []
        for key, job in matched.items():
            event, st = latest[key], states.get(job.pk)
            if st is None:
                continue
            meta = event.object.get("metadata") or {}
            uid = owner_uid(event.object)
            if key[1] == job.k8s_name and job.k8s_uid and uid and uid != job.k8s_uid:
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
        job_sync.jobs_set_cluster_refs(refs)
        self.save_states(changed, ["workload"])
        return {s.job_id for s in changed}

    def jobs_vanished(
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
        # the kinds whose top-level objects this relist covers (a session's is a Pod)
        top_kinds = [kind for kind, key in TOP_SYNC_KEY_OF_KIND.items() if key in seen_by_kind]
        if top_kinds:
            holding |= Q(job_deleted_at__isnull=True) & ~Q(batch_job={}) & Q(job__kind__in=top_kinds)
        if "pods" in seen_by_kind:
            holding |= ~Q(pods={})
        if "workloads" in seen_by_kind:
            holding |= ~Q(workload={})
        live_jobs = Job.objects.filter(cluster=self.cluster).exclude(state__in=Job.FINAL_STATES)
        states = (
            KubeJobState.objects.filter(job__in=live_jobs)
            .filter(holding)
            .select_related("job")
            .only(
                *(f.name for f in KubeJobState._meta.concrete_fields),
                "job__k8s_namespace",
                "job__k8s_name",
                "job__kind",
            )
        )
        changed: dict[tuple[str, ...], list[KubeJobState]] = defaultdict(list)
        for st in states.iterator(chunk_size=BATCH):
            job, fields = st.job, []
            top_key = TOP_SYNC_KEY_OF_KIND.get(job.kind, "jobs")
            seen = seen_by_kind.get(top_key)
            if (
                seen is not None
                and st.job_deleted_at is None
                and st.batch_job
                and (job.k8s_namespace, job.k8s_name) not in seen
                and not st.batch_job.get("deleted")
                and covered(st.batch_job.get("metadata") or {}, rvs.get(top_key, ""))
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
                        pods[name] = {**pods[name], "deleted": True, "deletedAt": iso_time(st.observed_at)}
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
        for names, rows in changed.items():
            self.save_states(rows, list(names))
        return {st.job_id for rows in changed.values() for st in rows}

    def kube_events(self, events: list[WatchEvent]) -> set[int]:
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
            if kind in TOP_KINDS or kind == "Workload":
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
        jobs = self.jobs_for_objects([(k, ns, n) for k, ns, n, _ in wanted])
        ctx: EvalContext | None = None  # the pool view, read once when a Workload's Event needs it
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
            # core/v1 Event times are whole seconds (truncated): an Event of the submission's second would sort
            # before the submission on the timeline. Nothing in the cluster happens to a job before it exists.
            at = max(at, job.submitted_at)
            reason = obj.get("reason", "")
            message = obj.get("message") or obj.get("note") or ""
            details = {
                "source": "kubernetes",
                "type": obj.get("type", ""),
                "reason": reason,
                "object": f"{kind}/{name}",
            }
            shown = message
            if kind == "Workload" and message:
                # Kueue's words as explain gives them for this Event (the raw text stays in the details)
                ctx = ctx or EvalContext(self.cluster, now=self.clock())
                t = km.translate(message, reason=reason, context=ctx.message_context(job))
                if t.recognised:
                    shown = t.message
                    details["kueueMessage"] = message
            job_services.record_event(
                job,
                JobEvent.Kind.NOTE,
                f"{kind} {reason}: {shown}" if shown else f"{kind} {reason}",
                at=at,
                details={**details, "count": count},
                source_key=f"{meta.get('uid', '')}:{count}"[:200],
            )
            if reason == "WorkloadPriorityClassNotFound" and job.state == Job.State.PENDING:
                t = km.translate(message)
                job_services.job_set_wait_reason(
                    job, code=km.MISCONFIGURED, message=t.message, kueue_message=message, details=t.details, now=at
                )
        return set()  # events change timelines, not states

    def jobs_for_objects(self, keys: list[tuple[str, str, str]]) -> dict[tuple[str, str, str], Job]:
        """Portal jobs behind Events' involved objects (a Job by name, a Workload by name, a Pod by its prefix)."""
        out: dict[tuple[str, str, str], Job] = {}
        base = Job.objects.filter(cluster=self.cluster).select_related("team")
        job_names = {n for k, _, n in keys if k in TOP_KINDS and k != "Pod"}
        wl_names = {n for k, _, n in keys if k == "Workload"}
        pod_prefixes = set()
        for k, _, n in keys:
            if k == "Pod":
                parts = n.split("-")
                pod_prefixes |= {"-".join(parts[:i]) for i in range(1, len(parts))}
        by_name = {(j.k8s_namespace, j.k8s_name): j for j in base.filter(k8s_name__in=job_names | pod_prefixes)}
        by_wl = {(j.k8s_namespace, j.workload_name): j for j in base.filter(workload_name__in=wl_names)}
        for kind, namespace, name in keys:
            if kind in TOP_KINDS and kind != "Pod":
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
