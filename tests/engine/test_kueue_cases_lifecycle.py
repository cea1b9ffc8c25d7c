"""Multi-step cases of Kueue's scheduler and controller integration tests (at ff69552e), transcribed as scenario
files with a timeline (``simulate --until``): objects created, changed and deleted while workloads arrive, finish
and are deleted; stop policies; reclaimable pods; the StrictFIFO capacity reservation kept across cycles.

Sources: test/integration/singlecluster/scheduler/scheduler_test.go (``Scheduler``),
scheduler/fairsharing/fair_sharing_test.go, controller/core/workload_controller_test.go and
controller/core/clusterqueue_controller_test.go. Upstream creates objects one after the other and waits with
``Eventually``; here each step is an event a second apart (``at``). Each test names its upstream case.
"""

from __future__ import annotations

import pytest

from .timeline_builders import (
    NS,
    World,
    admitted_order,
    cluster_queue,
    cohort,
    flavor,
    flavor_quotas,
    history,
    local_queue,
    namespace,
    pod_set,
    priority_class,
    row,
    state,
    workload,
)

INSTANCE = "cloud.provider.com/instance"
SPOT_TAINT = {"key": INSTANCE, "value": "spot-tainted", "effect": "NoSchedule"}


def scheduling_suite(*, cq_stop: str | None = None, lq_stop: str | None = None) -> World:
    """``Scheduler/Scheduling workloads on clusterQueues``: its flavors, ClusterQueues and LocalQueues."""
    return World(
        flavor("on-demand", **{INSTANCE: "on-demand"}),
        flavor("spot-tainted", SPOT_TAINT, **{INSTANCE: "spot-tainted"}),
        flavor("spot-untainted", **{INSTANCE: "spot-untainted"}),
        cluster_queue(
            "prod-cq",
            flavor_quotas("spot-tainted", cpu=("5", "5")),
            flavor_quotas("on-demand", cpu="5"),
            cohort="prod-cohort",
            stop=cq_stop,
        ),
        cluster_queue(
            "dev-clusterqueue",
            flavor_quotas("spot-untainted", cpu="5"),
            flavor_quotas("on-demand", cpu="5"),
            stop=cq_stop,
        ),
        cluster_queue(
            "preemption-cq",
            flavor_quotas("on-demand", cpu="3"),
            preemption={"withinClusterQueue": "LowerPriority"},
            stop=cq_stop,
        ),
        local_queue("prod-queue", "prod-cq", stop=lq_stop),
        local_queue("dev-queue", "dev-clusterqueue", stop=lq_stop),
        local_queue("preemption-queue", "preemption-cq", stop=lq_stop),
    )


def three_pod_sets(name: str, queue: str, *, priority: int | None = None) -> dict:
    """A workload of pod sets first, second and third of one pod and 1 CPU each."""
    sets = [pod_set(p, 1, cpu="1") for p in ("first", "second", "third")]
    return workload(name, queue, pod_sets=sets, priority=priority)


def reclaim(*pairs: tuple[str, int]) -> dict:
    """A status patch setting reclaimablePods (upstream: util.UpdateReclaimablePods)."""
    return {"status": {"reclaimablePods": [{"name": n, "count": c} for n, c in pairs]}}


def pod_sets_of(doc: dict, name: str) -> list[dict]:
    return row(doc, name)["podSets"]


# ------------------------------------------------------------------------ Scheduling workloads on clusterQueues


def test_admits_workloads_as_they_fit_including_one_of_count_zero():
    """Scheduler/Scheduling workloads on clusterQueues/"Should admit workloads as they fit in their ClusterQueue":
    a workload whose only pod set has count 0 is admitted with a flavor for the CPU its ClusterQueue covers (usage
    0: the untolerated spot-tainted flavor is skipped, on-demand taken), and the pending one is admitted once the
    first finishes."""
    world = scheduling_suite()
    world.at("0s", create=workload("prod-wl1", "prod-queue", "2"))
    world.at("1s", create=workload("prod-wl2", "prod-queue", "5"))
    world.at("2s", create=workload("empty-wl", "prod-queue", "1", count=0))
    world.at("3s", "finish-empty", finish="Workload/ns/empty-wl")
    world.at("4s", create=workload("dev-wl", "dev-queue", "5"))
    world.at("5s", "finish-prod-wl1", finish="Workload/ns/prod-wl1")

    at_two = world.run(until="2s")
    assert pod_sets_of(at_two, "empty-wl") == [
        {"name": "main", "count": 0, "flavors": {"cpu": "on-demand"}, "nodes": []}
    ]
    assert row(at_two, "empty-wl")["state"] == "admitted"
    assert row(at_two, "prod-wl2")["state"] == "pending"

    assert pod_sets_of(at_two, "prod-wl1")[0]["flavors"] == {"cpu": "on-demand"}
    doc = world.run()
    assert pod_sets_of(doc, "dev-wl")[0]["flavors"] == {"cpu": "spot-untainted"}
    assert history(doc, "prod-wl2") == [(1.0, "created"), (5.0, "admitted")]
    assert pod_sets_of(doc, "prod-wl2")[0]["flavors"] == {"cpu": "on-demand"}


def test_admits_when_resources_are_dynamically_reclaimed():
    """Scheduler/Scheduling workloads on clusterQueues/"Should admit workloads when resources are dynamically
    reclaimed": with one pod of first-wl reclaimable it uses 2 of preemption-cq's 3 CPUs; second-wl (priority 100,
    3 CPUs) preempts it; when second-wl reclaims two pods, first-wl (2 CPUs still needed) is admitted again."""
    world = scheduling_suite()
    world.at("0s", create=three_pod_sets("first-wl", "preemption-queue"))
    world.at("1s", "reclaim-first", patch="Workload/ns/first-wl", subresource="status", with_=reclaim(("third", 1)))
    world.at("2s", create=three_pod_sets("second-wl", "preemption-queue", priority=100))
    world.at(
        "3s",
        "reclaim-second",
        patch="Workload/ns/second-wl",
        subresource="status",
        with_=reclaim(("first", 1), ("second", 1)),
    )
    doc = world.run()
    assert history(doc, "first-wl") == [(0.0, "created"), (0.0, "admitted"), (2.0, "preempted"), (3.0, "admitted")]
    assert history(doc, "second-wl") == [(2.0, "created"), (2.0, "admitted")]
    assert state(doc, "first-wl", "second-wl") == {"first-wl": "admitted", "second-wl": "admitted"}
    assert [p["count"] for p in pod_sets_of(doc, "first-wl")] == [1, 1, 0]
    assert [p["count"] for p in pod_sets_of(doc, "second-wl")] == [0, 0, 1]
    assert doc["summary"]["clusterQueues"]["preemption-cq"]["admitted"] == 2


def test_admits_when_resources_are_gradually_released():
    """Scheduler/Scheduling workloads on clusterQueues/"Should admit workloads when resources are gradually
    released": second-wl (1 CPU) waits until first-wl (3 CPUs) marks a pod reclaimable."""
    world = scheduling_suite()
    world.at("0s", create=three_pod_sets("first-wl", "preemption-queue"))
    world.at("1s", create=workload("second-wl", "preemption-queue", pod_sets=[pod_set("first", 1, cpu="1")]))
    world.at("2s", "reclaim", patch="Workload/ns/first-wl", subresource="status", with_=reclaim(("third", 1)))
    waiting = world.run(until="1s")
    assert row(waiting, "second-wl")["reason"]["code"] == "quota_exhausted"
    doc = world.run()
    assert history(doc, "second-wl") == [(1.0, "created"), (2.0, "admitted")]
    assert row(doc, "second-wl")["decidedAfter"] == "reclaim"


def test_reclaimed_pods_are_not_accounted_during_admission():
    """Scheduler/Scheduling workloads on clusterQueues/"Reclaimed resources are not accounted during admission":
    2 pods of 3 CPUs do not fit prod-cq's 5 (on-demand); with one pod reclaimable the workload is admitted with a
    count of 1."""
    world = scheduling_suite()
    world.at("0s", create=workload("first-wl", "prod-queue", "3", count=2))
    world.at("1s", "reclaim", patch="Workload/ns/first-wl", subresource="status", with_=reclaim(("main", 1)))
    assert row(world.run(until="0s"), "first-wl")["state"] == "pending"
    doc = world.run()
    assert row(doc, "first-wl")["admittedAt"] == 1.0
    assert pod_sets_of(doc, "first-wl") == [{"name": "main", "count": 1, "flavors": {"cpu": "on-demand"}, "nodes": []}]


def test_zero_request_for_a_resource_not_in_the_cluster_queue():
    """Scheduler/Scheduling workloads on clusterQueues/"Should admit workload with zero quantity request for
    resource not in ClusterQueue": example.com/gpu 0 is dropped (no flavor), cpu gets one."""
    world = scheduling_suite()
    wl = workload("zero-resource-wl", "dev-queue", pod_sets=[pod_set("main", 1, cpu="1", **{"example.com/gpu": "0"})])
    world.at("0s", create=wl)
    doc = world.run()
    assert pod_sets_of(doc, "zero-resource-wl")[0]["flavors"] == {"cpu": "spot-untainted"}


@pytest.mark.parametrize(
    ("held", "release"),
    [("ClusterQueue", "ClusterQueue/prod-cq"), ("LocalQueue", "LocalQueue/ns/prod-queue")],
)
def test_held_queue_admits_by_priority_once_released(held, release):
    """Scheduler/Scheduling workloads on clusterQueues/Hold ClusterQueue at startup/"Should admit workloads according
    to their priorities" and Hold LocalQueue at startup/"Should admit workloads according to their priorities":
    five workloads wait in a held queue; released (util.UnholdClusterQueue / UnholdLocalQueue), the two of
    priority 100 are admitted; when they finish, the two of priority 10."""
    world = scheduling_suite(
        cq_stop="Hold" if held == "ClusterQueue" else None, lq_stop="Hold" if held == "LocalQueue" else None
    )
    five = [
        ("wl-low-priority", 0),
        ("wl-mid-priority-1", 10),
        ("wl-mid-priority-2", 10),
        ("wl-high-priority-1", 100),
        ("wl-high-priority-2", 100),
    ]
    for i, (name, prio) in enumerate(five):
        world.at(f"{i}s", create=workload(name, "prod-queue", "2", priority=prio))
    world.at("10s", "unhold", resume=release)
    world.at("20s", finish="Workload/ns/wl-high-priority-1")
    world.at("20s", finish="Workload/ns/wl-high-priority-2")
    held_doc = world.run(until="9s")
    assert all(w["state"] == "pending" and w["reason"]["code"] == "misconfigured" for w in held_doc["workloads"])
    doc = world.run()
    assert admitted_order(doc) == ["wl-high-priority-1", "wl-high-priority-2", "wl-mid-priority-1", "wl-mid-priority-2"]
    assert row(doc, "wl-high-priority-1")["admittedAt"] == 10.0
    assert row(doc, "wl-mid-priority-1")["admittedAt"] == 20.0
    assert row(doc, "wl-low-priority")["state"] == "pending"


def test_two_small_workloads_after_a_big_one_finishes():
    """Scheduler/Scheduling workloads on clusterQueues/"Should admit two small workloads after a big one finishes"."""
    world = scheduling_suite()
    world.at("0s", create=workload("big-wl", "prod-queue", "5"))
    world.at("1s", create=workload("small-wl-1", "prod-queue", "2.5"))
    world.at("1s", create=workload("small-wl-2", "prod-queue", "2.5"))
    world.at("2s", finish="Workload/ns/big-wl")
    doc = world.run()
    assert row(doc, "small-wl-1")["admittedAt"] == row(doc, "small-wl-2")["admittedAt"] == 2.0


# ------------------------------------------------------------------------ Handling workloads events


def handling_suite() -> World:
    """``Scheduler/Handling workloads events``: cluster-queue (cohort prod) over spot-tainted and on-demand."""
    return World(
        flavor("on-demand", **{INSTANCE: "on-demand"}),
        flavor("spot-tainted", SPOT_TAINT, **{INSTANCE: "spot-tainted"}),
        cluster_queue(
            "cluster-queue",
            flavor_quotas("spot-tainted", cpu=("5", "5")),
            flavor_quotas("on-demand", cpu="5"),
            cohort="prod",
        ),
        local_queue("queue", "cluster-queue"),
    )


def test_delete_of_a_workload_requeues_its_cluster_queue():
    """Scheduler/Handling workloads events/"Should re-enqueue by the delete event of workload belonging to the same
    ClusterQueue": wl2 (4 CPUs) waits, wl3 (1 CPU) passes it; deleting wl1 admits wl2."""
    world = handling_suite()
    world.at("0s", create=workload("on-demand-wl1", "queue", "4"))
    world.at("1s", create=workload("on-demand-wl2", "queue", "4"))
    world.at("2s", create=workload("on-demand-wl3", "queue", "1"))
    world.at("3s", "delete-wl1", delete="Workload/ns/on-demand-wl1")
    doc = world.run()
    assert history(doc, "on-demand-wl3") == [(2.0, "created"), (2.0, "admitted")]
    assert history(doc, "on-demand-wl2") == [(1.0, "created"), (3.0, "admitted")]
    assert row(doc, "on-demand-wl2")["decidedAfter"] == "delete-wl1"
    assert row(doc, "on-demand-wl1")["state"] == "deleted"


def test_delete_of_a_workload_requeues_its_cohort():
    """Scheduler/Handling workloads events/"Should re-enqueue by the delete event of workload belonging to the same
    Cohort": wl1 (8 CPUs) borrows in foo-clusterqueue; wl2 (8) waits in cluster-queue; deleting wl1 admits wl2."""
    world = handling_suite()
    world.add(
        cluster_queue("foo-clusterqueue", flavor_quotas("on-demand", cpu="5"), cohort="prod"),
        local_queue("foo-queue", "foo-clusterqueue"),
    )
    world.at("0s", create=workload("on-demand-wl1", "foo-queue", "8"))
    world.at("1s", create=workload("on-demand-wl2", "queue", "8"))
    world.at("2s", create=workload("on-demand-wl3", "foo-queue", "2"))
    world.at("3s", delete="Workload/ns/on-demand-wl1")
    doc = world.run()
    assert row(doc, "on-demand-wl1")["state"] == "deleted"
    assert history(doc, "on-demand-wl3") == [(2.0, "created"), (2.0, "admitted")]
    assert history(doc, "on-demand-wl2") == [(1.0, "created"), (3.0, "admitted")]
    assert pod_sets_of(doc, "on-demand-wl2")[0]["flavors"] == {"cpu": "on-demand"}


def test_update_of_a_cluster_queue_requeues_its_workloads():
    """Scheduler/Handling clusterQueue events/"Should re-enqueue by the update event of ClusterQueue": a 6-CPU
    workload waits on a 5-CPU queue; the queue is updated (cohort, nominal 6, borrowingLimit 0) and admits it."""
    world = World(
        flavor("on-demand", **{INSTANCE: "on-demand"}),
        cluster_queue("cluster-queue", flavor_quotas("on-demand", cpu="5")),
        local_queue("queue", "cluster-queue"),
    )
    world.at("0s", create=workload("on-demand-wl", "queue", "6"))
    update = {
        "spec": {
            "cohortName": "cohort",
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {
                            "name": "on-demand",
                            "resources": [{"name": "cpu", "nominalQuota": "6", "borrowingLimit": "0"}],
                        }
                    ],
                }
            ],
        }
    }
    world.at("5s", "update-cq", patch="ClusterQueue/cluster-queue", with_=update)
    before = world.run(until="4s")
    assert row(before, "on-demand-wl")["reason"]["code"] == "exceeds_maximum"
    doc = world.run()
    assert history(doc, "on-demand-wl") == [(0.0, "created"), (5.0, "admitted")]
    assert row(doc, "on-demand-wl")["decidedAfter"] == "update-cq"


def test_namespace_labels_changed_to_match_the_selector():
    """Scheduler/Using clusterQueue NamespaceSelector/"Should admit workloads from the selected namespaces": both
    workloads are inadmissible (their namespaces do not match ``dep In (eng)``) until ``ns`` gets ``dep: eng``."""
    selector = {"matchExpressions": [{"key": "dep", "operator": "In", "values": ["eng"]}]}
    world = World(
        flavor("on-demand"),
        namespace("foo"),
        cluster_queue("cluster-queue-with-selector", flavor_quotas("on-demand", cpu="5"), selector=selector),
        local_queue("queue", "cluster-queue-with-selector"),
        local_queue("foo", "cluster-queue-with-selector", namespace="foo"),
    )
    world.at("0s", create=workload("wl1", "queue", "1"))
    world.at("0s", create=workload("wl2", "foo", "1", namespace="foo"))
    world.at("5s", "label-ns", patch=f"Namespace/{NS}", with_={"metadata": {"labels": {"dep": "eng"}}})
    before = world.run(until="4s")
    assert {w["name"]: w["reason"]["code"] for w in before["workloads"]} == {
        "foo/wl2": "misconfigured",
        "ns/wl1": "misconfigured",
    }
    doc = world.run()
    assert row(doc, "wl1")["admittedAt"] == 5.0
    assert row(doc, "wl2", "foo")["state"] == "pending"


def test_cluster_queue_inactive_until_its_flavor_is_created():
    """Scheduler/Referencing resourceFlavors in clusterQueue/"Should be inactive until the flavor is created": the
    workload is frozen ("ClusterQueue foo-cq is inactive") until foo-flavor exists."""
    world = World(
        cluster_queue("foo-cq", flavor_quotas("foo-flavor", cpu="15"), strategy="BestEffortFIFO"),
        local_queue("foo-queue", "foo-cq"),
    )
    world.at("0s", create=workload("workload", "foo-queue", "1"))
    world.at("5s", "create-flavor", create=flavor("foo-flavor"))
    frozen = world.run(until="4s")
    assert row(frozen, "workload")["kueueMessage"] == "ClusterQueue foo-cq is inactive"
    doc = world.run()
    assert row(doc, "workload")["admittedAt"] == 5.0


@pytest.mark.parametrize(
    "order",
    [
        ("ResourceFlavor", "LocalQueue", "Workload", "ClusterQueue"),
        ("Workload", "ResourceFlavor", "LocalQueue", "ClusterQueue"),
        ("Workload", "ResourceFlavor", "ClusterQueue", "LocalQueue"),
        ("Workload", "ClusterQueue", "LocalQueue", "ResourceFlavor"),
    ],
)
def test_objects_created_out_of_order(order):
    """Scheduler/Creating objects out-of-order/"Should admit workload when creating ResourceFlavor->LocalQueue->
    Workload->ClusterQueue" (and the three other orders upstream tests)."""
    made = {
        "ResourceFlavor": flavor("on-demand"),
        "LocalQueue": local_queue("queue", "cq"),
        "Workload": workload("workload", "queue", "2"),
        "ClusterQueue": cluster_queue("cq", flavor_quotas("on-demand", cpu="5")),
    }
    world = World()
    for i, kind in enumerate(order):
        world.at(f"{i}s", create=made[kind])
    doc = world.run()
    assert row(doc, "workload")["admittedAt"] == 3.0


# ------------------------------------------------------------------------ Cohort provides resources directly


def test_cohort_created_then_updated_provides_resources():
    """Scheduler/Cohort provides resources directly/"Should admit workload using resources borrowed from cohort":
    not admitted without the Cohort, nor with its 5 CPUs, admitted once it offers 10."""
    world = World(
        flavor("on-demand"),
        cluster_queue("clusterqueue", flavor_quotas("on-demand", cpu="0"), cohort="cohort"),
        local_queue("queue", "clusterqueue"),
    )
    world.at("0s", create=workload("wl", "queue", "10"))
    world.at("5s", create=cohort("cohort", flavor_quotas("on-demand", cpu="5")))
    patch = {
        "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [flavor_quotas("on-demand", cpu="10")]}]}
    }
    world.at("10s", "grow-cohort", patch="Cohort/cohort", with_=patch)
    assert row(world.run(until="9s"), "wl")["state"] == "pending"
    doc = world.run()
    assert history(doc, "wl") == [(0.0, "created"), (10.0, "admitted")]


def test_cluster_queue_switches_into_a_cohort_with_capacity():
    """Scheduler/Cohort provides resources directly/"Should admit workload when cq switches into cohort with
    capacity"."""
    world = World(
        flavor("on-demand"),
        cluster_queue("clusterqueue", flavor_quotas("on-demand", cpu="0"), cohort="impecunious-cohort"),
        local_queue("queue", "clusterqueue"),
    )
    world.at("0s", create=workload("wl", "queue", "10"))
    world.at("5s", create=cohort("cohort", flavor_quotas("on-demand", cpu="10")))
    world.at("10s", "switch", patch="ClusterQueue/clusterqueue", with_={"spec": {"cohortName": "cohort"}})
    doc = world.run()
    assert history(doc, "wl") == [(0.0, "created"), (10.0, "admitted")]


def test_long_distance_resource_allows_scheduling():
    """Scheduler/Cohort provides resources directly/"Long distance resource allows workload to be scheduled": the
    10 CPUs of cohort ``bank`` (root → right → bank) reach cq (root → left → cq) once bank is created."""
    world = World(
        flavor("on-demand"),
        cluster_queue("cq", flavor_quotas("on-demand", cpu="0"), cohort="left"),
        local_queue("queue", "cq"),
    )
    world.at("0s", create=cohort("left", parent="root"))
    world.at("0s", create=cohort("right", parent="root"))
    world.at("1s", create=workload("wl", "queue", "10"))
    world.at("5s", "bank", create=cohort("bank", flavor_quotas("on-demand", cpu="10"), parent="right"))
    doc = world.run()
    assert history(doc, "wl") == [(1.0, "created"), (5.0, "admitted")]


def test_overflow_admitted_after_reparenting_a_child_cohort():
    """Scheduler/Cohort provides resources directly/"Should admit overflow workload after reparenting child cohort
    to a larger root": under root-a (1 CPU) two 500m workloads run and a third waits; moving ``child`` under
    root-b (2 CPUs) admits it, the first two keep running."""
    world = World(
        flavor("on-demand"),
        cohort("root-a", flavor_quotas("on-demand", cpu="1")),
        cohort("root-b", flavor_quotas("on-demand", cpu="2")),
        cohort("child", parent="root-a"),
        cluster_queue("cq", flavor_quotas("on-demand", cpu="0"), cohort="child"),
        local_queue("queue", "cq"),
    )
    world.at("0s", create=workload("wl-1", "queue", "500m"))
    world.at("0s", create=workload("wl-2", "queue", "500m"))
    world.at("1s", create=workload("wl-overflow", "queue", "500m"))
    world.at("5s", "reparent", patch="Cohort/child", with_={"spec": {"parentName": "root-b"}})
    doc = world.run()
    assert history(doc, "wl-overflow") == [(1.0, "created"), (5.0, "admitted")]
    assert state(doc, "wl-1", "wl-2") == {"wl-1": "admitted", "wl-2": "admitted"}


def test_queue_added_to_the_cohort_lends_its_quota():
    """Scheduler/Using cohorts for sharing with LendingLimit/"Should admit workloads using borrowed ClusterQueue":
    prod-cq (5, lendingLimit 1) cannot hold 9 CPUs alone; dev-cq (5, lendingLimit 4) joining the cohort lends 4."""
    world = World(
        flavor("on-demand"),
        cluster_queue("prod-cq", flavor_quotas("on-demand", cpu=("5", None, "1")), cohort="all"),
        local_queue("queue", "prod-cq"),
    )
    world.at("0s", create=workload("wl", "queue", "9"))
    world.at("5s", create=cluster_queue("dev-cq", flavor_quotas("on-demand", cpu=("5", None, "4")), cohort="all"))
    doc = world.run()
    assert history(doc, "wl") == [(0.0, "created"), (5.0, "admitted")]


def test_admits_after_the_lending_limit_is_raised():
    """Scheduler/Using cohorts for sharing with LendingLimit/"Should admit workloads after updating lending limit":
    two 5-CPU workloads in prod-cq (lendingLimit 0 on both queues); raising dev-cq's lendingLimit to 5 admits the
    second."""
    world = World(
        flavor("on-demand"),
        cluster_queue("prod-cq", flavor_quotas("on-demand", cpu=("5", None, "0")), cohort="all"),
        cluster_queue("dev-cq", flavor_quotas("on-demand", cpu=("5", None, "0")), cohort="all"),
        local_queue("prod-queue", "prod-cq"),
        local_queue("dev-queue", "dev-cq"),
    )
    world.at("0s", create=workload("wl-1", "prod-queue", "5"))
    world.at("0s", create=workload("wl-2", "prod-queue", "5"))
    raised = {
        "spec": {
            "resourceGroups": [
                {"coveredResources": ["cpu"], "flavors": [flavor_quotas("on-demand", cpu=("5", None, "5"))]}
            ]
        }
    }
    world.at("5s", "lend", patch="ClusterQueue/dev-cq", with_=raised)
    doc = world.run()
    assert history(doc, "wl-2") == [(0.0, "created"), (5.0, "admitted")]
    assert doc["summary"]["clusterQueues"]["dev-cq"]["admitted"] == 0


# ------------------------------------------------------------------------ StrictFIFO


def strict_suite() -> World:
    """``Scheduler/Queueing with StrictFIFO``: strict-fifo-cq (5 CPUs, borrowingLimit 0, cohort ``cohort``) selects
    namespaces labelled ``dep: eng``."""
    selector = {"matchExpressions": [{"key": "dep", "operator": "In", "values": ["eng"]}]}
    return World(
        flavor("on-demand"),
        namespace("foo", dep="eng"),
        cluster_queue(
            "strict-fifo-cq",
            flavor_quotas("on-demand", cpu=("5", "0")),
            cohort="cohort",
            strategy="StrictFIFO",
            selector=selector,
        ),
    )


def test_strict_fifo_schedules_by_priority_strictly():
    """Scheduler/Queueing with StrictFIFO/"Should schedule workloads by their priority strictly": wl1 (100, 2 CPUs)
    is admitted, wl2 (10, 5 CPUs) blocks the queue, wl3 (1, 1 CPU) is not admitted though it would fit."""
    world = strict_suite()
    world.at("0s", create=workload("wl1", "strict-fifo-q", "2", namespace="foo", priority=100))
    world.at("0s", create=workload("wl2", "strict-fifo-q", "5", namespace="foo", priority=10))
    world.at("0s", create=workload("wl3", "strict-fifo-q", "1", namespace="foo", priority=1))
    world.at("1s", "create-lq", create=local_queue("strict-fifo-q", "strict-fifo-cq", namespace="foo"))
    doc = world.run()
    assert row(doc, "wl1", "foo")["admittedAt"] == 1.0
    assert row(doc, "wl2", "foo")["state"] == "pending"
    wl3 = row(doc, "wl3", "foo")
    assert wl3["state"] == "pending"
    assert wl3["reason"]["code"] == "higher_priority_ahead"
    assert wl3["kueueMessage"] == ""  # Kueue writes no condition: it never gets a scheduling attempt


def test_strict_fifo_pending_head_keeps_its_capacity_in_every_cycle():
    """Scheduler/Queueing with StrictFIFO/"Pending workload with StrictFIFO doesn't block other CQ from borrowing
    from a third CQ": pending-wl (99, 3 CPUs) heads strict-fifo-cq, which cannot preempt for it; the 2 CPUs it would
    take stay reserved in every later cycle, so player3-a may not borrow them, while player2-a borrows
    shared-resources' 5. (team-a is held while the two arrive and released after, as upstream.)"""
    world = strict_suite()
    world.add(
        cluster_queue("team-a", flavor_quotas("on-demand", cpu="5"), cohort="cohort"),
        cluster_queue("shared-resources", flavor_quotas("on-demand", cpu="5"), cohort="cohort"),
        local_queue("strict-fifo-q", "strict-fifo-cq", namespace="foo"),
        local_queue("team-a-lq", "team-a", namespace="foo"),
    )
    world.at("0s", create=workload("wl", "strict-fifo-q", "3", namespace="foo", priority=10))
    world.at("0s", create=workload("player1-a", "team-a-lq", "5", namespace="foo", priority=1))
    world.at("1s", "hold-team-a", stop="ClusterQueue/team-a", keepAlreadyRunning=True)
    world.at("2s", create=workload("pending-wl", "strict-fifo-q", "3", namespace="foo", priority=99))
    world.at("3s", create=workload("player2-a", "team-a-lq", "5", namespace="foo", priority=11))
    world.at("4s", create=workload("player3-a", "team-a-lq", "1", namespace="foo", priority=10))
    world.at("5s", "release-team-a", resume="ClusterQueue/team-a")
    doc = world.run()
    assert state(doc, "wl", "player1-a", "player2-a", namespace="foo") == {
        "wl": "admitted",
        "player1-a": "admitted",
        "player2-a": "admitted",
    }
    assert row(doc, "player2-a", "foo")["admittedAt"] == 5.0
    assert row(doc, "pending-wl", "foo")["state"] == "pending"
    blocked = row(doc, "player3-a", "foo")
    assert blocked["state"] == "pending"
    assert blocked["reason"]["code"] == "higher_priority_ahead"
    assert blocked["kueueMessage"] == "Workload no longer fits after processing another workload"


def test_strict_fifo_reports_pending_workloads_when_blocked():
    """Scheduler/Queueing with StrictFIFO/"Should report pending workloads properly when blocked": wl2 blocks the
    queue (wl3 waits behind it) until wl1 finishes."""
    world = World(
        flavor("on-demand"),
        cluster_queue("cq", flavor_quotas("on-demand", cpu="5"), strategy="StrictFIFO"),
        local_queue("local-queue", "cq"),
    )
    world.at("0s", create=workload("wl1", "local-queue", "2", priority=100))
    world.at("0s", create=workload("wl2", "local-queue", "5", priority=10))
    world.at("1s", create=workload("wl3", "local-queue", "1", priority=1))
    world.at("2s", "finish-wl1", finish="Workload/ns/wl1")
    blocked = world.run(until="1s")
    assert blocked["summary"]["clusterQueues"]["cq"]["pending"] == 2
    doc = world.run()
    assert row(doc, "wl2")["admittedAt"] == 2.0
    assert doc["summary"]["clusterQueues"]["cq"]["pending"] == 1


def test_strict_fifo_queueing_strategy_can_be_mutated():
    """Scheduler/Queueing with StrictFIFO/"Should allow mutating the requeueingStrategy": as BestEffortFIFO, wl3
    passes the blocked wl2; back to StrictFIFO, wl4 waits behind wl2."""
    world = World(
        flavor("on-demand"),
        cluster_queue("cq", flavor_quotas("on-demand", cpu="5"), strategy="StrictFIFO"),
        local_queue("local-queue", "cq"),
    )
    world.at("0s", create=workload("wl1", "local-queue", "2", priority=100))
    world.at("0s", create=workload("wl2", "local-queue", "5", priority=10))
    world.at("0s", create=workload("wl3", "local-queue", "1", priority=1))
    world.at("5s", "best-effort", patch="ClusterQueue/cq", with_={"spec": {"queueingStrategy": "BestEffortFIFO"}})
    world.at("10s", "strict-again", patch="ClusterQueue/cq", with_={"spec": {"queueingStrategy": "StrictFIFO"}})
    world.at("15s", create=workload("wl4", "local-queue", "1", priority=1))
    assert row(world.run(until="4s"), "wl3")["state"] == "pending"
    doc = world.run()
    assert history(doc, "wl3") == [(0.0, "created"), (5.0, "admitted")]
    assert row(doc, "wl4")["state"] == "pending"
    assert row(doc, "wl2")["state"] == "pending"


# ------------------------------------------------------------------------ Reserving Resources in Cohort


def foundation_suite(reclaim: str) -> World:
    """``Scheduler/Reserving Resources in Cohort``: a StrictFIFO foundation-queue (2 CPUs) and a best-effort-queue
    (0) in one cohort; the foundation queue reclaims with ``reclaim``."""
    return World(
        flavor("on-demand"),
        cluster_queue(
            "foundation-queue",
            flavor_quotas("on-demand", cpu="2"),
            cohort="cohort",
            strategy="StrictFIFO",
            preemption={"reclaimWithinCohort": reclaim},
        ),
        cluster_queue("best-effort-queue", flavor_quotas("on-demand", cpu="0"), cohort="cohort"),
        local_queue("foundation-queue", "foundation-queue"),
        local_queue("best-effort-queue", "best-effort-queue"),
    )


def _foundation_steps(world: World) -> World:
    world.at("0s", create=workload("foundation-1", "foundation-queue", "1", priority=1000))
    world.at("1s", create=workload("foundation-2", "foundation-queue", "2", priority=1000))
    world.at("2s", create=workload("best-effort-1", "best-effort-queue", "1", priority=0))
    world.at("3s", create=workload("best-effort-2", "best-effort-queue", "1", priority=0))
    world.at("10s", "finish-foundation-1", finish="Workload/ns/foundation-1")
    return world


def test_foundation_queue_lends_until_it_admits_its_next_workload():
    """Scheduler/Reserving Resources in Cohort/"foundation-queue allows best-effort queue to use capacity until it is
    ready to admit next workload": with ``reclaimWithinCohort: Any`` nothing is held back: one best-effort workload
    borrows the idle CPU; when foundation-1 finishes, foundation-2 reclaims it by preemption."""
    doc = _foundation_steps(foundation_suite("Any")).run()
    assert history(doc, "best-effort-1") == [(2.0, "created"), (2.0, "admitted"), (10.0, "preempted")]
    assert row(doc, "best-effort-2")["state"] == "pending"
    assert history(doc, "foundation-2") == [(1.0, "created"), (10.0, "admitted")]
    assert doc["summary"]["clusterQueues"]["best-effort-queue"]["pending"] == 2


def test_foundation_queue_blocks_capacity_when_unsure_it_can_reclaim():
    """Scheduler/Reserving Resources in Cohort/"foundation-queue blocks capacity when it is not sure that it can
    reclaim": with ``reclaimWithinCohort: LowerPriority``, foundation-2 (which needs preemption and finds no
    candidate) holds the idle CPU in every cycle, so neither best-effort workload is admitted — not at 2s nor at 3s,
    cycles after the one where it was first found inadmissible — and foundation-2 is admitted when foundation-1
    finishes."""
    world = _foundation_steps(foundation_suite("LowerPriority"))
    waiting = world.run(until="9s")
    assert state(waiting, "best-effort-1", "best-effort-2") == {"best-effort-1": "pending", "best-effort-2": "pending"}
    head = row(waiting, "best-effort-1")
    assert head["kueueMessage"] == "Workload no longer fits after processing another workload"
    behind = row(waiting, "best-effort-2")
    assert behind["reason"]["code"] == "higher_priority_ahead"
    assert "held back for ns/foundation-2" in behind["reason"]["message"]
    doc = world.run()
    assert history(doc, "foundation-2") == [(1.0, "created"), (10.0, "admitted")]
    assert state(doc, "best-effort-1", "best-effort-2") == {"best-effort-1": "pending", "best-effort-2": "pending"}


# ------------------------------------------------------------------------ stop policy, deletions


def test_cluster_queue_drained_and_restarted():
    """Scheduler/Using clusterQueue stop policy/"Should evict workloads when stop policy is drain": ``one`` is
    evicted (ClusterQueueStopped, "The ClusterQueue is stopped"), ``two`` waits; removing the stopPolicy admits
    both."""
    world = World(
        flavor("on-demand"),
        cluster_queue("cluster-queue", flavor_quotas("on-demand", cpu=("5", "5")), cohort="cohort"),
        local_queue("queue", "cluster-queue"),
    )
    world.at("0s", create=workload("one", "queue", "1"))
    world.at("5s", "drain", patch="ClusterQueue/cluster-queue", with_={"spec": {"stopPolicy": "HoldAndDrain"}})
    world.at("6s", create=workload("two", "queue", "1"))
    world.at("10s", "restart", patch="ClusterQueue/cluster-queue", with_={"spec": {"stopPolicy": None}})
    stopped = world.run(until="9s")
    assert row(stopped, "one")["stopEviction"]["message"] == "The ClusterQueue is stopped"
    assert stopped["summary"]["clusterQueues"]["cluster-queue"]["pending"] == 2
    doc = world.run()
    assert history(doc, "one") == [(0.0, "created"), (0.0, "admitted"), (5.0, "evicted"), (10.0, "admitted")]
    assert row(doc, "two")["admittedAt"] == 10.0


def test_deleted_cluster_queue_admits_no_new_workload():
    """Scheduler/Deleting clusterQueues/"Should not admit new created workloads": its finalizer keeps the deleted
    queue while workload1 runs; workload2 is frozen ("ClusterQueue cluster-queue is inactive")."""
    world = World(
        flavor("on-demand"),
        cluster_queue("cluster-queue", flavor_quotas("on-demand", cpu="5")),
        local_queue("queue", "cluster-queue"),
    )
    world.at("0s", create=workload("workload1", "queue", None))
    world.at("5s", "delete-cq", delete="ClusterQueue/cluster-queue")
    world.at("6s", create=workload("workload2", "queue", None))
    doc = world.run()
    assert row(doc, "workload1")["state"] == "admitted"
    assert row(doc, "workload2")["kueueMessage"] == "ClusterQueue cluster-queue is inactive"
    assert doc["summary"]["clusterQueues"]["cluster-queue"]["admitted"] == 1


def test_cluster_queue_terminating_until_its_admitted_workload_finishes():
    """ClusterQueue controller/Deleting clusterQueues/"Should be stuck in termination until admitted workloads
    finished running" and "Should keep the status counters and Active condition accurate while terminating": the
    deleted queue stays while ``admitted`` runs (``pending`` waits, then is deleted); once ``admitted`` finishes the
    queue is gone and a later workload finds it missing."""
    world = World(
        flavor("on-demand"),
        cluster_queue("foo-cq", flavor_quotas("on-demand", **{"nvidia.com/gpu": "5"})),
        local_queue("queue", "foo-cq"),
    )
    gpus = {"nvidia.com/gpu": "5"}
    world.at("0s", create=workload("admitted", "queue", pod_sets=[pod_set("main", 1, **gpus)]))
    world.at("1s", create=workload("pending", "queue", pod_sets=[pod_set("main", 1, **gpus)]))
    world.at("5s", "delete-cq", delete="ClusterQueue/foo-cq")
    world.at("6s", delete="Workload/ns/pending")
    world.at("10s", "finish", finish="Workload/ns/admitted")
    world.at("11s", create=workload("late", "queue", pod_sets=[pod_set("main", 1, **gpus)]))
    terminating = world.run(until="7s")
    assert terminating["summary"]["clusterQueues"]["foo-cq"] == {
        **terminating["summary"]["clusterQueues"]["foo-cq"],
        "admitted": 1,
        "pending": 0,
    }
    doc = world.run()
    assert "foo-cq" in doc["summary"]["clusterQueues"]  # its figures over the run stay reported
    assert row(doc, "late")["kueueMessage"] == "ClusterQueue foo-cq doesn't exist"
    finalized = [d for d in doc["timeline"]["decisions"] if d["workload"] == "ClusterQueue/foo-cq"]
    assert [(d["at"], d["decision"]) for d in finalized] == [(10.0, "deleted")]


def test_deleted_cluster_queue_no_longer_lends():
    """Scheduler/Deleting ClusterQueue should update cohort borrowable resources/"Should prevent incorrect admission
    through borrowing after ClusterQueue deletion"."""
    world = World(
        flavor("on-demand"),
        cluster_queue("queue-1", flavor_quotas("on-demand", cpu="8"), cohort="bug-test"),
        cluster_queue("queue-2", flavor_quotas("on-demand", cpu="0"), cohort="bug-test"),
        local_queue("queue-1", "queue-1"),
        local_queue("queue-2", "queue-2"),
    )
    world.at("1s", delete="ClusterQueue/queue-1")
    world.at("2s", create=workload("wl", "queue-2", "8", priority=1000))
    doc = world.run()
    assert row(doc, "wl")["state"] == "pending"
    assert row(doc, "wl")["reason"]["code"] == "exceeds_maximum"


def test_deleted_sibling_cohort_no_longer_lends():
    """Scheduler/Deleting child Cohort should update borrowable resources for parent Cohort/"Should not admit from
    stale subtree quota after deleting sibling cohort": once ``right`` is deleted, cq-b hangs from an implicit cohort
    and its 7 + 5 CPUs no longer reach cq-a."""
    world = World(
        flavor("on-demand"),
        cohort("root"),
        cohort("left", flavor_quotas("on-demand", cpu="0"), parent="root"),
        cohort("right", flavor_quotas("on-demand", cpu="5"), parent="root"),
        cluster_queue("cq-a", flavor_quotas("on-demand", cpu="10"), cohort="left"),
        cluster_queue("cq-b", flavor_quotas("on-demand", cpu="7"), cohort="right"),
        local_queue("cq-a", "cq-a"),
    )
    world.at("0s", create=workload("wl-base", "cq-a", "10"))
    world.at("5s", delete="Cohort/right")
    world.at("6s", create=workload("wl-after-delete", "cq-a", "8"))
    doc = world.run()
    assert row(doc, "wl-base")["state"] == "admitted"
    assert row(doc, "wl-after-delete")["state"] == "pending"


def test_deleted_mid_tree_cohort_stops_borrowing():
    """Scheduler/Deleting child Cohort should update borrowable resources for parent Cohort/"Should not allow
    borrowing through deleted mid-tree cohort": wl-base (within cq's own quota) keeps running, a 2-CPU workload that
    would borrow through ``mid`` waits."""
    world = World(
        flavor("on-demand"),
        cohort("root", flavor_quotas("on-demand", cpu="2")),
        cohort("mid", flavor_quotas("on-demand", cpu="2"), parent="root"),
        cluster_queue("cq-mid", flavor_quotas("on-demand", cpu="1"), cohort="mid"),
        local_queue("cq-mid", "cq-mid"),
    )
    world.at("0s", create=workload("wl-base", "cq-mid", "1"))
    world.at("5s", delete="Cohort/mid")
    world.at("6s", create=workload("wl-after-delete", "cq-mid", "2"))
    doc = world.run()
    assert history(doc, "wl-base") == [(0.0, "created"), (0.0, "admitted")]
    assert row(doc, "wl-after-delete")["state"] == "pending"


# ------------------------------------------------------------------------ workloads changed after submission


def test_priority_class_value_change_changes_the_workload_priority():
    """Workload controller/changing the priority value of PriorityClass changes the priority of the workload/"case
    of WorkloadPriorityClass": the class goes 200 → 150; the pending workload's priority follows, so a workload of
    priority 180 created later goes first."""
    world = World(
        flavor("on-demand"),
        priority_class("workload-priority-class", 200),
        cluster_queue("cq", flavor_quotas("on-demand", cpu="1")),
        local_queue("lq", "cq"),
    )
    blocker = workload("blocker", "lq", "1", priority=1000)
    wl = workload("wl", "lq", "1")
    wl["spec"]["priorityClassRef"] = {
        "group": "kueue.x-k8s.io",
        "kind": "WorkloadPriorityClass",
        "name": "workload-priority-class",
    }
    world.at("0s", create=blocker)
    world.at("1s", create=wl)
    world.at("2s", "lower-class", patch="WorkloadPriorityClass/workload-priority-class", with_={"value": 150})
    world.at("3s", create=workload("challenger", "lq", "1", priority=180))
    world.at("5s", finish="Workload/ns/blocker")
    doc = world.run(until="5s")
    assert row(doc, "challenger")["admittedAt"] == 5.0
    assert row(doc, "wl")["state"] == "pending"


def test_admission_gate_annotation_removed():
    """Scheduler with AdmissionGatedBy/"Should gate workload admission with AdmissionGatedBy annotation and admit
    when removed": QuotaReserved=False "Admission is gated by: example.com/controller1" until the annotation goes."""
    gate = {"kueue.x-k8s.io/admission-gated-by": "example.com/controller1"}
    world = World(
        flavor("default"),
        cluster_queue("cluster-queue", flavor_quotas("default", cpu="5")),
        local_queue("local-queue", "cluster-queue"),
    )
    world.at("0s", create=workload("gated-wl", "local-queue", "100m", annotations=gate))
    world.at(
        "5s",
        "ungate",
        patch="Workload/ns/gated-wl",
        with_={"metadata": {"annotations": {"kueue.x-k8s.io/admission-gated-by": None}}},
    )
    gated = world.run(until="4s")
    assert row(gated, "gated-wl")["kueueMessage"] == "Admission is gated by: example.com/controller1"
    doc = world.run()
    assert history(doc, "gated-wl") == [(0.0, "created"), (5.0, "admitted")]


# ------------------------------------------------------------------------ fair sharing


def test_fair_sharing_admits_respecting_fair_share():
    """Scheduler (fair sharing)/Preemption is disabled/"Admits workloads respecting fair share": a (3 CPUs), b (1)
    and shared (4) in one cohort; ten 1-CPU workloads saturate a (8 admitted, share 625), five newer ones wait in
    b; as a's workloads finish one by one the freed CPUs go to b three times, then to a (shares 250 / 250), and two
    more finishes admit one of each (a 125, b 375)."""
    world = World(
        {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "fairSharing": {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]},
        },
        flavor("default"),
        cluster_queue("a", flavor_quotas("default", cpu="3"), cohort="all"),
        cluster_queue("b", flavor_quotas("default", cpu="1"), cohort="all"),
        cluster_queue("shared", flavor_quotas("default", cpu="4"), cohort="all"),
        local_queue("a", "a"),
        local_queue("b", "b"),
    )
    for i in range(10):
        world.at("0s", create=workload(f"a-{i}", "a", "1"))
    for i in range(5):
        world.at("1s", create=workload(f"b-{i}", "b", "1"))
    running = iter(range(8))
    for second in (10, 11, 12, 13):
        world.at(f"{second}s", finish=f"Workload/ns/a-{next(running)}")
    start = world.run(until="9s")
    queues = start["summary"]["clusterQueues"]
    assert (queues["a"]["admitted"], queues["a"]["pending"], queues["b"]["pending"]) == (8, 2, 5)
    assert queues["a"]["weightedShare"] == 625
    shared = world.run(until="13s")["summary"]["clusterQueues"]
    assert (shared["a"]["admitted"], shared["b"]["admitted"]) == (5, 3)
    assert (shared["a"]["weightedShare"], shared["b"]["weightedShare"]) == (250, 250)
    for second in (14, 14):
        world.at(f"{second}s", finish=f"Workload/ns/a-{next(running)}")
    final = world.run()["summary"]["clusterQueues"]
    assert (final["a"]["admitted"], final["a"]["pending"], final["b"]["admitted"], final["b"]["pending"]) == (
        4,
        0,
        4,
        1,
    )
    assert (final["a"]["weightedShare"], final["b"]["weightedShare"]) == (125, 375)
