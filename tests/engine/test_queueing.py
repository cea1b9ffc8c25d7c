"""Queueing: BestEffortFIFO vs StrictFIFO, priority/time order, the cycle's no-borrow-first order."""

from __future__ import annotations

from queues.engine import apply_cycle, schedule, settle

from .builders import GPU, cq, state, wl


def holders(final) -> set[str]:
    return {w.key for w in final.state.workloads if w.admission is not None}


def test_best_effort_fifo_parks_unfit_head_and_admits_others():
    s = state(
        [cq("a", {"f": {GPU: 8}})],
        [wl("a/run", 4, admitted="a"), wl("a/big", 6, created=1), wl("a/small", 2, created=2)],
    )
    final = settle(s, 0)
    assert holders(final) == {"a/run", "a/small"}
    assert final.pending["a/big"].code == "quota_exhausted"


def test_strict_fifo_head_blocks_its_queue():
    s = state(
        [cq("a", {"f": {GPU: 8}}, strategy="StrictFIFO")],
        [wl("a/run", 4, admitted="a"), wl("a/big", 6, created=1), wl("a/small", 2, created=2)],
    )
    final = settle(s, 0)
    assert holders(final) == {"a/run"}
    assert final.pending["a/big"].code == "quota_exhausted"
    behind = final.pending["a/small"]
    assert behind.code == "higher_priority_ahead"
    assert behind.kueue_message == ""
    assert "a/big" in behind.message
    assert behind.details["ownFit"] is True


def test_queue_order_priority_then_creation_time():
    s = state(
        [cq("a", {"f": {GPU: 4}})],
        [wl("a/old", 4, created=1), wl("a/new-high", 4, created=2, priority=5), wl("a/newest", 4, created=3)],
    )
    assert holders(settle(s, 0)) == {"a/new-high"}
    s = state([cq("a", {"f": {GPU: 4}})], [wl("a/second", 4, created=2), wl("a/first", 4, created=1)])
    assert holders(settle(s, 0)) == {"a/first"}


def test_requeued_workload_orders_by_eviction_time():
    from dataclasses import replace

    old = replace(wl("a/evicted", 4, created=0), requeued_at=100.0)
    s = state([cq("a", {"f": {GPU: 4}})], [old, wl("a/later", 4, created=50)])
    assert holders(settle(s, 200)) == {"a/later"}


def test_cycle_orders_no_borrowing_entries_first():
    # Both heads fit against the cycle's snapshot; only one can have b's idle 4 GPUs.
    # a's head borrows (higher priority), b's head fits b's nominal: b goes first, a no longer fits.
    s = state(
        [cq("a", {"f": {GPU: 4}}, cohort="c"), cq("b", {"f": {GPU: 4}}, cohort="c")],
        [wl("a/run", 4, admitted="a"), wl("a/borrower", 4, priority=100, created=1), wl("b/owner", 4, created=2)],
    )
    result = schedule(s, 10)
    assert [d.workload for d in result.admitted] == ["b/owner"]
    reason = result.pending["a/borrower"]
    assert reason.kueue_message == "Workload no longer fits after processing another workload"
    assert reason.code == "higher_priority_ahead"


def test_cycle_takes_one_head_per_cluster_queue():
    s = state([cq("a", {"f": {GPU: 8}}), cq("b", {"f": {GPU: 8}})], [wl("a/1", 1), wl("a/2", 1), wl("b/1", 1)])
    result = schedule(s, 0)
    assert sorted(d.workload for d in result.admitted) == ["a/1", "b/1"]
    nxt = apply_cycle(s, result)
    assert [d.workload for d in schedule(nxt, 1).admitted] == ["a/2"]


def test_apply_cycle_writes_admissions():
    s = state([cq("a", {"f": {GPU: 8}})], [wl("a/1", 2)])
    result = schedule(s, 7)
    after = apply_cycle(s, result)
    w = after.workloads[0]
    assert w.admission is not None
    assert w.admission.cluster_queue == "a"
    assert w.admitted_at == 7
    assert w.admission.pod_sets[0].flavors == {GPU: "f"}


def test_deterministic_for_same_input():
    workloads = [wl(f"a/j{i}", (i % 3) + 1, created=i % 4, priority=i % 2) for i in range(20)]
    s = state([cq("a", {"f": {GPU: 10}}, cohort="c"), cq("b", {"f": {GPU: 5}}, cohort="c")], workloads)
    first = settle(s, 0)
    second = settle(s, 0)
    assert first == second
