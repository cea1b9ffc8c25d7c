"""Public API: explain (feasibility), ETA forward simulation, settle, codes and their order."""

from __future__ import annotations

from queues.engine import WAIT_CODE_ORDER, estimate_admission, explain, settle

from .builders import GPU, cq, state, wl


def test_estimate_admission_waits_for_running_workload_to_end():
    s = state([cq("a", {"f": {GPU: 8}})], [wl("a/run", 8, admitted="a"), wl("a/target", 4, created=1)])
    assert estimate_admission(s, "a/target", now=10, end_times={"a/run": 100}) == 100


def test_estimate_admission_counts_workloads_ahead():
    s = state(
        [cq("a", {"f": {GPU: 8}})],
        [
            wl("a/run", 8, admitted="a"),
            wl("a/ahead", 8, priority=5, created=1, runtime=50),
            wl("a/target", 4, created=2),
        ],
    )
    assert estimate_admission(s, "a/target", now=10, end_times={"a/run": 100}) == 150


def test_estimate_admission_never_and_horizon():
    s = state([cq("a", {"f": {GPU: 8}})], [wl("a/run", 8, admitted="a"), wl("a/target", 4, created=1)])
    assert estimate_admission(s, "a/target", now=0, end_times={}) is None
    assert estimate_admission(s, "a/target", now=0, end_times={"a/run": 500}, horizon=100) is None
    too_big = wl("a/new", 16, created=1)
    assert estimate_admission(s, too_big, now=0, end_times={"a/run": 5}) is None


def test_estimate_admission_uses_default_runtime_for_unknown_jobs():
    s = state(
        [cq("a", {"f": {GPU: 8}})],
        [wl("a/run", 8, admitted="a"), wl("a/ahead", 8, created=1), wl("a/target", 8, created=2)],
    )
    assert estimate_admission(s, "a/target", now=0, end_times={"a/run": 10}) is None
    assert estimate_admission(s, "a/target", now=0, end_times={"a/run": 10}, default_runtime=30) == 40


def test_estimate_admission_for_new_workload_already_fitting():
    s = state([cq("a", {"f": {GPU: 8}})], [wl("a/run", 4, admitted="a")])
    assert estimate_admission(s, wl("a/new", 4, created=3), now=3, end_times={}) == 3


def test_explain_admitted_workload():
    s = state([cq("a", {"f": {GPU: 8}})], [wl("a/run", 4, admitted="a")])
    e = explain(s, "a/run", now=0)
    assert e.admissible
    assert e.assignment is not None
    assert e.reason is None


def test_explain_prospective_preemption():
    s = state(
        [cq("a", {"f": {GPU: 8}}, within="LowerPriority")],
        [wl("a/low", 8, admitted="a", priority=0)],
    )
    e = explain(s, wl("a/high", 4, priority=9, created=1), now=1)
    assert not e.admissible
    assert e.preemption_targets == ("a/low",)
    assert e.reason is not None
    assert e.reason.code == "preemption_in_progress"
    assert e.reason.kueue_message.endswith(". Pending the preemption of 1 workload(s)")


def test_wait_code_order_is_documented_order():
    assert WAIT_CODE_ORDER[:3] == ("misconfigured", "exceeds_maximum", "no_matching_flavor")
    assert WAIT_CODE_ORDER[-3:] == ("health_blocked", "topology_fragmented", "class_exhausted")


def test_misconfigured_wins_over_exceeds_maximum():
    s = state([cq("a", {"f": {GPU: 8}}, stop="Hold")], [wl("a/j", 100)])
    assert settle(s, 0).pending["a/j"].code == "misconfigured"


def test_exceeds_maximum_wins_over_no_matching_flavor():
    from queues.engine import ResourceFlavor, Taint

    flavors = [ResourceFlavor("spot", node_taints=(Taint("x", "", "NoSchedule"),)), ResourceFlavor("od")]
    s = state([cq("a", {"spot": {GPU: 64}, "od": {GPU: 8}})], [wl("a/j", 16)], flavors=flavors)
    assert settle(s, 0).pending["a/j"].code == "exceeds_maximum"
