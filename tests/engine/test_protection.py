"""Protected work: minimum runtime, finishing soon and checkpoint-aligned preemption, worked by hand.

Every case has one queue (or a cohort) whose waiting workload could preempt a running one; the expected instants
and sentences are computed in the comments from the protection's numbers.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from queues.engine import estimate_admission, explain, schedule
from queues.engine.model import Cohort, Eviction, FairSharing, Protection
from queues.engine.protection import CHECKPOINT, FINISHING, MIN_RUNTIME, next_release, protected_until, remaining_text
from queues.engine.scheduler import Engine
from queues.engine.simulation import Replay

from .builders import GPU, cq, state, wl


def running(key: str, gpus: int, protection: Protection | None, *, cq_name: str, priority: int = 0, at: float = 0.0):
    """A workload admitted in ``cq_name`` at ``at`` with ``protection``."""
    return replace(wl(key, gpus, admitted=cq_name, priority=priority, created=at), protection=protection)


def within_queue(protection: Protection | None) -> tuple:
    """Queue a (8 GPUs, preempts lower priority within it): a/low runs on all 8 since 0; a/high (priority 10, 8)
    arrives at 1."""
    return state(
        [cq("a", {"f": {GPU: 8}}, within="LowerPriority")],
        [running("a/low", 8, protection, cq_name="a", priority=1), wl("a/high", 8, priority=10, created=1)],
    )


# ------------------------------------------------------------------------------------------ the rules alone


def test_min_runtime_protects_until_it_has_run_that_long():
    p = Protection(min_runtime=1800)
    # admitted at 100: protected before 100 + 1800 = 1900, by the minimum runtime
    assert protected_until(p, 100.0, 100.0) == (1900.0, MIN_RUNTIME)
    assert protected_until(p, 100.0, 1899.0) == (1900.0, MIN_RUNTIME)
    assert protected_until(p, 100.0, 1900.0) is None
    assert next_release(p, 100.0, 700.0) == 1900.0
    assert next_release(p, 100.0, 1900.0) is None


def test_finishing_window_protects_the_last_minutes_of_the_maximum_runtime():
    p = Protection(max_runtime=7200, finishing_window=900)
    # admitted at 0: the window is [7200 - 900, 7200) = [6300, 7200)
    assert protected_until(p, 0.0, 6299.0) is None
    assert protected_until(p, 0.0, 6300.0) == (7200.0, FINISHING)
    assert protected_until(p, 0.0, 7000.0) == (7200.0, FINISHING)


def test_checkpoint_rule_opens_only_the_grace_after_each_checkpoint():
    p = Protection(checkpoint_interval=1800, checkpoint_grace=120)
    # checkpoints at 1800, 3600, …; preemptible in [1800, 1920], [3600, 3720] …
    assert protected_until(p, 0.0, 0.0) == (1800.0, CHECKPOINT)
    assert protected_until(p, 0.0, 1000.0) == (1800.0, CHECKPOINT)
    assert protected_until(p, 0.0, 1800.0) is None
    assert protected_until(p, 0.0, 1920.0) is None
    assert protected_until(p, 0.0, 1921.0) == (3600.0, CHECKPOINT)
    assert next_release(p, 0.0, 1000.0) == 1800.0
    assert next_release(p, 0.0, 1800.0) == 3600.0


def test_rules_chain_to_the_first_instant_none_holds():
    p = Protection(min_runtime=2000, checkpoint_interval=1800, checkpoint_grace=120)
    # at 100 the minimum runtime holds until 2000 (the later of 2000 and the checkpoint at 1800); at 2000 the last
    # checkpoint (1800) is 200 s old, past the grace: protected until the next one at 3600, which opens a window.
    assert protected_until(p, 0.0, 100.0) == (3600.0, MIN_RUNTIME)
    assert protected_until(p, 0.0, 3600.0) is None


def test_finishing_window_past_the_last_checkpoint_is_no_release():
    p = Protection(max_runtime=3000, finishing_window=600, checkpoint_interval=1800, checkpoint_grace=60)
    # checkpoint 2 would fall at 3600, after the end (3000): no release after 1800
    assert next_release(p, 0.0, 1900.0) is None


def test_remaining_text():
    assert remaining_text(1200) == "20 more minutes"
    assert remaining_text(61) == "2 more minutes"
    assert remaining_text(60) == "1 more minute"
    assert remaining_text(3 * 3600) == "3 more hours"
    assert remaining_text(2 * 3600 + 5 * 60) == "2 h 5 min more"


# ------------------------------------------------------------------------------------------ victim selection


def test_no_protection_preempts_at_once():
    result = schedule(within_queue(None), 600)
    assert [(p.victim, p.reason) for p in result.preemptions] == [("a/low", "InClusterQueue")]


def test_min_runtime_victim_is_not_preempted_and_the_wait_says_for_how_long():
    s = within_queue(Protection(min_runtime=1800))
    result = schedule(s, 600)
    assert result.preemptions == ()
    reason = result.pending["a/high"]
    # a/low was admitted at 0: 1800 - 600 = 1200 s = 20 minutes left
    assert reason.code == "quota_exhausted"
    assert "not preempting a/low: protected for 20 more minutes (it has not yet run its minimum runtime)" in (
        reason.message
    )
    assert reason.details["protectedUntil"] == 1800.0
    assert reason.details["protectedVictims"] == [{"workload": "a/low", "until": 1800.0, "rule": "min_runtime"}]
    # at 1800 the protection has ended: preempted
    assert [p.victim for p in schedule(s, 1800).preemptions] == ["a/low"]


def test_finishing_victim_is_spared_and_preempted_before_the_window():
    s = within_queue(Protection(max_runtime=7200, finishing_window=900))
    assert [p.victim for p in schedule(s, 6000).preemptions] == ["a/low"]
    result = schedule(s, 6300)
    assert result.preemptions == ()
    # until 7200: 900 s = 15 minutes, then it has ended at its maximum runtime
    assert "not preempting a/low: protected for 15 more minutes (it is finishing" in result.pending["a/high"].message


def test_checkpoint_aligned_victim_is_preempted_only_just_after_a_checkpoint():
    s = within_queue(Protection(checkpoint_interval=1800, checkpoint_grace=120))
    assert schedule(s, 1000).preemptions == ()
    # next checkpoint at 1800: 800 s, rounded up to 14 minutes
    assert "protected for 14 more minutes" in schedule(s, 1000).pending["a/high"].message
    assert [p.victim for p in schedule(s, 1850).preemptions] == ["a/low"]  # 50 s after the checkpoint
    assert schedule(s, 1930).preemptions == ()  # 130 s after it: past the grace


def test_protected_candidate_is_passed_over_for_an_unprotected_one():
    # Queue a (8 GPUs) runs a/x (4, admitted at 10) and a/y (4, admitted at 0). Kueue's order takes the most recently
    # admitted first: a/x. Protected, a/x is no candidate: a/y is preempted instead (4 freed = 4 needed).
    s = state(
        [cq("a", {"f": {GPU: 8}}, within="LowerPriority")],
        [
            running("a/x", 4, Protection(min_runtime=3600), cq_name="a", at=10),
            running("a/y", 4, None, cq_name="a", at=0),
            wl("a/high", 4, priority=10, created=20),
        ],
    )
    unprotected = replace(s, workloads=(replace(s.workloads[0], protection=None), *s.workloads[1:]))
    assert [p.victim for p in schedule(unprotected, 100).preemptions] == ["a/x"]
    assert [p.victim for p in schedule(s, 100).preemptions] == ["a/y"]


def test_reclaim_within_cohort_waits_for_the_borrowers_protection():
    # Cohort c: a (nominal 8, reclaims Any) and b (nominal 0). b/borrow borrows all 8 since 0, protected 30 min;
    # a/job (8) arrives at 60 and would reclaim them.
    s = state(
        [cq("a", {"f": {GPU: 8}}, cohort="c", reclaim="Any"), cq("b", {"f": {GPU: 0}}, cohort="c")],
        [running("b/borrow", 8, Protection(min_runtime=1800), cq_name="b"), wl("a/job", 8, created=60)],
        cohorts=[Cohort("c")],
    )
    result = schedule(s, 600)
    assert result.preemptions == ()
    assert "not preempting b/borrow: protected for 20 more minutes" in result.pending["a/job"].message
    assert [(p.victim, p.reason) for p in schedule(s, 1800).preemptions] == [("b/borrow", "InCohortReclamation")]


def test_fair_sharing_preemption_honours_protection():
    s = state(
        [
            cq("a", {"f": {GPU: 4}}, cohort="c", reclaim="Any", within="LowerPriority"),
            cq("b", {"f": {GPU: 4}}, cohort="c", reclaim="Any"),
        ],
        [running("b/wide", 8, Protection(min_runtime=600), cq_name="b"), wl("a/job", 4, created=5)],
        cohorts=[Cohort("c")],
    )
    fair = replace(s, fair_sharing=FairSharing())
    assert schedule(fair, 100).preemptions == ()
    assert "protected for 9 more minutes" in schedule(fair, 100).pending["a/job"].message
    assert [p.victim for p in schedule(fair, 600).preemptions] == ["b/wide"]


def test_explain_of_a_new_workload_names_the_protection():
    s = within_queue(Protection(min_runtime=1800))
    explanation = explain(s, "a/high", 900)
    assert not explanation.admissible
    assert explanation.reason.details["protectedUntil"] == 1800.0


def test_a_victim_already_being_evicted_is_not_held_by_its_protection():
    # The eviction was issued before (a/low is leaving): its protection is no reason to wait.
    s = within_queue(Protection(min_runtime=1800))
    low = replace(s.workloads[0], eviction=Eviction("Preempted", "", preemptor="a/high", issued_at=500))
    result = schedule(replace(s, workloads=(low, s.workloads[1])), 600)
    assert result.pending["a/high"].code == "preemption_in_progress"
    assert "protected" not in result.pending["a/high"].message


# ------------------------------------------------------------------------------------------ over time


@pytest.mark.parametrize(
    ("protection", "expected"),
    [
        (None, 1.0),  # preempts at once, admitted when a/low's pods are gone (evictions complete at once)
        (Protection(min_runtime=1800), 1800.0),  # waits out the minimum runtime
        (Protection(checkpoint_interval=1000, checkpoint_grace=60), 1000.0),  # the first checkpoint
        (Protection(min_runtime=1500, checkpoint_interval=1000, checkpoint_grace=60), 2000.0),  # past 1500: the next
    ],
)
def test_eta_follows_the_protection(protection, expected):
    s = within_queue(protection)
    assert estimate_admission(s, "a/high", 1.0, {}) == expected


def test_replay_preempts_at_the_checkpoint_instant():
    s = within_queue(Protection(checkpoint_interval=900, checkpoint_grace=30))
    engine = Engine(s, 1.0)
    replay = Replay(engine, start=1.0, default_runtime=10_000)
    replay.decisions = []
    replay.run(until=2000)
    preempted = [(t, k) for t, k, what, *_ in replay.decisions if what == "preempted"]
    # a/low admitted at 0 writes its first checkpoint at 900: preempted then, and only once
    assert preempted == [(900.0, "a/low")]
    assert replay.records["a/high"].admitted_at == 900.0


@pytest.mark.parametrize(("reclaim", "preempted"), [("Any", ["b/borrow"]), ("LowerPriority", [])])
def test_protection_by_priority_is_what_kueue_honours(reclaim, preempted):
    # Kubernetes mode: the protection is the Workload's raised priority. a (reclaim: Any) disregards priority and
    # takes its quota back from the protected borrower, as Kueue would; with LowerPriority the raised priority holds.
    # (a/job has priority 10 over b/borrow's 0 so that LowerPriority alone would allow it.)
    protection = Protection(min_runtime=1800, by_priority=True)
    s = state(
        [cq("a", {"f": {GPU: 8}}, cohort="c", reclaim=reclaim), cq("b", {"f": {GPU: 0}}, cohort="c")],
        [running("b/borrow", 8, protection, cq_name="b"), wl("a/job", 8, created=60, priority=10)],
        cohorts=[Cohort("c")],
    )
    assert [p.victim for p in schedule(s, 600).preemptions] == preempted
