"""Reads that turn the portal's rows into the engine's ClusterState (simulation, diagnosis, ETA, what-if).

The engine is Django-free; this module is the one place that knows both sides. Requests sent to the
engine cover the device resource of the job's class, plus cpu/memory where the team's ClusterQueue
declares them (the portal's Kueue configuration treats undeclared resources as unmanaged).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.db.models import Count, F, Min, Q, QuerySet
from django.utils import timezone

from kernel.quantity import parse_quantity
from pools.health.nodes import is_node_report_reason
from pools.inventory.records import is_device_plugin_reason
from pools.models import (
    USABLE_HEALTH,
    Cluster,
    Device,
    HealthState,
    Node,
    ResourceFlavor,
    Topology,
)
from pools.workload_kinds import kind_spec
from queues.class_facts import ClassFacts, class_facts, classes_facts
from queues.engine import model as m
from queues.engine_jobs import RowCache, raw_rows
from queues.guarantees.selectors import ClusterGuarantees, applied_lines, cluster_guarantees
from queues.models import Cohort, Job, PriorityClass, QuotaLine, Team, TeamQuota
from queues.pod_sets import companion_shapes
from queues.protection import engine_protection
from queues.recent_usage import cohort_policies, with_recent_usage
from queues.reservations.holds import cluster_holds

#: Job states that hold quota in the engine's eyes (a preempting job holds it until its pods are gone).
HOLDING_STATES = (Job.State.ADMITTED, Job.State.RUNNING, Job.State.PREEMPTING)


def ts(when: datetime) -> float:
    """Engine time: POSIX seconds."""
    return when.timestamp()


def workload_name(job: Job) -> str:
    """The engine/Kueue name of a job's workload (unique per job)."""
    return job.k8s_name or f"{job.name}-{job.pk}"


def workload_key(job: Job) -> str:
    """``namespace/name`` of a job's workload."""
    return f"{job.team.namespace}/{workload_name(job)}"


def _taints(raw: Iterable[dict]) -> tuple[m.Taint, ...]:
    """Kubernetes taint dicts to engine taints."""
    return tuple(
        m.Taint(key=t.get("key", ""), value=t.get("value", "") or "", effect=t.get("effect", "NoSchedule"))
        for t in raw or ()
    )


def _tolerations(raw: Iterable[dict]) -> tuple[m.Toleration, ...]:
    """Kubernetes toleration dicts to engine tolerations."""
    return tuple(
        m.Toleration(
            key=t.get("key", "") or "",
            operator=t.get("operator", "Equal") or "Equal",
            value=t.get("value", "") or "",
            effect=t.get("effect", "") or "",
        )
        for t in raw or ()
    )


def _resource_groups(lines: Iterable[QuotaLine]) -> tuple[m.ResourceGroup, ...]:
    """Quota lines to Kueue resource groups: flavors covering the same resources form one group, in order."""
    by_flavor: dict[str, list[QuotaLine]] = defaultdict(list)
    order: dict[str, tuple[int, str]] = {}
    for line in lines:
        by_flavor[line.flavor.name].append(line)
        order[line.flavor.name] = min(order.get(line.flavor.name, (1 << 30, "")), (line.flavor_order, line.flavor.name))
    groups: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for flavor in sorted(by_flavor, key=lambda f: order[f]):
        covered = tuple(sorted({line.resource_name for line in by_flavor[flavor]}))
        groups[covered].append(flavor)
    out = []
    for covered, flavors in groups.items():
        fqs = []
        for flavor in flavors:
            quotas = []
            for line in sorted(by_flavor[flavor], key=lambda ln: ln.resource_name):
                rn = line.resource_name
                quotas.append(
                    m.ResourceQuota(
                        name=rn,
                        nominal=parse_quantity(line.nominal, rn),
                        borrowing_limit=parse_quantity(line.borrowing_limit, rn) if line.borrowing_limit else None,
                        lending_limit=parse_quantity(line.lending_limit, rn) if line.lending_limit else None,
                    )
                )
            fqs.append(m.FlavorQuotas(name=flavor, resources=tuple(quotas)))
        out.append(m.ResourceGroup(covered_resources=covered, flavors=tuple(fqs)))
    return tuple(out)


def _cluster_queue(quota: TeamQuota, lines: list[QuotaLine]) -> m.ClusterQueue:
    """A team quota as a Kueue ClusterQueue."""
    return m.ClusterQueue(
        name=quota.cluster_queue_name,
        cohort=quota.cohort.name if quota.cohort_id else None,
        namespace_selector=m.LabelSelector(match_labels={"kubernetes.io/metadata.name": quota.team.namespace}),
        queueing_strategy=quota.queueing_strategy,
        resource_groups=_resource_groups(lines),
        preemption=m.PreemptionPolicy(
            within_cluster_queue=quota.within_cluster_queue,
            reclaim_within_cohort=quota.reclaim_within_cohort,
            borrow_within_cohort=m.BorrowWithinCohort(
                policy=quota.borrow_within_cohort, max_priority_threshold=quota.borrow_within_cohort_max_priority
            ),
        ),
        flavor_fungibility=m.FlavorFungibility(
            when_can_borrow=quota.when_can_borrow, when_can_preempt=quota.when_can_preempt
        ),
        stop_policy=quota.stop_policy,
        fair_weight=float(quota.fair_weight),
    )


@dataclass
class NodeUnits:
    """Per node and resource: units present and units usable (healthy or degraded); how many are degraded."""

    capacity: dict[str, int]
    allocatable: dict[str, int]
    unhealthy_keys: list[str]
    degraded: int = 0


def _node_units(devices: QuerySet[Device]) -> dict[int, NodeUnits]:
    """Device-derived capacity per node, in one aggregate query."""
    rows = (
        devices.exclude(resource_name="")
        .values("node_id", "resource_name")
        .annotate(
            n=Count("id"),
            usable=Count("id", filter=Q(health__in=USABLE_HEALTH)),
            degraded=Count("id", filter=Q(health=HealthState.DEGRADED)),
        )
        .order_by()
    )
    units: dict[int, NodeUnits] = {}
    for row in rows:
        u = units.setdefault(row["node_id"], NodeUnits({}, {}, []))
        u.capacity[row["resource_name"]] = row["n"]
        u.allocatable[row["resource_name"]] = row["usable"]
        u.degraded += row["degraded"]
    return units


def engine_nodes(cluster: Cluster) -> tuple[tuple[m.Node, ...], dict[str, Node]]:
    """Present nodes as the engine sees them: allocatable = usable devices; health exclusions named."""
    devices = Device.objects.filter(node__cluster=cluster, node__gone_at__isnull=True, gone_at__isnull=True)
    return _engine_nodes(Node.objects.filter(cluster=cluster, gone_at__isnull=True), devices)


@dataclass(frozen=True)
class WindowNode:
    """A node that was in the cluster at some time in a window, as its row holds it now, and when it came and went.

    ``joins_at`` / ``leaves_at`` (engine seconds) are None when the node was already there at the window's start /
    was still there at its end.
    """

    node: m.Node
    joins_at: float | None
    leaves_at: float | None


def window_engine_nodes(*, cluster: Cluster, start: datetime, end: datetime) -> list[WindowNode]:
    """Every node present at some time in [start, end), gone ones too, with the devices it had when last seen.

    Only presence is historical (``first_seen_at`` / ``gone_at``): labels, taints, capacity and health are the
    row's latest. A gone node's devices are those that left with it (``gone_at`` no earlier than the node's); a
    present node's are today's. A node that left and came back counts as present since it was first seen. Nodes
    first seen at the cluster's first inventory were there before the portal looked: they count as present from
    the window's start.
    """
    cluster_nodes = Node.objects.filter(cluster=cluster)
    first_inventory = cluster_nodes.aggregate(first=Min("first_seen_at"))["first"]
    came = Q(first_seen_at__lt=end) | Q(first_seen_at=first_inventory) if first_inventory else Q(first_seen_at__lt=end)
    rows = cluster_nodes.filter(came).filter(Q(gone_at__isnull=True) | Q(gone_at__gt=start))
    devices = Device.objects.filter(node__in=rows).filter(
        Q(gone_at__isnull=True) | Q(node__gone_at__isnull=False, gone_at__gte=F("node__gone_at"))
    )
    nodes, by_name = _engine_nodes(rows, devices)
    out = []
    for node in nodes:
        row = by_name[node.name]
        joins = ts(row.first_seen_at) if row.first_seen_at > start and row.first_seen_at != first_inventory else None
        leaves = ts(row.gone_at) if row.gone_at is not None and row.gone_at < end else None
        out.append(WindowNode(node, joins, leaves))
    return out


def _engine_nodes(rows: QuerySet[Node], devices: QuerySet[Device]) -> tuple[tuple[m.Node, ...], dict[str, Node]]:
    """Node rows as engine nodes, their capacity from ``devices`` (one aggregate query, one for exclusions)."""
    units = _node_units(devices)
    bad = defaultdict(list)
    # Nodes with an excluded unit the portal (DCGM, an operator, a ticket) excluded, not the device plugin; nodes
    # with one the node itself reported (a condition, a health taint, a quarantine cordon).
    portal_excluded, node_reported = set(), set()
    for node_id, key, reason in (
        devices.exclude(resource_name="")
        .exclude(health__in=USABLE_HEALTH)
        .values_list("node_id", "key", "health_reason")
    ):
        bad[node_id].append(f"{key}: {reason}" if reason else key)
        if is_node_report_reason(reason or ""):
            node_reported.add(node_id)
        elif not is_device_plugin_reason(reason or ""):
            portal_excluded.add(node_id)
    out, by_name = [], {}
    for node in rows.order_by("name"):
        u = units.get(node.pk, NodeUnits({}, {}, []))
        capacity = dict(u.capacity)
        allocatable = dict(u.allocatable)
        for rn, qty in (node.allocatable or {}).items():
            if "/" not in rn and rn in ("cpu", "memory", "pods"):
                try:
                    allocatable[rn] = parse_quantity(qty, rn)
                    capacity[rn] = parse_quantity((node.capacity or {}).get(rn, qty), rn)
                except ValueError:
                    continue
        reason = ""
        if bad.get(node.pk):
            reason = f"{len(bad[node.pk])} device(s) excluded for health: {'; '.join(bad[node.pk][:4])}"
        if not node.ready:
            reason = reason or "node is NotReady"
        out.append(
            m.Node(
                name=node.name,
                labels=dict(node.labels or {}),
                taints=_taints(node.taints),
                ready=node.ready,
                unschedulable=node.unschedulable,
                capacity=capacity,
                allocatable=allocatable,
                health_reason=reason,
                degraded_devices=u.degraded,
                health_gap_by=_gap_by(node.pk in bad, node.pk in portal_excluded, node.pk in node_reported),
            )
        )
        by_name[node.name] = node
    return tuple(out), by_name


def _gap_by(excluded: bool, by_portal: bool, by_node: bool = False) -> str:
    """Who took a node's excluded units out of its allocatable, for the wait reasons (see ``m.Node``)."""
    if not excluded:
        return ""
    if by_portal:
        return "the portal's health checks"
    return m.NODE_REPORTS if by_node else m.DEVICE_PLUGIN


def job_engine_pod_sets(job: Job, *, declared: set[str], facts: ClassFacts | None = None) -> tuple[m.PodSet, ...]:
    """A job's pod sets as the engine's, in Kueue's order (``queues.pod_sets``: companions, then the primary).

    Per-pod requests: the class's device resource (a pod set without devices asks for none), plus cpu/memory if
    the team's ClusterQueue declares them. Every pod set keeps to the class's flavors (its node affinity); the
    job's topology rule applies to the pod sets with devices (the others may go anywhere in a topology-aware
    flavor). ``facts``: the class's (``class_facts``), when the caller builds many jobs of few classes. Reads no
    relation of the job but its class (none when ``facts`` is given).
    """
    facts = facts or class_facts(job.resource_class)
    topology = _topology_request(job, topology_aware=facts.topology_aware)
    pod_sets = []
    anywhere = m.TopologyRequest(unconstrained=True) if facts.topology_aware else None
    for shape in companion_shapes(job) if job.companion_pod_sets else ():
        requests = {facts.resource_name: shape.devices_per_pod} if shape.devices_per_pod else {}
        if "cpu" in declared:
            requests["cpu"] = _quantity(shape.cpu, "cpu")
        if "memory" in declared:
            requests["memory"] = _quantity(shape.memory, "memory")
        pod_sets.append(
            m.PodSet(
                name=shape.name,
                count=shape.count,
                requests=requests,
                node_affinity=facts.node_affinity,
                topology=topology if shape.devices_per_pod else anywhere,
            )
        )
    requests = {facts.resource_name: job.devices_per_pod}
    if "cpu" in declared:
        requests["cpu"] = facts.cpu_per_device * job.devices_per_pod
    if "memory" in declared:
        requests["memory"] = facts.memory_per_device * job.devices_per_pod
    pod_sets.append(
        m.PodSet(
            name=kind_spec(job.kind).primary_pod_set,
            count=job.pod_count,
            requests=requests,
            node_affinity=facts.node_affinity,
            topology=topology,
        )
    )
    return tuple(pod_sets)


@functools.lru_cache(maxsize=1024)
def _quantity(text: str, resource: str) -> int:
    """A stored companion request (canonical, validated at submission) in the engine's units; few values recur."""
    return parse_quantity(text, resource)


def job_topology_request(job: Job) -> m.TopologyRequest | None:
    """The job's topology request; on a class with topology-aware flavors, at least an unconstrained one.

    Kueue skips a TAS flavor for a pod set without a topology request when the ClusterQueue also has
    non-TAS flavors ("Flavor X supports only TopologyAwareScheduling"), so the portal always asks for
    ``podset-unconstrained-topology`` there, in the simulator and on a real cluster alike.
    """
    aware = any(link.flavor.topology_id for link in job.resource_class.flavor_links.all())
    return _topology_request(job, topology_aware=aware)


def _topology_request(job: Job, *, topology_aware: bool) -> m.TopologyRequest | None:
    if job.topology_mode and job.topology_level:
        return m.TopologyRequest(
            required=job.topology_level if job.topology_mode == "required" else None,
            preferred=job.topology_level if job.topology_mode == "preferred" else None,
        )
    return m.TopologyRequest(unconstrained=True) if topology_aware else None


def job_workload(
    job: Job,
    *,
    declared: set[str],
    facts: ClassFacts | None = None,
    priority_class: str | None = None,
    protection_by_priority: bool = False,
) -> m.Workload:
    """A job as a Kueue Workload, with its admission when it holds quota, and the portal's protection of it.

    ``facts`` / ``priority_class``: the class's facts and the priority class's name, when the caller has them
    (else read through the job's relations). ``protection_by_priority``: its cluster is a Kubernetes one, where the
    protection is Kueue's raised priority (``m.Protection.by_priority``).
    """
    facts = facts or class_facts(job.resource_class)
    pod_sets = job_engine_pod_sets(job, declared=declared, facts=facts)
    if priority_class is None and job.priority_class_id:
        priority_class = job.priority_class.name
    admission = None
    eviction = None
    if job.state in HOLDING_STATES and job.assignment:
        admission = m.Admission(
            cluster_queue=job.assignment.get("clusterQueue", ""),
            pod_sets=tuple(
                m.PodSetAdmission(
                    name=ps.get("name", pod_sets[-1].name),
                    count=ps.get("count", job.pod_count),
                    flavors=dict(ps.get("flavors", {})),
                    nodes=tuple(ps.get("nodes", [])),
                )
                for ps in job.assignment.get("podSets", [])
            ),
        )
        if job.state == Job.State.PREEMPTING:
            eviction = m.Eviction(
                reason=job.eviction_reason or "Preempted", message="", issued_at=ts(job.state_changed_at)
            )
    return m.Workload(
        namespace=job.team.namespace,
        name=workload_name(job),
        queue_name=job.team.local_queue_name,
        pod_sets=pod_sets,
        priority=job.priority,
        priority_class=priority_class,
        created_at=ts(job.submitted_at),
        requeued_at=ts(job.queued_at) if job.queued_at != job.submitted_at else None,
        uid=f"job-{job.pk}",
        job_uid=f"job-{job.pk}",
        admission=admission,
        admitted_at=ts(job.admitted_at) if job.admitted_at and admission else None,
        eviction=eviction,
        protection=engine_protection(job, facts.protection, by_priority=protection_by_priority),
    )


@dataclass
class EngineInput:
    """The engine's state for a cluster plus the maps back to rows."""

    state: m.ClusterState
    jobs_by_key: dict[str, Job]
    nodes_by_name: dict[str, Node]
    #: The cluster's guaranteed quotas against its healthy capacity, as the state's quotas apply them.
    guarantees: ClusterGuarantees | None = None


def cluster_fair_sharing(cluster: Cluster) -> m.FairSharing | None:
    """The cluster's Kueue fair-sharing setting as the engine takes it (None = off)."""
    if not cluster.fair_sharing:
        return None
    strategies = tuple(s for s in cluster.fair_sharing_strategies.split(",") if s)
    return m.FairSharing(strategies) if strategies else m.FairSharing()  # type: ignore[arg-type]


#: The job columns the engine input and the diagnosis read (``_engine_workloads`` loads only these).
ENGINE_JOB_FIELDS = (
    "id",
    "team_id",
    "cluster_id",
    "resource_class_id",
    "priority_class_id",
    "name",
    "k8s_name",
    "state",
    "kind",
    "devices_per_pod",
    "pod_count",
    "companion_pod_sets",
    "topology_mode",
    "topology_level",
    "assignment",
    "eviction_reason",
    "priority",
    "submitted_at",
    "queued_at",
    "admitted_at",
    "state_changed_at",
    "sim_runtime_seconds",
    "max_runtime_seconds",
    "run_seconds_banked",
    "checkpoint_path",
    "checkpoint_signal",
    "checkpoint_command",
    "checkpoint_interval_seconds",
    "protect_min_runtime_seconds",
    "protect_finishing_seconds",
    "preempt_after_checkpoint",
)


#: Each job row's Job and Workload, kept between reads (``queues.engine_jobs``): a read after one change builds one.
_ROWS: RowCache[Job, m.Workload] = RowCache()


def _engine_workloads(
    cluster: Cluster,
    *,
    teams: dict[int, Team],
    priority_classes: dict[int, PriorityClass],
    declared: dict[int, set[str]],
    pc_names: dict[int, str],
    job_ids: Iterable[int] | None = None,
) -> list[tuple[Job, m.Workload]]:
    """The cluster's pending and quota-holding jobs and their workloads (one query for the jobs, no joins): only the
    columns the engine reads, teams and priority classes shared from the given maps, each row built once while it
    and its team, class and priority class stay the same (``queues.engine_jobs``).

    ``job_ids``: only those of these jobs (each built afresh; the kept rows of the cluster's last full read stay).
    """
    jobs = Job.objects.filter(cluster=cluster, state__in=(Job.State.PENDING, *HOLDING_STATES))
    if job_ids is not None:
        jobs = jobs.filter(pk__in=list(job_ids))
    raw = raw_rows(jobs, ENGINE_JOB_FIELDS)
    team_at, class_at, pc_at = raw.index("team_id"), raw.index("resource_class_id"), raw.index("priority_class_id")
    facts = classes_facts({row[class_at] for row in raw.rows})
    by_priority = protection_by_priority(cluster)
    team_cache = Job._meta.get_field("team")
    pc_cache = Job._meta.get_field("priority_class")
    contexts: dict[tuple, tuple] = {}

    def context_of(row: tuple) -> tuple:
        ids = (row[team_at], row[class_at], row[pc_at])
        context = contexts.get(ids)
        if context is None:
            team = teams[ids[0]]
            what = (
                team.namespace,
                team.local_queue_name,
                frozenset(declared.get(ids[0], ())),
                facts[ids[1]],
                by_priority,
            )
            context = contexts[ids] = _ROWS.context((*what, pc_names.get(ids[2]) if ids[2] else None))
        return context

    def share(job: Job) -> None:
        # A reused Job reads this read's team and priority class, not those of the read that built it.
        team_cache.set_cached_value(job, teams[job.team_id])
        if job.priority_class_id:
            pc_cache.set_cached_value(job, priority_classes[job.priority_class_id])

    def build(job: Job, context: tuple) -> m.Workload:
        share(job)
        return job_workload(
            job,
            declared=declared.get(job.team_id, set()),
            facts=context[3],
            priority_class=context[5],
            protection_by_priority=context[4],
        )

    if job_ids is not None:
        return [(job, build(job, context_of(row))) for row in raw.rows for job in [raw.make(row)]]
    return _ROWS.build_all(cluster.pk, raw, context_of, build, on_hit=share)


def engine_job_workloads(cluster: Cluster, job_ids: Iterable[int]) -> list[tuple[Job, m.Workload]]:
    """Those of ``job_ids`` that are pending or hold quota in ``cluster``, with their workloads as
    ``cluster_engine_input`` builds them (a few queries: teams, priority classes, declared resources, the rows)."""
    ids = list(job_ids)
    if not ids:
        return []
    priority_classes = {p.pk: p for p in PriorityClass.objects.all()}
    declared: dict[int, set[str]] = defaultdict(set)
    for team_id, resource in QuotaLine.objects.filter(team_quota__cluster=cluster).values_list(
        "team_quota__team_id", "resource_name"
    ):
        declared[team_id].add(resource)
    return _engine_workloads(
        cluster,
        teams={t.pk: t for t in Team.objects.all()},
        priority_classes=priority_classes,
        declared=dict(declared),
        pc_names={pk: p.name for pk, p in priority_classes.items()},
        job_ids=ids,
    )


def protection_by_priority(cluster: Cluster) -> bool:
    """Whether protected work is Kueue's raised priority in this cluster (a Kubernetes one) rather than the engine's
    own rule (``m.Protection.by_priority``)."""
    return cluster.backend == Cluster.Backend.KUBERNETES


def _given_workloads(
    jobs: Iterable[Job], *, declared: dict[int, set[str]], pc_names: dict[int, str], by_priority: bool = False
) -> list[tuple[Job, m.Workload]]:
    """The given jobs and their workloads (each class's facts read once, through the jobs' relations)."""
    facts: dict[int, ClassFacts] = {}
    out = []
    for job in jobs:
        job_facts = facts.get(job.resource_class_id)
        if job_facts is None:
            job_facts = facts[job.resource_class_id] = class_facts(job.resource_class)
        wl = job_workload(
            job,
            declared=declared.get(job.team_id, set()),
            facts=job_facts,
            priority_class=pc_names.get(job.priority_class_id) if job.priority_class_id else None,
            protection_by_priority=by_priority,
        )
        out.append((job, wl))
    return out


@dataclass
class PolicyRows:
    """The rows a cluster's Kueue policy is read from: the live rows, or their versions at some time of the audit
    log (``queues.policy.recorded``). Related rows are reached as attributes (``quota.team``, ``quota.cohort``,
    ``line.flavor``, ``cohort.parent``, ``flavor.topology``), as the ORM's select_related gives them."""

    cluster: Cluster
    quotas: list
    lines: list
    cohorts: list
    teams: list
    flavors: list
    topologies: list
    priority_classes: list


def live_policy_rows(cluster: Cluster) -> PolicyRows:
    """The cluster's policy rows as the database holds them now."""
    return PolicyRows(
        cluster=cluster,
        quotas=list(TeamQuota.objects.filter(cluster=cluster).select_related("team", "cohort")),
        lines=list(
            QuotaLine.objects.filter(Q(team_quota__cluster=cluster) | Q(cohort__isnull=False)).select_related("flavor")
        ),
        cohorts=list(Cohort.objects.select_related("parent")),
        teams=list(Team.objects.all()),
        flavors=list(ResourceFlavor.objects.select_related("topology")),
        topologies=list(Topology.objects.all()),
        priority_classes=list(PriorityClass.objects.all()),
    )


def applied_policy_rows(rows: PolicyRows) -> tuple[PolicyRows, ClusterGuarantees]:
    """The live policy rows with each quota line as applied now — its effective quota: the guarantee less its part
    of a shortfall of healthy capacity, per its cohort's policy (queues.guarantees) — and the guarantees."""
    guarantees = cluster_guarantees(rows.cluster, quotas=rows.quotas, lines=rows.lines, cohorts=rows.cohorts)
    if not guarantees.result.shortfalls:
        return rows, guarantees
    return replace(rows, lines=applied_lines(rows.lines, guarantees)), guarantees


def policy_state(rows: PolicyRows, *, usage_policy: bool = False) -> tuple[m.ClusterState, dict[int, set[str]]]:
    """The engine's policy (no nodes, no workloads) built from policy rows, and the resources each team's
    ClusterQueue declares (by team id). ``usage_policy``: the cohorts' fairness that remembers is part of it."""
    quotas = rows.quotas
    by_quota: dict[int, list[QuotaLine]] = defaultdict(list)
    by_cohort: dict[int, list[QuotaLine]] = defaultdict(list)
    for line in rows.lines:
        if line.team_quota_id:
            by_quota[line.team_quota_id].append(line)
        else:
            by_cohort[line.cohort_id].append(line)
    cluster_queues = tuple(_cluster_queue(q, by_quota[q.pk]) for q in quotas)
    declared = {q.team_id: {ln.resource_name for ln in by_quota[q.pk]} for q in quotas}
    policies = cohort_policies(rows.cohorts) if usage_policy else {}
    cohorts = tuple(
        m.Cohort(
            name=c.name,
            parent=c.parent.name if c.parent_id else None,
            resource_groups=_resource_groups(by_cohort.get(c.pk, [])),
            fair_weight=float(c.fair_weight),
            usage_decay=policies.get(c.pk),
        )
        for c in rows.cohorts
    )

    teams = {q.team_id: q.team for q in quotas}
    local_queues = tuple(
        m.LocalQueue(namespace=t.namespace, name=t.local_queue_name, cluster_queue=q.cluster_queue_name)
        for q in quotas
        for t in [teams[q.team_id]]
    )
    namespaces = tuple(m.Namespace(name=t.namespace) for t in rows.teams)
    flavors = tuple(
        m.ResourceFlavor(
            name=f.name,
            node_labels=dict(f.node_labels or {}),
            node_taints=_taints(f.node_taints),
            tolerations=_tolerations(f.tolerations),
            topology_name=f.topology.name if f.topology_id else None,
            display_name=f.display_name or None,
        )
        for f in rows.flavors
    )
    topologies = tuple(m.Topology(name=t.name, levels=tuple(t.levels)) for t in rows.topologies)
    priority_classes = tuple(m.WorkloadPriorityClass(name=p.name, value=p.value) for p in rows.priority_classes)
    state = m.ClusterState(
        fair_sharing=cluster_fair_sharing(rows.cluster),
        flavors=flavors,
        topologies=topologies,
        cohorts=cohorts,
        cluster_queues=cluster_queues,
        local_queues=local_queues,
        namespaces=namespaces,
        priority_classes=priority_classes,
    )
    return state, declared


#: Reservations that ended this long before ``now`` are left out of the engine input (they hold nothing any more).
HOLDS_SINCE = timedelta(hours=1)


def cluster_engine_input(
    *,
    cluster: Cluster,
    jobs: Iterable[Job] | None = None,
    with_nodes: bool = True,
    usage_as_of: datetime | None = None,
    usage_policy: bool | None = None,
    recent: bool = True,
    with_reservations: bool = True,
    now: datetime | None = None,
) -> EngineInput:
    """Everything the engine needs about one cluster: configuration (the quotas as applied: queues.guarantees),
    nodes (unless not ``with_nodes``), jobs, and the holds of its reservations that hold capacity at ``now``
    (default: the wall clock) or later (unless not ``with_reservations``: the policy as configured, for a what-if of
    a policy change).

    Fairness that remembers (cohorts with ``usage_half_life``) comes with each team's recent usage as of
    ``usage_as_of`` (default now). ``usage_policy`` (default: on for simulated clusters only) says whether the
    engine applies it: on Kubernetes, Kueue decides, and its admission fair sharing does not order teams of a
    cohort (docs/engine.md, *Fairness that remembers*), so the diagnosis explains without it; previews turn it on.
    """
    if usage_policy is None:
        usage_policy = cluster.backend == Cluster.Backend.SIMULATED
    rows, guarantees = applied_policy_rows(live_policy_rows(cluster))
    policy, declared = policy_state(rows, usage_policy=usage_policy)
    if with_reservations:
        now = now or timezone.now()
        policy = replace(policy, reservations=cluster_holds(cluster=cluster, start=now - HOLDS_SINCE, now=now))
    nodes, nodes_by_name = engine_nodes(cluster) if with_nodes else ((), {})
    pc_names = {p.pk: p.name for p in rows.priority_classes}
    if jobs is None:
        all_teams = {t.pk: t for t in rows.teams}
        by_pk = {p.pk: p for p in rows.priority_classes}
        built = _engine_workloads(
            cluster, teams=all_teams, priority_classes=by_pk, declared=declared, pc_names=pc_names
        )
    else:
        built = _given_workloads(
            jobs, declared=declared, pc_names=pc_names, by_priority=protection_by_priority(cluster)
        )
    jobs_by_key = {wl.key: job for job, wl in built}
    workloads = [wl for _, wl in built]
    state = replace(policy, nodes=nodes, workloads=tuple(workloads))
    if usage_policy and recent:
        state = with_recent_usage(state, cluster=cluster, as_of=usage_as_of or timezone.now())
    return EngineInput(state=state, jobs_by_key=jobs_by_key, nodes_by_name=nodes_by_name, guarantees=guarantees)
