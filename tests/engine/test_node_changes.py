"""Nodes joining and leaving during a replay."""

from __future__ import annotations

from queues.engine.scheduler import ADMITTED, PENDING, Engine
from queues.engine.simulation import Replay
from tests.engine.builders import cq, node, state, wl


def engine(*nodes):
    return Engine(state([cq("a", {"f": {"nvidia.com/gpu": 16}})], nodes=nodes), 0.0)


def test_replay_node_joins_and_the_waiting_workload_starts_then():
    e = engine(node("n1", 4))
    replay = Replay(e, start=0.0)
    replay.submit_at(wl("a/first", 4, runtime=100.0), 0.0)
    replay.submit_at(wl("a/second", 4, runtime=100.0), 0.0)
    replay.node_joins_at(node("n2", 4), 30.0)
    result = replay.run(until=500.0)
    assert sorted(r.first_admitted_at for r in result.records.values()) == [0.0, 30.0]


def test_replay_node_leaves_and_its_workload_restarts_elsewhere():
    e = engine(node("n1", 4), node("n2", 4))
    replay = Replay(e, start=0.0)
    replay.submit_at(wl("a/first", 4, runtime=100.0), 0.0)
    replay.submit_at(wl("a/second", 4, runtime=100.0), 0.0)
    replay.node_leaves_at("n2", 50.0)
    result = replay.run(until=500.0)
    [lost] = [k for k in e.workloads if result.records[k].node_losses]
    rec = result.records[lost]
    assert (rec.node_losses, rec.evictions, rec.admissions) == (1, 1, 2)
    # It waited for n1 (free at 100), then ran its full 100 again.
    assert (rec.admitted_at, rec.finished_at) == (100.0, 200.0)
    assert set(e.pool.nodes) == {"n1"}


def test_engine_remove_node_requeues_at_once_and_frees_quota():
    e = engine(node("n1", 4))
    e.submit(wl("a/w", 4))
    e.cycle(0.0)
    assert e.workloads["a/w"].state == ADMITTED
    assert e.remove_node("n1", 10.0) == ["a/w"]
    w = e.workloads["a/w"]
    assert (w.state, w.pods, w.usage, w.evicted_at) == (PENDING, [], {}, 10.0)
    assert e.cqs["a"].node.usage.get(("f", "nvidia.com/gpu"), 0) == 0
    e.cycle(10.0)
    assert e.workloads["a/w"].state == PENDING  # no node left to run on
    e.add_node(node("n1", 4))
    e.cycle(20.0)
    assert e.workloads["a/w"].state == ADMITTED
