"""Cases of Kueue's ``TestScheduleForTAS`` (pkg/scheduler/scheduler_tas_test.go), run through one engine cycle.

Transcribed from kubernetes-sigs/kueue main at commit 03efb7f0df84659c34ff0100286eac6491e72836 (Apache-2.0), in
this repository's own builders (``tas_builders``: Kueue's fixtures re-stated); each test names its upstream case.
The cases the engine does not model (second-pass node replacement, delayed topology after provisioning, pods
outside Kueue, ReclaimablePods, partial admission, resource transformations, slices and multi-layer constraints,
PodSet groups, the scheduler-library simulator) are listed in docs/engine.md, "Known differences".
"""

from __future__ import annotations

from queues.engine import schedule
from queues.engine.model import (
    AdmissionCheck,
    AdmissionCheckRule,
    LocalQueue,
    Node,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ResourceFlavor,
    Taint,
    Toleration,
    Topology,
)

from .builders import cq
from .tas_builders import (
    CPU,
    DEFAULT_TAS,
    HOST,
    MEM,
    ONE_LEVEL,
    PODS,
    RACK,
    TAS_LABELS,
    TWO_LEVEL,
    assignments,
    host,
    main_queue,
    pending,
    pod_set,
    q,
    running,
    tas_flavor,
    tas_state,
)

# ------------------------------------------------------------------------------------------ TestScheduleForTAS


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
