"""Cases of Kueue's TAS scheduler tests (pkg/scheduler/scheduler_tas_test.go): ``TestScheduleForTAS`` and
``TestScheduleForTASPreemption``, run through one engine cycle.

Transcribed from kubernetes-sigs/kueue main at commit 03efb7f0df84659c34ff0100286eac6491e72836 (Apache-2.0),
in this repository's own builders; each test names its upstream test and case. Kueue's fixtures, re-stated:

* Topologies ``tas-single-level`` (hostname), ``tas-two-level`` (rack, hostname), ``tas-three-level`` (block,
  rack, hostname); the TAS flavor ``tas-default`` selects nodes labelled ``tas-node=true``.
* ClusterQueue ``tas-main`` with 50 CPUs and 50Gi in ``tas-default``; one LocalQueue ``default/tas-main``.
* Nodes report cpu, memory and pods in ``status.allocatable``; a node's name here is its hostname label (Kueue
  names its domains by that label), and Kueue's topology assignment ``{x1: 1, y1: 2}`` is compared with the
  engine's one-node-per-pod list counted per node.

Cases the engine does not model (second-pass node replacement, delayed topology after provisioning, pods outside
Kueue, ReclaimablePods, partial admission, resource transformations, slices and multi-layer constraints, PodSet
groups, the scheduler-library simulator) are listed in docs/engine.md, "Known differences".
"""

from __future__ import annotations

from collections import Counter

from kernel.quantity import parse_quantity
from queues.engine import schedule
from queues.engine.model import (
    Admission,
    AdmissionCheck,
    AdmissionCheckRule,
    LocalQueue,
    Namespace,
    Node,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodSet,
    PodSetAdmission,
    ResourceFlavor,
    Taint,
    Toleration,
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


# ------------------------------------------------------------------------------------------ TestScheduleForTAS

DEFAULT_TAS = tas_flavor()


def _single_node_case(*workloads, queues=None, flavors=(DEFAULT_TAS,), nodes=None, **kw):
    # Kueue's defaultSingleNode: x1 with 1 CPU, 1Gi and 10 pods.
    return tas_state(
        queues or [main_queue()], workloads, flavors=list(flavors), nodes=nodes or [host("x1", "1", "1Gi")], **kw
    )


def test_required_tas_gets_scheduled():
    """TestScheduleForTAS/"workload required TAS gets scheduled"."""
    s = _single_node_case(pending("foo", pod_set("one", 1, cpu="1", required=HOST)))
    assert assignments(schedule(s, 10)) == {"default/foo": {"one": ("tas-default", {"x1": 1})}}


def test_tas_uses_podspec_memory_for_placement():
    """TestScheduleForTAS/"initial scheduling; TAS uses podspec memory for placement": two 1536Mi pods cannot
    share a 2Gi node."""
    nodes = [host("x1", "4", "2Gi"), host("x2", "4", "2Gi")]
    s = _single_node_case(pending("foo", pod_set("one", 2, cpu="1", memory="1536Mi", preferred=HOST)), nodes=nodes)
    assert assignments(schedule(s, 10)) == {"default/foo": {"one": ("tas-default", {"x1": 1, "x2": 1})}}


def test_one_byte_memory_request_fits():
    """TestScheduleForTAS/"initial scheduling; one-byte memory request fits on a 2Gi node with vectorized
    requests disabled" (the node reports no cpu)."""
    node = Node("x1", labels={**TAS_LABELS, HOST: "x1"}, allocatable={MEM: q("2Gi", MEM), PODS: 10})
    s = _single_node_case(pending("tiny-memory", pod_set("one", 1, memory="1", required=HOST)), nodes=[node])
    assert assignments(schedule(s, 10)) == {"default/tiny-memory": {"one": ("tas-default", {"x1": 1})}}


def test_pod_set_of_size_zero():
    """TestScheduleForTAS/"workload with a PodSet of size zero"."""
    node = host("x1", "3", rack="r1")
    flavor = tas_flavor(topology="tas-two-level")
    s = _single_node_case(
        pending("foo", pod_set("launcher", 1, cpu="1", preferred=HOST), pod_set("worker", 0, cpu="1", preferred=HOST)),
        flavors=[flavor],
        nodes=[node],
        topologies=(TWO_LEVEL,),
    )
    decision = schedule(s, 10).admitted[0]
    launcher, worker = decision.pod_sets
    assert (launcher.name, launcher.nodes, launcher.flavors) == ("launcher", ("x1",), {CPU: "tas-default"})
    assert (worker.name, worker.count, worker.nodes) == ("worker", 0, ())


def test_no_tas_request_uses_the_only_tas_flavor():
    """TestScheduleForTAS/"workload which does not specify TAS annotation uses the only TAS flavor"."""
    queue = main_queue({"tas-default": {CPU: q("50")}})
    s = _single_node_case(
        pending("foo", pod_set("one", 1, cpu="1")), queues=[queue], flavors=[DEFAULT_TAS, ResourceFlavor("default")]
    )
    assert assignments(schedule(s, 10)) == {"default/foo": {"one": ("tas-default", {"x1": 1})}}


def test_tas_request_skips_the_non_tas_flavor():
    """TestScheduleForTAS/"workload requiring TAS skips the non-TAS flavor"."""
    queue = main_queue({"default": {CPU: q("50")}, "tas-default": {CPU: q("50")}})
    s = _single_node_case(
        pending("foo", pod_set("one", 1, cpu="1", required=HOST)),
        queues=[queue],
        flavors=[DEFAULT_TAS, ResourceFlavor("default")],
    )
    assert assignments(schedule(s, 10)) == {"default/foo": {"one": ("tas-default", {"x1": 1})}}


def test_no_tas_request_skips_the_tas_flavor_of_a_mixed_queue():
    """TestScheduleForTAS/"workload which does not need TAS skips the TAS flavor" (Kueue leaves the pod on a
    non-TAS flavor to kube-scheduler; the engine places it too, on the only node)."""
    queue = main_queue({"tas-default": {CPU: q("50")}, "default": {CPU: q("50")}})
    s = _single_node_case(
        pending("foo", pod_set("one", 1, cpu="1")), queues=[queue], flavors=[DEFAULT_TAS, ResourceFlavor("default")]
    )
    assert assignments(schedule(s, 10)) == {"default/foo": {"one": ("default", {"x1": 1})}}


def test_mixed_pod_sets_requiring_tas_and_not():
    """TestScheduleForTAS/"workload with mixed PodSets (requiring TAS and not)"."""
    queue = main_queue({"tas-default": {CPU: q("50")}, "default": {CPU: q("50")}})
    s = _single_node_case(
        pending("foo", pod_set("launcher", 1, cpu="500m"), pod_set("worker", 1, cpu="500m", required=HOST)),
        queues=[queue],
        flavors=[DEFAULT_TAS, ResourceFlavor("default")],
    )
    got = assignments(schedule(s, 10))["default/foo"]
    assert got["launcher"][0] == "default"
    assert got["worker"] == ("tas-default", {"x1": 1})


def test_requested_level_missing_from_the_topology():
    """TestScheduleForTAS/"workload requests topology level which is not present in topology"."""
    s = _single_node_case(pending("foo", pod_set("one", 1, cpu="1", required="cloud.com/non-existing")))
    result = schedule(s, 10)
    assert not result.admitted
    reason = result.pending["default/foo"]
    assert reason.kueue_reason == "NoMatchingFlavor"
    assert reason.kueue_message == (
        'couldn\'t assign flavors to pod set one: Flavor "tas-default" does not contain the requested level'
    )


def test_requested_level_only_in_the_second_flavor():
    """TestScheduleForTAS/"workload requests topology level which is only present in second flavor"."""
    custom_level = "cloud.com/custom-level"
    node = Node("x1", labels={**TAS_LABELS, custom_level: "x1"}, allocatable={CPU: q("1"), PODS: 10})
    queue = main_queue({"tas-default": {CPU: q("50")}, "tas-custom-flavor": {CPU: q("50")}})
    s = _single_node_case(
        pending("foo", pod_set("one", 1, cpu="1", required=custom_level)),
        queues=[queue],
        flavors=[DEFAULT_TAS, tas_flavor("tas-custom-flavor", "tas-custom-topology")],
        nodes=[node],
        topologies=(ONE_LEVEL, Topology("tas-custom-topology", (custom_level,))),
    )
    assert assignments(schedule(s, 10)) == {"default/foo": {"one": ("tas-custom-flavor", {"x1": 1})}}


def test_does_not_fit_within_the_node_capacity():
    """TestScheduleForTAS/"workload does not get scheduled as it does not fit within the node capacity"."""
    s = _single_node_case(pending("foo", pod_set("one", 2, cpu="1", required=HOST)))
    result = schedule(s, 10)
    assert not result.admitted
    reason = result.pending["default/foo"]
    assert reason.kueue_reason == "TopologyPlacementFailed"
    assert reason.kueue_message == (
        'couldn\'t assign flavors to pod set one: topology "tas-single-level" allows to fit only 1 out of 2 pod(s)'
    )


def test_node_capacity_used_by_another_tas_workload():
    """TestScheduleForTAS/"workload does not get scheduled as the node capacity is already used by another TAS
    workload": it would fit were bar-admitted gone, so Kueue waits for quota (WaitingForQuota), not for a
    topology that can never hold it."""
    one = pod_set("one", 1, cpu="1", required=HOST)
    s = _single_node_case(pending("foo", one), running("bar-admitted", "tas-main", (one, "tas-default", ["x1"])))
    result = schedule(s, 10)
    assert not result.admitted
    reason = result.pending["default/foo"]
    assert reason.kueue_message == (
        "couldn't assign flavors to pod set one: topology \"tas-single-level\" doesn't allow to fit any of 1 pod(s). "
        'Total nodes: 1; excluded: resource "cpu": 1'
    )
    assert reason.kueue_reason == "WaitingForQuota"


def test_admitted_next_to_an_admitted_workload_multiple_resources():
    """TestScheduleForTAS/"workload gets admitted next to already admitted workload, multiple resources used"."""
    one = pod_set("one", 1, cpu="500m", memory="500Mi", required=HOST)
    s = _single_node_case(pending("foo", one), running("bar-admitted", "tas-main", (one, "tas-default", ["x1"])))
    assert assignments(schedule(s, 10)) == {"default/foo": {"one": ("tas-default", {"x1": 1})}}


def _two_nodes_in_a_rack(cpu: str):
    return [host("x1", cpu, rack="r1"), host("y1", cpu, rack="r1")]


def test_multiple_pod_sets_second_does_not_fit():
    """TestScheduleForTAS/"workload with multiple PodSets requesting the same TAS flavor; multiple levels": the
    worker's 7 CPUs fit on no 3-CPU node; Kueue names the pod set that failed."""
    s = _single_node_case(
        pending("foo", pod_set("launcher", 1, cpu="1", preferred=HOST), pod_set("worker", 1, cpu="7", preferred=HOST)),
        queues=[main_queue({"tas-default": {CPU: q("50")}})],
        flavors=[tas_flavor(topology="tas-two-level")],
        nodes=_two_nodes_in_a_rack("3"),
        topologies=(TWO_LEVEL,),
    )
    result = schedule(s, 10)
    assert not result.admitted
    reason = result.pending["default/foo"]
    assert reason.kueue_reason == "TopologyPlacementFailed"
    assert reason.kueue_message == (
        "couldn't assign flavors to pod set worker: topology \"tas-two-level\" doesn't allow to fit any of 1 pod(s). "
        'Total nodes: 2; excluded: resource "cpu": 2'
    )


def test_multiple_pod_sets_succeed():
    """TestScheduleForTAS/"scheduling workload with multiple PodSets requesting TAS flavor and will succeed": the
    launcher takes one CPU of x1, the 15 workers the other 7 of x1 and all 8 of y1."""
    s = _single_node_case(
        pending("foo", pod_set("launcher", 1, cpu="1", required=HOST), pod_set("worker", 15, cpu="1", preferred=HOST)),
        queues=[main_queue({"tas-default": {CPU: q("16")}})],
        flavors=[tas_flavor(topology="tas-two-level")],
        nodes=_two_nodes_in_a_rack("8"),
        topologies=(TWO_LEVEL,),
    )
    assert assignments(schedule(s, 10)) == {
        "default/foo": {"launcher": ("tas-default", {"x1": 1}), "worker": ("tas-default", {"x1": 7, "y1": 8})}
    }


def test_multiple_pod_sets_requiring_a_higher_level():
    """TestScheduleForTAS/"scheduling workload with multiple PodSets requesting higher level topology"."""
    s = _single_node_case(
        pending("foo", pod_set("launcher", 1, cpu="1", required=RACK), pod_set("worker", 15, cpu="1", required=RACK)),
        queues=[main_queue({"tas-default": {CPU: q("16")}})],
        flavors=[tas_flavor(topology="tas-two-level")],
        nodes=_two_nodes_in_a_rack("8"),
        topologies=(TWO_LEVEL,),
    )
    assert assignments(schedule(s, 10)) == {
        "default/foo": {"launcher": ("tas-default", {"x1": 1}), "worker": ("tas-default", {"x1": 7, "y1": 8})}
    }


def test_node_of_an_admitted_workload_was_deleted():
    """TestScheduleForTAS/"scheduling workload when the node for another admitted workload is deleted"."""
    s = _single_node_case(
        pending("foo", pod_set("one", 1, cpu="1", preferred=HOST)),
        running("bar-admitted", "tas-main", (pod_set("one", 1, cpu="1", required=HOST), "tas-default", ["x1"])),
        queues=[main_queue({"tas-default": {CPU: q("50")}})],
        nodes=[host("y1", "1")],
    )
    assert assignments(schedule(s, 10)) == {"default/foo": {"one": ("tas-default", {"y1": 1})}}


def test_tainted_node_tolerated_by_the_flavor():
    """TestScheduleForTAS/"scheduling workload on a tainted node when the toleration is on ResourceFlavor"."""
    node = Node(
        "x1",
        labels={**TAS_LABELS, HOST: "x1"},
        taints=(Taint("example.com/gpu", "present", "NoSchedule"),),
        allocatable={CPU: q("1"), PODS: 10},
    )
    flavor = tas_flavor(tolerations=(Toleration("example.com/gpu", "Exists"),))
    s = _single_node_case(
        pending("foo", pod_set("one", 1, cpu="1", preferred=HOST)),
        queues=[main_queue({"tas-default": {CPU: q("50")}})],
        flavors=[flavor],
        nodes=[node],
    )
    assert assignments(schedule(s, 10)) == {"default/foo": {"one": ("tas-default", {"x1": 1})}}


def _shared_nodes():
    return [host("x1", "400m", "400Mi"), host("x2", "400m", "400Mi")]


def test_fallback_flavor_sharing_the_nodes_of_a_full_one():
    """TestScheduleForTAS/"two ResourceFlavors share nodes: pending workload lands on the fallback flavor when the
    primary flavor is full": tas-flavor-a's quota is used up on x1, so the workload (which tolerates tas-flavor-b's
    taint) goes to tas-flavor-b, on the free node x2."""
    flavor_b = tas_flavor(node_taints=(Taint("tas-class", "b", "NoSchedule"),), name="tas-flavor-b")
    queue = main_queue(
        {
            "tas-flavor-a": {CPU: q("400m"), MEM: q("400Mi", MEM)},
            "tas-flavor-b": {CPU: q("100m"), MEM: q("100Mi", MEM)},
        }
    )
    primary = pod_set("one", 1, cpu="200m", memory="200Mi", preferred=HOST)
    s = _single_node_case(
        running("primary-admitted-1", "tas-main", (primary, "tas-flavor-a", ["x1"])),
        running("primary-admitted-2", "tas-main", (primary, "tas-flavor-a", ["x1"])),
        pending(
            "pending-wl",
            pod_set(
                "one",
                1,
                cpu="100m",
                memory="100Mi",
                preferred=HOST,
                tolerations=(Toleration("tas-class", "Equal", "b", "NoSchedule"),),
            ),
        ),
        queues=[queue],
        flavors=[tas_flavor("tas-flavor-a"), flavor_b],
        nodes=_shared_nodes(),
    )
    assert assignments(schedule(s, 10)) == {"default/pending-wl": {"one": ("tas-flavor-b", {"x2": 1})}}


def test_pod_sets_on_sibling_flavors_do_not_overlap_on_a_shared_node():
    """TestScheduleForTAS/"multi-PodSet workload across sibling flavors must not self-overlap on shared node"."""

    def flavor(v):
        return tas_flavor(f"flavor-{v}", node_taints=(Taint("example.com/flavor", v, "NoSchedule"),))

    def tolerating(name, v):
        toleration = Toleration("example.com/flavor", "Equal", v, "NoSchedule")
        return pod_set(name, 1, cpu="300m", memory="300Mi", preferred=HOST, tolerations=(toleration,))

    both = {CPU: q("400m"), MEM: q("400Mi", MEM)}
    s = _single_node_case(
        pending("multi-podset-wl", tolerating("ps-a", "a"), tolerating("ps-b", "b")),
        queues=[main_queue({"flavor-a": dict(both), "flavor-b": dict(both)})],
        flavors=[flavor("a"), flavor("b")],
        nodes=_shared_nodes(),
    )
    assert assignments(schedule(s, 10)) == {
        "default/multi-podset-wl": {"ps-a": ("flavor-a", {"x1": 1}), "ps-b": ("flavor-b", {"x2": 1})}
    }


def test_zero_value_request_gets_scheduled():
    """TestScheduleForTAS/"workload with zero value request gets scheduled"."""
    s = _single_node_case(pending("foo", pod_set("one", 1, cpu="0", memory="10Mi")))
    assert assignments(schedule(s, 10)) == {"default/foo": {"one": ("tas-default", {"x1": 1})}}


def test_zero_quantity_request_for_a_resource_the_queue_lacks():
    """TestScheduleForTAS/"admits workload with zero-quantity request for resource not in ClusterQueue with TAS"."""
    s = _single_node_case(pending("foo", pod_set("one", 1, cpu="1", preferred=HOST, requests={"example.com/gpu": 0})))
    assert assignments(schedule(s, 10)) == {"default/foo": {"one": ("tas-default", {"x1": 1})}}


def _affinity(key: str, value: str):
    return (NodeSelectorTerm((NodeSelectorRequirement(key, "In", (value,)),)),)


def test_node_does_not_match_required_affinity():
    """TestScheduleForTAS/"does not admit workload when node does not match required affinity"."""
    ps = pod_set("one", 1, cpu="1", preferred=HOST, node_affinity=_affinity("unused-key", "value"))
    result = schedule(_single_node_case(pending("foo", ps)), 10)
    assert not result.admitted
    assert result.pending["default/foo"].kueue_reason == "TopologyPlacementFailed"


def test_node_matches_required_affinity():
    """TestScheduleForTAS/"admits workload when node matches required affinity"."""
    node = host("x1", "1", "1Gi", **{"expected-label": "expected-value"})
    ps = pod_set("one", 1, cpu="1", preferred=HOST, node_affinity=_affinity("expected-label", "expected-value"))
    s = _single_node_case(pending("foo", ps), nodes=[node])
    assert assignments(schedule(s, 10)) == {"default/foo": {"one": ("tas-default", {"x1": 1})}}


def _partially_empty(**topology):
    # nodesWithZeroCapacityInstance: rack r1 with x1 (0 CPU), x2 and x3 (1 CPU each).
    nodes = [host("x1", "0", rack="r1"), host("x2", "1", rack="r1"), host("x3", "1", rack="r1")]
    return _single_node_case(
        pending("foo", pod_set("one", 2, cpu="1", **topology)),
        flavors=[tas_flavor(topology="tas-two-level")],
        nodes=nodes,
        topologies=(TWO_LEVEL,),
    )


def test_nodes_partially_empty():
    """TestScheduleForTAS/"admits workload when nodes are partially empty; unconstrained", "...; preferred" and
    "...; required"."""
    for topology in ({"unconstrained": True}, {"preferred": RACK}, {"required": RACK}):
        got = assignments(schedule(_partially_empty(**topology), 10))
        assert got == {"default/foo": {"one": ("tas-default", {"x2": 1, "x3": 1})}}, topology


def _prov_check_case(workload, queue, **kw):
    return _single_node_case(
        workload, queues=[queue], checks=[AdmissionCheck(n) for n in ("prov-check", "custom-check")], **kw
    )


def test_two_tas_flavors_only_the_second_with_an_admission_check():
    """TestScheduleForTAS/"workload in CQ with two TAS flavors, only the second is using Provisioning Admission
    Check": the first flavor fits, so no check applies and the workload is admitted at once."""
    node = Node("x1", labels={"tas-group": "reservation", HOST: "x1"}, allocatable={CPU: q("1"), PODS: 10})
    queue = main_queue(
        {"tas-reservation": {CPU: q("1")}, "tas-provisioning": {CPU: q("1")}},
        checks=[AdmissionCheckRule("prov-check", ("tas-provisioning",))],
    )
    flavors = [
        tas_flavor("tas-reservation", labels={"tas-group": "reservation"}),
        tas_flavor("tas-provisioning", labels={"tas-group": "provisioning"}),
    ]
    s = _prov_check_case(
        pending("foo", pod_set("one", 1, cpu="1", required=HOST)), queue, flavors=flavors, nodes=[node]
    )
    result = schedule(s, 10)
    assert assignments(result) == {"default/foo": {"one": ("tas-reservation", {"x1": 1})}}
    assert result.admitted[0].pending_checks == ()


def test_custom_admission_check_gets_tas_assigned():
    """TestScheduleForTAS/"workload with a custom AdmissionCheck gets TAS assigned": quota is reserved with the
    topology assignment, admission waits for the check."""
    queue = main_queue(checks=[AdmissionCheckRule("custom-check")])
    s = _prov_check_case(
        pending("foo", pod_set("one", 1, cpu="1", required=HOST), admission_checks={"custom-check": "Pending"}),
        queue,
    )
    result = schedule(s, 10)
    assert assignments(result) == {"default/foo": {"one": ("tas-default", {"x1": 1})}}
    assert result.admitted[0].pending_checks == ("custom-check",)


# --------------------------------------------------------------------------------- TestScheduleForTASPreemption


def _preemption_case(*workloads, queue=None, nodes=None, **kw):
    # Kueue's defaultSingleNode here: x1 with 5 CPUs, 5Gi and 10 pods; tas-main preempts LowerPriority within.
    queue = queue or main_queue(within="LowerPriority")
    return tas_state([queue], workloads, flavors=kw.pop("flavors", [DEFAULT_TAS]), nodes=nodes or [x5("x1")], **kw)


def x5(name: str) -> Node:
    """A node of 5 CPUs, 5Gi and 10 pods."""
    return host(name, "5", "5Gi")


def victims(result) -> set[tuple[str, str]]:
    return {(p.victim, p.reason) for p in result.preemptions}


def test_preempted_by_quota_while_on_a_deleted_node():
    """TestScheduleForTASPreemption/"workload preempted due to quota is using deleted Node": the victim's pod is on
    z1, which no longer exists; it is chosen for quota, and foo waits for it."""
    s = _preemption_case(
        pending("foo", pod_set("one", 10, cpu="1", preferred=HOST), priority=3),
        running(
            "low-priority-admitted",
            "tas-main",
            (pod_set("one", 1, cpu="5", required=HOST), "tas-default", ["z1"]),
            priority=1,
        ),
        queue=main_queue({"tas-default": {CPU: q("10"), MEM: q("10Gi", MEM)}}, within="LowerPriority"),
        nodes=[x5("x1"), x5("y1")],
    )
    result = schedule(s, 10)
    assert victims(result) == {("default/low-priority-admitted", "InClusterQueue")}
    assert not result.admitted
    assert result.preemptions[0].message == (
        "Preempted to accommodate a workload (UID: wl-foo, JobUID: job-foo) due to prioritization in the "
        "ClusterQueue; preemptor path: /tas-main; preemptee path: /tas-main"
    )
    assert result.pending["default/foo"].kueue_message == (
        "couldn't assign flavors to pod set one: insufficient unused quota for cpu in flavor tas-default, 5 more "
        "needed. Pending the preemption of 1 workload(s)"
    )


def test_preemption_frees_enough_pods_under_a_pods_quota():
    """TestScheduleForTASPreemption/"preemption frees enough Pods when the ClusterQueue has pods quota": the node
    would hold foo's 7 pods with low-4 gone, but the pods quota of 7 needs both victims."""
    s = _preemption_case(
        pending("foo", pod_set("one", 7, cpu="1", required=HOST), priority=1),
        running(
            "low-4", "tas-main", (pod_set("one", 4, cpu="1", required=HOST), "tas-default", ["x1"] * 4), pods_quota=True
        ),
        running(
            "low-3", "tas-main", (pod_set("one", 3, cpu="1", required=HOST), "tas-default", ["x1"] * 3), pods_quota=True
        ),
        queue=main_queue({"tas-default": {CPU: q("50"), PODS: 7}}, within="LowerPriority"),
        nodes=[host("x1", "50", "50Gi", pods=10)],
    )
    result = schedule(s, 10)
    assert victims(result) == {("default/low-4", "InClusterQueue"), ("default/low-3", "InClusterQueue")}
    assert result.pending["default/foo"].kueue_message == (
        "couldn't assign flavors to pod set one: insufficient unused quota for pods in flavor tas-default, 7 more "
        "needed. Pending the preemption of 2 workload(s)"
    )


def test_preemption_for_podspec_memory():
    """TestScheduleForTASPreemption/"preemption; TAS uses podspec memory for fit": 4Gi does not fit next to 2Gi
    on a 5Gi node."""
    s = _preemption_case(
        pending("foo", pod_set("one", 1, cpu="1", memory="4Gi", preferred=HOST), priority=3),
        running(
            "low-priority-admitted",
            "tas-main",
            (pod_set("one", 1, cpu="1", memory="2Gi", required=HOST), "tas-default", ["x1"]),
            priority=1,
        ),
    )
    result = schedule(s, 10)
    assert victims(result) == {("default/low-priority-admitted", "InClusterQueue")}
    assert result.pending["default/foo"].kueue_message == (
        "couldn't assign flavors to pod set one: topology \"tas-single-level\" doesn't allow to fit any of 1 pod(s). "
        'Total nodes: 1; excluded: resource "memory": 1. Pending the preemption of 1 workload(s)'
    )


def test_pods_count_pressure_only_low_priority_preempted():
    """TestScheduleForTASPreemption/"With pods count usage pressure on nodes: only low priority workload is
    preempted" (x1 allows one pod; its CPUs are what the preemptor lacks)."""
    node = host("x1", "5", "5Gi", pods=1)
    s = _preemption_case(
        pending("high-priority-waiting", pod_set("one", 1, cpu="2", preferred=HOST), priority=3),
        running(
            "low-priority-admitted",
            "tas-main",
            (pod_set("one", 1, cpu="5", required=HOST), "tas-default", ["x1"]),
            priority=1,
        ),
        nodes=[node],
    )
    result = schedule(s, 10)
    assert victims(result) == {("default/low-priority-admitted", "InClusterQueue")}
    assert result.pending["default/high-priority-waiting"].kueue_message == (
        "couldn't assign flavors to pod set one: topology \"tas-single-level\" doesn't allow to fit any of 1 pod(s). "
        'Total nodes: 1; excluded: resource "cpu": 1. Pending the preemption of 1 workload(s)'
    )


def test_low_priority_preempted_mid_priority_survives():
    """TestScheduleForTASPreemption/"low priority workload is preempted, mid-priority workload survives"."""
    two = pod_set("one", 1, cpu="2", required=HOST)
    s = _preemption_case(
        pending("foo", pod_set("one", 1, cpu="2", preferred=HOST), priority=3),
        running("mid-priority-admitted", "tas-main", (two, "tas-default", ["x1"]), priority=2),
        running("low-priority-admitted", "tas-main", (two, "tas-default", ["x1"]), priority=1),
    )
    result = schedule(s, 10)
    assert victims(result) == {("default/low-priority-admitted", "InClusterQueue")}
    assert result.pending["default/foo"].kueue_message == (
        "couldn't assign flavors to pod set one: topology \"tas-single-level\" doesn't allow to fit any of 1 pod(s). "
        'Total nodes: 1; excluded: resource "cpu": 1. Pending the preemption of 1 workload(s)'
    )


def test_low_priority_preempted_for_fragmented_capacity():
    """TestScheduleForTASPreemption/"low priority workload is preempted even though there is enough capacity, but
    fragmented": one CPU free on each node, and both pods must share one node."""
    four = pod_set("one", 1, cpu="4", required=HOST)
    s = _preemption_case(
        pending("foo", pod_set("one", 2, cpu="1", required=HOST), priority=3),
        running("mid-priority-admitted", "tas-main", (four, "tas-default", ["x1"]), priority=2),
        running("low-priority-admitted", "tas-main", (four, "tas-default", ["y1"]), priority=1),
        nodes=[x5("x1"), x5("y1")],
    )
    result = schedule(s, 10)
    assert victims(result) == {("default/low-priority-admitted", "InClusterQueue")}
    assert result.pending["default/foo"].kueue_message == (
        'couldn\'t assign flavors to pod set one: topology "tas-single-level" allows to fit only 1 out of 2 pod(s). '
        "Pending the preemption of 1 workload(s)"
    )


def test_equal_priority_waits_for_running_workloads():
    """TestScheduleForTASPreemption/"workload with equal priority awaits for other workloads to complete": the head
    may not preempt its equal, waits for quota, and the smaller workload behind it is not admitted in this cycle."""
    s = _preemption_case(
        pending("low-priority-which-would-fit", pod_set("one", 1, cpu="1", required=HOST), priority=1),
        pending("mid-priority-waiting", pod_set("one", 2, cpu="1", required=HOST), priority=2),
        running(
            "mid-priority-admitted",
            "tas-main",
            (pod_set("one", 1, cpu="4", required=HOST), "tas-default", ["x1"]),
            priority=2,
        ),
    )
    result = schedule(s, 10)
    assert not result.preemptions
    assert not result.admitted
    reason = result.pending["default/mid-priority-waiting"]
    assert reason.kueue_reason == "WaitingForQuota"
    assert reason.kueue_message == (
        'couldn\'t assign flavors to pod set one: topology "tas-single-level" allows to fit only 1 out of 2 pod(s)'
    )


def test_preempts_in_two_resources_after_fit_becomes_preempt_through_fragmentation():
    """TestScheduleForTASPreemption/"preempt in multiple flavors out of which one requires update Fit -> Preempt due
    to fragmentation": memory quota needs low-mem gone; cpu quota fits, but no node has 3 CPUs free until low-cpu
    goes too."""
    s = _preemption_case(
        running(
            "low-cpu",
            "tas-main",
            (pod_set("one", 2, cpu="3", required=HOST), "tas-default", ["x1", "y1"]),
            priority=-1000,
        ),
        running(
            "low-mem",
            "tas-main",
            (pod_set("one", 2, cpu="10m", memory="5Gi", required=HOST), "tas-default", ["x1", "y1"]),
            priority=-1000,
        ),
        pending("high-priority", pod_set("one", 1, cpu="3", memory="5Gi", required=HOST), priority=0),
        queue=main_queue({"tas-default": {CPU: q("10"), MEM: q("10Gi", MEM)}}, within="LowerPriority"),
        nodes=[x5("x1"), x5("y1")],
    )
    result = schedule(s, 10)
    assert victims(result) == {("default/low-cpu", "InClusterQueue"), ("default/low-mem", "InClusterQueue")}
    assert result.pending["default/high-priority"].kueue_message == (
        "couldn't assign flavors to pod set one: insufficient unused quota for memory in flavor tas-default, 5Gi more "
        "needed. Pending the preemption of 2 workload(s)"
    )


def test_sibling_flavor_usage_on_a_shared_node_forces_preemption():
    """TestScheduleForTASPreemption/"sibling-flavor usage on the shared node forces same-flavor preemption": w2 in
    flavor-b uses 3 of x1's 5 CPUs, so w3 in flavor-a preempts w1 (its flavor's only lower-priority workload)."""

    def flavor(v):
        return tas_flavor(f"flavor-{v}", node_taints=(Taint("example.com/flavor", v, "NoSchedule"),))

    def tolerating(v, cpu):
        toleration = Toleration("example.com/flavor", "Equal", v, "NoSchedule")
        return pod_set("one", 1, cpu=cpu, memory=f"{cpu}Gi", preferred=HOST, tolerations=(toleration,))

    both = {CPU: q("5"), MEM: q("5Gi", MEM)}
    s = _preemption_case(
        pending("w3-pending", tolerating("a", "2"), priority=5),
        running("w1-low-prio-a", "tas-main", (tolerating("a", "1"), "flavor-a", ["x1"]), priority=1),
        running("w2-sibling-b", "tas-main", (tolerating("b", "3"), "flavor-b", ["x1"]), priority=1),
        queue=main_queue({"flavor-a": dict(both), "flavor-b": dict(both)}, within="LowerPriority"),
        flavors=[flavor("a"), flavor("b")],
    )
    result = schedule(s, 10)
    assert victims(result) == {("default/w1-low-prio-a", "InClusterQueue")}
    assert result.pending["default/w3-pending"].kueue_message == (
        "couldn't assign flavors to pod set one: topology \"tas-single-level\" doesn't allow to fit any of 1 pod(s). "
        'Total nodes: 1; excluded: resource "cpu": 1. Pending the preemption of 1 workload(s)'
    )


def test_node_pods_allocatable_used_by_non_tas_and_tas_workloads():
    """TestScheduleForTAS/"workload does not get scheduled as the node capacity (.status.allocatable['pods']) is
    already used by non-TAS and TAS workloads": x1 allows 3 pods; bar-admitted has 2 there and a pod outside TAS
    the third. Kueue reads that pod from the node; here it is a workload the engine placed on x1 through a flavor
    without topology (in another ClusterQueue, so that tas-main stays TAS-only)."""
    node = host("x1", "1000m", pods=3)
    other = cq("other", {"default": {CPU: q("50")}})
    lqs = [LocalQueue("default", "tas-main", "tas-main"), LocalQueue("default", "other", "other")]
    s = tas_state(
        [main_queue(), other],
        [
            pending("foo", pod_set("one", 1, cpu="300m", required=HOST)),
            running(
                "bar-admitted", "tas-main", (pod_set("one", 2, cpu="150m", required=HOST), "tas-default", ["x1"] * 2)
            ),
            running("test-running", "other", (pod_set("main", 1, cpu="300m"), "default", ["x1"]), queue="other"),
        ],
        flavors=[DEFAULT_TAS, ResourceFlavor("default")],
        nodes=[node],
        local_queues=lqs,
    )
    result = schedule(s, 10)
    assert not result.admitted
    reason = result.pending["default/foo"]
    assert reason.kueue_reason == "WaitingForQuota"
    assert reason.kueue_message == (
        "couldn't assign flavors to pod set one: topology \"tas-single-level\" doesn't allow to fit any of 1 pod(s). "
        'Total nodes: 1; excluded: resource "pods": 1'
    )


# ------------------------------------------------------------- cohort cases: the engine differs (docs/engine.md)


def _cohort_queue(name: str, nominal: str, *, borrowing: str | None = None, within: str = "LowerPriority"):
    quota = {CPU: q(nominal) if borrowing is None else (q(nominal), q(borrowing))}
    if borrowing is None:
        quota[MEM] = q("4Gi", MEM)
    return cq(name, {"tas-default": quota}, cohort="tas-cohort-main", within=within, reclaim="Any")


def _cohort_local_queues():
    return [LocalQueue("default", f"tas-lq-{c}", f"tas-cq-{c}") for c in "abc"]


def test_overlapping_preemption_targets_are_skipped_not_recomputed():
    """TestScheduleForTASPreemption/"preempting workload recomputes both overlapping preemption targets and TAS
    topology assignment; both features enabled": wl-high-1 reclaims x1 from wl-low-admitted. Kueue (v0.20+,
    RecomputeAssignmentUponPreemptionTargetsOverlap and TASRecomputeAssignmentWithinSchedulingCycle on by default)
    recomputes wl-high-2's targets and takes wl-mid-admitted on y1; the engine skips wl-high-2 for this cycle with
    "overlapping preemption targets" (a difference kept, docs/engine.md)."""
    three = pod_set("one", 1, cpu="3", required=HOST)
    s = tas_state(
        [
            _cohort_queue("tas-cq-a", "5", borrowing="10"),
            _cohort_queue("tas-cq-b", "5", borrowing="10"),
            _cohort_queue("tas-cq-c", "0", borrowing="10"),
        ],
        [
            running("wl-low-admitted", "tas-cq-c", (three, "tas-default", ["x1"]), priority=1, queue="tas-lq-c"),
            running("wl-mid-admitted", "tas-cq-c", (three, "tas-default", ["y1"]), priority=2, queue="tas-lq-c"),
            pending("wl-high-1", three, priority=10, created=1.0, queue="tas-lq-a"),
            pending("wl-high-2", three, priority=10, created=2.0, queue="tas-lq-b"),
        ],
        flavors=[DEFAULT_TAS],
        nodes=[x5("x1"), x5("y1")],
        local_queues=_cohort_local_queues(),
    )
    result = schedule(s, 10)
    assert victims(result) == {("default/wl-low-admitted", "InCohortReclamation")}  # Kueue: + wl-mid-admitted
    assert result.preemptions[0].message == (
        "Preempted to accommodate a workload (UID: wl-wl-high-1, JobUID: job-wl-high-1) due to reclamation within "
        "the cohort; preemptor path: /tas-cohort-main/tas-cq-a; preemptee path: /tas-cohort-main/tas-cq-c"
    )
    assert result.pending["default/wl-high-1"].kueue_message == (
        "couldn't assign flavors to pod set one: topology \"tas-single-level\" doesn't allow to fit any of 1 pod(s). "
        'Total nodes: 2; excluded: resource "cpu": 2. Pending the preemption of 1 workload(s)'
    )
    assert result.pending["default/wl-high-2"].kueue_message == (
        "Workload has overlapping preemption targets with another workload"
    )


def test_capacity_reserved_by_a_preemptor_is_not_recomputed_into_a_new_preemption():
    """TestScheduleForTASCohorts/"reclaim within cohort; capacity reserved by preempting workload does not allow to
    schedule last workload; TASRecomputeAssignmentWithinSchedulingCycle enabled": b1 reclaims a2 and a3 to get 3
    CPUs on y1, as in Kueue. c1 had been nominated the last free CPU of y1, which b1 now holds: Kueue (v0.19+)
    recomputes c1's assignment and reclaims a1 for it; the engine leaves c1 with "no longer fits" for this cycle
    (a difference kept, docs/engine.md)."""

    def one(n):
        return pod_set("one", n, cpu="1", required=HOST)

    s = tas_state(
        [
            _cohort_queue("tas-cq-a", "4"),
            _cohort_queue("tas-cq-b", "4", within="Never"),
            _cohort_queue("tas-cq-c", "4", within="Never"),
        ],
        [
            running(
                "a1-admitted",
                "tas-cq-a",
                (one(5), "tas-default", ["x1"] * 3 + ["y1"] * 2),
                priority=2,
                queue="tas-lq-a",
            ),
            running("a2-admitted", "tas-cq-a", (one(1), "tas-default", ["y1"]), priority=1, queue="tas-lq-a"),
            running("a3-admitted", "tas-cq-a", (one(1), "tas-default", ["y1"]), priority=1, queue="tas-lq-a"),
            pending("b1", one(3), priority=3, queue="tas-lq-b"),
            pending("c1", pod_set("one", 1, cpu="1", preferred=HOST), priority=1, queue="tas-lq-c"),
        ],
        flavors=[DEFAULT_TAS],
        nodes=[host("x1", "3", "5Gi"), host("y1", "5", "3Gi")],
        local_queues=_cohort_local_queues(),
    )
    result = schedule(s, 10)
    by_preemptor = {(p.victim, p.preemptor, p.reason) for p in result.preemptions}
    assert by_preemptor == {
        ("default/a2-admitted", "default/b1", "InCohortReclamation"),
        ("default/a3-admitted", "default/b1", "InCohortReclamation"),
    }  # Kueue: + (a1-admitted, c1, InCohortReclamation)
    assert not result.admitted
    assert result.pending["default/c1"].kueue_message == "Workload no longer fits after processing another workload"
