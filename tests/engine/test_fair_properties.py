"""Property tests with fair sharing on: limits and nodes hold, shares are sane, settling ends and is deterministic."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queues.engine import WAIT_CODE_ORDER, ClusterState, settle
from queues.engine.fair_share import MAX_SHARE, share
from queues.engine.model import FairSharing
from queues.engine.scheduler import Engine

from .test_properties import _check_limits, _check_nodes, _check_topology, clusters

STRATEGIES = (
    ("LessThanOrEqualToFinalShare", "LessThanInitialShare"),
    ("LessThanOrEqualToFinalShare",),
    ("LessThanInitialShare",),
)


@st.composite
def fair_clusters(draw, with_nodes: bool):
    first, later = draw(clusters(with_nodes))
    weights = [draw(st.sampled_from((0.0, 0.5, 1.0, 1.0, 2.0))) for _ in first.cluster_queues]
    cqs = tuple(replace(q, fair_weight=w) for q, w in zip(first.cluster_queues, weights, strict=True))
    fs = FairSharing(draw(st.sampled_from(STRATEGIES)))
    return replace(first, cluster_queues=cqs, fair_sharing=fs), later


def run(drawn) -> tuple[ClusterState, object, object]:
    first, later = drawn
    before = settle(first, 10.0)
    s = replace(before.state, workloads=before.state.workloads + later)
    return s, before, settle(s, 30.0)


def _check_settles(s: ClusterState, final) -> None:
    assert len(final.cycles) <= 3 * len(s.workloads) + 3, len(final.cycles)
    victims = [p.victim for c in final.cycles for p in c.preemptions]
    assert len(victims) == len(set(victims)), victims
    for c in final.cycles:
        for p in c.preemptions:
            assert p.reason in ("InClusterQueue", "InCohortReclamation", "InCohortFairSharing")


def _check_shares(s: ClusterState) -> None:
    engine = Engine(s, 30.0)
    for name, cq in engine.cqs.items():
        value = share(cq.node)
        weighted = value.weighted_share
        assert 0 <= weighted <= MAX_SHARE
        if not value.borrowing:
            assert weighted == 0, name
        if value.infinite:
            assert cq.spec.fair_weight == 0
            assert weighted == MAX_SHARE


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fair_clusters(with_nodes=False))
def test_property_fair_sharing_limits_hold_and_settle(drawn):
    s, before, final = run(drawn)
    _check_limits(s, final)
    _check_settles(drawn[0], before)
    _check_settles(s, final)
    _check_shares(final.state)
    for reason in final.pending.values():
        assert reason.code in WAIT_CODE_ORDER


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fair_clusters(with_nodes=True))
def test_property_fair_sharing_with_nodes_is_deterministic(drawn):
    s, _, final = run(drawn)
    _check_limits(s, final)
    _check_nodes(s, final)
    _check_topology(s, final)
    assert settle(s, 30.0) == final
    reversed_state = replace(
        s,
        flavors=tuple(reversed(s.flavors)),
        cluster_queues=tuple(reversed(s.cluster_queues)),
        local_queues=tuple(reversed(s.local_queues)),
        nodes=tuple(reversed(s.nodes)),
        workloads=tuple(reversed(s.workloads)),
    )
    other = settle(reversed_state, 30.0)
    assert {w.key: w.admission for w in final.state.workloads} == {w.key: w.admission for w in other.state.workloads}
