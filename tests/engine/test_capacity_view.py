"""The incremental capacity views place every pod set exactly as the full node scan they replaced.

``reference_placement`` is the placement code before the views (a scan of every node per request); the pool
under test and the reference pool see the same nodes and the same sequence of pods added and removed, and
must give the same result for every request: nodes, fit, exclusions, free units, level and best domain
(and ``NodePool.fits`` must say whether it succeeds).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from queues.engine.model import Node, Taint, Toleration
from queues.engine.placement import NodePool, PodSetRequest

from . import reference_placement

GPU = "nvidia.com/gpu"
LEVELS = ("block", "rack", "clique", "kubernetes.io/hostname")


@st.composite
def clusters(draw):
    """Nodes in blocks/racks/cliques, some degraded, tainted, cordoned or not ready, some with CPU listed."""
    count = draw(st.integers(1, 24))
    nodes = []
    for i in range(count):
        gpus = draw(st.sampled_from((0, 1, 4, 8, 8, 8)))
        allocatable = {GPU: gpus - draw(st.integers(0, min(gpus, 2)))}
        capacity = {GPU: gpus}
        if draw(st.booleans()):
            allocatable["cpu"] = capacity["cpu"] = draw(st.sampled_from((16, 64, 128)))
        labels = {"pool": draw(st.sampled_from(("gpu", "gpu", "other")))}
        for level, fan in (("block", 3), ("rack", 2), ("clique", 2)):
            if draw(st.integers(0, 9)) > 0:
                labels[level] = f"{level[0]}{draw(st.integers(0, fan))}"
        taints = (Taint("dedicated", "x", "NoSchedule"),) if draw(st.integers(0, 7)) == 0 else ()
        nodes.append(
            Node(
                name=f"n{i:02d}",
                labels=labels,
                capacity=capacity,
                allocatable=allocatable,
                taints=taints,
                ready=draw(st.integers(0, 9)) > 0,
                unschedulable=draw(st.integers(0, 9)) == 0,
                degraded_devices=1 if draw(st.integers(0, 5)) == 0 else 0,
            )
        )
    return nodes


requests = st.builds(
    lambda count, gpus, cpu, rule, level, tolerate, labels: PodSetRequest(
        count=count,
        per_pod={GPU: gpus, **({"cpu": cpu} if cpu else {})},
        node_labels=labels,
        tolerations=(Toleration("dedicated", "Equal", "x", "NoSchedule"),) if tolerate else (),
        levels=LEVELS,
        topology_name="dc",
        required=level if rule == "required" else None,
        preferred=level if rule == "preferred" else None,
    ),
    st.integers(1, 6),
    st.sampled_from((1, 2, 4, 8)),
    st.sampled_from((0, 0, 8, 32)),
    st.sampled_from(("none", "required", "preferred")),
    st.sampled_from(LEVELS),
    st.booleans(),
    st.sampled_from(({"pool": "gpu"}, {})),
)

operations = st.lists(
    st.tuples(st.sampled_from(("place", "place", "empty", "healthy", "plain", "undo")), requests), max_size=30
)


def _same(new, old):
    assert new.ok == old.ok
    assert new.nodes == old.nodes
    assert new.fit == old.fit
    assert new.total_nodes == old.total_nodes
    assert new.exclusions == old.exclusions
    assert new.level == old.level
    assert new.free_units == old.free_units
    assert new.best_domain == old.best_domain


@settings(max_examples=300, deadline=None)
@given(clusters(), operations)
def test_views_agree_with_a_full_scan(nodes, ops):
    pool = NodePool(nodes)
    ref = reference_placement.NodePool(nodes)
    placed: list[list[tuple[str, dict[str, int]]]] = []
    for op, req in ops:
        if op == "undo":
            if placed:
                pods = placed.pop(0)
                pool.remove(pods)
                ref.remove(pods)
            continue
        kwargs = {"empty": op == "empty", "healthy": op == "healthy", "ignore_topology": op == "plain"}
        # The cycle's "does it fit, never mind where" (asked before the placement itself is cached).
        fits = pool.fits(req) if op == "place" else None
        # The cycle's "where, never mind why" (``placement_ok``).
        chosen = pool.place_nodes(req) if op == "place" else None
        new = pool.place(req, **kwargs)
        old = ref.place(req, **kwargs)
        _same(new, old)
        assert fits is None or fits == old.ok
        assert op != "place" or chosen == (old.nodes if old.ok else None)
        assert pool.free_summary(req.node_labels, req.per_pod) == ref.free_summary(req.node_labels, req.per_pod)
        if new.ok and op == "place":
            pods = [(n, dict(req.per_pod)) for n in new.nodes]
            pool.add(pods)
            ref.add(pods)
            placed.append(pods)


def test_a_long_change_log_makes_views_rebuild_and_still_agree():
    nodes = [
        Node(name=f"n{i}", labels={"rack": f"r{i % 3}"}, capacity={GPU: 8}, allocatable={GPU: 8}) for i in range(6)
    ]
    pool = NodePool(nodes)
    ref = reference_placement.NodePool(nodes)
    req = PodSetRequest(count=3, per_pod={GPU: 2}, node_labels={}, levels=("rack",), required="rack")
    _same(pool.place(req), ref.place(req))
    # Far more changes than the log keeps: the view cannot replay them and rebuilds.
    for _ in range(3000):
        for p in (pool, ref):
            p.add([("n1", {GPU: 1})])
            p.remove([("n1", {GPU: 1})])
    for p in (pool, ref):
        p.add([("n0", {GPU: 7}), ("n3", {GPU: 5})])
    _same(pool.place(req), ref.place(req))


def test_a_view_within_the_kept_log_tail_catches_up_and_still_agrees():
    nodes = [
        Node(name=f"n{i}", labels={"rack": f"r{i % 3}"}, capacity={GPU: 8}, allocatable={GPU: 8}) for i in range(6)
    ]
    pool = NodePool(nodes)
    ref = reference_placement.NodePool(nodes)
    req = PodSetRequest(count=3, per_pod={GPU: 2}, node_labels={}, levels=("rack",), required="rack")
    # Fill the log up to just below its limit, use the view, then cross the limit: the log keeps its tail.
    limit = 4 * len(nodes) + 4096
    while len(pool._log) < limit - 1:
        for p in (pool, ref):
            p.add([("n1", {GPU: 1})])
        if len(pool._log) < limit - 1:
            for p in (pool, ref):
                p.remove([("n1", {GPU: 1})])
    _same(pool.place(req), ref.place(req))
    view = next(iter(pool._views.values()))
    for p in (pool, ref):
        p.add([("n0", {GPU: 7}), ("n3", {GPU: 5})])
    assert len(pool._log) <= len(nodes)
    assert pool._changes_since(view.seen) is not None
    _same(pool.place(req), ref.place(req))
