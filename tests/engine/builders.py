"""Small builders for engine test states (plain dataclasses, no Django)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest

from queues.engine import native
from queues.engine.model import (
    Admission,
    AdmissionCheck,
    AdmissionCheckRule,
    BorrowWithinCohort,
    ClusterQueue,
    ClusterState,
    Cohort,
    FlavorFungibility,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    Namespace,
    Node,
    PodSet,
    PodSetAdmission,
    PreemptionPolicy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Taint,
    Toleration,
    Topology,
    TopologyRequest,
    Workload,
)

GPU = "nvidia.com/gpu"
QuotaSpec = int | tuple[int, int | None] | tuple[int, int | None, int | None]


def rq(resource: str, spec: QuotaSpec) -> ResourceQuota:
    """ResourceQuota from ``n`` or ``(nominal, borrowingLimit[, lendingLimit])``."""
    if isinstance(spec, int):
        return ResourceQuota(resource, spec)
    nominal, bl, *rest = spec
    return ResourceQuota(resource, nominal, bl, rest[0] if rest else None)


def group(flavors: Mapping[str, Mapping[str, QuotaSpec]]) -> ResourceGroup:
    """A resource group: {flavor: {resource: quota}} in preference order."""
    covered: list[str] = []
    for res in flavors.values():
        for r in res:
            if r not in covered:
                covered.append(r)
    return ResourceGroup(
        tuple(covered),
        tuple(FlavorQuotas(f, tuple(rq(r, q) for r, q in res.items())) for f, res in flavors.items()),
    )


def cq(
    name: str,
    quotas: Mapping[str, Mapping[str, QuotaSpec]] | None = None,
    *,
    groups: Iterable[ResourceGroup] | None = None,
    cohort: str | None = None,
    strategy: str = "BestEffortFIFO",
    within: str = "Never",
    reclaim: str = "Never",
    bwc: str = "Never",
    threshold: int | None = None,
    when_borrow: str = "MayStopSearch",
    when_preempt: str = "TryNextFlavor",
    checks: Iterable[AdmissionCheckRule] = (),
    selector: LabelSelector | None = LabelSelector(),  # noqa: B008
    stop: str = "None",
) -> ClusterQueue:
    """A ClusterQueue; ``quotas`` is one resource group {flavor: {resource: quota}}."""
    rgs = tuple(groups) if groups is not None else ((group(quotas),) if quotas else ())
    return ClusterQueue(
        name=name,
        cohort=cohort,
        namespace_selector=selector,
        queueing_strategy=strategy,  # type: ignore[arg-type]
        resource_groups=rgs,
        preemption=PreemptionPolicy(within, reclaim, BorrowWithinCohort(bwc, threshold)),  # type: ignore[arg-type]
        flavor_fungibility=FlavorFungibility(when_borrow, when_preempt),  # type: ignore[arg-type]
        admission_checks=tuple(checks),
        stop_policy=stop,  # type: ignore[arg-type]
    )


def wl(
    key: str,
    gpus: int = 1,
    *,
    count: int = 1,
    priority: int = 0,
    created: float = 0.0,
    queue: str = "main",
    requests: Mapping[str, int] | None = None,
    admitted: str | None = None,
    flavor: str = "f",
    nodes: Iterable[str] = (),
    admitted_at: float | None = None,
    selector: Mapping[str, str] | None = None,
    tolerations: Iterable[Toleration] = (),
    topology: TopologyRequest | None = None,
    pod_sets: Iterable[PodSet] | None = None,
    checks: Mapping[str, str] | None = None,
    runtime: float | None = None,
) -> Workload:
    """A workload; ``admitted="cq"`` makes it hold quota in that ClusterQueue with ``flavor``."""
    ns, name = key.split("/")
    req = dict(requests) if requests is not None else {GPU: gpus}
    sets = (
        tuple(pod_sets)
        if pod_sets is not None
        else (
            PodSet(
                "main",
                count,
                req,
                node_selector=dict(selector or {}),
                tolerations=tuple(tolerations),
                topology=topology,
            ),
        )
    )
    admission = None
    if admitted is not None:
        node_list = tuple(nodes)
        admission = Admission(
            admitted,
            tuple(PodSetAdmission(p.name, p.count, dict.fromkeys(p.requests, flavor), node_list) for p in sets),
        )
    return Workload(
        namespace=ns,
        name=name,
        queue_name=queue,
        pod_sets=sets,
        priority=priority,
        created_at=created,
        uid=f"uid-{name}",
        job_uid=f"job-{name}",
        admission=admission,
        admitted_at=admitted_at if admitted_at is not None else (created if admitted else None),
        admission_checks=dict(checks or {}),
        runtime=runtime,
    )


def node(
    name: str,
    gpus: int = 8,
    *,
    labels: Mapping[str, str] | None = None,
    allocatable: int | None = None,
    taints: Iterable[Taint] = (),
    ready: bool = True,
    unschedulable: bool = False,
    health: str = "",
    degraded: int = 0,
) -> Node:
    """A GPU node (``degraded``: how many of its devices are degraded)."""
    lab = {"kubernetes.io/hostname": name}
    lab.update(labels or {})
    return Node(
        name=name,
        labels=lab,
        taints=tuple(taints),
        ready=ready,
        unschedulable=unschedulable,
        capacity={GPU: gpus},
        allocatable={GPU: gpus if allocatable is None else allocatable},
        health_reason=health,
        degraded_devices=degraded,
    )


def state(
    cqs: Iterable[ClusterQueue],
    workloads: Iterable[Workload] = (),
    *,
    flavors: Iterable[ResourceFlavor] | None = None,
    cohorts: Iterable[Cohort] = (),
    nodes: Iterable[Node] = (),
    topologies: Iterable[Topology] = (),
    namespaces: Iterable[Namespace] | None = None,
    local_queues: Iterable[LocalQueue] | None = None,
    checks: Iterable[AdmissionCheck] = (),
) -> ClusterState:
    """A ClusterState; by default one LocalQueue ``<cq>/main`` in namespace ``<cq>`` per ClusterQueue."""
    cq_list = tuple(cqs)
    if flavors is None:
        names = sorted({f.name for c in cq_list for g in c.resource_groups for f in g.flavors})
        flavors = [ResourceFlavor(n) for n in names]
    lqs = (
        tuple(local_queues) if local_queues is not None else tuple(LocalQueue(c.name, "main", c.name) for c in cq_list)
    )
    nss = tuple(namespaces) if namespaces is not None else tuple(Namespace(q.namespace) for q in lqs)
    return ClusterState(
        flavors=tuple(flavors),
        topologies=tuple(topologies),
        cohorts=tuple(cohorts),
        cluster_queues=cq_list,
        local_queues=lqs,
        namespaces=nss,
        admission_checks=tuple(checks),
        nodes=tuple(nodes),
        workloads=tuple(workloads),
    )


#: For a test that swaps an engine module's functions to watch or replace them: the compiled engine calls its own
#: functions directly, so there it would check nothing. It runs where the engine is plain Python (CI's SQLite run).
plain_engine_only = pytest.mark.skipif(
    native.compiled(), reason="patches engine functions: runs on the plain-Python engine (PORTAL_ENGINE_PURE=1)"
)
