"""Quota rules: nominal, borrowing, borrowingLimit, lendingLimit, nested cohorts, undeclared resources."""

from __future__ import annotations

import re

from queues.engine import Cohort, explain, schedule, settle

from .builders import GPU, cq, group, state, wl

IUQ = re.compile(
    r"insufficient unused quota for (?P<resource>\S+) in flavor (?P<flavor>\S+), (?P<missing>\S+) more needed"
)
MAXCAP = re.compile(
    r"insufficient quota for (?P<resource>\S+) in flavor (?P<flavor>\S+), previously considered podsets requests "
    r"\((?P<previous>[^)]*)\) \+ current podset request \((?P<request>[^)]*)\) > maximum capacity \((?P<max>[^)]*)\)"
)


def admitted(result) -> dict[str, object]:
    return {d.workload: d for d in result.admitted}


def test_quota_fits_within_nominal_is_admitted_without_borrowing():
    s = state([cq("a", {"f": {GPU: 8}})], [wl("a/j1", 4), wl("a/j2", 4, created=1)])
    result = schedule(s, now=10)
    # One head per ClusterQueue per cycle.
    assert list(admitted(result)) == ["a/j1"]
    assert not result.admitted[0].borrowing
    final = settle(s, now=10)
    assert {w.key for w in final.state.workloads if w.admission} == {"a/j1", "a/j2"}
    assert final.pending == {}


def test_quota_exceeding_nominal_without_cohort_waits_with_kueue_message():
    s = state([cq("a", {"f": {GPU: 8}})], [wl("a/run", 6, admitted="a"), wl("a/j", 4, created=1)])
    final = settle(s, now=10)
    reason = final.pending["a/j"]
    assert reason.code == "quota_exhausted"
    assert reason.kueue_message == (
        "couldn't assign flavors to pod set main: "
        "insufficient unused quota for nvidia.com/gpu in flavor f, 2 more needed"
    )
    m = IUQ.search(reason.kueue_message)
    assert m
    assert m["missing"] == "2"
    assert "uses 6 of its 8" in reason.message
    assert reason.details["missing"] == 2


def test_quota_borrows_unused_quota_from_cohort():
    s = state(
        [cq("a", {"f": {GPU: 4}}, cohort="c"), cq("b", {"f": {GPU: 8}}, cohort="c")],
        [wl("a/j", 10)],
    )
    result = schedule(s, now=0)
    assert result.admitted[0].borrowing
    assert result.admitted[0].pod_sets[0].flavors == {GPU: "f"}


def test_quota_borrowing_limit_reached_is_borrow_limit():
    s = state(
        [cq("a", {"f": {GPU: (8, 4)}}, cohort="c"), cq("b", {"f": {GPU: 16}}, cohort="c")],
        [wl("a/run", 8, admitted="a"), wl("a/j", 6, created=1)],
    )
    final = settle(s, now=5)
    reason = final.pending["a/j"]
    assert reason.code == "borrow_limit"
    assert reason.message == (
        "Your team uses 8 of its 8 f GPUs and this job needs 6. The cohort has 16 idle, "
        "but your borrowing limit of 4 is reached."
    )
    assert reason.kueue_message.endswith("insufficient unused quota for nvidia.com/gpu in flavor f, 2 more needed")
    # Within the limit it is admitted.
    ok = settle(state(s.cluster_queues, [wl("a/run", 8, admitted="a"), wl("a/j", 4, created=1)]), now=5)
    assert ok.pending == {}


def test_quota_lending_limit_keeps_private_part():
    # b lends at most 2 of its 8: a can borrow only 2 although b is idle.
    s = state(
        [cq("a", {"f": {GPU: 4}}, cohort="c"), cq("b", {"f": {GPU: (8, None, 2)}}, cohort="c")],
        [wl("a/j", 7)],
    )
    final = settle(s, now=0)
    reason = final.pending["a/j"]
    assert reason.code == "exceeds_maximum"
    assert MAXCAP.search(reason.kueue_message)["max"] == "6"
    fits = settle(state(s.cluster_queues, [wl("a/j", 6)]), now=0)
    assert fits.pending == {}
    # b keeps its private 6 for itself even when a borrows everything it may.
    both = settle(state(s.cluster_queues, [wl("a/j", 6), wl("b/k", 6, created=1)]), now=0)
    assert both.pending == {}


def test_quota_lending_limit_quota_exhausted_mentions_lending():
    s = state(
        [cq("a", {"f": {GPU: 4}}, cohort="c"), cq("b", {"f": {GPU: (8, None, 2)}}, cohort="c")],
        [wl("a/run", 4, admitted="a"), wl("a/j", 3, created=1)],
    )
    reason = settle(s, now=0).pending["a/j"]
    assert reason.code == "quota_exhausted"
    assert "held back by borrowing or lending limits" in reason.message
    assert reason.details["cohortIdle"] == 8
    assert reason.details["borrowable"] == 2


def test_quota_nested_cohorts_share_parent_quota():
    # team-a is in cohort "ml", whose parent "org" has 8 GPUs of its own (Cohort resourceGroups).
    cohorts = [
        Cohort("org", resource_groups=(group({"f": {GPU: 8}}),)),
        Cohort("ml", parent="org"),
    ]
    s = state([cq("a", {"f": {GPU: 2}}, cohort="ml")], [wl("a/j", 10)], cohorts=cohorts)
    result = schedule(s, now=0)
    assert admitted(result)["a/j"].borrowing
    too_big = settle(state(s.cluster_queues, [wl("a/j", 11)], cohorts=cohorts), now=0)
    assert too_big.pending["a/j"].code == "exceeds_maximum"
    assert MAXCAP.search(too_big.pending["a/j"].kueue_message)["max"] == "10"


def test_quota_nested_cohort_borrowing_limit_on_cohort():
    cohorts = [
        Cohort("org", resource_groups=(group({"f": {GPU: 8}}),)),
        Cohort("ml", parent="org", resource_groups=(group({"f": {GPU: (0, 3)}}),)),
    ]
    s = state([cq("a", {"f": {GPU: 2}}, cohort="ml")], [wl("a/j", 6)], cohorts=cohorts)
    reason = settle(s, now=0).pending["a/j"]
    assert reason.code == "exceeds_maximum"
    assert MAXCAP.search(reason.kueue_message)["max"] == "5"


def test_quota_undeclared_resource_is_unavailable():
    s = state([cq("a", {"f": {"cpu": 8000}})], [wl("a/j", requests={GPU: 1, "cpu": 1000})])
    reason = settle(s, now=0).pending["a/j"]
    assert (
        reason.kueue_message
        == "couldn't assign flavors to pod set main: resource nvidia.com/gpu unavailable in ClusterQueue"
    )
    assert reason.code == "no_matching_flavor"
    assert reason.kueue_reason == "NoMatchingFlavor"


def test_quota_zero_requests_are_ignored():
    s = state([cq("a", {"f": {"cpu": 8000}})], [wl("a/j", requests={GPU: 0, "cpu": 1000})])
    result = schedule(s, now=0)
    assert admitted(result)["a/j"].pod_sets[0].flavors == {"cpu": "f"}


def test_quota_borrows_only_declared_flavors():
    # b's flavor g is idle but a does not declare g: a cannot use it.
    s = state(
        [cq("a", {"f": {GPU: 2}}, cohort="c"), cq("b", {"g": {GPU: 8}}, cohort="c")],
        [wl("a/j", 4)],
    )
    reason = settle(s, now=0).pending["a/j"]
    assert reason.code == "exceeds_maximum"
    assert "flavor g" not in reason.kueue_message


def test_quota_pods_resource_counts_pods():
    s = state(
        [cq("a", {"f": {GPU: 16, "pods": 2}})],
        [wl("a/j", 1, count=3)],
    )
    reason = settle(s, now=0).pending["a/j"]
    assert "pods in flavor f" in reason.kueue_message
    assert reason.code == "exceeds_maximum"


def test_quota_cpu_and_memory_messages_use_kueue_units():
    s = state(
        [cq("a", {"f": {"cpu": 4000, "memory": 8 * 2**30}})],
        [
            wl("a/run", requests={"cpu": 3500, "memory": 2**30}, admitted="a"),
            wl("a/j", requests={"cpu": 1000, "memory": 4 * 2**30}, created=1),
        ],
    )
    reason = settle(s, now=0).pending["a/j"]
    assert reason.kueue_message == (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor f, 500m more needed"
    )


def test_quota_explain_feasibility_of_unsubmitted_workload():
    s = state([cq("a", {"f": {GPU: 8}})], [wl("a/run", 6, admitted="a")])
    ok = explain(s, wl("a/new", 2, created=5), now=5)
    assert ok.admissible
    assert ok.assignment is not None
    assert ok.assignment.pod_sets[0].flavors == {GPU: "f"}
    bad = explain(s, wl("a/new", 4, created=5), now=5)
    assert not bad.admissible
    assert bad.reason is not None
    assert bad.reason.code == "quota_exhausted"
    never = explain(s, wl("a/new", 9, created=5), now=5)
    assert never.reason is not None
    assert never.reason.code == "exceeds_maximum"
    assert "at most 8" in never.reason.message
