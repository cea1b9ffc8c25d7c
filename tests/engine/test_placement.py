"""Node placement beyond Kueue: nodes, topology required/preferred, health exclusion, placement reasons."""

from __future__ import annotations

import re

from queues.engine import ResourceFlavor, Taint, Topology, TopologyRequest, schedule, settle

from .builders import GPU, cq, node, state, wl

TAS_SOME = re.compile(
    r"topology \"(?P<topology>[^\"]+)\" allows to fit only (?P<fit>\d+) out of (?P<total>\d+) (?P<unit>pod|slice)\(s\)"
)
TAS_NONE = re.compile(
    r"topology \"(?P<topology>[^\"]+)\" doesn't allow to fit any of (?P<total>\d+) (?P<unit>pod|slice)\(s\)"
)
TAS_STATS = re.compile(r"\. Total nodes: (?P<total_nodes>\d+); excluded: (?P<exclusions>.+)$")

TOPO = Topology("dc", ("cloud/block", "cloud/rack", "kubernetes.io/hostname"))
TAS = ResourceFlavor("h100", node_labels={"gpu": "h100"}, topology_name="dc")
PLAIN = ResourceFlavor("h100", node_labels={"gpu": "h100"})


def rack_nodes(**overrides):
    """Four 8-GPU nodes: n0, n1 in rack r0 and n2, n3 in rack r1 (one block)."""
    out = []
    for i in range(4):
        extra = dict(overrides.get(f"n{i}", {}))
        labels = {"gpu": "h100", "cloud/block": "b1", "cloud/rack": f"r{i // 2}", **extra.pop("labels", {})}
        out.append(node(f"n{i}", 8, labels=labels, **extra))
    return out


def big_queue():
    return cq("a", {"h100": {GPU: 64}})


def placed(result, key):
    decision = next(d for d in result.admitted if d.workload == key)
    return list(decision.pod_sets[0].nodes)


def test_placement_pods_on_fewest_nodes_best_fit():
    nodes = rack_nodes()
    s = state(
        [big_queue()],
        [wl("a/run", 5, admitted="a", flavor="h100", nodes=["n1"]), wl("a/j", 3, count=2, created=1)],
        flavors=[PLAIN],
        nodes=nodes,
    )
    # n1 has 3 free: best fit puts one pod there, the other on a full node... both fit on one empty node.
    assert placed(schedule(s, 0), "a/j") == ["n0", "n0"]
    s = state([big_queue()], [wl("a/j", 3)], flavors=[PLAIN], nodes=nodes)
    assert placed(schedule(s, 0), "a/j") == ["n0"]


def test_placement_best_fit_prefers_fullest_node_that_fits():
    s = state(
        [big_queue()],
        [wl("a/run", 5, admitted="a", flavor="h100", nodes=["n2"]), wl("a/j", 3, created=1)],
        flavors=[PLAIN],
        nodes=rack_nodes(),
    )
    assert placed(schedule(s, 0), "a/j") == ["n2"]


def test_topology_required_rack_fits_in_one_rack():
    s = state(
        [big_queue()],
        [wl("a/j", 8, count=2, topology=TopologyRequest(required="cloud/rack"))],
        flavors=[TAS],
        nodes=rack_nodes(),
        topologies=[TOPO],
    )
    nodes = placed(schedule(s, 0), "a/j")
    assert nodes in (["n0", "n1"], ["n2", "n3"])


def test_topology_required_fragmented():
    # 8 GPUs used in each rack: 16 free in total, only 8 per rack.
    s = state(
        [big_queue()],
        [
            wl("a/r0", 8, admitted="a", flavor="h100", nodes=["n0"]),
            wl("a/r1", 8, admitted="a", flavor="h100", nodes=["n2"]),
            wl("a/j", 8, count=2, created=1, topology=TopologyRequest(required="cloud/rack")),
        ],
        flavors=[TAS],
        nodes=rack_nodes(),
        topologies=[TOPO],
    )
    reason = settle(s, 0).pending["a/j"]
    assert reason.code == "topology_fragmented"
    m = TAS_SOME.search(reason.kueue_message)
    assert (m["topology"], m["fit"], m["total"]) == ("dc", "1", "2")
    assert TAS_STATS.search(reason.kueue_message)["exclusions"] == 'resource "nvidia.com/gpu": 2'
    assert reason.kueue_message == (
        'couldn\'t assign flavors to pod set main: topology "dc" allows to fit only 1 out of 2 pod(s). '
        'Total nodes: 4; excluded: resource "nvidia.com/gpu": 2'
    )
    # It would fit with r0 and r1 gone, so Kueue's assignment is in Preempt mode and its reason WaitingForQuota
    # (TestScheduleForTAS/"workload does not get scheduled as the node capacity is already used by another TAS
    # workload"); TopologyPlacementFailed is for a pod set that does not fit even on an empty cluster.
    assert reason.kueue_reason == "WaitingForQuota"
    assert "16 GPUs are free in total" in reason.message.replace("h100 ", "")


def test_topology_placement_failed_when_only_health_excluded_capacity_would_hold_it():
    # Kueue's empty-cluster probe frees the pods, not tainted or shrunken nodes: with n1 tainted and two of n3's
    # GPUs out, no rack ever holds 2 pods of 8, so the reason is TopologyPlacementFailed; the code says health.
    nodes = rack_nodes(n1={"taints": [Taint("nvidia.com/gpu-xid-error", "79", "NoSchedule")]}, n3={"allocatable": 6})
    s = state(
        [big_queue()],
        [wl("a/j", 8, count=2, topology=TopologyRequest(required="cloud/rack"))],
        flavors=[TAS],
        nodes=nodes,
        topologies=[TOPO],
    )
    reason = settle(s, 0).pending["a/j"]
    assert reason.code == "health_blocked"
    assert reason.kueue_reason == "TopologyPlacementFailed"


def test_topology_preferred_spreads_when_no_domain_fits():
    s = state(
        [big_queue()],
        [
            wl("a/r0", 8, admitted="a", flavor="h100", nodes=["n0"]),
            wl("a/r1", 8, admitted="a", flavor="h100", nodes=["n2"]),
            wl("a/j", 8, count=2, created=1, topology=TopologyRequest(preferred="cloud/rack")),
        ],
        flavors=[TAS],
        nodes=rack_nodes(),
        topologies=[TOPO],
    )
    assert placed(schedule(s, 0), "a/j") == ["n1", "n3"]


def test_class_exhausted_when_every_device_is_used():
    s = state(
        [big_queue()],
        [wl(f"a/r{i}", 8, admitted="a", flavor="h100", nodes=[f"n{i}"]) for i in range(4)] + [wl("a/j", 4, created=1)],
        flavors=[PLAIN],
        nodes=rack_nodes(),
    )
    reason = settle(s, 0).pending["a/j"]
    assert reason.code == "class_exhausted"
    assert reason.kueue_message == ""
    assert reason.details["free"] == 0


def test_health_blocked_names_nodes():
    nodes = rack_nodes(
        n2={"taints": [Taint("nvidia.com/gpu-xid-error", "79", "NoSchedule")], "health": "XID 79 on GPU 3"},
        n3={"allocatable": 6},
    )
    s = state(
        [big_queue()],
        [
            wl("a/r0", 8, admitted="a", flavor="h100", nodes=["n0"]),
            wl("a/r1", 8, admitted="a", flavor="h100", nodes=["n1"]),
            wl("a/j", 8, count=2, created=1),
        ],
        flavors=[PLAIN],
        nodes=nodes,
    )
    reason = settle(s, 0).pending["a/j"]
    assert reason.code == "health_blocked"
    assert reason.details["unhealthyNodes"] == ["n2", "n3"]
    assert reason.message == (
        "The capacity this job needs exists, but part of it is out for health: 8 h100 GPUs on n2 are held back by "
        "the health taint nvidia.com/gpu-xid-error=79:NoSchedule: XID 79 on GPU 3; 2 h100 GPUs on n3 are marked "
        "unhealthy by the device plugin (capacity 8, allocatable 6). Free now on healthy devices: 6, needed: 16; "
        "once repaired this job can start."
    )
    assert reason.details["excludedForHealth"] == 10


def test_not_ready_and_cordoned_nodes_are_excluded():
    nodes = rack_nodes(n0={"ready": False}, n1={"unschedulable": True}, n2={"unschedulable": True}, n3={"ready": False})
    s = state([big_queue()], [wl("a/j", 1)], flavors=[PLAIN], nodes=nodes)
    reason = settle(s, 0).pending["a/j"]
    # NotReady nodes count as health exclusions.
    assert reason.code == "health_blocked"
    assert reason.details["unhealthyNodes"] == ["n0", "n3"]


def test_untolerated_node_taint_excludes_node():
    nodes = rack_nodes(**{f"n{i}": {"taints": [Taint("dedicated", "infra", "NoSchedule")]} for i in range(3)})
    s = state([big_queue()], [wl("a/j", 4)], flavors=[PLAIN], nodes=nodes)
    assert placed(schedule(s, 0), "a/j") == ["n3"]


def test_exceeds_maximum_per_pod_larger_than_any_node():
    s = state([big_queue()], [wl("a/j", 16)], flavors=[PLAIN], nodes=rack_nodes())
    reason = settle(s, 0).pending["a/j"]
    assert reason.code == "exceeds_maximum"
    assert "largest node of flavor h100 has 8" in reason.message


def test_exceeds_maximum_required_domain_too_small():
    s = state(
        [big_queue()],
        [wl("a/j", 8, count=3, topology=TopologyRequest(required="cloud/rack"))],
        flavors=[TAS],
        nodes=rack_nodes(),
        topologies=[TOPO],
    )
    reason = settle(s, 0).pending["a/j"]
    assert reason.code == "exceeds_maximum"
    assert reason.kueue_reason == "TopologyPlacementFailed"
    assert reason.kueue_message == (
        'couldn\'t assign flavors to pod set main: topology "dc" allows to fit only 2 out of 3 pod(s)'
    )


def test_tas_flavor_without_request_in_tas_only_queue_is_unconstrained():
    s = state([big_queue()], [wl("a/j", 8, count=2)], flavors=[TAS], nodes=rack_nodes(), topologies=[TOPO])
    assert len(placed(schedule(s, 0), "a/j")) == 2


def test_topology_request_on_non_tas_flavor_is_no_matching_flavor():
    s = state(
        [big_queue()],
        [wl("a/j", 8, topology=TopologyRequest(required="cloud/rack"))],
        flavors=[PLAIN],
        nodes=rack_nodes(),
    )
    reason = settle(s, 0).pending["a/j"]
    assert reason.code == "no_matching_flavor"
    assert (
        reason.kueue_message
        == 'couldn\'t assign flavors to pod set main: Flavor "h100" does not support TopologyAwareScheduling'
    )


def test_topology_level_missing():
    s = state(
        [big_queue()],
        [wl("a/j", 8, topology=TopologyRequest(required="cloud/superpod"))],
        flavors=[TAS],
        nodes=rack_nodes(),
        topologies=[TOPO],
    )
    reason = settle(s, 0).pending["a/j"]
    assert reason.kueue_message.endswith('Flavor "h100" does not contain the requested level')


def test_no_nodes_means_quota_only():
    s = state(
        [big_queue()],
        [wl("a/j", 8, count=4, topology=TopologyRequest(required="cloud/rack"))],
        flavors=[TAS],
        topologies=[TOPO],
    )
    decision = schedule(s, 0).admitted[0]
    assert decision.pod_sets[0].nodes == ()


def test_no_node_matches_flavor_labels():
    other = [node("x", 8, labels={"gpu": "a100"})]
    reason = settle(state([big_queue()], [wl("a/j", 1)], flavors=[PLAIN], nodes=other), 0).pending["a/j"]
    assert reason.code == "no_matching_flavor"
    assert "no node carries flavor h100's labels" in reason.message


def test_tas_exclusion_stats_list_taints_and_selectors():
    nodes = rack_nodes(
        n0={"taints": [Taint("maint", "", "NoSchedule")], "labels": {"zone": "z3"}},
        n1={"labels": {"zone": "z3"}},
    )
    s = state(
        [big_queue()],
        [
            wl("a/r1", 8, admitted="a", flavor="h100", nodes=["n1"]),
            wl("a/j", 8, created=1, selector={"zone": "z3"}, topology=TopologyRequest(required="cloud/rack")),
        ],
        flavors=[TAS],
        nodes=nodes,
        topologies=[TOPO],
    )
    reason = settle(s, 0).pending["a/j"]
    assert reason.kueue_message == (
        "couldn't assign flavors to pod set main: topology \"dc\" doesn't allow to fit any of 1 pod(s). "
        'Total nodes: 4; excluded: nodeSelector: 2, resource "nvidia.com/gpu": 1, taint "maint:NoSchedule": 1'
    )
    assert TAS_NONE.search(reason.kueue_message)
    assert reason.code == "class_exhausted"
    # Free the zone-z3 node: admitted there.
    s2 = state([big_queue()], [s.workloads[1]], flavors=[TAS], nodes=nodes, topologies=[TOPO])
    assert placed(schedule(s2, 0), "a/j") == ["n1"]


# --- nodes with degraded devices are used last ---------------------------------------------------------------


def test_placement_prefers_a_node_without_degraded_devices_over_the_best_fit():
    # n0 is the fullest node that fits (best fit), but one of its cards is degraded: the next best fit wins.
    s = state(
        [big_queue()],
        [
            wl("a/run0", 5, admitted="a", flavor="h100", nodes=["n0"]),
            wl("a/run2", 4, admitted="a", flavor="h100", nodes=["n2"]),
            wl("a/j", 3, created=1),
        ],
        flavors=[PLAIN],
        nodes=rack_nodes(n0={"degraded": 1}),
    )
    assert placed(schedule(s, 0), "a/j") == ["n2"]


def test_placement_uses_a_degraded_node_when_nothing_else_fits():
    s = state(
        [big_queue()],
        [wl(f"a/r{i}", 8, admitted="a", flavor="h100", nodes=[f"n{i}"]) for i in (1, 2, 3)] + [wl("a/j", 4, created=1)],
        flavors=[PLAIN],
        nodes=rack_nodes(n0={"degraded": 2}),
    )
    assert placed(schedule(s, 0), "a/j") == ["n0"]


def test_placement_puts_on_degraded_nodes_only_the_pods_the_others_cannot_hold():
    nodes = rack_nodes(n0={"degraded": 1}, n1={"degraded": 1})
    s = state([big_queue()], [wl("a/j", 4, count=2)], flavors=[PLAIN], nodes=nodes)
    # without the preference both pods would share n0 (fewest nodes); n2 holds both
    assert placed(schedule(s, 0), "a/j") == ["n2", "n2"]
    s = state(
        [big_queue()],
        [
            wl("a/r2", 8, admitted="a", flavor="h100", nodes=["n2"]),
            wl("a/r3", 4, admitted="a", flavor="h100", nodes=["n3"]),
            wl("a/j", 4, count=3, created=1),
        ],
        flavors=[PLAIN],
        nodes=nodes,
    )
    # n3 takes the one pod it has room for; the two others go to one degraded node, best fit among them
    assert placed(schedule(s, 0), "a/j") == ["n0", "n0", "n3"]


def test_topology_domain_choice_is_unchanged_and_the_node_inside_it_preferred():
    s = state(
        [big_queue()],
        [wl("a/j", 8, topology=TopologyRequest(required="cloud/rack"))],
        flavors=[TAS],
        nodes=rack_nodes(n0={"degraded": 1}),
        topologies=[TOPO],
    )
    # both racks fit; rack r0 is chosen as before, and n1 rather than its degraded neighbour
    assert placed(schedule(s, 0), "a/j") == ["n1"]
    s = state(
        [big_queue()],
        [wl("a/j", 8, topology=TopologyRequest(required="kubernetes.io/hostname"))],
        flavors=[TAS],
        nodes=rack_nodes(n0={"degraded": 1}),
        topologies=[TOPO],
    )
    assert placed(schedule(s, 0), "a/j") == ["n1"]


def test_degraded_nodes_do_not_change_what_fits():
    # the same pending reason with and without degraded devices
    def reason(degraded):
        s = state(
            [big_queue()],
            [wl(f"a/r{i}", 6, admitted="a", flavor="h100", nodes=[f"n{i}"]) for i in range(4)]
            + [wl("a/j", 4, count=2, created=1)],
            flavors=[PLAIN],
            nodes=rack_nodes(**{f"n{i}": {"degraded": degraded} for i in range(4)}),
        )
        return settle(s, 0).pending["a/j"]

    assert reason(1).message == reason(0).message
    assert reason(1).code == reason(0).code
