"""Preemption with Nodes: victims are chosen so that the preemptor fits on the nodes, and reclaiming settles."""

from __future__ import annotations

from queues.engine import schedule, settle

from .builders import GPU, cq, node, state, wl


def _cohort():
    # a reclaims; b has no quota of its own (all it runs is borrowed); d lends 4; c is outside the cohort.
    return [
        cq("a", {"f": {GPU: (4, 4)}}, cohort="c1", reclaim="Any"),
        cq("b", {"f": {GPU: (0, 8)}}, cohort="c1"),
        cq("d", {"f": {GPU: 4}}, cohort="c1"),
        cq("c", {"f": {GPU: 4}}),
    ]


def _preemptions(result) -> list[tuple[str, str]]:
    return [(p.victim, p.preemptor) for c in result.cycles for p in c.preemptions]


def test_no_preemption_when_evicting_borrowers_cannot_make_the_pod_fit_on_a_node():
    # Each 5-GPU node holds 2 GPUs of queue c (not a candidate) and 3 of borrowing queue b.
    # a/p asks for one 4-GPU pod: within a's nominal quota and evicting b/x alone frees enough quota
    # (what a quota-only choice would do), but no node gets 4 free GPUs even with every borrower evicted.
    s = state(
        _cohort(),
        [
            wl("c/r0", 2, admitted="c", nodes=["n0"], created=0),
            wl("c/r1", 2, admitted="c", nodes=["n1"], created=0),
            wl("b/x", 3, admitted="b", nodes=["n0"], created=1),
            wl("b/y", 3, admitted="b", nodes=["n1"], created=2),
            wl("a/p", 4, created=3),
        ],
        nodes=[node("n0", 5), node("n1", 5)],
    )
    once = schedule(s, 10)
    assert once.preemptions == ()
    # a's whole quota is held by borrower b: lent out (reclaim is on, but evicting b frees no node for the pod)
    assert once.pending["a/p"].code in ("topology_fragmented", "quota_lent_out", "class_exhausted")
    final = settle(s, 10)
    assert _preemptions(final) == []
    assert len(final.cycles) <= 2
    by_key = {w.key: w for w in final.state.workloads}
    assert by_key["a/p"].admission is None
    assert by_key["b/x"].admission is not None
    assert by_key["b/y"].admission is not None
    reason = final.pending["a/p"]
    assert reason.code == once.pending["a/p"].code
    assert reason.message


def test_victim_chosen_for_node_fit_and_preemptor_admitted_once():
    # b/x (newest, so first in Kueue's candidate order) sits on n0 next to c's pod: evicting it frees
    # enough quota but leaves no node with 4 free GPUs for a/p's pod. The engine must evict b/y on n1
    # instead (a quota-only choice would take b/x), and only it.
    s = state(
        _cohort(),
        [
            wl("c/r0", 2, admitted="c", nodes=["n0"], created=0),
            wl("b/y", 3, admitted="b", nodes=["n1"], created=1),
            wl("b/x", 3, admitted="b", nodes=["n0"], created=2),
            wl("a/p", 4, created=3),
        ],
        nodes=[node("n0", 5), node("n1", 5)],
    )
    once = schedule(s, 10)
    assert [(p.victim, p.preemptor) for p in once.preemptions] == [("b/y", "a/p")]
    final = settle(s, 10)
    assert _preemptions(final) == [("b/y", "a/p")]
    by_key = {w.key: w for w in final.state.workloads}
    assert by_key["a/p"].admission is not None
    assert by_key["a/p"].admission.pod_sets[0].nodes == ("n1",)
    assert by_key["b/y"].admission is None
    assert by_key["b/y"].requeued_at == 10
    admitted = [d.workload for c in final.cycles for d in c.admitted]
    assert admitted.count("a/p") == 1
    assert "b/y" not in admitted


def _reclaim_loop_state(nodes: bool):
    # a/big (older) needs more than a's nominal quota, so it may not preempt and is parked; a/small reclaims
    # from borrowing b. The victim's release wakes a/big; it must not take a/small's head position, or b's
    # next borrower takes the freed capacity and a/small reclaims again, endlessly, at the same instant.
    return state(
        [
            cq("a", {"f": {GPU: (4, 4)}}, cohort="c1", reclaim="Any"),
            cq("b", {"f": {GPU: (4, 4)}}, cohort="c1"),
        ],
        [
            wl("b/r0", 4, admitted="b", nodes=["n0"] if nodes else (), created=0),
            wl("b/r1", 4, admitted="b", nodes=["n1"] if nodes else (), created=0, admitted_at=0.5),
            wl("b/next", 4, created=0.7),
            wl("a/big", 6, created=1),
            wl("a/small", 4, created=2),
        ],
        nodes=[node("n0", 8), node("n1", 8)] if nodes else (),
    )


def test_reclaim_settles_when_an_older_parked_workload_is_woken():
    for with_nodes in (True, False):
        final = settle(_reclaim_loop_state(with_nodes), 10, max_cycles=200)
        assert _preemptions(final) == [("b/r1", "a/small")], with_nodes
        assert len(final.cycles) < 10, with_nodes
        by_key = {w.key: w for w in final.state.workloads}
        assert by_key["a/small"].admission is not None
        assert by_key["b/next"].admission is None
        assert by_key["b/r1"].admission is None
        assert final.pending["a/big"].code in ("quota_exhausted", "borrow_limit")


def test_workload_evicted_and_readmitted_at_an_instant_is_not_preempted_again_there():
    # Found by the property test: w11 reclaims w3 from borrowing q0; w9 (q2, priority 1) preempts w11 to
    # borrow; w3 (priority 2) is ahead of w9 in Kueue's order and takes the freed quota back; w11 reclaims
    # w3 again ... at the same instant, forever. A workload evicted and re-admitted at an instant is not a
    # candidate again at that instant, so the cycle ends.
    s = state(
        [
            cq("q0", {"f": {GPU: (0, None)}}, cohort="c"),
            cq("q1", {"f": {GPU: (2, None)}}, cohort="c"),
            cq("q2", {"f": {GPU: (7, None)}}, cohort="c", within="LowerPriority", reclaim="Any"),
        ],
        [
            wl("q0/w0", 1, priority=3, created=20),
            wl("q2/w2", 2, count=2, priority=1, created=20),
            wl("q0/w3", 4, priority=2, created=20),
            wl("q2/w9", 4, priority=1, created=20),
            wl("q2/w11", 1, priority=0, created=20),
        ],
    )
    final = settle(s, 30, max_cycles=200)
    victims = [v for v, _ in _preemptions(final)]
    # w11 then reclaims w0 instead of w3 (before this rule: 200 cycles, w3 and w11 evicted over and over).
    assert victims == ["q0/w3", "q2/w11", "q0/w0"]
    assert len(final.cycles) < 15
    by_key = {w.key: w for w in final.state.workloads}
    assert by_key["q0/w3"].admission is not None
    assert by_key["q0/w3"].requeued_at == 30
    assert {k for k, w in by_key.items() if w.admission is not None} == {"q0/w3", "q2/w2", "q2/w11"}
