"""What a Node says, read into the health model (pools.health.nodes): conditions by GPU index or for the whole
node, health taints by effect, the clear path with and without a repair ticket, the causes in words, and the
selector the kubernetes wait reasons read."""

from __future__ import annotations

import pytest

from pools.health.nodes import (
    NODE_CONDITION_SIGNAL,
    NODE_TAINT_SIGNAL,
    health_nodes_reconcile,
    node_health_causes,
)
from pools.health.selectors import health_excluded_nodes
from pools.inventory.parse import HEALTH_TAINTS
from pools.models import Device, HealthPolicy, HealthSignal, HealthState, RepairTicket
from queues.engine.model import HEALTH_TAINT_KEYS
from tests.factories import DeviceFactory, NodeFactory

pytestmark = pytest.mark.django_db

XID_ON_GPU_2 = {
    "type": "GpuXidError",
    "status": "True",
    "reason": "GpuXidErrorIsNotHealthy",
    "message": "ErrorCode:79 GPU:2 Recommended Action=RESTART_BM;",
}
HEALTHY_AGAIN = {
    "type": "GpuXidError",
    "status": "False",
    "reason": "GpuXidErrorIsHealthy",
    "message": "No Health Failures",
}
NVSENTINEL_TAINT = {"key": "nvidia.com/gpu-xid-error", "value": "true", "effect": "NoSchedule"}


def _health(node) -> dict[int, str]:
    return dict(Device.objects.filter(node=node).values_list("index", "health"))


def _no_tickets():
    HealthPolicy.objects.update_or_create(name="default", defaults={"active": True, "auto_open_ticket": False})


def test_the_inventorys_health_taints_are_engine_health_taints():
    """A node the import takes out for a taint is one the engine also counts as health-excluded."""
    assert set(HEALTH_TAINTS) <= HEALTH_TAINT_KEYS


def test_a_condition_naming_a_gpu_index_takes_out_that_card_only(pool):
    node = pool.nodes[0]
    node.conditions = [{"type": "Ready", "status": "True"}, XID_ON_GPU_2]
    node.save()
    report = health_nodes_reconcile(cluster=pool.cluster, node_names=[node.name], now=pool.at(10))
    assert _health(node) == {0: "healthy", 1: "healthy", 2: "quarantined", 3: "healthy"}
    assert len(report.tickets_opened) == 1
    signal = HealthSignal.objects.get(device__node=node, device__index=2, signal=NODE_CONDITION_SIGNAL)
    assert signal.message == "node condition GpuXidError=True: ErrorCode:79 GPU:2 Recommended Action=RESTART_BM"
    assert _health(pool.nodes[1]) == dict.fromkeys(range(4), "healthy")  # not named: not read
    again = health_nodes_reconcile(cluster=pool.cluster, now=pool.at(20))
    assert (again.changes, again.observations) == ([], 0)


def test_a_condition_type_the_policy_does_not_name_is_ignored(pool):
    node = pool.nodes[0]
    node.conditions = [{**XID_ON_GPU_2, "type": "GpuThermalWatch"}]  # throttling: the portal's DCGM grades it
    node.save()
    health_nodes_reconcile(cluster=pool.cluster, now=pool.at(10))
    assert set(_health(node).values()) == {"healthy"}


def test_only_a_no_schedule_or_no_execute_health_taint_is_a_signal(pool):
    first, second = pool.nodes
    first.taints = [{**NVSENTINEL_TAINT, "effect": "PreferNoSchedule"}]
    first.save()
    second.taints = [{**NVSENTINEL_TAINT, "effect": "NoExecute"}]
    second.save()
    health_nodes_reconcile(cluster=pool.cluster, now=pool.at(10))
    assert set(_health(first).values()) == {"healthy"}
    assert set(_health(second).values()) == {"quarantined"}
    assert HealthSignal.objects.filter(device__node=second, signal=NODE_TAINT_SIGNAL, level="unhealthy").count() == 4


def test_without_tickets_a_cleared_condition_returns_the_card(pool):
    _no_tickets()
    node = pool.nodes[0]
    node.conditions = [XID_ON_GPU_2]
    node.save()
    health_nodes_reconcile(cluster=pool.cluster, now=pool.at(10))
    assert _health(node)[2] == "unhealthy"
    assert not RepairTicket.objects.exists()
    node.conditions = [HEALTHY_AGAIN]
    node.save()
    report = health_nodes_reconcile(cluster=pool.cluster, now=pool.at(20))
    assert _health(node)[2] == "healthy"
    [change] = report.changes
    assert (change.before, change.after) == ("unhealthy", "healthy")
    assert change.reason.startswith("the node no longer reports it (node condition GpuXidError=True")


def test_without_tickets_another_bad_signal_keeps_the_card_out(pool):
    _no_tickets()
    node = pool.nodes[0]
    node.conditions = [XID_ON_GPU_2]
    node.taints = [NVSENTINEL_TAINT]
    node.save()
    health_nodes_reconcile(cluster=pool.cluster, now=pool.at(10))
    node.conditions = [HEALTHY_AGAIN]  # the condition clears, the taint stays
    node.save()
    health_nodes_reconcile(cluster=pool.cluster, now=pool.at(20))
    assert _health(node)[2] == "unhealthy"


def test_with_a_ticket_a_cleared_condition_is_noted_and_the_card_stays_in_repair(pool):
    node = pool.nodes[0]
    node.conditions = [XID_ON_GPU_2]
    node.save()
    health_nodes_reconcile(cluster=pool.cluster, now=pool.at(10))
    ticket = RepairTicket.objects.get()
    node.conditions = [HEALTHY_AGAIN]
    node.save()
    health_nodes_reconcile(cluster=pool.cluster, now=pool.at(20))
    assert _health(node)[2] == "quarantined"
    note = ticket.events.order_by("-at", "-id").first().note
    assert note.startswith("The node no longer reports it (node condition GpuXidError=True: ErrorCode:79 GPU:2")
    assert note.endswith("the devices return to the pool once a validation job passes.")


def test_causes_in_words_most_telling_first(pool):
    node = pool.nodes[0]
    node.ready = False
    node.unschedulable = True
    node.taints = [NVSENTINEL_TAINT, {"key": "portal.gpu/unhealthy", "effect": "NoSchedule"}]
    node.conditions = [XID_ON_GPU_2, {**HEALTHY_AGAIN, "type": "GpuMemWatch"}]
    node.capacity = {"nvidia.com/gpu": "4"}
    node.allocatable = {"nvidia.com/gpu": "1"}
    causes = node_health_causes(node, condition_types=["GpuXidError", "GpuMemWatch"], resource="nvidia.com/gpu")
    assert causes == [
        "NotReady",
        "tainted nvidia.com/gpu-xid-error=true:NoSchedule by NVSentinel's fault quarantine",
        "tainted portal.gpu/unhealthy:NoSchedule by the portal's repair workflow",
        "condition GpuXidError=True: ErrorCode:79 GPU:2 Recommended Action=RESTART_BM",
        "cordoned",
        "the device plugin reports capacity 4, allocatable 1",
    ]
    quiet = pool.nodes[1]
    assert node_health_causes(quiet, condition_types=[], device_reasons=["XID 79", "", "XID 79"]) == ["XID 79"]


def test_health_excluded_nodes_counts_units_and_says_why(pool):
    first, second = pool.nodes
    first.taints = [NVSENTINEL_TAINT]
    first.save()
    health_nodes_reconcile(cluster=pool.cluster, now=pool.at(10))
    Device.objects.filter(node=second, index=0).update(health=HealthState.UNHEALTHY, health_reason="XID 79 (DCGM)")
    rows = health_excluded_nodes(cluster=pool.cluster, resource="nvidia.com/gpu", kind="full")
    assert [(r.node, r.units, r.flavor) for r in rows] == [(first.name, 4, "h100"), (second.name, 1, "h100")]
    assert rows[0].causes == ("tainted nvidia.com/gpu-xid-error=true:NoSchedule by NVSentinel's fault quarantine",)
    assert rows[1].causes == ("XID 79 (DCGM)",)


def test_a_quiet_cluster_is_read_in_a_fixed_number_of_queries(pool, django_assert_max_num_queries):
    """The kube sync reads every node of a relist: nodes that report nothing cost no per-node or per-card query."""
    for i in range(2, 12):
        node = NodeFactory(cluster=pool.cluster, flavor=pool.nodes[0].flavor, name=f"gpu-node-{i}")
        for index in range(8):
            DeviceFactory(node=node, index=index)
    health_nodes_reconcile(cluster=pool.cluster, now=pool.at(1))  # the policy row exists from now on
    with django_assert_max_num_queries(9):  # 7 reads and locks, and the savepoint around them
        report = health_nodes_reconcile(cluster=pool.cluster, now=pool.at(2))
    assert report.changes == []
