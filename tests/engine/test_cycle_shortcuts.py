"""The cycle's shortcuts answer exactly as the general code they stand in for.

A replay of a mixed cluster (cohorts with borrowing limits, one- and two-flavor queues, a preempting queue, a
pods quota, nodes in racks with topology rules) runs with each shortcut checked at every use against the code
path it replaces: ``assign_if_fits`` against ``assign`` (and the node request its plan keeps against a fresh one),
``find_heads`` (queued ClusterQueues only) against a look at every ClusterQueue, the shared pod-set requests against
freshly built ones, and ``placement_ok`` of a deferred assignment (its kept request) against ``place_all``.
"""

from __future__ import annotations

import random

import pytest

from queues.engine import cycle, flavor_assignment, pod_placement
from queues.engine.model import ResourceFlavor, Topology, TopologyRequest
from queues.engine.queueing import next_head
from queues.engine.scheduler import Engine
from queues.engine.simulation import Replay

from .builders import GPU, cq, node, plain_engine_only, state, wl

LEVELS = ("rack", "kubernetes.io/hostname")


def _cluster(seed: int):
    rng = random.Random(seed)
    queues = [
        cq("a1", {"gpu": {GPU: (8, 8)}}, cohort="one"),
        cq("a2", {"gpu": {GPU: (8, 4)}, "spot": {GPU: 8}}, cohort="one"),
        cq("a3", {"gpu": {GPU: (4, None), "pods": 6}}, cohort="one", when_borrow="TryNextFlavor"),
        cq("b1", {"gpu": {GPU: 8}}, cohort="two", reclaim="Any", within="LowerPriority"),
        cq("b2", {"gpu": {GPU: (8, 16)}}, cohort="two"),
        cq("c1", {"gpu": {GPU: 6}}),
    ]
    flavors = [
        ResourceFlavor("gpu", node_labels={"pool": "gpu"}, topology_name="dc"),
        ResourceFlavor("spot", node_labels={"pool": "spot"}),
    ]
    nodes = [node(f"g{i}", 4, labels={"pool": "gpu", "rack": f"r{i // 3}"}) for i in range(9)]
    nodes += [node(f"s{i}", 8, labels={"pool": "spot"}) for i in range(2)]
    workloads = []
    names = [q.name for q in queues]
    for i in range(160):
        queue = rng.choice(names)
        rule = rng.choice((None, None, TopologyRequest(required="rack"), TopologyRequest(preferred="rack")))
        workloads.append(
            wl(
                f"{queue}/w{i:03d}",
                rng.choice((1, 1, 2, 4)),
                count=rng.choice((1, 1, 2)),
                priority=rng.choice((0, 0, 10)),
                created=float(i),
                runtime=rng.uniform(5, 40),
                topology=rule,
            )
        )
    st = state(queues, flavors=flavors, nodes=nodes, topologies=[Topology("dc", LEVELS)])
    return st, workloads


def _reference_heads(engine: Engine) -> list:
    out = []
    for q in engine.cqs.values():
        if q.blocked or not q.heap:
            continue
        head = cycle._pinned(engine, q) if engine.preemptors else None
        if head is None:
            head = next_head(engine, q)
        if head is not None:
            out.append((q, head))
    return out


@plain_engine_only
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_shortcuts_agree_with_the_general_code(monkeypatch, seed):
    st, workloads = _cluster(seed)
    engine = Engine(st, 0.0)
    used = {"fits": 0, "general": 0, "kept request": 0, "deferred placement": 0}

    def checked_assign_if_fits(eng, w, q, plan, *, defer_nodes=False):
        fast = flavor_assignment.assign_if_fits(eng, w, q, plan, defer_nodes=defer_nodes)
        if fast is not None:
            used["fits"] += 1
            assert fast == flavor_assignment.assign(eng, w, q, defer_nodes=defer_nodes, explain=False)
            if eng.pool.enabled:
                # The node request kept on the plan is the one this workload's pod set asks for.
                kept = plan[6][eng.pool.counts_pods]
                assert kept == pod_placement._podset_request(eng, w.pod_sets[0], (plan[0],))[0]
                used["kept request"] += 1
        else:
            used["general"] += 1
        return fast

    def checked_find_heads(eng):
        heads = cycle.find_heads(eng)
        assert [(q.name, w.key) for q, w in heads] == [(q.name, w.key) for q, w in _reference_heads(eng)]
        return heads

    shared_request = pod_placement.podset_request

    def checked_request(eng, q, ps, flavors):
        shared = shared_request(eng, q, ps, flavors)
        names = tuple(sorted(set(flavors.values())))
        assert shared == pod_placement._podset_request(eng, ps, names)
        return shared

    def checked_placement_ok(eng, w, q, assignment):
        nodes = pod_placement.placement_ok(eng, w, q, assignment)
        if assignment.deferred_request is not None:
            used["deferred placement"] += 1
        assert nodes == pod_placement.place_all(eng, w, q, assignment.pod_sets, lean=True)
        return nodes

    monkeypatch.setattr(cycle, "assign_if_fits", checked_assign_if_fits)
    monkeypatch.setattr(cycle, "placement_ok", checked_placement_ok)
    monkeypatch.setattr(engine, "heads", lambda: checked_find_heads(engine))
    monkeypatch.setattr(pod_placement, "podset_request", checked_request)
    replay = Replay(engine, start=0.0)
    for spec in workloads:
        replay.submit_at(spec, spec.created_at)
    result = replay.run(until=None)
    assert used["fits"] > 20
    assert used["kept request"] > 20
    assert used["deferred placement"] > 20
    assert used["general"] > 0
    assert sum(1 for r in result.records.values() if r.admissions) > 100


def test_quota_fit_plan_only_for_single_flavor_shapes():
    st, workloads = _cluster(1)
    engine = Engine(st, 0.0)
    for spec in workloads:
        engine.submit(spec)
    plans = {}
    for w in engine.live.values():
        plans[w.cq] = flavor_assignment.quota_fit_plan(engine, w, engine.cqs[w.cq])
    assert plans["a2"] is None  # two flavors
    assert plans["a1"] is not None
    assert plans["a1"][0] == "gpu"
    assert {fr for fr, _ in plans["a3"][1]} == {("gpu", GPU), ("gpu", "pods")}
