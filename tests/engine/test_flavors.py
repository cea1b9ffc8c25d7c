"""Flavor assignment: order, fungibility, taints, node affinity, message assembly, gang admission."""

from __future__ import annotations

from queues.engine import (
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodSet,
    ResourceFlavor,
    Taint,
    Toleration,
    schedule,
    settle,
)

from .builders import GPU, cq, state, wl


def flavors_of(result, key):
    decision = next(d for d in result.admitted if d.workload == key)
    return decision.pod_sets[0].flavors, decision.borrowing


def test_flavor_order_first_flavor_with_room_wins():
    s = state([cq("a", {"h100": {GPU: 4}, "a100": {GPU: 8}})], [wl("a/j", 4)])
    assert flavors_of(schedule(s, 0), "a/j") == ({GPU: "h100"}, False)
    s = state([cq("a", {"h100": {GPU: 4}, "a100": {GPU: 8}})], [wl("a/j", 6)])
    assert flavors_of(schedule(s, 0), "a/j") == ({GPU: "a100"}, False)


def _borrow_setup(when_borrow: str):
    # h100 fits only by borrowing from b; a100 fits in a's nominal quota.
    return state(
        [
            cq("a", {"h100": {GPU: 2}, "a100": {GPU: 8}}, cohort="c", when_borrow=when_borrow),
            cq("b", {"h100": {GPU: 8}, "a100": {GPU: 0}}, cohort="c"),
        ],
        [wl("a/j", 4)],
    )


def test_flavor_fungibility_when_can_borrow_may_stop_search():
    assert flavors_of(schedule(_borrow_setup("MayStopSearch"), 0), "a/j") == ({GPU: "h100"}, True)


def test_flavor_fungibility_when_can_borrow_try_next_flavor():
    assert flavors_of(schedule(_borrow_setup("TryNextFlavor"), 0), "a/j") == ({GPU: "a100"}, False)


def _preempt_setup(when_preempt: str):
    # h100 is full of lower-priority work (preemption possible); a100 has room.
    return state(
        [cq("a", {"h100": {GPU: 4}, "a100": {GPU: 4}}, within="LowerPriority", when_preempt=when_preempt)],
        [wl("a/low", 4, admitted="a", flavor="h100", priority=0), wl("a/hi", 4, priority=10, created=1)],
    )


def test_flavor_fungibility_when_can_preempt_try_next_flavor():
    result = schedule(_preempt_setup("TryNextFlavor"), 5)
    assert flavors_of(result, "a/hi") == ({GPU: "a100"}, False)
    assert result.preemptions == ()


def test_flavor_fungibility_when_can_preempt_may_stop_search():
    result = schedule(_preempt_setup("MayStopSearch"), 5)
    assert result.admitted == ()
    assert [p.victim for p in result.preemptions] == ["a/low"]
    assert result.pending["a/hi"].code == "preemption_in_progress"
    assert result.pending["a/hi"].kueue_message == (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, "
        "4 more needed. Pending the preemption of 1 workload(s)"
    )


def test_flavor_untolerated_taint_skips_flavor():
    flavors = [ResourceFlavor("spot", node_taints=(Taint("spot", "true", "NoSchedule"),)), ResourceFlavor("od")]
    s = state([cq("a", {"spot": {GPU: 8}, "od": {GPU: 2}})], [wl("a/j", 4)], flavors=flavors)
    reason = settle(s, 0).pending["a/j"]
    assert reason.kueue_message == (
        "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor od, previously "
        "considered podsets requests (0) + current podset request (4) > maximum capacity (2), "
        "untolerated taint {spot true NoSchedule <nil>} in flavor spot"
    )
    assert reason.code == "exceeds_maximum"
    tolerant = wl("a/j", 4, tolerations=[Toleration("spot", "Equal", "true", "NoSchedule")])
    result = schedule(state(s.cluster_queues, [tolerant], flavors=flavors), 0)
    assert flavors_of(result, "a/j")[0] == {GPU: "spot"}


def test_flavor_tolerations_on_flavor_count():
    flavors = [
        ResourceFlavor(
            "spot",
            node_taints=(Taint("spot", "", "NoSchedule"),),
            tolerations=(Toleration("spot", "Exists"),),
        )
    ]
    result = schedule(state([cq("a", {"spot": {GPU: 8}})], [wl("a/j", 4)], flavors=flavors), 0)
    assert result.admitted


def test_flavor_only_taint_reason_is_no_matching_flavor():
    flavors = [ResourceFlavor("spot", node_taints=(Taint("spot", "", "NoExecute"),))]
    reason = settle(state([cq("a", {"spot": {GPU: 8}})], [wl("a/j", 4)], flavors=flavors), 0).pending["a/j"]
    assert reason.code == "no_matching_flavor"
    assert reason.kueue_message.endswith("untolerated taint {spot  NoExecute <nil>} in flavor spot")
    assert "tainted" in reason.message


def test_flavor_node_affinity_mismatch():
    flavors = [ResourceFlavor("h100", node_labels={"gpu": "h100"}), ResourceFlavor("a100", node_labels={"gpu": "a100"})]
    s = state(
        [cq("a", {"h100": {GPU: 8}, "a100": {GPU: 8}})],
        [wl("a/j", 2, selector={"gpu": "a100", "zone": "z1"})],
        flavors=flavors,
    )
    # zone is not a flavor label key: ignored by the flavor check.
    assert flavors_of(schedule(s, 0), "a/j")[0] == {GPU: "a100"}
    affinity = PodSet(
        "main",
        1,
        {GPU: 2},
        node_affinity=(NodeSelectorTerm((NodeSelectorRequirement("gpu", "In", ("b200",)),)),),
    )
    reason = settle(state(s.cluster_queues, [wl("a/j", pod_sets=[affinity])], flavors=flavors), 0).pending["a/j"]
    assert reason.kueue_message == (
        "couldn't assign flavors to pod set main: flavor a100 doesn't match node affinity, "
        "flavor h100 doesn't match node affinity"
    )
    assert reason.code == "no_matching_flavor"


def test_flavor_reasons_sorted_as_strings():
    s = state(
        [cq("a", {"h100": {GPU: 4}, "a100": {GPU: 4}})],
        [
            wl("a/r1", 4, admitted="a", flavor="h100"),
            wl("a/r2", 2, admitted="a", flavor="a100"),
            wl("a/j", 4, created=1),
        ],
    )
    reason = settle(s, 0).pending["a/j"]
    # a100 sorts before h100 although h100 is first in the queue's flavor order.
    assert reason.kueue_message == (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor a100, "
        "2 more needed, insufficient unused quota for nvidia.com/gpu in flavor h100, 4 more needed"
    )
    assert reason.details["flavor"] == "h100"


def test_flavor_pod_sets_joined_by_semicolon_and_gang():
    pod_sets = [PodSet("driver", 1, {GPU: 4}), PodSet("workers", 1, {GPU: 4})]
    s = state(
        [cq("a", {"f": {GPU: 8}})],
        [wl("a/run", 6, admitted="a"), wl("a/j", pod_sets=pod_sets, created=1)],
    )
    reason = settle(s, 0).pending["a/j"]
    assert reason.kueue_message == (
        "couldn't assign flavors to pod set driver: insufficient unused quota for nvidia.com/gpu in flavor f, "
        "2 more needed; couldn't assign flavors to pod set workers: insufficient unused quota for nvidia.com/gpu "
        "in flavor f, 6 more needed"
    )
    # Gang: neither pod set is admitted on its own.
    assert all(w.admission is None for w in settle(s, 0).state.workloads if w.key == "a/j")


def test_flavor_max_capacity_counts_previous_pod_sets():
    pod_sets = [PodSet("a", 1, {GPU: 6}), PodSet("b", 1, {GPU: 4})]
    reason = settle(state([cq("q", {"f": {GPU: 8}})], [wl("q/j", pod_sets=pod_sets)]), 0).pending["q/j"]
    assert reason.kueue_message == (
        "couldn't assign flavors to pod set b: insufficient quota for nvidia.com/gpu in flavor f, previously "
        "considered podsets requests (6) + current podset request (4) > maximum capacity (8)"
    )


def test_flavor_resource_groups_assigned_independently():
    from .builders import group

    groups = [group({"cpu-od": {"cpu": 4000}}), group({"h100": {GPU: 2}, "a100": {GPU: 8}})]
    s = state([cq("a", groups=groups)], [wl("a/j", requests={"cpu": 2000, GPU: 4})])
    decision = schedule(s, 0).admitted[0]
    assert decision.pod_sets[0].flavors == {"cpu": "cpu-od", GPU: "a100"}
