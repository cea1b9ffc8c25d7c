"""Preemption: each policy, borrowWithinCohort threshold, minimal victim sets, messages, pending preemptors."""

from __future__ import annotations

import re

from queues.engine import apply_cycle, schedule, settle

from .builders import GPU, cq, state, wl

PREEMPTED = re.compile(
    r"^Preempted to accommodate a workload \(UID: (?P<uid>[^,]+)(?:, JobUID: (?P<job_uid>[^)]+))?\) due to "
    r"(?P<why>.+?)(?:; preemptor path: (?P<preemptor_path>\S+); preemptee path: (?P<preemptee_path>\S+))?$"
)
PENDING_SUFFIX = re.compile(r"\. Pending the preemption of (?P<count>\d+) workload\(s\)$")


def victims(result) -> dict[str, str]:
    return {p.victim: p.reason for p in result.preemptions}


def test_within_cluster_queue_lower_priority_preempts():
    s = state(
        [cq("a", {"f": {GPU: 8}}, within="LowerPriority")],
        [wl("a/low", 8, admitted="a", priority=1), wl("a/high", 8, priority=10, created=1)],
    )
    result = schedule(s, 5)
    assert victims(result) == {"a/low": "InClusterQueue"}
    pre = result.preemptions[0]
    assert pre.message == (
        "Preempted to accommodate a workload (UID: uid-high, JobUID: job-high) due to prioritization in the "
        "ClusterQueue; preemptor path: /a; preemptee path: /a"
    )
    assert PREEMPTED.match(pre.message)["why"] == "prioritization in the ClusterQueue"
    # Not admitted in the same cycle.
    assert result.admitted == ()
    reason = result.pending["a/high"]
    assert reason.code == "preemption_in_progress"
    assert PENDING_SUFFIX.search(reason.kueue_message)["count"] == "1"
    # While the victim is still evicting the preemptor keeps waiting; once it is gone it is admitted.
    marked = apply_cycle(s, result)
    again = schedule(marked, 6)
    assert again.admitted == ()
    assert again.preemptions == ()
    assert again.pending["a/high"].code == "preemption_in_progress"
    done = schedule(apply_cycle(s, result, complete_evictions=True), 6)
    assert [d.workload for d in done.admitted] == ["a/high"]
    assert done.pending["a/low"].code == "quota_exhausted"


def test_within_cluster_queue_never_does_not_preempt():
    s = state(
        [cq("a", {"f": {GPU: 8}})],
        [wl("a/low", 8, admitted="a", priority=1), wl("a/high", 8, priority=10, created=1)],
    )
    result = schedule(s, 5)
    assert result.preemptions == ()
    assert result.pending["a/high"].code == "quota_exhausted"


def test_within_cluster_queue_lower_or_newer_equal_priority():
    s = state(
        [cq("a", {"f": {GPU: 8}}, within="LowerOrNewerEqualPriority")],
        [wl("a/newer", 8, admitted="a", created=10, priority=3), wl("a/older", 8, created=1, priority=3)],
    )
    assert victims(schedule(s, 20)) == {"a/newer": "InClusterQueue"}
    s2 = state(
        [cq("a", {"f": {GPU: 8}}, within="LowerPriority")],
        [wl("a/newer", 8, admitted="a", created=10, priority=3), wl("a/older", 8, created=1, priority=3)],
    )
    assert victims(schedule(s2, 20)) == {}


def test_reclaim_within_cohort_any_reclaims_from_borrower():
    s = state(
        [
            cq("a", {"f": {GPU: 4}}, cohort="c", reclaim="Any"),
            cq("b", {"f": {GPU: 4}}, cohort="c"),
        ],
        [wl("b/borrower", 8, admitted="b", priority=100), wl("a/owner", 4, created=1)],
    )
    result = schedule(s, 5)
    assert victims(result) == {"b/borrower": "InCohortReclamation"}
    assert result.preemptions[0].message.endswith(
        "due to reclamation within the cohort; preemptor path: /c/a; preemptee path: /c/b"
    )
    final = settle(s, 5)
    assert {w.key for w in final.state.workloads if w.admission} == {"a/owner"}
    assert final.pending["b/borrower"].code == "quota_exhausted"


def test_reclaim_within_cohort_lower_priority_only():
    cqs = [cq("a", {"f": {GPU: 4}}, cohort="c", reclaim="LowerPriority"), cq("b", {"f": {GPU: 4}}, cohort="c")]
    high = state(cqs, [wl("b/borrower", 8, admitted="b", priority=100), wl("a/owner", 4, created=1)])
    assert victims(schedule(high, 5)) == {}
    low = state(cqs, [wl("b/borrower", 8, admitted="b", priority=0), wl("a/owner", 4, priority=1, created=1)])
    assert victims(schedule(low, 5)) == {"b/borrower": "InCohortReclamation"}


def test_reclaim_only_from_borrowing_queues():
    cqs = [cq("a", {"f": {GPU: 4}}, cohort="c", reclaim="Any"), cq("b", {"f": {GPU: 8}}, cohort="c")]
    # b uses its own nominal only: nothing to reclaim.
    s = state(cqs, [wl("b/own", 8, admitted="b"), wl("a/run", 4, admitted="a"), wl("a/j", 4, created=1)])
    result = schedule(s, 5)
    assert result.preemptions == ()
    assert result.pending["a/j"].code == "quota_exhausted"


def test_preemptor_must_fit_nominal_without_borrow_within_cohort():
    cqs = [
        cq("a", {"f": {GPU: 4}}, cohort="c", reclaim="Any", within="LowerPriority"),
        cq("b", {"f": {GPU: 4}}, cohort="c"),
    ]
    # a/j needs 6 > a's nominal 4: it could only run by borrowing, so it may not preempt b's borrower.
    s = state(cqs, [wl("b/borrower", 6, admitted="b", priority=0), wl("a/j", 6, priority=10, created=1)])
    result = schedule(s, 5)
    assert result.preemptions == ()


def test_borrow_within_cohort_threshold():
    def setup(victim_priority: int):
        cqs = [
            cq("a", {"f": {GPU: 4}}, cohort="c", reclaim="Any", bwc="LowerPriority", threshold=50),
            cq("b", {"f": {GPU: 4}}, cohort="c"),
        ]
        return state(
            cqs, [wl("b/borrower", 6, admitted="b", priority=victim_priority), wl("a/j", 6, priority=100, created=1)]
        )

    result = schedule(setup(10), 5)
    assert victims(result) == {"b/borrower": "InCohortReclaimWhileBorrowing"}
    assert "reclamation within the cohort while borrowing" in result.preemptions[0].message
    assert victims(schedule(setup(60), 5)) == {}


def test_preemption_minimal_victim_set():
    s = state(
        [cq("a", {"f": {GPU: 8}}, within="LowerPriority")],
        [
            wl("a/v1", 1, admitted="a", priority=1, created=1),
            wl("a/v2", 1, admitted="a", priority=2, created=2),
            wl("a/v3", 4, admitted="a", priority=3, created=3),
            wl("a/keep", 2, admitted="a", priority=20, created=4),
            wl("a/p", 4, priority=10, created=5),
        ],
    )
    result = schedule(s, 10)
    assert victims(result) == {"a/v3": "InClusterQueue"}
    assert PENDING_SUFFIX.search(result.pending["a/p"].kueue_message)["count"] == "1"


def test_preemption_candidates_most_recently_admitted_first():
    s = state(
        [cq("a", {"f": {GPU: 4}}, within="LowerPriority")],
        [
            wl("a/early", 2, admitted="a", priority=1, admitted_at=1),
            wl("a/late", 2, admitted="a", priority=1, admitted_at=5),
            wl("a/p", 2, priority=10, created=6),
        ],
    )
    assert victims(schedule(s, 10)) == {"a/late": "InClusterQueue"}


def test_preemption_prefers_reclaim_over_own_queue():
    # Either victim would make room; the borrower in the other queue is taken first (hierarchical reclaim).
    s = state(
        [
            cq("a", {"f": {GPU: 6}}, cohort="c", reclaim="Any", within="LowerPriority"),
            cq("b", {"f": {GPU: 2}}, cohort="c"),
        ],
        [
            wl("a/mine", 4, admitted="a", priority=0),
            wl("b/borrower", 4, admitted="b", priority=50),
            wl("a/p", 2, priority=10, created=1),
        ],
    )
    assert victims(schedule(s, 5)) == {"b/borrower": "InCohortReclamation"}


def test_preemption_needs_own_victim_when_reclaim_is_not_enough():
    s = state(
        [
            cq("a", {"f": {GPU: 4}}, cohort="c", reclaim="Any", within="LowerPriority"),
            cq("b", {"f": {GPU: 4}}, cohort="c"),
        ],
        [
            wl("a/mine", 2, admitted="a", priority=0),
            wl("b/borrower", 6, admitted="b", priority=50),
            wl("a/p", 4, priority=10, created=1),
        ],
    )
    assert victims(schedule(s, 5)) == {"b/borrower": "InCohortReclamation", "a/mine": "InClusterQueue"}


def test_settle_completes_preemption_and_requeues_victim():
    s = state(
        [cq("a", {"f": {GPU: 8}}, within="LowerPriority")],
        [wl("a/low", 8, admitted="a", priority=1), wl("a/high", 8, priority=10, created=1)],
    )
    final = settle(s, 5)
    by_key = {w.key: w for w in final.state.workloads}
    assert by_key["a/high"].admission is not None
    assert by_key["a/low"].admission is None
    assert by_key["a/low"].requeued_at == 5
    assert [p.victim for c in final.cycles for p in c.preemptions] == ["a/low"]


def test_overlapping_preemption_targets_in_one_cycle():
    s = state(
        [
            cq("a", {"f": {GPU: 4}}, cohort="c", reclaim="Any"),
            cq("b", {"f": {GPU: 4}}, cohort="c", reclaim="Any"),
            cq("x", {"f": {GPU: 0}}, cohort="c"),
        ],
        [wl("x/borrower", 8, admitted="x"), wl("a/p", 4, created=1), wl("b/p", 4, created=2)],
    )
    result = schedule(s, 5)
    assert victims(result) == {"x/borrower": "InCohortReclamation"}
    assert result.pending["b/p"].kueue_message in (
        "Workload has overlapping preemption targets with another workload",
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor f, "
        "4 more needed. Pending the preemption of 1 workload(s)",
    )
