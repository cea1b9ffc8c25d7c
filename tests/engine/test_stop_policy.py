"""stopPolicy: Hold and HoldAndDrain on ClusterQueues and LocalQueues (Kueue's workload controller)."""

from __future__ import annotations

from dataclasses import replace

from queues.engine import (
    AdmissionCheck,
    AdmissionCheckRule,
    LocalQueue,
    apply_cycle,
    estimate_admission,
    schedule,
    settle,
)
from queues.engine.scheduler import EVICTING, PENDING, Engine

from .builders import GPU, cq, state, wl


def _drained_state(stop: str = "HoldAndDrain"):
    return state(
        [cq("a", {"f": {GPU: 8}}, stop=stop)],
        [
            wl("a/run", 4, admitted="a", created=1.0),
            wl("a/old", 4, admitted="a", created=0.0),
            wl("a/new", 2, created=5),
        ],
    )


def test_hold_and_drain_cluster_queue_evicts_admitted_workloads():
    result = schedule(_drained_state(), 100.0)
    assert [(e.workload, e.reason, e.message, e.admitted) for e in result.evictions] == [
        ("a/old", "ClusterQueueStopped", "The ClusterQueue is stopped", True),
        ("a/run", "ClusterQueueStopped", "The ClusterQueue is stopped", True),
    ]
    assert result.admitted == ()
    assert result.preemptions == ()
    after = {w.key: w for w in apply_cycle(_drained_state(), result).workloads}
    # The eviction is under way: quota is held until the pods are gone, as for a preemption.
    assert after["a/run"].admission is not None
    assert after["a/run"].eviction.reason == "ClusterQueueStopped"
    assert after["a/run"].eviction.preemptor is None
    assert after["a/run"].eviction.issued_at == 100.0


def test_drained_workloads_wait_with_the_stopped_queue_reason():
    settled = settle(_drained_state(), 100.0)
    assert {e.workload for e in settled.evictions} == {"a/old", "a/run"}
    assert all(w.admission is None and w.eviction is None for w in settled.state.workloads)
    for key in ("a/old", "a/run", "a/new"):
        reason = settled.pending[key]
        assert reason.code == "misconfigured"
        assert reason.kueue_message == "ClusterQueue a is stopped"
        assert reason.details["cause"] == "cluster_queue_inactive"


def test_hold_keeps_admitted_workloads_running():
    settled = settle(_drained_state("Hold"), 100.0)
    assert settled.evictions == ()
    held = {w.key: w for w in settled.state.workloads}
    assert held["a/run"].admission is not None
    assert held["a/run"].eviction is None
    assert set(settled.pending) == {"a/new"}


def test_restart_readmits_in_creation_order():
    drained = settle(_drained_state(), 100.0).state
    # Kueue orders a workload evicted by a stopped queue by its creation time, not by the eviction.
    assert all(w.requeued_at is None for w in drained.workloads)
    restarted = replace(drained, cluster_queues=(replace(drained.cluster_queues[0], stop_policy="None"),))
    result = schedule(restarted, 200.0)
    assert result.evictions == ()
    assert [d.workload for d in result.admitted] == ["a/old"]
    settled = settle(restarted, 200.0)
    assert {w.key for w in settled.state.workloads if w.admission} == {"a/old", "a/run"}
    assert settled.pending["a/new"].code == "quota_exhausted"


def test_local_queue_hold_and_drain_evicts_and_is_checked_first():
    s = state(
        [cq("a", {"f": {GPU: 8}}, stop="HoldAndDrain")],
        [wl("a/x", 2, admitted="a"), wl("a/y", 2, admitted="a", queue="other")],
        local_queues=[
            LocalQueue("a", "main", "a", stop_policy="HoldAndDrain"),
            LocalQueue("a", "other", "a", stop_policy="Hold"),
        ],
    )
    result = schedule(s, 10.0)
    assert [(e.workload, e.reason, e.message) for e in result.evictions] == [
        ("a/x", "LocalQueueStopped", "The LocalQueue is stopped"),
        ("a/y", "ClusterQueueStopped", "The ClusterQueue is stopped"),
    ]
    settled = settle(s, 10.0)
    assert settled.pending["a/x"].kueue_message == "LocalQueue main is inactive"
    assert settled.pending["a/x"].details["cause"] == "local_queue_stopped"


def test_local_queue_hold_leaves_running_workloads_of_an_active_cluster_queue():
    s = state(
        [cq("a", {"f": {GPU: 8}})],
        [wl("a/x", 2, admitted="a")],
        local_queues=[LocalQueue("a", "main", "a", stop_policy="Hold")],
    )
    assert schedule(s, 10.0).evictions == ()


def test_quota_reservation_is_released_under_any_stop_policy():
    checks = [AdmissionCheck("prov", "kueue.x-k8s.io/provisioning-request")]
    for stop in ("Hold", "HoldAndDrain"):
        s = state(
            [cq("a", {"f": {GPU: 8}}, checks=[AdmissionCheckRule("prov")], stop=stop)],
            [wl("a/r", 4, admitted="a", checks={"prov": "Pending"})],
            checks=checks,
        )
        result = schedule(s, 10.0)
        assert [(e.workload, e.reason, e.message, e.admitted) for e in result.evictions] == [
            ("a/r", "ClusterQueueStopped", "ClusterQueue a is stopped", False)
        ]
        after = apply_cycle(s, result)
        assert after.workloads[0].admission is None
        assert after.workloads[0].eviction is None


def test_drain_is_idempotent_and_spares_workloads_already_evicting():
    s = _drained_state()
    engine = Engine(s, 0.0)
    assert len(engine.drain(0.0)) == 2
    assert engine.drain(1.0) == []
    preempted = apply_cycle(s, schedule(s, 0.0))  # marked evicting with the stop reason
    engine = Engine(preempted, 5.0)
    assert engine.drain(5.0) == []
    assert engine.workloads["a/run"].state == EVICTING
    engine.complete_evictions(5.0)
    assert engine.workloads["a/run"].state == PENDING


def test_engine_without_stopped_queues_never_drains():
    s = state([cq("a", {"f": {GPU: 8}})], [wl("a/x", 2, admitted="a")])
    assert not Engine(s).has_stopped_queues
    assert schedule(s, 0.0).evictions == ()


def test_replay_drains_at_the_first_instant_and_never_readmits_while_stopped():
    s = _drained_state()
    assert estimate_admission(s, "a/run", 0.0, {}, horizon=10_000.0) is None
    assert estimate_admission(s, "a/new", 0.0, {}, horizon=10_000.0) is None
