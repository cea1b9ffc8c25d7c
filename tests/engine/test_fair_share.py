"""Dominant resource share (Kueue's weightedShare) against numbers worked by hand."""

from __future__ import annotations

import math
from dataclasses import replace

from queues.engine.fair_share import MAX_SHARE, NEGATIVE, Share, compare, share
from queues.engine.model import Cohort, FairSharing
from queues.engine.scheduler import Engine

from .builders import GPU, cq, group, state, wl

CPU = "cpu"


def _engine(s) -> Engine:
    return Engine(replace(s, fair_sharing=FairSharing()), 0)


def test_share_flat_cohort_by_hand():
    # Cohort quota 6 + 2 + 4 = 12 GPUs: what every member's parent could lend.
    s = state(
        [
            cq("a", {"f": {GPU: 6}}, cohort="c"),
            cq("b", {"f": {GPU: 2}}, cohort="c"),
            replace(cq("w", {"f": {GPU: 4}}, cohort="c"), fair_weight=2.0),
        ],
        [wl("a/x", 9, admitted="a"), wl("b/x", 2, admitted="b"), wl("w/x", 5, admitted="w")],
    )
    engine = _engine(s)
    a, b, w = (share(engine.quota.cqs[n]) for n in "abw")
    assert a.ratio == 3 * 1000 / 12
    assert a.weighted_share == 250
    assert a.resource == GPU
    assert b.weighted_share == 0
    assert not b.borrowing
    # 1 borrowed GPU: 1000/12 = 83.3, weight 2 -> 41.67, rounded up.
    assert math.isclose(w.precise, 1000 / 12 / 2)
    assert w.weighted_share == 42
    queues, cohorts = engine.weighted_shares()
    assert queues == {"a": 250, "b": 0, "w": 42}
    # The root cohort has no parent: its share is 0 by definition.
    assert cohorts == {"c": 0}


def test_share_dominant_resource_is_the_largest_ratio():
    # gpu: 3 of 12 lendable -> 250; cpu: 6 of 30 cores -> 200. GPU dominates.
    quotas = {"f": {GPU: 6, CPU: 10_000}}
    s = state(
        [cq("a", quotas, cohort="c"), cq("b", quotas, cohort="c"), cq("d", {"f": {GPU: 0, CPU: 10_000}}, cohort="c")],
        [wl("a/x", requests={GPU: 9, CPU: 16_000}, admitted="a")],
    )
    a = share(_engine(s).quota.cqs["a"])
    assert a.resource == GPU
    assert a.weighted_share == 250
    # With 12 cpu borrowed (cpu 400) the dominant resource becomes cpu.
    s2 = replace(s, workloads=(wl("a/x", requests={GPU: 9, CPU: 22_000}, admitted="a"),))
    a2 = share(_engine(s2).quota.cqs["a"])
    assert a2.resource == CPU
    assert a2.weighted_share == 400


def test_share_sums_flavors_of_one_resource():
    # Borrowing 2 in flavor f and 1 in flavor g: 3 GPUs over 8 + 8 lendable.
    quotas = {"f": {GPU: 4}, "g": {GPU: 4}}
    s = state(
        [cq("a", quotas, cohort="c"), cq("b", quotas, cohort="c")],
        [wl("a/x", 6, admitted="a", flavor="f"), wl("a/y", 5, admitted="a", flavor="g")],
    )
    a = share(_engine(s).quota.cqs["a"])
    assert a.ratio == 3 * 1000 / 16
    assert a.weighted_share == 188


def test_share_weight_zero_is_infinite_only_while_borrowing():
    s = state(
        [cq("a", {"f": {GPU: 4}}, cohort="c"), replace(cq("z", {"f": {GPU: 4}}, cohort="c"), fair_weight=0.0)],
        [wl("z/x", 4, admitted="z")],
    )
    z = share(_engine(s).quota.cqs["z"])
    assert not z.borrowing
    assert z.weighted_share == 0
    assert not z.infinite
    s2 = replace(s, workloads=(wl("z/x", 5, admitted="z"),))
    z2 = share(_engine(s2).quota.cqs["z"])
    assert z2.infinite
    assert z2.precise == math.inf
    assert z2.weighted_share == MAX_SHARE
    a = share(_engine(s2).quota.cqs["a"])
    assert compare(z2, a) == 1
    assert compare(a, z2) == -1


def test_share_nested_cohorts_with_lending_limit():
    # org: own quota 4; team-x (x1 nominal 4, x2 nominal 4 lending 1, so 3 kept private); y nominal 8.
    # team-x subtree = 4 + (4 - 3) = 5; org subtree = 4 + 5 + 8 = 17 = what team-x can lend to x1.
    s = state(
        [
            cq("x1", {"f": {GPU: 4}}, cohort="team-x"),
            cq("x2", {"f": {GPU: (4, None, 1)}}, cohort="team-x"),
            cq("y", {"f": {GPU: 8}}, cohort="org"),
        ],
        [wl("x1/a", 6, admitted="x1"), wl("y/a", 10, admitted="y")],
        cohorts=[Cohort("org", resource_groups=(group({"f": {GPU: 4}}),)), Cohort("team-x", parent="org")],
    )
    engine = _engine(s)
    x1 = share(engine.quota.cqs["x1"])
    assert x1.ratio == 2 * 1000 / 17
    assert x1.weighted_share == 118
    # team-x uses 6 of its 5: borrows 1 of org's 17 -> 58.8 -> 59.
    team = share(engine.quota.cohorts["team-x"])
    assert team.ratio == 1000 / 17
    assert team.weighted_share == 59
    # y borrows 2; its parent org is the root: 2/17.
    assert share(engine.quota.cqs["y"]).weighted_share == 118
    assert share(engine.quota.cohorts["org"]).weighted_share == 0


def test_share_cohort_weight_divides():
    s = state(
        [cq("x1", {"f": {GPU: 4}}, cohort="team-x"), cq("y", {"f": {GPU: 4}}, cohort="org")],
        [wl("x1/a", 6, admitted="x1")],
        cohorts=[Cohort("org"), Cohort("team-x", parent="org", fair_weight=0.5)],
    )
    team = share(_engine(s).quota.cohorts["team-x"])
    # Borrows 2 of 8: 250, weight 0.5 -> 500.
    assert team.weighted_share == 500


def test_share_compare_orders_values():
    low, high = Share(1.0, 100.0, GPU, (("f", GPU),)), Share(2.0, 400.0, GPU, (("f", GPU),))
    assert compare(low, high) == -1
    assert compare(high, low) == 1
    assert compare(Share(1.0, 200.0, GPU, (("f", GPU),)), high) == 0
    assert compare(NEGATIVE, Share(1.0)) == -1
    assert Share(1.0, 0.4, GPU, (("f", GPU),)).weighted_share == 1
