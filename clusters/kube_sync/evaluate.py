"""A job's state machine in kubernetes mode: from what the cluster shows to transitions through queues.services.

Inputs are the job row and its :class:`~pools.models.KubeJobState` (batch Job, Workload, Pods). The state is
derived from all of them together (SEMANTICS.md §7 "derive, don't trust a single condition"), and every
transition is applied at the cluster's own time for it — Admitted / PodsReady / Evicted ``lastTransitionTime``,
the Job's ``completionTime``, a pod's termination or ``deletionTimestamp`` — so allocations (and the usage billed
from them) start and end when the devices were really taken and given back, also for changes that happened
while the portal was not watching. Running the evaluation again changes nothing.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from django.db.models import Count, Max, Q

from clusters.kube_sync.observe import parse_time, pod_end, pod_is_live
from clusters.models import KubeConfigObject, KubeJobState
from kernel.quantity import parse_quantity
from pools.health.selectors import health_excluded_nodes
from pools.models import USABLE_HEALTH, Allocation, Cluster, Device, Node, ResourceFlavor
from pools.selectors import SHARING_KIND
from queues import job_sync
from queues import kueue_messages as km
from queues import services as job_services
from queues.models import Job, JobEvent, QuotaLine, TeamQuota

log = logging.getLogger(__name__)

HOLDING = (Job.State.ADMITTED, Job.State.RUNNING, Job.State.PREEMPTING)
#: Evicted reasons → the reason the portal records on the requeue.
REQUEUE_REASONS = {
    "Preempted": "preempted",
    "PodsReadyTimeout": "pods_ready_timeout",
    "NodeFailures": "node_lost",
    "AdmissionCheck": "admission_check",
    "ClusterQueueStopped": "queue_stopped",
    "LocalQueueStopped": "queue_stopped",
    "Deactivated": "deactivated",
}
#: Finished=True on a Workload slice that a resized slice of the same Job replaced: not the Job's end.
SLICE_REPLACED = "WorkloadSliceReplaced"
#: Deactivations that end a job for good: its final state, and the sentence when Kueue's text is not recognised.
FINAL_DEACTIVATIONS = {
    "DeactivatedDueToMaximumExecutionTimeExceeded": (
        Job.State.TIMED_OUT,
        "Kueue stopped the job at its maximum execution time.",
    ),
    "DeactivatedDueToRequeuingLimitExceeded": (
        Job.State.FAILED,
        "Kueue gave up on the job: its pods did not start after the maximum number of requeues.",
    ),
    "DeactivatedDueToAdmissionCheck": (Job.State.FAILED, "Kueue gave up on the job: an admission check rejected it."),
}


def _clamp(at: datetime | None, floor: datetime, fallback: datetime) -> datetime:
    """A cluster time no earlier than the portal's last change of the job (clocks differ a little)."""
    return max(at or fallback, floor)


@dataclass
class QuotaUse:
    """Per (ClusterQueue, flavor, resource): nominal, borrowing limit, used; and the ClusterQueue's cohort."""

    nominal: dict[tuple[str, str, str], int] = field(default_factory=dict)
    borrowing: dict[tuple[str, str, str], int | None] = field(default_factory=dict)
    used: dict[tuple[str, str, str], int] = field(default_factory=dict)
    cohort_of: dict[str, str] = field(default_factory=dict)


class EvalContext:
    """What evaluations in one sync batch share: the pool view, quota use, lookups; computed once, lazily."""

    def __init__(self, cluster: Cluster, *, now: datetime) -> None:
        self.cluster = cluster
        self.now = now
        self._pool: dict[tuple[str, str], dict[tuple[str, str], km.PoolFigures]] = {}
        self._health_nodes: dict[tuple[str, str], dict[tuple[str, str], tuple[km.HealthNode, ...]]] = {}
        #: Devices a team holds per (team, flavor, resource), counted once and kept up to date by admissions
        #: made through this context; any other transition (a release) drops the counts.
        self.held: dict[tuple[int, str, str], int] = {}
        #: Where wait reasons of a closed-set code go when the caller writes them in bulk (None: one by one).
        self.waits: job_services.WaitReasonBatch | None = None
        #: Nodes by name and their free usable devices per (resource, kind), read for a chunk at once by
        #: :meth:`prefetch`; an admission takes its devices out of these lists, a release drops them.
        self._nodes: dict[str, Node | None] = {}
        self._free: dict[tuple[str, str], dict[int, list[Device]]] = {}

    def forget(self) -> None:
        """Drop what was read from the database (a rolled-back evaluation may have changed it); flavors stay."""
        self._pool.clear()
        self._health_nodes.clear()
        self.held.clear()
        self._nodes.clear()
        self._free.clear()
        for name in ("quota_use", "_quota_figures", "_team_quota"):
            self.__dict__.pop(name, None)

    @cached_property
    def flavors(self) -> dict[str, ResourceFlavor]:
        """Flavors by name."""
        return {f.name: f for f in ResourceFlavor.objects.select_related("topology")}

    @cached_property
    def topology_flavors(self) -> dict[str, list[str]]:
        """Topology name → flavors that use it."""
        out: dict[str, list[str]] = defaultdict(list)
        for f in self.flavors.values():
            if f.topology_id:
                out[f.topology.name].append(f.name)
        return dict(out)

    @cached_property
    def quota_use(self) -> QuotaUse:
        """Quota and use per ClusterQueue of the cluster: Kueue's own reservation figures where synced."""
        use = QuotaUse()
        quotas = {q.pk: q for q in TeamQuota.objects.filter(cluster=self.cluster).select_related("cohort")}
        for q in quotas.values():
            if q.cohort_id:
                use.cohort_of[q.cluster_queue_name] = self._root(q.cohort)
        for line in QuotaLine.objects.filter(team_quota__in=quotas).select_related("flavor"):
            key = (quotas[line.team_quota_id].cluster_queue_name, line.flavor.name, line.resource_name)
            try:
                use.nominal[key] = parse_quantity(line.nominal, line.resource_name)
                use.borrowing[key] = (
                    parse_quantity(line.borrowing_limit, line.resource_name) if line.borrowing_limit else None
                )
            except ValueError:
                continue
        live = KubeConfigObject.objects.filter(cluster=self.cluster, kind="ClusterQueue").values_list(
            "name", "live_status"
        )
        for name, status in live:
            for flavor in (status or {}).get("flavorsReservation") or []:
                for res in flavor.get("resources") or []:
                    try:
                        use.used[(name, flavor["name"], res["name"])] = parse_quantity(res.get("total", 0), res["name"])
                    except (ValueError, KeyError):
                        continue
        if not use.used:  # no ClusterQueue status synced: count the devices the portal's allocations hold
            rows = (
                Allocation.objects.filter(job__cluster=self.cluster, ended_at__isnull=True)
                .values("job__team_id", "device__node__flavor__name", "device__resource_name")
                .annotate(n=Count("id"))
            )
            cq_of_team = {q.team_id: q.cluster_queue_name for q in quotas.values()}
            for row in rows:
                cq = cq_of_team.get(row["job__team_id"])
                if cq and row["device__node__flavor__name"]:
                    key = (cq, row["device__node__flavor__name"], row["device__resource_name"])
                    use.used[key] = use.used.get(key, 0) + row["n"]
        return use

    @staticmethod
    def _root(cohort) -> str:
        seen = set()
        while cohort.parent_id and cohort.pk not in seen:
            seen.add(cohort.pk)
            cohort = cohort.parent
        return cohort.name

    def quota_figures(self) -> dict[tuple[str, str, str], km.QuotaFigures]:
        """Figures per (ClusterQueue, flavor, resource), with cohort totals."""
        use = self.quota_use
        cohort_cap: dict[tuple[str, str, str], int] = defaultdict(int)
        cohort_used: dict[tuple[str, str, str], int] = defaultdict(int)
        for (cq, flavor, res), nominal in use.nominal.items():
            root = use.cohort_of.get(cq)
            if root:
                cohort_cap[(root, flavor, res)] += nominal
                cohort_used[(root, flavor, res)] += use.used.get((cq, flavor, res), 0)
        out = {}
        for key, nominal in use.nominal.items():
            cq, flavor, res = key
            root = use.cohort_of.get(cq)
            out[key] = km.QuotaFigures(
                nominal=nominal,
                used=use.used.get(key, 0),
                borrowing_limit=use.borrowing.get(key),
                in_cohort=bool(root),
                cohort_capacity=cohort_cap.get((root, flavor, res)) if root else None,
                cohort_used=cohort_used.get((root, flavor, res)) if root else None,
            )
        return out

    @cached_property
    def _quota_figures(self) -> dict[tuple[str, str, str], km.QuotaFigures]:
        return self.quota_figures()

    def pool(self, resource: str, kind: str) -> dict[tuple[str, str], km.PoolFigures]:
        """Present, free and health-excluded units of a resource per flavor, in two aggregate queries."""
        key = (resource, kind)
        if key not in self._pool:
            units = Device.objects.filter(
                node__cluster=self.cluster,
                node__gone_at__isnull=True,
                gone_at__isnull=True,
                resource_name=resource,
                kind=kind,
            ).exclude(node__flavor__isnull=True)
            healthy = Q(health__in=USABLE_HEALTH, node__ready=True, node__unschedulable=False)
            held = Allocation.objects.filter(ended_at__isnull=True).values("device_id")
            free_q = healthy & ~Q(pk__in=held)
            per_node = (
                units.filter(free_q)
                .values("node__flavor__name", "node_id")
                .annotate(n=Count("id", distinct=True))
                .order_by()
            )
            free: dict[str, int] = defaultdict(int)
            best: dict[str, int] = defaultdict(int)
            for row in per_node:
                free[row["node__flavor__name"]] += row["n"]
                best[row["node__flavor__name"]] = max(best[row["node__flavor__name"]], row["n"])
            totals = (
                units.values("node__flavor__name")
                .annotate(total=Count("id", distinct=True), excluded=Count("id", filter=~healthy, distinct=True))
                .order_by()
            )
            self._pool[key] = {
                (row["node__flavor__name"], resource): km.PoolFigures(
                    total=row["total"],
                    free=free.get(row["node__flavor__name"], 0),
                    health_excluded=row["excluded"],
                    max_free_per_node=best.get(row["node__flavor__name"], 0),
                )
                for row in totals
            }
        return self._pool[key]

    def health_nodes(self, resource: str, kind: str) -> dict[tuple[str, str], tuple[km.HealthNode, ...]]:
        """Per (flavor, resource): the nodes with units out for health and why (pools' health selector)."""
        key = (resource, kind)
        if key not in self._health_nodes:
            out: dict[tuple[str, str], list[km.HealthNode]] = defaultdict(list)
            for row in health_excluded_nodes(cluster=self.cluster, resource=resource, kind=kind):
                out[(row.flavor, row.resource)].append(km.HealthNode(node=row.node, units=row.units, causes=row.causes))
            self._health_nodes[key] = {k: tuple(v) for k, v in out.items()}
        return self._health_nodes[key]

    def message_context(self, job: Job) -> km.MessageContext:
        """The translation context of one job: its queue, its class's flavors and its request."""
        rc = job.resource_class
        quota = self._team_quota.get(job.team_id)
        per_pod = {rc.resource_name: job.devices_per_pod}
        try:
            per_pod["cpu"] = parse_quantity(rc.cpu_per_device, "cpu") * job.devices_per_pod
            per_pod["memory"] = parse_quantity(rc.memory_per_device, "memory") * job.devices_per_pod
        except ValueError:
            pass
        return km.MessageContext(
            cluster_queue=quota.cluster_queue_name if quota else "",
            quotas=self._quota_figures,
            pool=self.pool(rc.resource_name, SHARING_KIND[rc.sharing]),
            health_nodes=self.health_nodes(rc.resource_name, SHARING_KIND[rc.sharing]),
            flavor_labels={n: f.label for n, f in self.flavors.items()},
            topology_flavors=self.topology_flavors,
            class_flavors=tuple(link.flavor.name for link in rc.flavor_links.all()),
            request={k: v * job.pod_count for k, v in per_pod.items()},
            per_pod=per_pod,
        )

    @cached_property
    def _team_quota(self) -> dict[int, TeamQuota]:
        return {q.team_id: q for q in TeamQuota.objects.filter(cluster=self.cluster)}

    def prefetch(self, jobs: list[Job], states: dict[int, KubeJobState]) -> None:
        """Read at once what a chunk's evaluations look up per job: the nodes its pods are on and, for pending
        jobs with pods on nodes (about to be admitted), the free devices there. Replaces the previous chunk's."""
        self._nodes.clear()
        self._free.clear()
        names: set[str] = set()
        admitting: dict[tuple[str, str], set[str]] = defaultdict(set)
        for job in jobs:
            st = states.get(job.pk)
            on = {p["node"] for p in ((st.pods if st else None) or {}).values() if p.get("node")}
            names |= on
            if on and job.state == Job.State.PENDING:
                rc = job.resource_class
                admitting[(rc.resource_name, SHARING_KIND[rc.sharing])] |= on
        self.nodes(names)
        for (resource, kind), on in admitting.items():
            self.free_devices([n for n in on if self._nodes.get(n) is not None], resource, kind)

    def nodes(self, names: set[str]) -> dict[str, Node]:
        """This cluster's nodes by name (gone ones included; names it never had left out)."""
        missing = [n for n in names if n not in self._nodes]
        if missing:
            rows = Node.objects.filter(cluster=self.cluster, name__in=missing).only("pk", "name", "gone_at")
            found = {n.name: n for n in rows}
            for name in missing:
                self._nodes[name] = found.get(name)
        return {n: self._nodes[n] for n in names if self._nodes[n] is not None}

    def gone_nodes(self, names: set[str]) -> set[str]:
        """Which of these node names the inventory knows as gone from the cluster."""
        return {name for name, node in self.nodes(names).items() if node.gone_at is not None}

    def free_devices(self, names: list[str], resource: str, kind: str) -> dict[str, list[Device]]:
        """Free usable devices of a resource on these (present) nodes, by node name, healthy first; the lists
        are shared: take devices out of them when they are allocated."""
        nodes = {name: node for name, node in self.nodes(set(names)).items() if node.gone_at is None}
        free = self._free.setdefault((resource, kind), {})
        missing = [node.pk for node in nodes.values() if node.pk not in free]
        if missing:
            found = job_services.usable_free_devices(node_ids=missing, resource_name=resource, kind=kind)
            for pk in missing:
                free[pk] = found.get(pk, [])
        return {name: free[node.pk] for name, node in nodes.items()}

    def released(self) -> None:
        """Devices or quota were given back: counts and free lists are read again when next needed."""
        self.held.clear()
        self._free.clear()

    def job_by_uid(self, uid: str) -> Job | None:
        """The portal job whose batch Job has this uid (a preemptor named in Kueue's message)."""
        if not uid:
            return None
        return Job.objects.filter(k8s_uid=uid).select_related("team").first()

    def nominal(self, job: Job, flavor: str, resource: str) -> int | None:
        """The team's nominal quota of a flavor/resource in this cluster."""
        quota = self._team_quota.get(job.team_id)
        if quota is None:
            return None
        return self.quota_use.nominal.get((quota.cluster_queue_name, flavor, resource))


# --- reading the snapshot ------------------------------------------------------------------------------------


def _conditions(obj: dict) -> dict[str, dict]:
    return {c.get("type", ""): c for c in ((obj.get("status") or {}).get("conditions") or [])}


def _true(conditions: dict[str, dict], kind: str) -> bool:
    return (conditions.get(kind) or {}).get("status") == "True"


def _ltt(conditions: dict[str, dict], kind: str) -> datetime | None:
    return parse_time((conditions.get(kind) or {}).get("lastTransitionTime"))


def _final_outcome(bj: dict, jc: dict[str, dict], wlc: dict[str, dict]) -> tuple[str, datetime | None, str] | None:
    """(final state, true end, message) when the cluster says the job ended."""
    status = bj.get("status") or {}
    if _true(jc, "Complete"):
        at = parse_time(status.get("completionTime")) or _ltt(jc, "Complete")
        return Job.State.SUCCEEDED, at, "All pods completed successfully."
    if _true(jc, "Failed"):
        cond = jc["Failed"]
        at = _ltt(jc, "Failed")
        if cond.get("reason") == "DeadlineExceeded":
            return Job.State.TIMED_OUT, at, "Stopped at its maximum runtime (activeDeadlineSeconds)."
        return Job.State.FAILED, at, f"Failed: {cond.get('message') or cond.get('reason') or 'the Job failed'}"
    if _true(wlc, "Finished") and wlc["Finished"].get("reason") != SLICE_REPLACED:
        cond = wlc["Finished"]
        state = Job.State.SUCCEEDED if cond.get("reason") == "Succeeded" else Job.State.FAILED
        return state, _ltt(wlc, "Finished"), cond.get("message") or cond.get("reason", "Finished")
    return None


def _pods_sorted(pods: dict[str, dict]) -> list[tuple[str, dict]]:
    def key(item: tuple[str, dict]) -> tuple[int, str]:
        index = item[1].get("index")
        return (int(index) if str(index).isdigit() else 1 << 30, item[0])

    return sorted(pods.items(), key=key)


@dataclass
class Outcome:
    """What an evaluation did (transition names) and what it would want repaired."""

    actions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _set_wait(
    job: Job, verdict: km.Verdict | km.Translation, *, now: datetime, outcome: Outcome, ctx: EvalContext
) -> None:
    """Store a wait reason: a code of the closed set through the service (or the context's batch), an
    unrecognised text visibly."""
    code = verdict.code
    since = (
        _clamp(parse_time(getattr(verdict, "since", "")), job.queued_at, now) if getattr(verdict, "since", "") else now
    )
    if code in km.WAIT_CODES:
        write = ctx.waits.set_wait_reason if ctx.waits is not None else job_services.job_set_wait_reason
        if write(
            job,
            code=code,
            message=verdict.message,
            kueue_message=verdict.kueue_message,
            details=verdict.details,
            now=since,
        ):
            outcome.actions.append(f"wait:{code}")
        return
    if code != km.UNRECOGNISED:
        return  # admitted / starting / running: not a wait, the transition path handles it
    if job_sync.job_set_unrecognised_wait(
        job, text=verdict.kueue_message or verdict.message, details=verdict.details, now=since
    ):
        outcome.actions.append("wait:unrecognised")


def _pick_devices(job: Job, pods: list[tuple[str, dict]], ctx: EvalContext) -> tuple[list[list[Device]], list[str]]:
    """Free usable devices of the class on each pod's node (taken out of the context's free lists); the nodes
    where the portal found too few."""
    rc = job.resource_class
    names = sorted({p["node"] for _, p in pods if p.get("node")})
    free = ctx.free_devices(names, rc.resource_name, SHARING_KIND[rc.sharing])
    picked: list[list[Device]] = []
    short: list[str] = []
    for _, pod in pods:
        pool = free.get(pod.get("node", ""), [])
        take = pool[: job.devices_per_pod]
        del pool[: job.devices_per_pod]
        if len(take) < job.devices_per_pod:
            short.append(pod.get("node", "?"))
        picked.append(take)
    return picked, short


def _borrowing(job: Job, ctx: EvalContext, flavor: str, adding: int) -> bool:
    """Whether the team holds more than its nominal quota of the flavor once this job is admitted."""
    rc = job.resource_class
    nominal = ctx.nominal(job, flavor, rc.resource_name)
    if nominal is None:
        return False
    key = (job.team_id, flavor, rc.resource_name)
    if key not in ctx.held:
        ctx.held[key] = Allocation.objects.filter(
            job__team_id=job.team_id,
            job__cluster=ctx.cluster,
            ended_at__isnull=True,
            device__resource_name=rc.resource_name,
            device__node__flavor__name=flavor,
        ).count()
    return ctx.held[key] + adding > nominal


def _admit(
    job: Job, st: KubeJobState, ctx: EvalContext, pods: list[tuple[str, dict]], *, at: datetime, outcome: Outcome
) -> None:
    wl = st.workload or {}
    admission = (wl.get("status") or {}).get("admission") or {}
    cq = admission.get("clusterQueue") or (
        ctx._team_quota.get(job.team_id).cluster_queue_name if ctx._team_quota.get(job.team_id) else ""
    )
    nodes = [p.get("node", "") for _, p in pods]
    assignments = admission.get("podSetAssignments") or [{"name": "main", "count": job.pod_count, "flavors": {}}]
    pod_sets = [
        {
            "name": a.get("name", "main"),
            "count": a.get("count", job.pod_count),
            "flavors": dict(a.get("flavors") or {}),
            "nodes": nodes,
        }
        for a in assignments
    ]
    devices, short = _pick_devices(job, pods, ctx)
    flavor = (assignments[0].get("flavors") or {}).get(job.resource_class.resource_name, "")
    adding = sum(len(d) for d in devices)
    borrowing = _borrowing(job, ctx, flavor, adding) if flavor else False
    message = f"Admitted by ClusterQueue {cq}" if cq else "Admitted by Kueue"
    job_services.job_admit(
        job, now=at, cluster_queue=cq, pod_sets=pod_sets, borrowing=borrowing, devices=devices, message=message
    )
    key = (job.team_id, flavor, job.resource_class.resource_name)
    if key in ctx.held:
        ctx.held[key] += adding
    outcome.actions.append("admitted")
    if short:
        outcome.notes.append(f"admitted without a free device on {', '.join(sorted(set(short)))} in the inventory")


def _start_time(job: Job, wlc: dict[str, dict], bj: dict, pods: list[tuple[str, dict]]) -> datetime | None:
    """When all pods were running: PodsReady, else the last pod's start, else the Job's startTime."""
    if _true(wlc, "PodsReady"):
        return _ltt(wlc, "PodsReady")
    running = [p for _, p in pods if p.get("runningSince") or p.get("phase") in ("Running", "Succeeded")]
    if len(running) >= job.pod_count:
        times = [parse_time(p.get("runningSince") or p.get("startTime")) for p in running]
        known = [t for t in times if t]
        return max(known) if known else None
    return None


def _run_evidence(st: KubeJobState) -> bool:
    wl = st.workload or {}
    return bool((wl.get("status") or {}).get("admission")) or any(p.get("node") for p in (st.pods or {}).values())


def _catch_up(job: Job, st: KubeJobState, ctx: EvalContext, *, until: datetime, outcome: Outcome) -> None:
    """Admit and start a job the portal saw pending but the cluster ran (the portal was not watching)."""
    wl, bj = st.workload or {}, st.batch_job or {}
    wlc = _conditions(wl)
    pods = _pods_sorted({n: p for n, p in (st.pods or {}).items() if p.get("node")})[: job.pod_count]
    if job.state == Job.State.PENDING and _run_evidence(st) and pods:
        at = (
            _ltt(wlc, "Admitted") or _ltt(wlc, "QuotaReserved") or parse_time((bj.get("status") or {}).get("startTime"))
        )
        _admit(job, st, ctx, pods, at=_clamp(at, job.queued_at, until), outcome=outcome)
    if job.state == Job.State.ADMITTED:
        start = _start_time(job, wlc, bj, pods) or parse_time((bj.get("status") or {}).get("startTime"))
        if start is not None:
            job_services.job_start(
                job, now=min(_clamp(start, job.state_changed_at, until), max(until, job.state_changed_at))
            )
            outcome.actions.append("started")


def _released_at(st: KubeJobState, evicted_at: datetime | None, fallback: datetime) -> datetime:
    """When the job's devices were given back: its pods' ends (deletion / termination), else the eviction."""
    ends = [pod_end(p) for p in (st.pods or {}).values()]
    known = [e for e in ends if e]
    if known:
        return max(known)
    return evicted_at or fallback


def _checkpointed(job: Job, bj: dict, evicted_at: datetime | None) -> bool:
    """Evidence of a checkpoint written for this eviction (the job's own annotation), with a policy."""
    if not job_services.has_checkpoint_policy(job):
        return False
    done = parse_time((bj.get("annotations") or {}).get("gpu-pool-portal.io/checkpoint-done-at"))
    return bool(done and evicted_at and done >= evicted_at)


def _lost_node_at(job: Job) -> datetime | None:
    """When a node (or device) holding one of the job's open allocations left the cluster."""
    row = (
        Allocation.objects.filter(job=job, ended_at__isnull=True)
        .filter(Q(device__gone_at__isnull=False) | Q(device__node__gone_at__isnull=False))
        .aggregate(device_gone=Max("device__gone_at"), node_gone=Max("device__node__gone_at"))
    )
    times = [t for t in (row["device_gone"], row["node_gone"]) if t]
    return min(times) if times else None


def evaluate_job(job: Job, st: KubeJobState, ctx: EvalContext) -> Outcome:
    """Apply every transition the cluster shows for one job (the caller holds the job's row lock)."""
    outcome = _evaluate_job(job, st, ctx)
    if any(not a.startswith(("admitted", "started", "wait")) for a in outcome.actions):
        ctx.released()  # something was released: count again
    return outcome


@dataclass
class _Observed:
    """What the cluster says about one job, read once from its stored snapshots."""

    bj: dict
    wl: dict
    jc: dict
    wlc: dict
    live: dict
    evicted: dict
    evicted_true: bool
    evicted_at: datetime | None
    admitted: bool


def _observe(st: KubeJobState, ctx: EvalContext) -> _Observed:
    bj, wl = st.batch_job or {}, st.workload or {}
    jc, wlc = _conditions(bj), _conditions(wl)
    pods_all = st.pods or {}
    # a pod on a node that left the cluster is not running, whatever its last status said
    gone = ctx.gone_nodes({p.get("node", "") for p in pods_all.values() if p.get("node")})
    live = {n: p for n, p in pods_all.items() if pod_is_live(p) and p.get("node", "") not in gone}
    evicted = wlc.get("Evicted") or {}
    evicted_true = evicted.get("status") == "True"
    admission = (wl.get("status") or {}).get("admission")
    return _Observed(
        bj=bj,
        wl=wl,
        jc=jc,
        wlc=wlc,
        live=live,
        evicted=evicted,
        evicted_true=evicted_true,
        evicted_at=_ltt(wlc, "Evicted"),
        admitted=_true(wlc, "Admitted") and bool(admission) and not evicted_true,
    )


def _evaluate_job(job: Job, st: KubeJobState, ctx: EvalContext) -> Outcome:
    outcome = Outcome()
    if job.is_final:
        return outcome
    seen = _observe(st, ctx)
    if _ended(job, st, ctx, seen, outcome):
        return outcome
    if job.state in HOLDING:
        _holding(job, st, ctx, seen, outcome)
    if job.state == Job.State.PENDING:
        _pending(job, st, ctx, seen, outcome)
    if job.state == Job.State.ADMITTED:
        pods = _pods_sorted({n: p for n, p in seen.live.items() if p.get("node")})
        start = _start_time(job, seen.wlc, seen.bj, pods)
        if start is not None:
            job_services.job_start(job, now=_clamp(start, job.state_changed_at, ctx.now))
            outcome.actions.append("started")
    return outcome


def _ended(job: Job, st: KubeJobState, ctx: EvalContext, seen: _Observed, outcome: Outcome) -> bool:
    """The job finished, was deleted in the cluster or deactivated for good: record its end (True)."""
    now = ctx.now
    final = _final_outcome(seen.bj, seen.jc, seen.wlc)
    if final is not None:
        state, at, message = final
        _catch_up(job, st, ctx, until=at or now, outcome=outcome)
        job_services.job_finish(job, state=state, now=_clamp(at, job.state_changed_at, now), message=message)
        outcome.actions.append(state)
        return True
    if st.job_deleted_at or seen.bj.get("deleted"):
        at = _released_at(st, st.job_deleted_at, now)
        job_services.job_finish(
            job,
            state=Job.State.CANCELLED,
            now=_clamp(at, job.state_changed_at, now),
            message="The Kubernetes Job was deleted in the cluster.",
        )
        outcome.actions.append(Job.State.CANCELLED)
        return True
    if _true(seen.wlc, "Finished") and seen.wlc["Finished"].get("reason") == SLICE_REPLACED:
        # the sentence explain gives, once on the timeline; the new slice's Workload says what happens next
        verdict = km.workload_verdict(seen.wl, context=ctx.message_context(job))
        key = f"{(seen.wl.get('metadata') or {}).get('uid', '')}:{SLICE_REPLACED}"
        job_services.record_event(
            job,
            JobEvent.Kind.NOTE,
            verdict.message,
            at=_clamp(_ltt(seen.wlc, "Finished"), job.state_changed_at, now),
            details={"source": "kueue", "reason": SLICE_REPLACED, "kueueMessage": verdict.kueue_message},
            source_key=key[:200],
        )
        return True
    if seen.wl and (seen.wl.get("spec") or {}).get("active") is False:
        final_state = FINAL_DEACTIVATIONS.get(seen.evicted.get("reason", ""))
        if final_state and not seen.live:
            state, message = final_state
            verdict = km.workload_verdict(seen.wl, context=ctx.message_context(job))
            if verdict.code != km.UNRECOGNISED:  # the sentence explain gives for this Workload
                message = verdict.message
            at = _released_at(st, seen.evicted_at, now)
            job_services.job_finish(job, state=state, now=_clamp(at, job.state_changed_at, now), message=message)
            outcome.actions.append(state)
            return True
    return False


def _holding(job: Job, st: KubeJobState, ctx: EvalContext, seen: _Observed, outcome: Outcome) -> None:
    """A job holding quota: preempted or evicted by Kueue, released back to the queue, or its node lost."""
    now, evicted = ctx.now, seen.evicted
    running = job.state in (Job.State.ADMITTED, Job.State.RUNNING)
    if seen.evicted_true and evicted.get("reason") == "Preempted" and running:
        t = km.translate(evicted.get("message", ""), reason="Preempted")
        preemptor = ctx.job_by_uid(t.details.get("preemptorJobUid", ""))
        reason = (seen.wlc.get("Preempted") or {}).get("reason") or "Preempted"
        job_services.job_preempt(
            job,
            now=_clamp(seen.evicted_at, job.state_changed_at, now),
            preemptor=preemptor,
            reason=reason,
            message=evicted.get("message", ""),
        )
        outcome.actions.append("preempting")
    elif seen.evicted_true and evicted.get("reason") in job_services.QUEUE_STOP_EVICTIONS and running:
        # stopPolicy HoldAndDrain: Kueue evicts; the pods may take a while to end (checkpoint).
        job_services.job_evict(
            job,
            now=_clamp(seen.evicted_at, job.state_changed_at, now),
            reason=evicted["reason"],
            message=evicted.get("message", ""),
        )
        outcome.actions.append("evicting")
    if not seen.admitted and not any(p.get("node") for p in seen.live.values()):
        _requeue_released(job, st, ctx, seen, outcome)
        return
    lost = _lost_node_at(job)
    if lost is not None:
        job_services.job_requeue(
            job,
            now=_clamp(lost, job.state_changed_at, now),
            reason="node_lost",
            message="A node this job ran on left the cluster; its pods are being replaced.",
            checkpointed=False,
        )
        outcome.actions.append("requeued:node_lost")


def _requeue_released(job: Job, st: KubeJobState, ctx: EvalContext, seen: _Observed, outcome: Outcome) -> None:
    """Kueue released the job's quota and no pod is left on a node: back in the queue."""
    evicted = seen.evicted
    reason = REQUEUE_REASONS.get(evicted.get("reason", ""), "evicted") if seen.evicted_true else "evicted"
    t = km.translate(evicted.get("message", ""), reason=evicted.get("reason", ""))
    message = t.message if seen.evicted_true else "Kueue released the job's quota; back in the queue."
    at = _clamp(_released_at(st, seen.evicted_at, ctx.now), job.state_changed_at, ctx.now)
    job_services.job_requeue(
        job, now=at, reason=reason, message=message, checkpointed=_checkpointed(job, seen.bj, seen.evicted_at)
    )
    outcome.actions.append(f"requeued:{reason}")


def _pending(job: Job, st: KubeJobState, ctx: EvalContext, seen: _Observed, outcome: Outcome) -> None:
    """A pending job: admitted with its pods bound (admit it), or still waiting (say why, in Kueue's words)."""
    now = ctx.now
    msg_ctx = ctx.message_context(job)
    messages = [m for m in ((p.get("unschedulable") or {}).get("message", "") for p in seen.live.values()) if m]
    if seen.admitted:
        bound = _pods_sorted({n: p for n, p in seen.live.items() if p.get("node")})
        if len(bound) >= job.pod_count:
            at = _ltt(seen.wlc, "Admitted") or now
            _admit(job, st, ctx, bound[: job.pod_count], at=_clamp(at, job.queued_at, now), outcome=outcome)
            return
        blocked = km.pods_unschedulable(messages, context=msg_ctx)
        if blocked is not None:
            _set_wait(job, blocked, now=now, outcome=outcome, ctx=ctx)
    elif seen.wl:
        verdict = km.workload_verdict(seen.wl, context=msg_ctx, pod_messages=messages)
        _set_wait(job, verdict, now=now, outcome=outcome, ctx=ctx)


def job_mismatch(job: Job, st: KubeJobState | None) -> str:
    """A one-line description of how the portal and the cluster disagree about a job ("" when they agree)."""
    if st is None:
        return "no cluster state recorded" if not job.is_final and job.k8s_uid else ""
    bj, wl = st.batch_job or {}, st.workload or {}
    final = _final_outcome(bj, _conditions(bj), _conditions(wl))
    wlc = _conditions(wl)
    admitted = _true(wlc, "Admitted") and bool((wl.get("status") or {}).get("admission")) and not _true(wlc, "Evicted")
    if final and not job.is_final:
        return f"ended in the cluster ({final[0]}) but {job.get_state_display().lower()} in the portal"
    if (st.job_deleted_at or bj.get("deleted")) and not job.is_final:
        return f"deleted in the cluster but {job.get_state_display().lower()} in the portal"
    if (
        job.state in HOLDING
        and not admitted
        and not any(p.get("node") for p in (st.pods or {}).values() if pod_is_live(p))
    ):
        return f"{job.get_state_display().lower()} in the portal but Kueue holds no quota for it and no pod runs"
    if job.state == Job.State.PENDING and admitted:
        bound = [p for p in (st.pods or {}).values() if pod_is_live(p) and p.get("node")]
        if len(bound) >= job.pod_count:
            return "admitted by Kueue with its pods on nodes but pending in the portal"
    return ""


def evaluation_details(outcome: Outcome) -> dict[str, Any]:
    """A JSON-ready summary."""
    return {"actions": outcome.actions, "notes": outcome.notes}
