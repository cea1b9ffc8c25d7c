"""Fair sharing in the cycle: the admission tournament and the fair-sharing preemption strategies."""

from __future__ import annotations

from dataclasses import replace

from queues.engine import schedule, settle
from queues.engine.model import Cohort, FairSharing

from .builders import GPU, cq, state, wl

LTE = "LessThanOrEqualToFinalShare"
LTI = "LessThanInitialShare"


def fair(s, *strategies: str):
    return replace(s, fair_sharing=FairSharing(tuple(strategies)) if strategies else FairSharing())


def victims(result) -> list[tuple[str, str]]:
    return sorted((p.victim, p.reason) for p in result.preemptions)


# ---------------------------------------------------------------------------------------------- admission


def _two_borrowers(weight_b: float = 1.0):
    # 12 GPUs in the cohort, 10 used, room for one 2-GPU job. a already borrows 2, b is at its nominal.
    return state(
        [
            cq("a", {"f": {GPU: 4}}, cohort="c"),
            replace(cq("b", {"f": {GPU: 4}}, cohort="c"), fair_weight=weight_b),
            cq("z", {"f": {GPU: 4}}, cohort="c"),
        ],
        [
            wl("a/run", 6, admitted="a"),
            wl("b/run", 4, admitted="b"),
            wl("a/next", 2, priority=10, created=0),
            wl("b/next", 2, priority=0, created=5),
        ],
    )


def test_admission_classic_order_is_priority_without_fair_sharing():
    result = schedule(_two_borrowers(), 10)
    assert [d.workload for d in result.admitted] == ["a/next"]


def test_admission_lowest_share_first_with_fair_sharing():
    # With its head a would borrow 4 of 12 (333), b only 2 (167): b wins although a/next has higher priority.
    result = schedule(fair(_two_borrowers()), 10)
    assert [d.workload for d in result.admitted] == ["b/next"]
    assert result.pending["a/next"].kueue_message == "Workload no longer fits after processing another workload"


def test_admission_weight_zero_goes_last():
    s = fair(_two_borrowers(weight_b=0.0))
    assert [d.workload for d in schedule(s, 10).admitted] == ["a/next"]


def test_admission_non_borrowing_head_wins_over_lower_share():
    # c/next fits in c's nominal quota; b/next would borrow (share 83) -- the non-borrowing one goes first
    # even though c's share with it is 0 as well; then b/next no longer fits.
    s = state(
        [cq("b", {"f": {GPU: 4}}, cohort="c"), cq("c", {"f": {GPU: 4}}, cohort="c")],
        [
            wl("b/run", 4, admitted="b"),
            wl("c/run", 2, admitted="c"),
            wl("b/next", 2, priority=100, created=0),
            wl("c/next", 2, created=5),
        ],
    )
    result = schedule(fair(s), 10)
    assert [d.workload for d in result.admitted] == ["c/next"]


def test_admission_tournament_through_nested_cohorts():
    # org = team-x (x1, x2) + y, 4 GPUs each; x1 runs 6 (2 lent by x2), x2 2, y 2: room for one 2-GPU job.
    # x2/next keeps x2 within its nominal quota, but the team-x subtree would borrow 2 from org (share 167);
    # y/next keeps y within nominal (share 0). At org the non-borrowing subtree wins: y/next, although
    # x2/next has the higher priority and the classic order takes it.
    s = state(
        [
            cq("x1", {"f": {GPU: 4}}, cohort="team-x"),
            cq("x2", {"f": {GPU: 4}}, cohort="team-x"),
            cq("y", {"f": {GPU: 4}}, cohort="org"),
        ],
        [
            wl("x1/run", 6, admitted="x1"),
            wl("x2/run", 2, admitted="x2"),
            wl("y/run", 2, admitted="y"),
            wl("x2/next", 2, priority=5, created=0),
            wl("y/next", 2, created=1),
        ],
        cohorts=[Cohort("org"), Cohort("team-x", parent="org")],
    )
    assert [d.workload for d in schedule(fair(s), 10).admitted] == ["y/next"]
    assert [d.workload for d in schedule(s, 10).admitted] == ["x2/next"]


def test_admission_within_one_queue_keeps_queue_order():
    s = state(
        [cq("a", {"f": {GPU: 4}}, cohort="c"), cq("b", {"f": {GPU: 4}}, cohort="c")],
        [wl("a/low", 2, priority=1, created=0), wl("a/high", 2, priority=9, created=5), wl("a/mid", 2, created=1)],
    )
    order = [d.workload for c in settle(fair(s), 10).cycles for d in c.admitted]
    assert order == ["a/high", "a/low", "a/mid"]


# ---------------------------------------------------------------------------------------------- preemption


def _cohort(b_jobs: int, b_size: int, *, reclaim: str = "Any", a_used: int = 2, priority: int = 0):
    return state(
        [
            cq("a", {"f": {GPU: 4}}, cohort="c", reclaim=reclaim),
            cq("b", {"f": {GPU: 4}}, cohort="c"),
            cq("z", {"f": {GPU: 4}}, cohort="c"),
        ],
        [
            wl("a/old", a_used, admitted="a"),
            *[wl(f"b/w{i}", b_size, admitted="b", created=i, priority=priority) for i in range(b_jobs)],
            wl("a/new", 4, created=10),
        ],
    )


def test_preemption_less_than_or_equal_to_final_share():
    # a with a/new: 6 of 4 -> borrows 2 -> 167. b borrows 6 (500); removing one 2-GPU job -> 333 >= 167,
    # a second one -> 167 >= 167: two victims, newest first, reason InCohortFairSharing.
    result = schedule(fair(_cohort(5, 2), LTE), 20)
    assert victims(result) == [("b/w3", "InCohortFairSharing"), ("b/w4", "InCohortFairSharing")]
    assert result.preemptions[0].message == (
        "Preempted to accommodate a workload (UID: uid-new, JobUID: job-new) due to Fair Sharing within the "
        "cohort; preemptor path: /c/a; preemptee path: /c/b"
    )


def test_preemption_final_share_refuses_what_initial_share_allows():
    # b runs two 4-GPU jobs (borrows 4: 333). Removing one leaves b at 0 < 167: S2-a refuses; S2-b only asks
    # 167 < 333 and preempts the newest.
    s = _cohort(2, 4)
    assert victims(schedule(fair(s, LTE), 20)) == []
    assert victims(schedule(fair(s, LTI), 20)) == [("b/w1", "InCohortFairSharing")]
    assert victims(schedule(fair(s, LTE, LTI), 20)) == [("b/w1", "InCohortFairSharing")]
    # Classic preemption would not reclaim at all: a/new would borrow.
    assert victims(schedule(s, 20)) == []


def test_preemption_equal_shares_do_not_preempt():
    # a with a/new borrows 2 (167); b borrows 2 (167): neither strategy holds.
    assert victims(schedule(fair(_cohort(3, 2, a_used=4)), 20)) == []


def test_preemption_within_nominal_reclaims_without_share_test():
    # a uses nothing: with a/new it stays within its nominal quota and reclaims (InCohortReclamation).
    result = schedule(fair(_cohort(6, 2, a_used=0)), 20)
    assert victims(result) == [("b/w4", "InCohortReclamation"), ("b/w5", "InCohortReclamation")]


def test_preemption_reclaim_policy_still_applies():
    s = _cohort(5, 2, reclaim="LowerPriority", priority=5)
    assert victims(schedule(fair(s), 20)) == []
    assert victims(schedule(fair(_cohort(5, 2, reclaim="Never")), 20)) == []


def test_preemption_borrow_within_cohort_is_not_needed_nor_used():
    s = _cohort(2, 4)
    s = replace(
        s,
        cluster_queues=(
            cq("a", {"f": {GPU: 4}}, cohort="c", reclaim="Any", bwc="LowerPriority", threshold=-100),
            *s.cluster_queues[1:],
        ),
    )
    # The threshold would forbid every victim in classic preemption; fair sharing ignores it.
    assert victims(schedule(fair(s), 20)) == [("b/w1", "InCohortFairSharing")]


def test_preemption_targets_highest_share_queue():
    # 18 GPUs, all in use. a with a/new borrows 2 (111); b borrows 4 (222), d borrows 2 (111): b is visited
    # first and one of its jobs is enough (b then 111 >= 111).
    s = state(
        [
            cq("a", {"f": {GPU: 4}}, cohort="c", reclaim="Any"),
            cq("b", {"f": {GPU: 4}}, cohort="c"),
            cq("d", {"f": {GPU: 4}}, cohort="c"),
            cq("e", {"f": {GPU: 6}}, cohort="c"),
        ],
        [
            *[wl(f"a/w{i}", 2, admitted="a", created=i) for i in range(2)],
            *[wl(f"b/w{i}", 2, admitted="b", created=i) for i in range(4)],
            *[wl(f"d/w{i}", 2, admitted="d", created=i) for i in range(3)],
            wl("a/new", 2, created=10),
        ],
    )
    assert victims(schedule(fair(s), 20)) == [("b/w3", "InCohortFairSharing")]


def test_preemption_within_cluster_queue_keeps_its_reason():
    s = state(
        [cq("a", {"f": {GPU: 4}}, within="LowerPriority")],
        [wl("a/low", 4, admitted="a", priority=1), wl("a/high", 4, priority=10, created=1)],
    )
    assert victims(schedule(fair(s), 5)) == [("a/low", "InClusterQueue")]


def test_preemption_settles_to_equal_shares():
    result = settle(fair(_cohort(5, 2)), 20)
    running = {w.key for w in result.state.workloads if w.admission is not None}
    assert "a/new" in running
    assert sum(1 for k in running if k.startswith("b/")) == 3
