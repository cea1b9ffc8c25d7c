"""The diagnosis's engine input, kept between refreshes and brought up to date by the change, not rebuilt.

A refresh follows every counted change of a cluster (``pools.state_version``), and one change alters a job or a few
while a large cluster holds 100,000 pending jobs. So this process keeps, per cluster (the last ``KEEP_CLUSTERS``),
every pending and quota-holding job with its workload, each pending queue in the engine's order, and the engine
configuration; a refresh reads the state version's journal (``changed_jobs``) and re-reads only the jobs it names.
Everything is read again when the journal says something else changed (a quota, a node, a class…), when a step is
no longer journalled, or when the kept input is older than ``FULL_READ_AGE`` (a bound on anything a write missed).

The Job instances are shared with ``queues.engine_input``'s kept rows: read them, never change or save them.
"""

from __future__ import annotations

import bisect
import dataclasses
import gc
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings

from pools.models import Cluster
from pools.state_version import Anchor, StateVersions, changed_jobs, journal_anchor
from queues import engine
from queues.diagnosis_context import class_runtime_history, expected_end, expected_runtime, is_simulated
from queues.engine import model as m
from queues.engine_input import EngineInput, cluster_engine_input, engine_job_workloads, ts
from queues.engine_jobs import PerCluster
from queues.models import Job

#: The kept input is read in full again when it is older than this, whatever the journal says.
FULL_READ_AGE = timedelta(minutes=30)

#: A kept input of at least this many jobs is moved out of the collector's sight once read (``_out_of_collection``).
FREEZE_JOBS = 20_000

#: Workload fields that do not decide how the engine groups and explains a pending workload (identity, times,
#: quota held): every other field is part of its ``group``.
_NOT_GROUPING = frozenset(
    {"name", "uid", "job_uid", "created_at", "requeued_at", "admission", "admitted_at", "eviction", "submit_at"}
    | {"runtime"}
)
_GROUPING_FIELDS = tuple(f.name for f in dataclasses.fields(m.Workload) if f.name not in _NOT_GROUPING)


def group_of(workload: m.Workload) -> str:
    """What the engine groups and explains a pending workload by (its queue and every request, constraint and
    flag), as one string: pending workloads of one group are ordered, scheduled and explained alike but for their
    place. It may split the engine's groups (``Engine``'s shapes) further, never join two of them."""
    return repr(tuple(getattr(workload, name) for name in _GROUPING_FIELDS))


def queue_order(workload: m.Workload) -> tuple[int, float, str]:
    """The engine's queue order of a pending workload: priority, then queue time, then key."""
    queued = workload.requeued_at if workload.requeued_at is not None else workload.created_at
    return (-workload.priority, queued, workload.key)


@dataclass(slots=True)
class KeptJob:
    """One pending or quota-holding job with its workload (as the engine input built it) and its place."""

    job: Job
    workload: m.Workload
    key: str
    team_id: int
    holding: bool
    queue: tuple[str, str]  # (namespace, local queue)
    order: tuple[int, float, str]
    group: str
    #: The workload with its expected runtime, and what that runtime read besides the row (made when first needed).
    timed: m.Workload | None = None
    runtime_reads: tuple | None = None


def _kept_job(job: Job, workload: m.Workload, previous: KeptJob | None) -> KeptJob:
    if previous is not None and previous.workload is workload:
        return previous  # the same row in the same context: the engine input gave the very same workload
    holding = workload.admission is not None
    return KeptJob(
        job=job,
        workload=workload,
        key=workload.key,
        team_id=job.team_id,
        holding=holding,
        queue=(workload.namespace, workload.queue_name),
        order=queue_order(workload),
        group="" if holding else group_of(workload),
    )


@dataclass
class KeptInput:
    """A cluster's engine input as of ``versions``: configuration and nodes (``base``, no workloads) and every
    pending and quota-holding job, with each pending queue in the engine's order."""

    cluster_id: int
    versions: StateVersions
    #: The journal's steps at ``versions`` (``pools.state_version.journal_anchor``).
    anchor: Anchor
    read_at: datetime
    base: m.ClusterState
    jobs: dict[int, KeptJob]
    by_key: dict[str, KeptJob]
    #: (namespace, local queue) → its pending jobs as (engine order, job id), sorted.
    queues: dict[tuple[str, str], list[tuple[tuple[int, float, str], int]]]
    #: (namespace, local queue) → group → how many of its pending jobs are of that group.
    group_sizes: dict[tuple[str, str], dict[str, int]]
    #: The ClusterQueues whose pending workloads are explained alike by group (``engine.verdict_sharing_queues``).
    sharing: frozenset[str]
    #: (namespace, local queue) → its ClusterQueue.
    cluster_queue_of: dict[tuple[str, str], str]
    #: Counts a full read: a window computed on another read is not reused (``queues.diagnosis_window``).
    generation: int = 0
    history: dict[int, float] = field(default_factory=dict)

    def holders(self) -> list[KeptJob]:
        """The quota-holding jobs, by key."""
        return sorted((k for k in self.jobs.values() if k.holding), key=lambda k: k.key)

    def group_firsts(self, queue: tuple[str, str]) -> dict[str, int]:
        """Each group's first place in ``queue`` (0-based; read until every group of the queue was met)."""
        sizes = self.group_sizes.get(queue, {})
        first: dict[str, int] = {}
        jobs = self.jobs
        for index, (_, job_id) in enumerate(self.queues.get(queue, [])):
            group = jobs[job_id].group
            if group not in first:
                first[group] = index
                if len(first) == len(sizes):
                    break
        return first

    def _add(self, kept: KeptJob) -> None:
        self.jobs[kept.job.pk] = kept
        self.by_key[kept.key] = kept
        if not kept.holding:
            bisect.insort(self.queues.setdefault(kept.queue, []), (kept.order, kept.job.pk))
            sizes = self.group_sizes.setdefault(kept.queue, {})
            sizes[kept.group] = sizes.get(kept.group, 0) + 1

    def _remove(self, job_id: int) -> KeptJob | None:
        kept = self.jobs.pop(job_id, None)
        if kept is None:
            return None
        self.by_key.pop(kept.key, None)
        if not kept.holding:
            queue = self.queues.get(kept.queue, [])
            at = bisect.bisect_left(queue, (kept.order, job_id))
            if at < len(queue) and queue[at][1] == job_id:
                del queue[at]
            sizes = self.group_sizes[kept.queue]
            sizes[kept.group] -= 1
            if not sizes[kept.group]:
                del sizes[kept.group]
        return kept


@dataclass(frozen=True)
class InputChange:
    """What a refresh found changed since the kept input: per job id, its entry before and after (None: absent);
    ``None`` as a whole: everything was read afresh."""

    jobs: dict[int, tuple[KeptJob | None, KeptJob | None]]


_KEPT: PerCluster[KeptInput] = PerCluster()
_GENERATION = [0]


def kept_input(cluster: Cluster, *, versions: StateVersions, now: datetime) -> tuple[KeptInput, InputChange | None]:
    """The cluster's engine input at ``versions`` (read *before* the input, as for any stored result), and what
    changed since this process last kept it (None: everything read afresh)."""
    kept = _KEPT.take(cluster.pk, None)  # type: ignore[arg-type]
    ids = None
    anchor: Anchor = ()
    if kept is not None and kept.read_at > now - FULL_READ_AGE:
        ids, anchor = changed_jobs(cluster, since=kept.versions, until=versions, anchor=kept.anchor)
    if kept is None or ids is None:
        if _FROZEN[0]:
            gc.unfreeze()  # what the last freeze held (the input this read replaces among it) is collectable again
            _FROZEN[0] = False
        fresh = _read_all(cluster, versions=versions, now=now, previous=kept)
        del kept
        _KEPT.put(cluster.pk, fresh)
        _out_of_collection(fresh)
        return fresh, None
    change = _apply(kept, cluster, ids)
    kept.versions = versions
    kept.anchor = anchor
    _KEPT.put(cluster.pk, kept)
    return kept, change


_FROZEN = [False]


def _out_of_collection(kept: KeptInput) -> None:
    """After a full read of a large input: collect once, then move every object the process holds into the
    collector's permanent generation (``gc.freeze``).

    Why: the kept input is millions of long-lived objects (100,000 jobs, their workloads and rows); every full
    collection walked them all again — 0.5–0.8 CPU-s of a refresh at 100,000 pending, more than the refresh's own
    work. Frozen, they are still freed by reference counting when dropped; the next full read unfreezes first, so
    a replaced input's cycles (if any) are collected then. Small inputs are left alone (their collections are
    cheap, and a process that reads many of them, as a test run does, keeps its garbage collectable)."""
    if len(kept.jobs) < FREEZE_JOBS:
        return
    gc.collect()
    gc.freeze()
    _FROZEN[0] = True


def forget_kept_inputs() -> None:
    """Drop every kept input of this process (tests, and a process that must read everything again)."""
    _KEPT.clear()


def _read_all(cluster: Cluster, *, versions: StateVersions, now: datetime, previous: KeptInput | None) -> KeptInput:
    """Everything read afresh (``cluster_engine_input``, whose kept rows make a re-read cheap)."""
    inp = cluster_engine_input(cluster=cluster)
    old = previous.by_key if previous is not None else {}
    _GENERATION[0] += 1
    kept = KeptInput(
        cluster_id=cluster.pk,
        versions=versions,
        anchor=journal_anchor(cluster, versions),
        read_at=now,
        base=dataclasses.replace(inp.state, workloads=()),
        jobs={},
        by_key={},
        queues={},
        group_sizes={},
        sharing=engine.verdict_sharing_queues(inp.state),
        cluster_queue_of={(q.namespace, q.name): q.cluster_queue for q in inp.state.local_queues},
        generation=_GENERATION[0],
    )
    queues: dict[tuple[str, str], list[tuple[tuple[int, float, str], int]]] = {}
    for wl in inp.state.workloads:
        key = wl.key
        job = inp.jobs_by_key[key]
        entry = _kept_job(job, wl, old.get(key))
        kept.jobs[job.pk] = entry
        kept.by_key[key] = entry
        if not entry.holding:
            queues.setdefault(entry.queue, []).append((entry.order, job.pk))
            sizes = kept.group_sizes.setdefault(entry.queue, {})
            sizes[entry.group] = sizes.get(entry.group, 0) + 1
    for queue in queues.values():
        queue.sort()
    kept.queues = queues
    return kept


def _apply(kept: KeptInput, cluster: Cluster, ids: Iterable[int]) -> InputChange:
    """Re-read the changed jobs into ``kept``; what each was before and is now."""
    ids = set(ids)
    rows = {job.pk: (job, wl) for job, wl in engine_job_workloads(cluster, ids)} if ids else {}
    change: dict[int, tuple[KeptJob | None, KeptJob | None]] = {}
    for job_id in sorted(ids):
        before = kept.jobs.get(job_id)
        row = rows.get(job_id)
        after = _kept_job(row[0], row[1], None) if row is not None else None
        if before is not None and after is not None and before.workload == after.workload:
            after = dataclasses.replace(after, timed=before.timed, runtime_reads=before.runtime_reads)
            if before.order == after.order and before.group == after.group and before.holding == after.holding:
                # The engine sees the same workload (a change of a column the input does not turn into anything).
                kept.jobs[job_id] = after
                kept.by_key[after.key] = after
                continue
        kept._remove(job_id)
        if after is not None:
            kept._add(after)
        change[job_id] = (before, after)
    return InputChange(jobs=change)


# --------------------------------------------------------------------------- the engine's times


@dataclass
class Timing:
    """What the replay is given besides the workloads: each quota holder's expected end and the default runtime."""

    end_times: dict[str, float]
    default_runtime: float
    history: dict[int, float]


def input_timing(kept: KeptInput, cluster: Cluster, *, now: datetime) -> Timing:
    """The holders' expected ends at ``now`` (kubernetes mode: from the classes' recent runtimes)."""
    simulated = is_simulated(cluster)
    history = {} if simulated else class_runtime_history({k.job.resource_class_id for k in kept.jobs.values()})
    kept.history = history
    end_times = {
        k.key: ts(expected_end(k.job, now=now, cluster=cluster, history=history))
        for k in kept.jobs.values()
        if k.holding
    }
    return Timing(
        end_times=end_times, default_runtime=float(settings.SIMULATED_DEFAULT_RUNTIME_SECONDS), history=history
    )


def timed_workload(kept_job: KeptJob, cluster: Cluster, timing: Timing) -> m.Workload:
    """The workload with its expected runtime (kept on the entry while what the runtime reads stays the same)."""
    job = kept_job.job
    reads = (is_simulated(cluster), timing.history.get(job.resource_class_id), timing.default_runtime)
    if kept_job.timed is None or kept_job.runtime_reads != reads:
        runtime = expected_runtime(job, cluster=cluster, history=timing.history) - job.run_seconds_banked
        kept_job.timed = dataclasses.replace(kept_job.workload, runtime=max(float(runtime), 1.0))
        kept_job.runtime_reads = reads
    return kept_job.timed


def engine_input_of(kept: KeptInput, state: m.ClusterState) -> EngineInput:
    """An ``EngineInput`` of a state made of kept jobs (its workloads' jobs mapped by key)."""
    by_key = kept.by_key
    return EngineInput(
        state=state,
        jobs_by_key={wl.key: by_key[wl.key].job for wl in state.workloads if wl.key in by_key},
        nodes_by_name={},
    )
