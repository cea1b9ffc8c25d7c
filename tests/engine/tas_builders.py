"""Builders for the transcribed Kueue TAS cases (tests/engine/test_kueue_cases_tas*.py): Kueue's fixtures of
pkg/scheduler/scheduler_tas_test.go re-stated in the engine's dataclasses.

* Topologies ``tas-single-level`` (hostname), ``tas-two-level`` (rack, hostname), ``tas-three-level`` (block,
  rack, hostname); the TAS flavor ``tas-default`` selects nodes labelled ``tas-node=true``.
* ClusterQueue ``tas-main`` with 50 CPUs and 50Gi in ``tas-default``; one LocalQueue ``default/tas-main``.
* Nodes report cpu, memory and pods in ``status.allocatable``; a node's name here is its hostname label (Kueue
  names its domains by that label), and Kueue's topology assignment ``{x1: 1, y1: 2}`` is compared with the
  engine's one-node-per-pod list counted per node.
"""

from __future__ import annotations

from collections import Counter

from kernel.quantity import parse_quantity
from queues.engine.model import (
    Admission,
    LocalQueue,
    Namespace,
    Node,
    PodSet,
    PodSetAdmission,
    ResourceFlavor,
    Topology,
    TopologyRequest,
    Workload,
)

from .builders import cq, state

CPU = "cpu"
MEM = "memory"
PODS = "pods"
HOST = "kubernetes.io/hostname"
RACK = "cloud.provider.com/rack"
BLOCK = "cloud.com/topology-block"

ONE_LEVEL = Topology("tas-single-level", (HOST,))
TWO_LEVEL = Topology("tas-two-level", (RACK, HOST))
THREE_LEVEL = Topology("tas-three-level", (BLOCK, RACK, HOST))
TAS_LABELS = {"tas-node": "true"}


def q(value: str, resource: str = CPU) -> int:
    """A Kubernetes quantity in the engine's units (cpu in millicores, memory in bytes)."""
    return parse_quantity(value, resource)


def tas_flavor(name: str = "tas-default", topology: str = "tas-single-level", **kw) -> ResourceFlavor:
    """A TAS flavor on the ``tas-node=true`` nodes."""
    return ResourceFlavor(name, node_labels=kw.pop("labels", TAS_LABELS), topology_name=topology, **kw)


def host(name: str, cpu: str, memory: str | None = None, pods: int = 10, **labels: str) -> Node:
    """A Ready TAS node with ``status.allocatable`` cpu / memory / pods; ``labels`` use the short level names."""
    alloc = {CPU: q(cpu), PODS: pods}
    if memory is not None:
        alloc[MEM] = q(memory, MEM)
    lab = {"tas-node": "true", HOST: name}
    lab.update({{"block": BLOCK, "rack": RACK}.get(k, k): v for k, v in labels.items()})
    return Node(name, labels=lab, capacity=dict(alloc), allocatable=alloc)


def main_queue(flavors=None, **kw):
    """ClusterQueue ``tas-main`` (default: 50 CPUs and 50Gi in ``tas-default``)."""
    return cq("tas-main", flavors or {"tas-default": {CPU: q("50"), MEM: q("50Gi", MEM)}}, **kw)


def pod_set(
    name: str,
    count: int,
    *,
    cpu: str | None = None,
    memory: str | None = None,
    required: str | None = None,
    preferred: str | None = None,
    unconstrained: bool = False,
    **kw,
) -> PodSet:
    """A pod set with per-pod requests and a topology request (level names in full)."""
    requests = {}
    if cpu is not None:
        requests[CPU] = q(cpu)
    if memory is not None:
        requests[MEM] = q(memory, MEM)
    requests.update(kw.pop("requests", {}))
    topology = None
    if required or preferred or unconstrained:
        topology = TopologyRequest(required=required, preferred=preferred, unconstrained=unconstrained)
    return PodSet(name, count, requests, topology=topology, **kw)


def pending(name: str, *pod_sets: PodSet, priority: int = 0, created: float = 1.0, queue: str = "tas-main", **kw):
    """A pending workload ``default/<name>``."""
    return Workload(
        "default",
        name,
        queue,
        tuple(pod_sets),
        priority=priority,
        created_at=created,
        uid=f"wl-{name}",
        job_uid=f"job-{name}",
        **kw,
    )


def running(
    name: str, cluster_queue: str, *placed: tuple[PodSet, str, list[str]], priority: int = 0, pods_quota=False, **kw
):
    """An admitted workload: per pod set, its flavor and its pods' nodes (one entry per pod); ``pods_quota``: its
    admission also charges the pod count to the flavor (Kueue's assignment when the queue covers ``pods``)."""
    sets = tuple(p for p, _, _ in placed)
    extra = (PODS,) if pods_quota else ()
    admission = Admission(
        cluster_queue,
        tuple(
            PodSetAdmission(p.name, p.count, dict.fromkeys((*p.requests, *extra), f), tuple(n)) for p, f, n in placed
        ),
    )
    return Workload(
        "default",
        name,
        kw.pop("queue", "tas-main"),
        sets,
        priority=priority,
        created_at=0.0,
        uid=f"{name}-uid",
        admission=admission,
        admitted_at=0.0,
        **kw,
    )


def tas_state(queues, workloads, *, flavors, nodes, topologies=(ONE_LEVEL,), local_queues=None, **kw):
    """The state of a case: namespace ``default`` with LocalQueue ``tas-main`` (or the given ones)."""
    lqs = local_queues or [LocalQueue("default", "tas-main", "tas-main")]
    return state(
        queues,
        workloads,
        flavors=flavors,
        nodes=nodes,
        topologies=topologies,
        local_queues=lqs,
        namespaces=[Namespace("default")],
        **kw,
    )


def assignments(result) -> dict[str, dict[str, tuple[str, dict[str, int]]]]:
    """Each admitted workload's pod sets: (flavor of its first resource, pods per node)."""
    out = {}
    for d in result.admitted:
        out[d.workload] = {p.name: (next(iter(p.flavors.values()), ""), dict(Counter(p.nodes))) for p in d.pod_sets}
    return out


DEFAULT_TAS = tas_flavor()
