"""Fair sharing's admission order and preemption candidates, kept cheap, decide as worked out from scratch.

The engine keeps each head's order keys while the usage they read is unchanged (per workload, and per tree while
its usage version holds), takes the minimum of whole keys instead of comparing heads pairwise, and parks every
head at once when none may be admitted; fair preemption keeps the shares it visits while their nodes' usage is
unchanged. ``reference_fair`` is all of it as first written; replays of nested cohort trees (with lending limits,
weights 0 and preemption) must decide the same, cycle by cycle.
"""

from __future__ import annotations

import math
from dataclasses import replace
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queues.engine import cycle, fair_sharing, schedule
from queues.engine.fair_share import Share, compare, order_key
from queues.engine.model import Cohort, FairSharing, ResourceFlavor, Topology, TopologyRequest
from queues.engine.scheduler import Engine
from queues.engine.simulation import Replay

from .builders import GPU, cq, group, node, plain_engine_only, state, wl
from .reference_fair import reference_all_inadmissible, reference_candidates, reference_tournament

#: (ClusterQueue, its Cohort): org <- {team-x <- {x1, x2}, y}; solo <- {s1, s2}; lone has no cohort.
QUEUES = (("x1", "team-x"), ("x2", "team-x"), ("y", "org"), ("s1", "solo"), ("s2", "solo"), ("lone", None))
STRATEGIES = (
    ("LessThanOrEqualToFinalShare", "LessThanInitialShare"),
    ("LessThanOrEqualToFinalShare",),
    ("LessThanInitialShare",),
)


@st.composite
def replays(draw, with_nodes: bool, preempting: bool = False):
    """A fair-sharing cluster of two cohort trees and a lone queue, and workloads arriving over time.

    ``preempting``: every queue reclaims and preempts within itself, and lends more than it keeps busy.
    """
    cqs = []
    for name, cohort in QUEUES:
        spec = (
            draw(st.integers(0, 8)),
            draw(st.sampled_from((None, 0, 4, 8))),
            draw(st.sampled_from((None, 0, 2))),
        )
        queue = cq(
            name,
            {"f": {GPU: spec}},
            cohort=cohort,
            within="LowerPriority" if preempting else draw(st.sampled_from(("Never", "LowerPriority"))),
            reclaim=draw(
                st.sampled_from(("Any", "LowerPriority") if preempting else ("Never", "Never", "Any", "LowerPriority"))
            ),
        )
        cqs.append(replace(queue, fair_weight=draw(st.sampled_from((0.0, 0.5, 1.0, 1.0, 2.0)))))
    lending = draw(st.sampled_from((None, 0, 2)))
    team = group({"f": {GPU: (draw(st.integers(0, 4)), None, lending)}}) if lending is not None else None
    cohorts = [
        Cohort("org"),
        Cohort(
            "team-x",
            parent="org",
            resource_groups=(team,) if team else (),
            fair_weight=draw(st.sampled_from((0.0, 1.0, 2.0))),
        ),
        Cohort("solo"),
    ]
    submissions = []
    for j in range(draw(st.integers(10 if preempting else 0, 30))):
        queue = draw(st.sampled_from(QUEUES))[0]
        topology = TopologyRequest(preferred="rack") if with_nodes and draw(st.booleans()) else None
        spec = wl(
            f"{queue}/w{j}",
            draw(st.sampled_from((1, 1, 2, 4))),
            count=draw(st.sampled_from((1, 1, 2))),
            priority=draw(st.integers(0, 3)),
            runtime=float(draw(st.sampled_from((5, 10, 15)))),
            topology=topology,
        )
        # Few distinct times: many heads meet in one cycle.
        submissions.append((float(draw(st.sampled_from((0, 5, 10, 20)))), spec))
    extra = {}
    if with_nodes:
        extra = {
            "nodes": [
                node(f"n{k}", draw(st.sampled_from((4, 8))), labels={"rack": f"r{k % 2}"})
                for k in range(draw(st.integers(1, 5)))
            ],
            "topologies": [Topology("t", ("rack", "kubernetes.io/hostname"))],
            "flavors": [ResourceFlavor("f", topology_name="t")],
        }
    s = state(cqs, cohorts=cohorts, **extra)
    return replace(s, fair_sharing=FairSharing(draw(st.sampled_from(STRATEGIES)))), submissions


def _decisions(drawn) -> list[tuple]:
    """Every cycle's admissions, preemptions and parked heads (as a set) of the replay."""
    s, submissions = drawn
    replay = Replay(Engine(s, 0.0), start=0.0, record_outcomes=True)
    for when, spec in submissions:
        replay.submit_at(spec, when)
    result = replay.run()
    return [(o.admitted, o.preemptions, sorted(o.parked)) for o in result.outcomes]


def _reference_decisions(drawn) -> list[tuple]:
    with (
        mock.patch.object(cycle, "tournament", reference_tournament),
        mock.patch.object(cycle, "_all_inadmissible", reference_all_inadmissible),
        mock.patch.object(fair_sharing, "_candidates", reference_candidates),
    ):
        return _decisions(drawn)


@plain_engine_only
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replays(with_nodes=False))
def test_fair_order_decides_as_the_reference(drawn):
    assert _decisions(drawn) == _reference_decisions(drawn)


@plain_engine_only
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replays(with_nodes=True))
def test_fair_order_with_nodes_decides_as_the_reference(drawn):
    assert _decisions(drawn) == _reference_decisions(drawn)


@plain_engine_only
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replays(with_nodes=False, preempting=True))
def test_fair_preemption_decides_as_the_reference(drawn):
    assert _decisions(drawn) == _reference_decisions(drawn)


@st.composite
def shares(draw):
    """A share as ``fair_share.share`` makes them: a ratio above 0 only while borrowing."""
    borrowing = draw(st.booleans())
    ratio = draw(st.sampled_from((0.0, 125.0, 250.0, 500.0, math.nextafter(250.0, 0)))) if borrowing else 0.0
    weight = draw(st.sampled_from((0.0, 0.5, 1.0, 2.0)))
    return Share(weight, ratio, "gpu" if ratio else "", (("f", GPU),) if borrowing else ())


@given(shares(), shares())
def test_order_key_orders_as_compare(a, b):
    ka, kb = order_key(a), order_key(b)
    assert compare(a, b) == (ka > kb) - (ka < kb)


def test_final_share_is_worked_out_again_for_another_usage():
    # a with a/new borrows 2 of the cohort's 12 (167); b borrows 4 (333). Its newest, b/big, leaves b at 0 < 167:
    # refused; b/w1 (another usage) leaves 167 >= 167 and is taken, although the answer for b/big was no.
    s = state(
        [cq(q, {"f": {GPU: 4}}, cohort="c", reclaim="Any" if q == "a" else "Never") for q in "abz"],
        [
            wl("a/old", 2, admitted="a"),
            wl("b/w0", 2, admitted="b", created=0),
            wl("b/w1", 2, admitted="b", created=1),
            wl("b/big", 4, admitted="b", created=3),
            wl("a/new", 4, created=10),
        ],
    )
    s = replace(s, fair_sharing=FairSharing(("LessThanOrEqualToFinalShare",)))
    result = schedule(s, 20)
    assert [(p.victim, p.reason) for p in result.preemptions] == [("b/w1", "InCohortFairSharing")]
