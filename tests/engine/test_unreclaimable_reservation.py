"""Capacity held for a preemptor that cannot reclaim (issue 16, item 1).

Kueue, pkg/scheduler/scheduler.go (``reserveCapacityForUnreclaimablePreempt`` and ``resourcesToReserve``):
a head that needs preemption, finds no candidates and whose ClusterQueue cannot always reclaim
(``preemption.CanAlwaysReclaim``: ``reclaimWithinCohort`` is ``Any``) keeps the capacity it would use for the
rest of the cycle, so a lower-ordered queue of the cohort cannot borrow it; that queue's head gets "Workload no
longer fits after processing another workload".

Worked example: cohort ``c`` of queue ``a`` (4 GPUs nominal) and ``b`` (none, borrows). ``b/run`` borrows 2 of
``a``'s 4. ``a/want`` asks for 4: within nominal, only 2 available, no candidate it may preempt, so it
reserves min(4, 4 - 0) = 4 for the cycle. ``b/more`` (2 GPUs, borrowing) comes after it in the cycle (it
borrows) and no longer fits. Before this rule the engine admitted ``b/more`` into the last 2 GPUs.
"""

from __future__ import annotations

from queues.engine import schedule

from .builders import GPU, cq, state, wl


def _cohort(reclaim: str, run_priority: int = 0):
    return state(
        [cq("a", {"f": {GPU: 4}}, cohort="c", reclaim=reclaim), cq("b", {"f": {GPU: 0}}, cohort="c")],
        [
            wl("b/run", 2, admitted="b", priority=run_priority),
            wl("a/want", 4, created=1),
            wl("b/more", 2, created=2),
        ],
    )


def test_queue_that_cannot_reclaim_holds_its_nominal_capacity_for_the_cycle():
    result = schedule(_cohort("Never"), 10)
    assert [d.workload for d in result.admitted] == []
    assert result.pending["b/more"].kueue_message == "Workload no longer fits after processing another workload"
    assert "a/want" in result.pending


def test_lower_priority_reclaim_without_candidates_also_reserves():
    # a may reclaim only from lower-priority workloads: b/run has a higher priority, so no candidate.
    result = schedule(_cohort("LowerPriority", run_priority=10), 10)
    assert [d.workload for d in result.admitted] == []
    assert result.pending["b/more"].kueue_message == "Workload no longer fits after processing another workload"


def test_queue_that_can_always_reclaim_preempts_instead():
    # reclaimWithinCohort Any: b/run is a candidate, so a/want reclaims its quota by preempting it.
    result = schedule(_cohort("Any"), 10)
    assert [(p.victim, p.preemptor) for p in result.preemptions] == [("b/run", "a/want")]


def test_reservation_is_released_at_the_end_of_the_cycle():
    # Alone in its cohort's cycle, b/more borrows the free 2 GPUs once a/want is parked (next cycle).
    s = _cohort("Never")
    first = schedule(s, 10)
    assert not first.admitted
    nothing_reserved = state(
        [cq("a", {"f": {GPU: 4}}, cohort="c"), cq("b", {"f": {GPU: 0}}, cohort="c")],
        [wl("b/run", 2, admitted="b"), wl("b/more", 2, created=2)],
    )
    assert [d.workload for d in schedule(nothing_reserved, 10).admitted] == ["b/more"]
