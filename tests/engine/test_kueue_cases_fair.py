"""Cases of Kueue's ``TestFairPreemptions`` (pkg/scheduler/preemption/preemption_fair_test.go), run as a cycle
with fair sharing on and the default strategies (LessThanOrEqualToFinalShare, then LessThanInitialShare).

The base cohort ``all``: ClusterQueues a, b and c with 3 CPUs each (withinClusterQueue LowerPriority,
reclaimWithinCohort Any, borrowWithinCohort LowerPriority below -3) and ``preemptible`` with none. Cases with
half CPUs are doubled throughout (quotas 6), which leaves every share ratio as it was. Each test names its
upstream case.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from queues.engine import schedule
from queues.engine.model import FairSharing

from .builders import cq, state, wl

CPU = "cpu"


def _cohort(
    admitted: dict[str, tuple[int, ...]], incoming: tuple[str, int], *, scale: int = 1, low=(), high=(), strategies=None
):
    """``admitted``: {cq: sizes}, named <cq><i>; ``low`` / ``high``: names admitted at priority -1 / 1."""
    queues = [
        cq(
            n,
            {"default": {CPU: 3 * scale}},
            cohort="all",
            within="LowerPriority",
            reclaim="Any",
            bwc="LowerPriority",
            threshold=-3,
        )
        for n in ("a", "b", "c")
    ] + [cq("preemptible", {"default": {CPU: 0}}, cohort="all")]
    workloads = []
    for queue, sizes in admitted.items():
        for i, size in enumerate(sizes, start=1):
            name = f"{queue}{i}"
            workloads.append(
                wl(
                    f"{queue}/{name}",
                    requests={CPU: size},
                    admitted=queue,
                    flavor="default",
                    priority=-1 if name in low else 0,
                )
            )
    target, size = incoming
    workloads.append(wl(f"{target}/{target}_incoming", requests={CPU: size}, created=10))
    return replace(state(queues, workloads), fair_sharing=FairSharing(strategies) if strategies else FairSharing())


def victims(s) -> set[tuple[str, str]]:
    return {(p.victim, p.reason) for p in schedule(s, 20).preemptions}


FS = "InCohortFairSharing"
IN_CQ = "InClusterQueue"
#: Current Kueue (main, tests on the v1beta2 helpers) reports a victim taken while the preemptor's ClusterQueue
#: stays within its nominal quota as InCohortReclamation; older releases (tests on the v1beta1 helpers) wrote
#: InCohortFairSharing for every fair-sharing victim. The engine follows main.
RECLAIM = "InCohortReclamation"
LTE = "LessThanOrEqualToFinalShare"
LTI = "LessThanInitialShare"


def test_reclaim_nominal_from_user_using_the_most():
    """TestFairPreemptions/"reclaim nominal from user using the most"."""
    s = _cohort({"a": (1, 1, 1), "b": (1, 1, 1, 1, 1), "c": (1,)}, ("c", 1))
    assert victims(s) == {("b/b1", RECLAIM)}


def test_reclaim_borrowable_quota_from_user_using_the_most():
    """TestFairPreemptions/"reclaim borrowable quota from user using the most"."""
    s = _cohort({"a": (1, 1, 1), "b": (1, 1, 1, 1, 1), "c": (1,)}, ("a", 1))
    assert victims(s) == {("b/b1", FS)}


def test_can_reclaim_from_queue_using_less_if_the_most_is_not_enough():
    """TestFairPreemptions/"can reclaim from queue using less, if taking the latest workload from user using the
    most isn't enough"."""
    s = _cohort({"a": (3, 1), "b": (2, 3)}, ("c", 3))
    assert victims(s) == {("a/a1", RECLAIM)}


def test_preempt_one_from_each_cq_borrowing():
    """TestFairPreemptions/"preempt one from each CQ borrowing" (sizes doubled)."""
    s = _cohort({"a": (1, 1, 6), "b": (1, 1, 6)}, ("c", 4), scale=2)
    assert victims(s) == {("a/a1", RECLAIM), ("b/b1", RECLAIM)}


def test_can_preempt_lower_priority_workloads_from_same_cq():
    """TestFairPreemptions/"can preempt lower priority workloads from same CQ"."""
    s = _cohort({"a": (1, 1, 1, 1), "b": (1, 1, 1, 1, 1)}, ("a", 2), low=("a1", "a2"))
    assert victims(s) == {("a/a1", IN_CQ), ("a/a2", IN_CQ)}


def test_can_preempt_a_combination_of_same_cq_and_highest_user():
    """TestFairPreemptions/"can preempt a combination of same CQ and highest user"."""
    s = _cohort({"a": (1, 1, 1), "b": (1, 1, 1, 1, 1, 1)}, ("a", 2), low=("a1",))
    assert victims(s) == {("a/a1", IN_CQ), ("b/b1", FS)}


def test_preempt_huge_workload_if_target_cq_gets_a_lower_share():
    """TestFairPreemptions/"preempt huge workload if there is no other option, as long as the target CQ gets a
    lower share"."""
    s = _cohort({"b": (9,)}, ("a", 2))
    assert victims(s) == {("b/b1", RECLAIM)}


def test_preempt_from_target_and_others_even_if_over_nominal():
    """TestFairPreemptions/"preempt from target and others even if over nominal"."""
    s = _cohort({"a": (2, 1), "b": (3, 3)}, ("a", 4), low=("a1", "a2"))
    assert victims(s) == {("a/a1", IN_CQ), ("b/b1", FS)}


def test_preempt_from_different_cqs_if_the_end_result_has_a_smaller_max_share():
    """TestFairPreemptions/"preempt from different cluster queues if the end result has a smaller max share"
    (sizes doubled)."""
    s = _cohort({"b": (4, 5), "c": (4, 5)}, ("a", 7), scale=2)
    assert victims(s) == {("b/b1", FS), ("c/c1", FS)}


@pytest.mark.parametrize(
    ("upstream", "admitted", "incoming", "scale"),
    [
        ("can't preempt when everyone under nominal", {"a": (1, 1, 1), "b": (1, 1, 1), "c": (1, 1, 1)}, ("c", 1), 1),
        ("can't preempt when it would switch the imbalance", {"a": (1, 1, 1), "b": (1, 1, 1, 1, 1)}, ("a", 2), 1),
        ("can't preempt huge workload if the incoming is also huge", {"a": (2,), "b": (7,)}, ("a", 5), 1),
        ("can't preempt 2 smaller workloads if the incoming is huge", {"b": (2, 2, 3)}, ("a", 6), 1),
        ("scenario above does not flap", {"a": (7,), "b": (5,), "c": (5,)}, ("b", 4), 2),
        (
            "cannot preempt if it would make the candidate CQ go under nominal after preempting one element",
            {"b": (3, 3), "c": (3,)},
            ("a", 4),
            1,
        ),
    ],
)
def test_no_fair_preemption(upstream, admitted, incoming, scale):
    """TestFairPreemptions/<upstream>: no victim satisfies the fair-sharing strategies, nothing is admitted."""
    s = _cohort(admitted, incoming, scale=scale)
    result = schedule(s, 20)
    assert not result.preemptions, upstream
    assert not result.admitted, upstream


def test_preempt_lower_priority_first_even_if_big():
    """TestFairPreemptions/"preempt lower priority first, even if big" (strategy LessThanInitialShare only)."""
    s = _cohort({"a": (3,), "b": (5, 1)}, ("a", 1), high=("b2",), strategies=(LTI,))
    assert victims(s) == {("b/b1", FS)}


def test_preempt_workload_that_does_not_transfer_the_imbalance_even_if_high_priority():
    """TestFairPreemptions/"preempt workload that doesn't transfer the imbalance, even if high priority"
    (strategy LessThanOrEqualToFinalShare only)."""
    s = _cohort({"a": (3,), "b": (5, 1)}, ("a", 1), high=("b2",), strategies=(LTE,))
    assert victims(s) == {("b/b2", FS)}
