"""Cases of Kueue's scheduler tests (pkg/scheduler/scheduler_test.go): ``TestSchedule``, ``TestEntryOrdering``
and ``TestLastSchedulingContext``, run through the engine's cycle. CPU becomes a plain integer resource; each
test names its upstream case.
"""

from __future__ import annotations

from queues.engine import schedule

from .builders import cq, state, wl

CPU = "cpu"


def _cpu(key: str, n: int, *, priority: int = 0, created: float = 0.0, admitted: str | None = None, flavor="default"):
    return wl(key, requests={CPU: n}, priority=priority, created=created, admitted=admitted, flavor=flavor)


def admitted(result) -> dict[str, tuple[str, str]]:
    return {d.workload: (d.cluster_queue, d.pod_sets[0].flavors[CPU]) for d in result.admitted}


# ---------------------------------------------------------------------------------------- TestSchedule


def test_waiting_for_preemption_does_not_block_a_borrower_in_another_queue():
    """TestSchedule/"preemption while borrowing, workload waiting for preemption should not block a borrowing
    workload in another CQ"."""
    shared = cq("cq_shared", {"default": {CPU: (4, 0)}}, cohort="pwb")
    cq_a = cq("cq_a", {"default": {CPU: (0, 3)}}, cohort="pwb", reclaim="LowerPriority", bwc="LowerPriority")
    cq_b = cq("cq_b", {"default": {CPU: 0}}, cohort="pwb", reclaim="LowerPriority", bwc="LowerPriority")
    s = state(
        [shared, cq_a, cq_b],
        [
            _cpu("cq_a/admitted_a", 2, admitted="cq_a"),
            _cpu("cq_a/a", 3, created=1),
            _cpu("cq_b/b", 1, created=2),
        ],
    )
    result = schedule(s, 10)
    assert admitted(result) == {"cq_b/b": ("cq_b", "default")}
    assert not result.preemptions
    assert "cq_a/a" in result.pending


def _other_cohort(*workloads, gamma: bool = True):
    alpha = cq("other-alpha", {"on-demand": {CPU: 2}}, cohort="other", reclaim="Any", within="LowerPriority")
    beta = cq("other-beta", {"on-demand": {CPU: 2}}, cohort="other")
    queues = [alpha, beta] + ([cq("other-gamma", {"on-demand": {CPU: 2}}, cohort="other")] if gamma else [])
    return state(queues, workloads)


def test_minimal_preemptions_when_target_queue_is_exhausted():
    """TestSchedule/"minimal preemptions when target queue is exhausted"."""
    od = "on-demand"
    s = _other_cohort(
        _cpu("other-alpha/a1", 1, priority=-2, admitted="other-alpha", flavor=od),
        _cpu("other-alpha/a2", 1, priority=-2, admitted="other-alpha", flavor=od),
        _cpu("other-alpha/a3", 1, priority=-1, admitted="other-alpha", flavor=od),
        _cpu("other-beta/b1", 1, admitted="other-beta", flavor=od),
        _cpu("other-beta/b2", 1, admitted="other-beta", flavor=od),
        _cpu("other-beta/b3", 1, admitted="other-beta", flavor=od),
        _cpu("other-alpha/incoming", 2, created=5),
    )
    result = schedule(s, 10)
    assert {p.victim for p in result.preemptions} == {"other-alpha/a1", "other-alpha/a2"}
    assert not result.admitted


def test_only_a_workload_within_nominal_quota_may_preempt():
    """TestSchedule/"A workload is only eligible to do preemptions if it fits fully within nominal quota"."""
    od = "on-demand"
    s = _other_cohort(
        _cpu("other-alpha/a1", 1, priority=-1, admitted="other-alpha", flavor=od),
        _cpu("other-beta/b1", 1, priority=-1, admitted="other-beta", flavor=od),
        _cpu("other-alpha/incoming", 3, priority=1, created=5),
        gamma=False,
    )
    result = schedule(s, 10)
    assert not result.preemptions
    assert not result.admitted
    assert "other-alpha/incoming" in result.pending


# ----------------------------------------------------------------------------------- TestEntryOrdering


def _borrowers(*pending):
    # x and y have no quota of their own and borrow from z's 2 CPUs: only one 2-CPU head fits.
    qs = [cq(n, {"default": {CPU: 0}}, cohort="c") for n in ("x", "y")] + [cq("z", {"default": {CPU: 2}}, cohort="c")]
    return state(qs, pending)


def test_entry_ordering_non_borrowing_before_borrowing():
    """TestEntryOrdering: a head that fits without borrowing ("old", "new") goes before a borrowing head of
    higher priority ("high_pri_borrowing")."""
    x = cq("x", {"default": {CPU: 0}}, cohort="c")
    y = cq("y", {"default": {CPU: 2}}, cohort="c")
    s = state([x, y], [_cpu("x/high_pri_borrowing", 2, priority=1), _cpu("y/new", 2, created=3)])
    result = schedule(s, 10)
    assert admitted(result) == {"y/new": ("y", "default")}
    assert result.pending["x/high_pri_borrowing"].kueue_message == (
        "Workload no longer fits after processing another workload"
    )


def test_entry_ordering_borrowing_heads_by_priority():
    """TestEntryOrdering: among borrowing heads, "high_pri_borrowing" (newer) goes before "old_borrowing"."""
    s = _borrowers(_cpu("x/old_borrowing", 2, created=0), _cpu("y/high_pri_borrowing", 2, priority=1, created=3))
    assert admitted(schedule(s, 10)) == {"y/high_pri_borrowing": ("y", "default")}


def test_entry_ordering_borrowing_heads_of_equal_priority_by_age():
    """TestEntryOrdering: "old_borrowing" goes before "new_borrowing" (same priority, older creation)."""
    s = _borrowers(_cpu("x/new_borrowing", 2, created=3), _cpu("y/old_borrowing", 2, created=0))
    assert admitted(schedule(s, 10)) == {"y/old_borrowing": ("y", "default")}


# ---------------------------------------------------------------------------- TestLastSchedulingContext


def _cohort_of_three(*workloads):
    # eng-cohort-{alpha,beta}: whenCanBorrow Borrow (MayStopSearch), whenCanPreempt Preempt (MayStopSearch);
    # eng-cohort-theta: TryNextFlavor for both. on-demand 50 (borrowing limit 50), spot 100 (limit 0); StrictFIFO.
    def q(name: str, when: str):
        return cq(
            f"eng-cohort-{name}",
            {"on-demand": {CPU: (50, 50)}, "spot": {CPU: (100, 0)}},
            cohort="cohort",
            strategy="StrictFIFO",
            reclaim="LowerPriority",
            when_borrow=when,
            when_preempt=when,
        )

    return state([q("alpha", "MayStopSearch"), q("beta", "MayStopSearch"), q("theta", "TryNextFlavor")], workloads)


def test_borrow_before_next_flavor():
    """TestLastSchedulingContext/"borrow before next flavor" (first schedule)."""
    s = _cohort_of_three(
        _cpu("eng-cohort-alpha/placeholder", 50, admitted="eng-cohort-alpha", flavor="on-demand"),
        _cpu("eng-cohort-alpha/borrower", 20, created=1),
        _cpu("eng-cohort-beta/workload1", 20, created=2),
    )
    assert admitted(schedule(s, 10)) == {
        "eng-cohort-alpha/borrower": ("eng-cohort-alpha", "on-demand"),
        "eng-cohort-beta/workload1": ("eng-cohort-beta", "on-demand"),
    }


def test_borrow_after_all_flavors():
    """TestLastSchedulingContext/"borrow after all flavors" (first schedule)."""
    s = _cohort_of_three(
        _cpu("eng-cohort-alpha/placeholder", 50, admitted="eng-cohort-alpha", flavor="on-demand"),
        _cpu("eng-cohort-theta/placeholder1", 50, admitted="eng-cohort-theta", flavor="on-demand"),
        _cpu("eng-cohort-theta/workload", 20, created=1),
    )
    assert admitted(schedule(s, 10)) == {"eng-cohort-theta/workload": ("eng-cohort-theta", "spot")}


def test_next_flavor_full_but_can_borrow_on_first():
    """TestLastSchedulingContext/"when the next flavor is full, but can borrow on first" (first schedule)."""
    s = _cohort_of_three(
        _cpu("eng-cohort-alpha/placeholder", 40, admitted="eng-cohort-alpha", flavor="on-demand"),
        _cpu("eng-cohort-theta/placeholder1", 40, admitted="eng-cohort-theta", flavor="on-demand"),
        _cpu("eng-cohort-theta/placeholder2", 100, admitted="eng-cohort-theta", flavor="spot"),
        _cpu("eng-cohort-theta/workload", 20, created=1),
    )
    assert admitted(schedule(s, 10)) == {"eng-cohort-theta/workload": ("eng-cohort-theta", "on-demand")}


def _eng_alpha():
    queue = cq(
        "eng-alpha",
        {"on-demand": {CPU: (50, 50)}, "spot": {CPU: (100, 0)}},
        within="LowerPriority",
        when_preempt="MayStopSearch",
    )
    return state(
        [queue],
        [_cpu("eng-alpha/low-1", 50, admitted="eng-alpha", flavor="on-demand"), _cpu("eng-alpha/new", 20, created=1)],
    )


def test_use_second_flavor_when_the_first_has_no_preemption_candidates():
    """TestSchedule/"use second flavor when the first has no preemption candidates; WhenCanPreempt: Preempt".

    Same cluster as TestLastSchedulingContext/"scheduling context not changed: use next flavor if can't
    preempt", whose older expectation (nothing admitted in the first cycle, spot in the second through
    LastTriedFlavorIdx) predates Kueue's preemption oracle; current Kueue, like the engine, treats a flavor
    whose preemption has no candidates as worse than a fit and admits into spot at once.
    """
    result = schedule(_eng_alpha(), 10)
    assert admitted(result) == {"eng-alpha/new": ("eng-alpha", "spot")}
    assert not result.preemptions
