"""Fairness that remembers (``usage_decay``) against Kueue's admission fair sharing.

Sources (Kueue at the reference snapshot, ``kubernetes-sigs/kueue`` ff69552e):

* KEP-4136 (``keps/4136-admission-fair-sharing/README.md``): usage is a decayed average,
  ``usage = (1 − A) × previous + A × current`` with ``A = 1 − 0.5^(sampling / half_life)``; an admission adds the
  entry penalty ``A × request`` at once; "If there are two AdmissionScopes on the path ... the higher one is used".
* ``pkg/util/admissionfairsharing/admission_fair_sharing_test.go``, ``TestCalculateDecayedConsumedConvergesToUsage``:
  a queue holding 2 CPUs from no history reaches 1, 1.5 and 1.75 CPUs after one, two and three half-lives (168 h).
* ``pkg/scheduler/scheduler_afs_test.go``, ``TestScheduleForAFS``: "admits workload from less active localqueue"
  (usage 8 vs 2, both ask 8 of 8: the less active one is admitted although created later), "without AFS: classic
  admission decision ignores queue usage" (the older one is admitted), "schedules normally when queues have equal
  usage", "does not prioritize a zero-weight localqueue".
* ``pkg/scheduler/preemption/common/ordering.go``, ``CandidatesOrdering``: with admission fair sharing, candidates
  of the queue with more usage are preempted first (``cmp.Compare(*b.LocalQueueFSUsage, *a.LocalQueueFSUsage)``).

Kueue applies it between the LocalQueues of one ClusterQueue; the portal's policy applies the same rules between
the ClusterQueues (teams) of a Cohort, and only to what they borrow (docs/engine.md, *Fairness that remembers*).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from queues.engine import explain, schedule
from queues.engine.model import Cohort, FairSharing, UsageDecay
from queues.engine.scheduler import Engine
from queues.engine.usage_decay import decay_factor, duration_words, entry_penalty_share

from .builders import GPU, cq, group, state, wl

WEEK = 168 * 3600.0
DAY = 86400.0


def policy(half_life: float = WEEK, window: float = 7 * DAY, sampling: float = 300.0) -> UsageDecay:
    return UsageDecay(half_life=half_life, window=window, sampling_interval=sampling)


def shared_pool(*, decay: UsageDecay | None, usage: dict[str, float], fair: bool = False, weights=None):
    """Kueue's AFS test as teams: a Cohort with 8 GPUs of its own, two teams with no quota of their own (so all they
    use is borrowed, as Kueue's LocalQueues share their ClusterQueue's quota), each asking 8 GPUs; a's job is
    older."""
    weights = weights or {}
    teams = [
        replace(cq(name, {"f": {GPU: 0}}, cohort="pool"), consumed={GPU: usage.get(name, 0.0)}, consumed_at=0.0,
                fair_weight=weights.get(name, 1.0))
        for name in ("a", "b")
    ]  # fmt: skip
    s = state(
        teams,
        [wl("a/wl-a1", 8, created=0.0), wl("b/wl-b1", 8, created=1.0)],
        cohorts=[Cohort("pool", resource_groups=(group({"f": {GPU: 8}}),), usage_decay=decay)],
    )
    return replace(s, fair_sharing=FairSharing()) if fair else s


def test_decay_follows_kueues_formula():
    # calculateAlphaRate: 1 − 0.5^(sampling/halfLife); 5 min sampling, 10 min half-life (TestCalculateEntryPenalty…)
    assert entry_penalty_share(policy(half_life=600, sampling=300)) == pytest.approx(1 - 0.5**0.5)
    assert decay_factor(WEEK, WEEK) == pytest.approx(0.5)
    assert decay_factor(10, 0) == 0.0  # "If set to 0, usage will be reset to 0 immediately."
    assert duration_words(7 * DAY) == "7 days"
    assert duration_words(3.5 * DAY) == "3.5 days"
    assert duration_words(12 * 3600) == "12 hours"


def test_recent_usage_converges_to_usage_on_the_half_life_curve():
    """TestCalculateDecayedConsumedConvergesToUsage: 2 units held from no history → 1, 1.5, 1.75 after 1, 2, 3
    half-lives (here with 2 GPUs, a 168 h half-life, and one engine cycle per half-life)."""
    s = state(
        [cq("a", {"f": {GPU: 0}}, cohort="pool")],
        [wl("a/run", 2, admitted="a")],
        cohorts=[Cohort("pool", resource_groups=(group({"f": {GPU: 8}}),), usage_decay=policy())],
    )
    engine = Engine(s, 0.0)
    seen = []
    for n in (1, 2, 3):
        engine.cycle(n * WEEK)
        seen.append(engine.memory.recent("a")[GPU])
    assert seen == pytest.approx([1.0, 1.5, 1.75])
    # what the exported state carries on the ClusterQueue (Kueue's consumedResources and lastUpdate)
    exported = {c.name: c for c in engine.export_state().cluster_queues}["a"]
    assert exported.consumed == pytest.approx({GPU: 1.75})
    assert exported.consumed_at == 3 * WEEK


def test_a_policy_change_keeps_the_teams_recent_usage():
    """A recorded policy change mid-replay (``Engine.reconfigure`` on a policy read from the audit log, which carries
    no usage) keeps what the engine remembered: after one half-life at 1 GPU, another brings it to 1.5 as if nothing
    had changed; a policy that brings its own usage replaces it."""
    pool = Cohort("pool", resource_groups=(group({"f": {GPU: 8}}),), usage_decay=policy())
    s = state([cq("a", {"f": {GPU: 0}}, cohort="pool")], [wl("a/run", 2, admitted="a")], cohorts=[pool])
    engine = Engine(s, 0.0)
    engine.cycle(WEEK)
    bigger = state([cq("a", {"f": {GPU: 0}}, cohort="pool")], [], cohorts=[replace(pool, resource_groups=(
        group({"f": {GPU: 16}}),))])  # fmt: skip
    engine.reconfigure(bigger, WEEK)
    assert engine.memory.recent("a")[GPU] == pytest.approx(1.0)
    engine.cycle(2 * WEEK)
    assert engine.memory.recent("a")[GPU] == pytest.approx(1.5)
    own = replace(
        bigger, cluster_queues=(replace(bigger.cluster_queues[0], consumed={GPU: 6.0}, consumed_at=2 * WEEK),)
    )
    engine.reconfigure(own, 2 * WEEK)
    assert engine.memory.recent("a")[GPU] == pytest.approx(6.0)


def test_admits_the_workload_of_the_less_active_team():
    """'admits workload from less active localqueue': usage 8 vs 2, both ask 8 of 8 → b, though a is older."""
    for fair in (False, True):
        result = schedule(shared_pool(decay=policy(), usage={"a": 8, "b": 2}, fair=fair), 10.0)
        assert [d.workload for d in result.admitted] == ["b/wl-b1"], fair


def test_without_the_policy_usage_is_ignored():
    """'without AFS: classic admission decision ignores queue usage': the older workload wins."""
    for fair in (False, True):
        result = schedule(shared_pool(decay=None, usage={"a": 8, "b": 2}, fair=fair), 10.0)
        assert [d.workload for d in result.admitted] == ["a/wl-a1"], fair


def test_equal_usage_schedules_normally():
    """'schedules normally when queues have equal usage': FIFO."""
    result = schedule(shared_pool(decay=policy(), usage={"a": 2, "b": 2}, fair=True), 10.0)
    assert [d.workload for d in result.admitted] == ["a/wl-a1"]


def test_a_zero_weight_team_is_not_preferred():
    """'does not prioritize a zero-weight localqueue': weight 0 goes last even with no usage and the older job."""
    s = shared_pool(decay=policy(), usage={}, fair=True, weights={"a": 0.0})
    assert [d.workload for d in schedule(s, 10.0).admitted] == ["b/wl-b1"]


def test_the_entry_penalty_orders_a_burst_behind_the_other_team():
    """KEP-4136's entry penalty: an admission adds ``A × request`` to its queue's usage at once, so a burst of one
    team's jobs in one instant is not all admitted before the usage is sampled again.

    Half-life 10 min, sampling 5 min: A = 1 − 0.5^0.5 = 0.293. a's recent usage is 0.5 GPU, b's 1.0; the pool has
    2 GPUs and every job asks 2. First cycle: a/1 goes first (0.5 < 1.0). a/1 ends at once; next cycle, same
    instant: a's penalty 0.293 × 2 = 0.586 has lifted it to 1.086 > 1.0, so b/1 goes before a/2. With no penalty
    (sampling 0) a stays at 0.5 and a/2 goes first.
    """

    def run(sampling: float) -> list[str]:
        teams = [
            replace(cq(name, {"f": {GPU: 0}}, cohort="pool"), consumed={GPU: u}, consumed_at=0.0)
            for name, u in (("a", 0.5), ("b", 1.0))
        ]
        s = state(
            teams,
            [wl("a/1", 2, created=0.0), wl("a/2", 2, created=1.0), wl("b/1", 2, created=2.0)],
            cohorts=[
                Cohort(
                    "pool",
                    resource_groups=(group({"f": {GPU: 2}}),),
                    usage_decay=policy(half_life=600, sampling=sampling),
                )
            ],
        )
        engine = Engine(s, 0.0)
        first = [d.workload for d in engine.cycle(0.0).admitted]
        engine.finish(first[0])
        return first + [d.workload for d in engine.cycle(0.0).admitted]

    assert run(300.0) == ["a/1", "b/1"]
    assert run(0.0) == ["a/1", "a/2"]


def test_quota_within_nominal_is_never_affected():
    """KAI: "this does not effect in-quota allocation". a used 6× its nominal recently but asks within it: a job of
    b that would borrow does not go first."""
    s = state(
        [
            replace(cq("a", {"f": {GPU: 2}}, cohort="pool"), consumed={GPU: 12.0}, consumed_at=0.0),
            replace(cq("b", {"f": {GPU: 2}}, cohort="pool"), consumed={GPU: 0.0}, consumed_at=0.0),
        ],
        [wl("b/run", 2, admitted="b"), wl("a/own", 2, created=5.0), wl("b/borrow", 2, created=0.0)],
        cohorts=[Cohort("pool", usage_decay=policy())],
    )
    for fair in (False, True):
        s2 = replace(s, fair_sharing=FairSharing()) if fair else s
        assert [d.workload for d in schedule(s2, 10.0).admitted] == ["a/own"], fair


def test_reclaim_takes_the_recent_borrower_first():
    """CandidatesOrdering with AFS: the candidate of the queue with more usage goes first. Two teams borrow 2 GPUs
    each from c, at the same priority; c reclaims 2: the one that borrowed more over the week is preempted."""
    for heavy in ("a", "b"):
        s = state(
            [
                replace(cq("a", {"f": {GPU: 0}}, cohort="pool"), consumed={GPU: 3.0 if heavy == "a" else 1.0}),
                replace(cq("b", {"f": {GPU: 0}}, cohort="pool"), consumed={GPU: 3.0 if heavy == "b" else 1.0}),
                cq("c", {"f": {GPU: 4}}, cohort="pool", reclaim="Any"),
            ],
            [
                wl("a/run", 2, admitted="a", admitted_at=0.0),
                wl("b/run", 2, admitted="b", admitted_at=0.0),
                wl("c/mine", 2, created=5.0),
            ],
            cohorts=[Cohort("pool", usage_decay=policy())],
        )
        result = schedule(s, 10.0)
        assert [(p.victim, p.reason) for p in result.preemptions] == [(f"{heavy}/run", "InCohortReclamation")]


def test_fair_preemption_takes_from_the_team_with_more_remembered_borrowing():
    """Fair sharing's preemption compares shares that count remembered borrowing: a and b borrow the same now, but
    b borrowed much more over the week; z, within its nominal quota, reclaims from b (the highest share first) —
    without the policy the shares are equal and the tie goes to a (the first candidate in Kueue's order)."""
    s = state(
        [
            replace(cq("a", {"f": {GPU: 2}}, cohort="pool"), consumed={GPU: 2.5}),
            replace(cq("b", {"f": {GPU: 2}}, cohort="pool"), consumed={GPU: 6.0}),
            cq("z", {"f": {GPU: 4}}, cohort="pool", reclaim="Any"),
        ],
        [
            wl("a/run", 4, admitted="a", admitted_at=0.0),
            wl("b/run", 4, admitted="b", admitted_at=0.0),
            wl("z/mine", 2, created=5.0),
        ],
        cohorts=[Cohort("pool", usage_decay=policy())],
    )
    result = schedule(replace(s, fair_sharing=FairSharing()), 10.0)
    assert [p.victim for p in result.preemptions] == ["b/run"]
    without = schedule(replace(s, cohorts=(Cohort("pool"),), fair_sharing=FairSharing()), 10.0)
    assert [p.victim for p in without.preemptions] == ["a/run"]


def test_the_highest_cohort_with_the_policy_applies():
    """KEP-4136: "If there are two AdmissionScopes on the path from CQ/Cohort to the top of the hierarchy tree, the
    higher one is used"."""
    s = state(
        [replace(cq("a", {"f": {GPU: 1}}, cohort="inner"), consumed={GPU: 2.0})],
        cohorts=[
            Cohort("inner", parent="top", usage_decay=policy(half_life=DAY)),
            Cohort("top", resource_groups=(group({"f": {GPU: 4}}),), usage_decay=policy(half_life=WEEK)),
        ],
    )
    engine = Engine(s, 0.0)
    assert engine.memory.policy["a"].half_life == WEEK
    assert engine.memory.scope["a"].name == "top"


def test_the_wait_reason_says_the_team_used_more_than_its_share():
    s = state(
        [
            replace(cq("a", {"f": {GPU: 2}}, cohort="pool"), consumed={GPU: 6.2}),
            cq("b", {"f": {GPU: 2}}, cohort="pool"),
        ],
        [wl("b/run", 2, admitted="b"), wl("a/run", 2, admitted="a"), wl("a/more", 2, created=1.0)],
        cohorts=[Cohort("pool", usage_decay=policy(half_life=3.5 * DAY))],
    )
    reason = explain(s, "a/more", 10.0).reason
    assert reason.code == "quota_exhausted"
    assert "Your team used 3.1× its share over the last 7 days (usage counts half after 3.5 days)" in reason.message
    assert reason.details["recentUsage"] == {
        "ratio": 3.1,
        "resource": GPU,
        "windowSeconds": 7 * DAY,
        "halfLifeSeconds": 3.5 * DAY,
    }
    calm = explain(replace(s, cohorts=(Cohort("pool"),)), "a/more", 10.0).reason
    assert "Your team used" not in calm.message
    assert "recentUsage" not in calm.details
