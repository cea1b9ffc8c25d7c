"""Property tests over random clusters: limits hold, devices are never over-used, output is deterministic."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queues.engine import WAIT_CODE_ORDER, ClusterState, ResourceFlavor, Topology, TopologyRequest, settle

from .builders import GPU, cq, node, state, wl

FLAVORS = ("f1", "f2")
POLICIES_WITHIN = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
POLICIES_RECLAIM = ("Never", "LowerPriority", "Any")


@st.composite
def clusters(draw, with_nodes: bool) -> ClusterState:
    n_cqs = draw(st.integers(1, 4))
    cohorted = draw(st.booleans())
    cqs = []
    for i in range(n_cqs):
        quotas = {}
        for f in FLAVORS[: draw(st.integers(1, 2))]:
            nominal = draw(st.integers(0, 12))
            bl = draw(st.one_of(st.none(), st.integers(0, 8)))
            ll = draw(st.one_of(st.none(), st.integers(0, nominal)))
            quotas[f] = {GPU: (nominal, bl, ll)}
        bwc = draw(st.sampled_from(("Never", "LowerPriority")))
        cqs.append(
            cq(
                f"q{i}",
                quotas,
                cohort="c" if cohorted else None,
                strategy=draw(st.sampled_from(("BestEffortFIFO", "StrictFIFO"))),
                within=draw(st.sampled_from(POLICIES_WITHIN)),
                reclaim=draw(st.sampled_from(POLICIES_RECLAIM)),
                bwc=bwc,
                threshold=draw(st.one_of(st.none(), st.integers(0, 10))) if bwc != "Never" else None,
                when_borrow=draw(st.sampled_from(("MayStopSearch", "TryNextFlavor"))),
                when_preempt=draw(st.sampled_from(("TryNextFlavor", "MayStopSearch"))),
            )
        )
    workloads = []
    for j in range(draw(st.integers(0, 18))):
        q = draw(st.integers(0, n_cqs - 1))
        topo = draw(st.sampled_from((None, "rack", "preferred"))) if with_nodes else None
        request = None
        if topo == "rack":
            request = TopologyRequest(required="rack")
        elif topo == "preferred":
            request = TopologyRequest(preferred="rack")
        workloads.append(
            wl(
                f"q{q}/w{j}",
                draw(st.sampled_from((1, 1, 2, 4, 8))),
                count=draw(st.sampled_from((1, 1, 2, 3))),
                priority=draw(st.integers(0, 10)),
                created=float(draw(st.integers(0, 5))),
                topology=request,
            )
        )
    late = draw(st.integers(0, len(workloads)))
    nodes = []
    topologies = []
    flavors = [ResourceFlavor(f, node_labels={"flavor": f}) for f in FLAVORS]
    if with_nodes:
        topologies = [Topology("t", ("rack", "kubernetes.io/hostname"))]
        flavors = [ResourceFlavor(f, node_labels={"flavor": f}, topology_name="t") for f in FLAVORS]
        for k in range(draw(st.integers(1, 8))):
            gpus = draw(st.sampled_from((4, 8, 8, 16)))
            healthy = draw(st.integers(0, 4)) > 0
            nodes.append(
                node(
                    f"n{k}",
                    gpus,
                    labels={"flavor": draw(st.sampled_from(FLAVORS)), "rack": f"r{k % 3}"},
                    allocatable=gpus if healthy else draw(st.integers(0, gpus)),
                    ready=healthy or draw(st.booleans()),
                )
            )
    first = state(cqs, workloads[:late], flavors=flavors, nodes=nodes, topologies=topologies)
    return first, tuple(replace(w, created_at=w.created_at + 20) for w in workloads[late:])


def run(drawn) -> tuple[ClusterState, object]:
    """Settle the first batch, submit the second batch (later, often higher priority), settle again."""
    first, later = drawn
    before = settle(first, 10.0)
    s = replace(before.state, workloads=before.state.workloads + later)
    return s, settle(s, 30.0)


def _usage(final) -> dict[tuple[str, str], int]:
    pods = {w.key: w for w in final.state.workloads}
    usage: dict[tuple[str, str], int] = defaultdict(int)
    for w in final.state.workloads:
        if w.admission is None:
            continue
        for ps, adm in zip(pods[w.key].pod_sets, w.admission.pod_sets, strict=True):
            for res, per_pod in ps.requests.items():
                usage[(w.admission.cluster_queue, adm.flavors[res])] += per_pod * adm.count
    return usage


def _check_limits(s: ClusterState, final) -> None:
    usage = _usage(final)
    lendable = defaultdict(int)
    borrowed = defaultdict(int)
    for q in s.cluster_queues:
        for g in q.resource_groups:
            for f in g.flavors:
                for r in f.resources:
                    used = usage.get((q.name, f.name), 0)
                    limit = r.nominal + (r.borrowing_limit if r.borrowing_limit is not None else 10**9)
                    assert used <= limit, (q.name, f.name, used, limit)
                    if q.cohort is None:
                        assert used <= r.nominal
                        continue
                    private = max(0, r.nominal - r.lending_limit) if r.lending_limit is not None else 0
                    lendable[(q.cohort, f.name)] += r.nominal - private
                    borrowed[(q.cohort, f.name)] += max(0, used - private)
    for key, used in borrowed.items():
        assert used <= lendable[key], (key, used, lendable[key])


def _check_nodes(s: ClusterState, final) -> None:
    if not s.nodes:
        return
    per_node: dict[str, int] = defaultdict(int)
    specs = {w.key: w for w in s.workloads}
    for w in final.state.workloads:
        if w.admission is None:
            continue
        for ps, adm in zip(specs[w.key].pod_sets, w.admission.pod_sets, strict=True):
            assert len(adm.nodes) == adm.count
            for n in adm.nodes:
                per_node[n] += ps.requests[GPU]
    by_name = {n.name: n for n in s.nodes}
    for name, used in per_node.items():
        n = by_name[name]
        assert n.ready
        assert used <= n.allocatable[GPU], (name, used, n.allocatable[GPU])


def _check_topology(s: ClusterState, final) -> None:
    if not s.nodes:
        return
    racks = {n.name: n.labels["rack"] for n in s.nodes}
    specs = {w.key: w for w in s.workloads}
    for w in final.state.workloads:
        if w.admission is None:
            continue
        for ps, adm in zip(specs[w.key].pod_sets, w.admission.pod_sets, strict=True):
            if ps.topology is not None and ps.topology.required:
                assert len({racks[n] for n in adm.nodes}) == 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(with_nodes=False))
def test_property_quota_limits_hold(drawn):
    s, final = run(drawn)
    _check_limits(s, final)
    for reason in final.pending.values():
        assert reason.code in WAIT_CODE_ORDER
        assert reason.message


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(with_nodes=True))
def test_property_never_more_devices_than_nodes_have(drawn):
    s, final = run(drawn)
    _check_limits(s, final)
    _check_nodes(s, final)
    _check_topology(s, final)
    for reason in final.pending.values():
        assert reason.code in WAIT_CODE_ORDER


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(with_nodes=True))
def test_property_deterministic(drawn):
    s, final = run(drawn)
    assert settle(s, 30.0) == final
    reversed_state = ClusterState(
        flavors=tuple(reversed(s.flavors)),
        topologies=s.topologies,
        cluster_queues=tuple(reversed(s.cluster_queues)),
        local_queues=tuple(reversed(s.local_queues)),
        namespaces=s.namespaces,
        nodes=tuple(reversed(s.nodes)),
        workloads=tuple(reversed(s.workloads)),
    )
    other = settle(reversed_state, 30.0)
    assert {w.key: w.admission for w in final.state.workloads} == {w.key: w.admission for w in other.state.workloads}
    assert final.pending == other.pending


def _check_preemptions_settle(s: ClusterState, final) -> None:
    """Bounded cycles at one instant, no victim preempted twice, and every eviction leads to an admission.

    The capacity a preemption frees goes to its preemptor, unless Kueue's cycle order gives it first to a
    workload that does not borrow or has a higher priority (a queue's claim on its own nominal quota); it
    never goes back and forth between queues at the same instant.
    """
    assert len(final.cycles) <= 3 * len(s.workloads) + 3, len(final.cycles)
    priority = {w.key: w.priority for w in s.workloads}
    admitted_at: dict[str, int] = {}
    for i, cycle in enumerate(final.cycles):
        for decision in cycle.admitted:
            admitted_at[decision.workload] = i
    victims: list[str] = []
    for i, cycle in enumerate(final.cycles):
        for p in cycle.preemptions:
            victims.append(p.victim)
            if admitted_at.get(p.preemptor, -1) > i:
                continue
            # The preemptor lost the freed capacity, in a later cycle at this instant, to a workload ahead of it in
            # Kueue's order (one that may first issue preemptions of its own, and is admitted once they are done).
            ahead = [
                d.workload
                for later in final.cycles[i + 1 :]
                for d in later.admitted
                if not d.borrowing or priority[d.workload] > priority[p.preemptor]
            ]
            assert ahead, (p.victim, p.preemptor, i)
    assert len(victims) == len(set(victims)), victims


# Derandomized (a fixed sequence of examples, no example database) so that CI is reproducible; a cluster a random
# run drew is kept as a regression case (tests/engine/regressions/, test_preemption_regressions.py).
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True, database=None
)
@given(clusters(with_nodes=True), st.booleans())
def test_property_preemption_settles_and_admits_the_preemptor(drawn, with_nodes):
    first, later = drawn
    if not with_nodes:
        first = replace(first, nodes=())
    before = settle(first, 10.0)
    _check_preemptions_settle(first, before)
    s = replace(before.state, workloads=before.state.workloads + later)
    final = settle(s, 30.0)
    _check_preemptions_settle(s, final)
