"""Cases of Kueue's ``TestPreemption`` (pkg/scheduler/preemption/preemption_test.go), run as a whole cycle.

Kueue's test hands the preemptor a ready flavor assignment and asks for the victims; here the engine's own
flavor assigner runs first, so only cases whose assignment is what a real cycle would compute are
transcribed (CPU and memory become plain integer units). Each test names its upstream case.
"""

from __future__ import annotations

from queues.engine import schedule

from .builders import cq, group, state, wl

CPU = "cpu"
MEM = "memory"


def victims(result) -> set[tuple[str, str]]:
    return {(p.victim, p.reason) for p in result.preemptions}


def _standalone(*admitted, incoming):
    # "standalone": cpu 6 in flavor default; memory 3 in alpha or beta; withinClusterQueue LowerPriority.
    queue = cq(
        "standalone",
        groups=[group({"default": {CPU: 6}}), group({"alpha": {MEM: 3}, "beta": {MEM: 3}})],
        within="LowerPriority",
    )
    return state([queue], [*admitted, incoming])


def _cpu(key: str, n: int, priority: int, cq_name: str, *, mem: int | None = None):
    req = {CPU: n} if mem is None else {CPU: n, MEM: mem}
    return wl(key, requests=req, priority=priority, admitted=cq_name, flavor="default")


def _pending(key: str, priority: int, **req: int):
    return wl(key, requests=req, priority=priority, created=10)


def test_preempt_lowest_priority():
    """TestPreemption/"preempt lowest priority"."""
    s = _standalone(
        _cpu("standalone/low", 2, -1, "standalone"),
        _cpu("standalone/mid", 2, 0, "standalone"),
        _cpu("standalone/high", 2, 1, "standalone"),
        incoming=_pending("standalone/in", 1, cpu=2),
    )
    assert victims(schedule(s, 20)) == {("standalone/low", "InClusterQueue")}


def test_preempt_multiple():
    """TestPreemption/"preempt multiple"."""
    s = _standalone(
        _cpu("standalone/low", 2, -1, "standalone"),
        _cpu("standalone/mid", 2, 0, "standalone"),
        _cpu("standalone/high", 2, 1, "standalone"),
        incoming=_pending("standalone/in", 1, cpu=3),
    )
    assert victims(schedule(s, 20)) == {("standalone/low", "InClusterQueue"), ("standalone/mid", "InClusterQueue")}


def test_no_preemption_for_low_priority():
    """TestPreemption/"no preemption for low priority"."""
    s = _standalone(
        _cpu("standalone/low", 3, -1, "standalone"),
        _cpu("standalone/mid", 3, 0, "standalone"),
        incoming=_pending("standalone/in", -1, cpu=1),
    )
    result = schedule(s, 20)
    assert victims(result) == set()
    assert "standalone/in" in result.pending


def test_not_enough_low_priority_workloads():
    """TestPreemption/"not enough low priority workloads"."""
    s = _standalone(
        _cpu("standalone/low", 3, -1, "standalone"),
        _cpu("standalone/mid", 3, 0, "standalone"),
        incoming=_pending("standalone/in", 0, cpu=4),
    )
    result = schedule(s, 20)
    assert victims(result) == set()
    assert "standalone/in" in result.pending


def test_some_free_quota_preempt_low_priority():
    """TestPreemption/"some free quota, preempt low priority"."""
    s = _standalone(
        _cpu("standalone/low", 1, -1, "standalone"),
        _cpu("standalone/mid", 1, 0, "standalone"),
        _cpu("standalone/high", 3, 1, "standalone"),
        incoming=_pending("standalone/in", 1, cpu=2),
    )
    assert victims(schedule(s, 20)) == {("standalone/low", "InClusterQueue")}


def test_minimal_set_excludes_low_priority():
    """TestPreemption/"minimal set excludes low priority": mid alone frees enough, so low is kept."""
    s = _standalone(
        _cpu("standalone/low", 1, -1, "standalone"),
        _cpu("standalone/mid", 2, 0, "standalone"),
        _cpu("standalone/high", 3, 1, "standalone"),
        incoming=_pending("standalone/in", 1, cpu=2),
    )
    assert victims(schedule(s, 20)) == {("standalone/mid", "InClusterQueue")}


# ------------------------------------------------------------------------ cohort "cohort": c1 and c2


def _cohort(*workloads):
    # c1: within LowerPriority, reclaim LowerPriority; c2: within Never, reclaim Any. cpu 6 / memory 3 each,
    # borrowing limit equal to nominal.
    c1 = cq(
        "c1", {"default": {CPU: (6, 6), MEM: (3, 3)}}, cohort="cohort", within="LowerPriority", reclaim="LowerPriority"
    )
    c2 = cq("c2", {"default": {CPU: (6, 6), MEM: (3, 3)}}, cohort="cohort", within="Never", reclaim="Any")
    return state([c1, c2], workloads)


def test_reclaim_quota_from_borrower():
    """TestPreemption/"reclaim quota from borrower"."""
    s = _cohort(
        _cpu("c1/c1-low", 3, -1, "c1"),
        _cpu("c2/c2-mid", 3, 0, "c2"),
        _cpu("c2/c2-high", 6, 1, "c2"),
        _pending("c1/in", 1, cpu=3),
    )
    assert victims(schedule(s, 20)) == {("c2/c2-mid", "InCohortReclamation")}


def test_reclaim_quota_if_workload_requests_zero_of_a_resource_at_nominal():
    """TestPreemption/"reclaim quota if workload requests 0 resources for a resource at nominal quota"."""
    s = _cohort(
        _cpu("c1/c1-low", 3, -1, "c1", mem=3),
        _cpu("c2/c2-mid", 3, 0, "c2"),
        _cpu("c2/c2-high", 6, 1, "c2"),
        _pending("c1/in", 1, cpu=3, memory=0),
    )
    assert victims(schedule(s, 20)) == {("c2/c2-mid", "InCohortReclamation")}


def test_not_enough_workloads_borrowing():
    """TestPreemption/"not enough workloads borrowing": in would borrow, so it may not reclaim from c2."""
    s = _cohort(
        _cpu("c1/c1-high", 4, 1, "c1"),
        _cpu("c2/c2-low-1", 4, -1, "c2"),
        _cpu("c2/c2-low-2", 4, -1, "c2"),
        _pending("c1/in", 1, cpu=4),
    )
    result = schedule(s, 20)
    assert victims(result) == set()
    assert "c1/in" in result.pending


def test_preempting_locally_and_borrowing_other_resources_without_cohort_candidates():
    """TestPreemption/"preempting locally and borrowing other resources in cohort, without cohort candidates"."""
    s = _cohort(
        _cpu("c1/c1-low", 4, -1, "c1"),
        _cpu("c2/c2-low-1", 4, -1, "c2"),
        _cpu("c2/c2-high-2", 4, 1, "c2"),
        _pending("c1/in", 1, cpu=4, memory=5),
    )
    assert victims(schedule(s, 20)) == {("c1/c1-low", "InClusterQueue")}


def test_preempting_locally_and_borrowing_same_resource_in_cohort():
    """TestPreemption/"preempting locally and borrowing same resource in cohort"."""
    s = _cohort(
        _cpu("c1/c1-med", 4, 0, "c1"),
        _cpu("c1/c1-low", 4, -1, "c1"),
        _cpu("c2/c2-low-1", 4, -1, "c2"),
        _pending("c1/in", 1, cpu=4),
    )
    assert victims(schedule(s, 20)) == {("c1/c1-low", "InClusterQueue")}


def test_do_not_reclaim_borrowed_quota_from_same_priority():
    """TestPreemption/"do not reclaim borrowed quota from same priority for withinCohort=ReclaimFromLowerPriority"."""
    s = _cohort(
        _cpu("c1/c1", 2, 0, "c1"),
        _cpu("c2/c2-1", 4, 0, "c2"),
        _cpu("c2/c2-2", 4, 0, "c2"),
        _pending("c1/in", 0, cpu=4),
    )
    result = schedule(s, 20)
    assert victims(result) == set()
    assert "c1/in" in result.pending


def test_preempting_locally_and_not_borrowing_same_resource_in_one_queue_cohort():
    """TestPreemption/"preempting locally and not borrowing same resource in 1-queue cohort"."""
    l1 = cq(
        "l1", {"default": {CPU: (6, 12), MEM: (3, 6)}}, cohort="legion", within="LowerPriority", reclaim="LowerPriority"
    )
    s = state(
        [l1],
        [_cpu("l1/l1-med", 4, 0, "l1"), _cpu("l1/l1-low", 2, -1, "l1"), _pending("l1/in", 1, cpu=4)],
    )
    assert victims(schedule(s, 20)) == {("l1/l1-med", "InClusterQueue")}
