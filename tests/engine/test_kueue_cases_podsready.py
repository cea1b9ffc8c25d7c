"""Kueue's waitForPodsReady integration tests (test/integration/singlecluster/scheduler/podsready/scheduler_test.go
at ff69552e), transcribed as scenario files with a timeline and run as ``simulate --until`` runs them.

The upstream suite: two ClusterQueues ``prod-cq`` and ``dev-cq`` of 5 CPUs in cohort ``all``, LocalQueues
``prod-queue`` and ``dev-queue``, waitForPodsReady with ``backoffBaseSeconds: 1`` (``blockAdmission`` true in
``SchedulerWithWaitForPodsReady``, false in ``...NonblockingMode``). Upstream waits real time for the timeout and
sets PodsReady by hand; here a workload's pods are Ready when a timeline event says so (or never:
``sim.portal/pods-ready-after: never``) and the timeout is 10s (tiny/short) or 5m (medium). Each test names its case.
"""

from __future__ import annotations

import pytest

from .timeline_builders import (
    World,
    cluster_queue,
    flavor,
    flavor_quotas,
    history,
    local_queue,
    pods_ready_config,
    row,
    workload,
)

NEVER = {"sim.portal/pods-ready-after": "never"}
BLOCK_MESSAGE = "waiting for all admitted workloads to be in PodsReady condition"


def suite(timeout: str = "10s", *, block: bool = True, limit: int | None = None, timestamp: str = "Eviction"):
    """The suite's objects (JustBeforeEach)."""
    return World(
        pods_ready_config(timeout, block=block, limit=limit, timestamp=timestamp),
        flavor("default"),
        cluster_queue("prod-cq", flavor_quotas("default", cpu="5"), cohort="all"),
        cluster_queue("dev-cq", flavor_quotas("default", cpu="5"), cohort="all"),
        local_queue("prod-queue", "prod-cq"),
        local_queue("dev-queue", "dev-cq"),
    )


def ready(name: str) -> dict:
    """The status patch that sets PodsReady=True (upstream: apimeta.SetStatusCondition + Status().Update)."""
    return {"status": {"conditions": [{"type": "PodsReady", "status": "True", "reason": "PodsReady"}]}}


# ------------------------------------------------------------------------------------ Long PodsReady timeout


@pytest.mark.parametrize("reason", ["PodsReady", "Started"])
def test_long_timeout_unblocks_other_queues_once_pods_are_ready(reason):
    """SchedulerWithWaitForPodsReady/Long PodsReady timeout/"Should unblock admission of new workloads in other
    ClusterQueues once the admitted workload exceeds timeout" (both variants: PodsReady=True with reason
    ``PodsReady``, and with reason ``Started``)."""
    world = suite("5m")
    world.at("0s", create=workload("prod-wl", "prod-queue", "2", annotations=NEVER))
    world.at("1s", create=workload("dev-wl", "dev-queue", "2"))
    patch = ready("prod-wl")
    patch["status"]["conditions"][0]["reason"] = reason
    world.at("30s", "prod-ready", patch="Workload/ns/prod-wl", subresource="status", with_=patch)

    before = world.run(until="29s")
    assert row(before, "prod-wl")["state"] == "admitted"
    assert row(before, "dev-wl")["state"] == "pending"
    assert row(before, "dev-wl")["kueueMessage"] == BLOCK_MESSAGE
    assert row(before, "dev-wl")["reason"]["code"] == "higher_priority_ahead"

    after = world.run()
    assert history(after, "dev-wl") == [(1.0, "created"), (30.0, "admitted")]
    assert row(after, "dev-wl")["decidedAfter"] == "prod-ready"
    assert "eviction" not in row(after, "prod-wl")  # Ready before the 5m timeout


def test_long_timeout_unblocks_once_the_admitted_workload_is_deleted():
    """SchedulerWithWaitForPodsReady/Long PodsReady timeout/"Should unblock admission of new workloads once the
    admitted workload is deleted"."""
    world = suite("5m")
    world.at("0s", create=workload("prod-wl", "prod-queue", "2", annotations=NEVER))
    world.at("1s", create=workload("dev-wl", "dev-queue", "2"))
    world.at("20s", "delete-prod", delete="Workload/ns/prod-wl")
    doc = world.run()
    assert history(doc, "prod-wl") == [(0.0, "created"), (0.0, "admitted"), (20.0, "deleted")]
    assert history(doc, "dev-wl") == [(1.0, "created"), (20.0, "admitted")]
    assert row(doc, "prod-wl")["state"] == "deleted"


def test_long_timeout_blocks_one_of_two_workloads_considered_in_the_same_cycle():
    """SchedulerWithWaitForPodsReady/Long PodsReady timeout/"Should block admission of one new workload if two are
    considered in the same scheduling cycle": both need 11 CPUs (more than the cohort's 10) until test-cq (25 CPUs,
    borrowingLimit 0) joins the cohort; the older is admitted, the other waits for its pods."""
    world = suite("5m")
    world.at("0s", create=workload("prod-wl", "prod-queue", "11", annotations=NEVER))
    world.at("1s", create=workload("dev-wl", "dev-queue", "11", annotations=NEVER))
    world.at(
        "10s",
        "create-test-cq",
        create=cluster_queue("test-cq", flavor_quotas("default", cpu=("25", "0")), cohort="all"),
    )
    doc = world.run(until="2m")
    assert row(doc, "prod-wl")["state"] == "admitted"
    assert row(doc, "prod-wl")["admittedAt"] == 10.0
    assert row(doc, "dev-wl")["state"] == "pending"
    assert row(doc, "dev-wl")["kueueMessage"] == BLOCK_MESSAGE


# ------------------------------------------------------------------------------------ Short PodsReady timeout


def test_short_timeout_requeues_a_workload_that_exceeded_it():
    """SchedulerWithWaitForPodsReady/Short PodsReady timeout/"Should requeue a workload which exceeded the timeout
    to reach PodsReady=True": prod1 (priority 100) is admitted and prod2 (priority 0) waits; at the timeout prod1 is
    evicted (PodsReadyTimeout, requeue count 1, a requeueAt) and prod2 is admitted while prod1 waits out its
    backoff."""
    world = suite("10s", limit=2)
    world.at("0s", create=workload("prod1", "prod-queue", "2", priority=100, annotations=NEVER))
    world.at("1s", create=workload("prod2", "prod-queue", "2", priority=0))
    doc = world.run(until="10.5s")
    prod1 = row(doc, "prod1")
    assert prod1["state"] == "pending"
    assert prod1["eviction"] == {
        "reason": "PodsReadyTimeout",
        "message": "Exceeded the PodsReady timeout ns/prod1",
        "at": 10.0,
    }
    assert prod1["requeueState"] == {"count": 1, "requeueAt": 11.0}
    assert prod1["reason"]["code"] == "awaiting_provisioning"
    assert prod1["kueueMessage"] == "Exceeded the PodsReady timeout ns/prod1"
    assert history(doc, "prod2") == [(1.0, "created"), (10.0, "admitted")]


def test_short_timeout_deactivates_past_the_requeue_limit_and_reactivates():
    """SchedulerWithWaitForPodsReady/Short PodsReady timeout/"Should re-admit a timed out workload and deactivate a
    workload exceeded the re-queue count limit. After that re-activating a workload": requeued twice (backoffs of
    1s and 2s), the third timeout deactivates it (``DeactivatedDueToRequeuingLimitExceeded``, requeue state
    cleared); set active again, it is admitted and counts from 1."""
    world = suite("10s", limit=2)
    world.at("0s", create=workload("prod", "prod-queue", "2", annotations=NEVER))
    world.at("60s", "reactivate", patch="Workload/ns/prod", with_={"spec": {"active": True}})
    before = world.run(until="59s")
    prod = row(before, "prod")
    assert [d for d in history(before, "prod") if d[1] != "created"] == [
        (0.0, "admitted"),
        (10.0, "evicted"),
        (11.0, "requeued"),
        (11.0, "admitted"),
        (21.0, "evicted"),
        (23.0, "requeued"),
        (23.0, "admitted"),
        (33.0, "evicted"),
    ]
    assert prod["eviction"] == {
        "reason": "DeactivatedDueToRequeuingLimitExceeded",
        "message": "The workload is deactivated due to exceeding the maximum number of re-queuing retries",
        "at": 33.0,
    }
    assert "requeueState" not in prod  # Kueue clears it on deactivation
    assert prod["reason"]["code"] == "misconfigured"
    assert prod["kueueMessage"] == (
        "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
    )

    after = world.run(until="70.5s")
    assert [d for d in history(after, "prod") if d[0] >= 60] == [(60.0, "admitted"), (70.0, "evicted")]
    assert row(after, "prod")["requeueState"] == {"count": 1, "requeueAt": 71.0}


# ------------------------------------------------------------------------------------ Tiny PodsReady timeout


def test_tiny_timeout_unblocks_other_queues_once_the_workload_exceeds_it():
    """SchedulerWithWaitForPodsReady/Tiny PodsReady timeout/"Should unblock admission of new workloads in other
    ClusterQueues once the admitted workload exceeds timeout": prod is admitted, dev waits; at the timeout prod is
    evicted (its 2 CPUs freed), dev is admitted and prod waits (backoff, then blocked by dev's start... dev is Ready
    at once, so prod is admitted again after its backoff)."""
    world = suite("10s", limit=2)
    world.at("0s", create=workload("prod", "prod-queue", "2", annotations=NEVER))
    world.at("1s", create=workload("dev", "dev-queue", "2"))
    waiting = world.run(until="9s")
    assert row(waiting, "dev")["state"] == "pending"
    assert row(waiting, "dev")["kueueMessage"] == BLOCK_MESSAGE
    assert waiting["summary"]["clusterQueues"]["prod-cq"]["utilization"] is not None

    doc = world.run(until="10.5s")
    assert history(doc, "dev") == [(1.0, "created"), (10.0, "admitted")]
    assert row(doc, "prod")["state"] == "pending"
    assert row(doc, "prod")["eviction"]["reason"] == "PodsReadyTimeout"


def test_evicted_workload_moves_to_the_end_of_the_queue():
    """SchedulerWithWaitForPodsReady/"Should move the evicted workload at the end of the queue": prod1..prod3 (5
    CPUs each) exist before their LocalQueue ``eviction-lq``; each is admitted in turn and a timed-out one queues
    by its eviction time, behind the others (a circular pattern: prod1, prod2, prod3, then prod1). Upstream lets
    prod2 and prod3 time out before finishing them; here they finish just before their timeout, so the order is
    the same and only prod1 is requeued."""
    world = suite("10s", limit=2)
    world.add(
        {**workload("prod1", "eviction-lq", "5", annotations=NEVER), "metadata": _created("prod1", 0)},
        {**workload("prod2", "eviction-lq", "5", annotations=NEVER), "metadata": _created("prod2", 1)},
        {**workload("prod3", "eviction-lq", "5", annotations=NEVER), "metadata": _created("prod3", 2)},
    )
    world.at("1s", "create-lq", create=local_queue("eviction-lq", "prod-cq"))
    world.at("20s", "finish-prod2", finish="Workload/ns/prod2")
    world.at("25s", "finish-prod3", finish="Workload/ns/prod3")
    doc = world.run(until="30s")
    admitted = [(d["at"], d["workload"]) for d in doc["timeline"]["decisions"] if d["decision"] == "admitted"]
    assert admitted == [(1.0, "ns/prod1"), (11.0, "ns/prod2"), (20.0, "ns/prod3"), (25.0, "ns/prod1")]
    assert row(doc, "prod1")["requeueState"] == {"count": 1, "requeueAt": None}  # cleared once the backoff ended
    assert "requeueState" not in row(doc, "prod2")


def _created(name: str, second: int) -> dict:
    return {"name": name, "namespace": "ns", "creationTimestamp": f"2026-04-01T10:00:0{second}Z", **_never_meta()}


def _never_meta() -> dict:
    return {"annotations": dict(NEVER)}


# ------------------------------------------------------------------------------------ Requeuing timestamp: Creation


def _standalone(world: World) -> World:
    """The "Requeuing timestamp set to Creation" context: a standalone ClusterQueue with room for one workload."""
    world.add(
        cluster_queue("standalone-cq", flavor_quotas("default", cpu="1")),
        local_queue("standalone-queue", "standalone-cq"),
    )
    for i in (1, 2, 3):
        world.at(f"{i - 1}s", create=workload(f"wl-{i}", "standalone-queue", "1", annotations=NEVER))
    return world


def test_creation_timestamp_prioritizes_workloads_submitted_earlier():
    """SchedulerWithWaitForPodsReady/Requeuing timestamp set to Creation/"Should prioritize workloads submitted
    earlier": wl-1 times out, wl-2 runs while wl-1 backs off; when wl-2 times out, wl-1 (created first) goes before
    wl-3."""
    world = _standalone(suite("12s", timestamp="Creation"))
    doc = world.run(until="25s")
    admitted = [(d["at"], d["workload"]) for d in doc["timeline"]["decisions"] if d["decision"] == "admitted"]
    assert admitted == [(0.0, "ns/wl-1"), (12.0, "ns/wl-2"), (24.0, "ns/wl-1")]
    assert row(doc, "wl-3")["state"] == "pending"


def test_eviction_timestamp_puts_the_timed_out_workload_behind():
    """The same sequence with the default ``timestamp: Eviction`` (SchedulerWithWaitForPodsReady, the suite's
    default): when wl-2 times out, wl-3 (created before wl-1's eviction) goes first."""
    world = _standalone(suite("12s"))
    doc = world.run(until="25s")
    admitted = [(d["at"], d["workload"]) for d in doc["timeline"]["decisions"] if d["decision"] == "admitted"]
    assert admitted == [(0.0, "ns/wl-1"), (12.0, "ns/wl-2"), (24.0, "ns/wl-3")]


# ------------------------------------------------------------------------------------ non-blocking mode


def test_nonblocking_admits_both_workloads_of_one_cycle():
    """SchedulerWithWaitForPodsReadyNonblockingMode/Long PodsReady timeout/"Should not block admission of one new
    workload if two are considered in the same scheduling cycle"."""
    world = suite("5m", block=False)
    world.at("0s", create=workload("prod-wl", "prod-queue", "11", annotations=NEVER))
    world.at("1s", create=workload("dev-wl", "dev-queue", "11", annotations=NEVER))
    world.at("10s", create=cluster_queue("test-cq", flavor_quotas("default", cpu=("25", "0")), cohort="all"))
    doc = world.run(until="1m")
    assert row(doc, "prod-wl")["admittedAt"] == 10.0
    assert row(doc, "dev-wl")["admittedAt"] == 10.0


def test_nonblocking_readmits_a_timed_out_workload():
    """SchedulerWithWaitForPodsReadyNonblockingMode/Tiny PodsReady timeout/"Should re-admit a timed out workload":
    admitted, evicted at the timeout, re-admitted once the 1s backoff ends, evicted again (requeue count 2) and
    still active."""
    world = suite("10s", block=False)
    world.at("0s", create=workload("prod", "prod-queue", "2", annotations=NEVER))
    doc = world.run(until="21.5s")
    assert [d for d in history(doc, "prod") if d[1] in ("admitted", "evicted")] == [
        (0.0, "admitted"),
        (10.0, "evicted"),
        (11.0, "admitted"),
        (21.0, "evicted"),
    ]
    assert row(doc, "prod")["requeueState"] == {"count": 2, "requeueAt": 23.0}
    assert row(doc, "prod")["reason"]["code"] != "misconfigured"  # still active (no backoffLimitCount)


def test_nonblocking_keeps_the_evicted_workload_at_the_front_of_the_queue():
    """SchedulerWithWaitForPodsReadyNonblockingMode/Requeuing timestamp set to Creation/"Should keep the evicted
    workload at the front of the queue": wl-1 runs, times out; wl-2 runs; when wl-2 times out wl-1 (back from its
    backoff, queued by creation) is admitted before wl-3; requeue counts 2 / 1 / none."""
    world = _standalone(suite("12s", block=False, timestamp="Creation"))
    doc = world.run(until="36.5s")
    admitted = [(d["at"], d["workload"]) for d in doc["timeline"]["decisions"] if d["decision"] == "admitted"]
    assert admitted[:3] == [(0.0, "ns/wl-1"), (12.0, "ns/wl-2"), (24.0, "ns/wl-1")]
    assert row(doc, "wl-1")["requeueState"]["count"] == 2
    assert row(doc, "wl-2")["requeueState"]["count"] == 1
    assert "requeueState" not in row(doc, "wl-3")
