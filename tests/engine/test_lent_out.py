"""The lent-out wait reason: a job within its team's own quota waits because teams that borrowed hold that quota.

Issue 32: jobs of Language Models said "Team quota used up" while the team used 2 of its 16 H100s: the rest was in
use by teams that borrowed it. The reason names who holds how much, and whether the team's queue reclaims it.
"""

from __future__ import annotations

from queues.engine import schedule

from .builders import GPU, cq, state, wl


def _cohort(reclaim: str = "Never"):
    # a: 16 nominal, uses 2. b: 4 nominal, borrows 8 above it. c: 4 nominal, borrows 6 above it.
    # The cohort's 24 are all in use: 2 (a) + 12 (b) + 10 (c).
    return [
        cq("a", {"f": {GPU: 16}}, cohort="lab", reclaim=reclaim),
        cq("b", {"f": {GPU: 4}}, cohort="lab"),
        cq("c", {"f": {GPU: 4}}, cohort="lab"),
    ]


def _running():
    return [
        wl("a/run", 2, admitted="a"),
        wl("b/big", 8, admitted="b", priority=100),
        wl("b/small", 4, admitted="b", priority=100),
        wl("c/mid", 10, admitted="c", priority=100),
    ]


def test_a_job_within_its_quota_waits_on_lent_quota_and_says_who_holds_it():
    result = schedule(state(_cohort(), [*_running(), wl("a/job", 8, created=1)]), 5)
    reason = result.pending["a/job"]
    assert reason.code == "quota_lent_out"
    # Worked by hand: a's unused 14 (16 − 2) are held by b (12 − 4 = 8 above its own) and c (10 − 4 = 6).
    assert reason.details["lent"] == 14
    assert reason.details["lentTo"] == [{"clusterQueue": "b", "units": 8}, {"clusterQueue": "c", "units": 6}]
    assert reason.details["reclaim"] == "Never"
    assert reason.message.startswith("Your team uses 2 of its 16 f GPUs and this job needs 8.")
    assert (
        "14 f GPUs of its unused quota are lent out, in use by queues that borrowed them (b 8, c 6 above their own "
        "quota); 8 must come back for this job to start." in reason.message
    )
    assert "does not reclaim lent quota (reclaimWithinCohort: Never)" in reason.message
    assert reason.kueue_message.endswith("insufficient unused quota for nvidia.com/gpu in flavor f, 8 more needed")


def test_reclaim_of_lower_priority_only_is_said():
    result = schedule(state(_cohort("LowerPriority"), [*_running(), wl("a/job", 8, created=1, priority=1)]), 5)
    reason = result.pending["a/job"]
    assert reason.code == "quota_lent_out"
    assert reason.details["reclaim"] == "LowerPriority"
    assert "reclaims lent quota only from lower-priority jobs" in reason.message


def test_a_job_that_also_needs_to_borrow_waits_on_lent_quota_when_getting_it_back_would_start_it():
    # Worked by hand: c's job ended. 24 in the cohort, 2 (a) + 12 (b) in use: 10 idle. a asks 16 (14 of its own,
    # 2 borrowed): 6 missing, and b holds 8 of a's unused quota: getting that back starts it.
    running = [w for w in _running() if w.name != "mid"]
    reason = schedule(state(_cohort(), [*running, wl("a/big", 16, created=1)]), 5).pending["a/big"]
    assert reason.code == "quota_lent_out"
    assert reason.details["lentTo"] == [{"clusterQueue": "b", "units": 8}]
    assert reason.details["lent"] == 8
    assert "6 must come back for this job to start" in reason.message


def test_a_job_past_what_is_lent_says_what_must_come_back_and_what_must_free_up():
    # 2 used + 18 asked: 18 missing, 14 lent: all 14 back, and 4 more freed in the cohort.
    reason = schedule(state(_cohort(), [*_running(), wl("a/huge", 18, created=1)]), 5).pending["a/huge"]
    assert reason.code == "quota_lent_out"
    assert "all 14 must come back and 4 more must free up in the cohort for this job to start" in reason.message


def test_a_team_over_its_own_quota_is_quota_exhausted():
    # b uses 12 of its 4: its quota is used up, whatever others hold.
    reason = schedule(state(_cohort(), [*_running(), wl("b/more", 4, created=1)]), 5).pending["b/more"]
    assert reason.code == "quota_exhausted"


def test_nobody_borrowing_is_not_lent_out():
    cqs = [cq("a", {"f": {GPU: 4}}, cohort="lab"), cq("b", {"f": {GPU: 8}}, cohort="lab")]
    s = state(cqs, [wl("b/own", 8, admitted="b"), wl("a/run", 4, admitted="a"), wl("a/j", 4, created=1)])
    assert schedule(s, 5).pending["a/j"].code == "quota_exhausted"
