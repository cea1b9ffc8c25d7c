"""``simulate`` reads a Node's health as the kube sync does: NVSentinel's conditions name the GPUs out for health
(queues.engine.scenario.kinds), with the same condition types the health policy defaults to."""

from __future__ import annotations

from pools.models.health import _default_node_condition_types
from queues.engine.model import NODE_HEALTH_CONDITION_TYPES, NODE_REPORTS
from queues.engine.scenario.kinds import node_reported_gpus, parse_node
from queues.engine.scenario.manifest import Manifest

XID_GPU_3 = {"type": "GpuXidError", "status": "True", "message": "ErrorCode:79 GPU:3 Recommended Action=RESTART_BM;"}


def node(conditions, allocatable="8", **spec):
    raw = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gpu-node-07", "labels": {"kubernetes.io/hostname": "gpu-node-07"}},
        "spec": spec,
        "status": {
            "capacity": {"nvidia.com/gpu": "8"},
            "allocatable": {"nvidia.com/gpu": allocatable},
            "conditions": [{"type": "Ready", "status": "True"}, *conditions],
        },
    }
    return parse_node(Manifest(raw, 0))


def test_the_engine_reads_the_condition_types_the_health_policy_defaults_to():
    assert list(NODE_HEALTH_CONDITION_TYPES) == _default_node_condition_types()


def test_a_condition_naming_a_gpu_takes_that_gpu_out():
    n = node([XID_GPU_3])
    assert n.allocatable["nvidia.com/gpu"] == 7
    assert n.health_gap_by == NODE_REPORTS
    assert n.health_reason == (
        "1 device(s) excluded for health: gpu-3: node condition GpuXidError=True: ErrorCode:79 GPU:3 "
        "Recommended Action=RESTART_BM"
    )


def test_the_device_plugin_having_counted_it_already_is_not_counted_twice():
    assert node([XID_GPU_3], allocatable="7").allocatable["nvidia.com/gpu"] == 7
    assert node([XID_GPU_3], allocatable="5").allocatable["nvidia.com/gpu"] == 5


def test_a_condition_naming_no_gpu_takes_every_gpu_out_and_false_ones_nothing():
    whole = {"type": "SysLogsGPUFallenOff", "status": "True", "message": "GPU has fallen off the bus"}
    assert node([whole]).allocatable["nvidia.com/gpu"] == 0
    cleared = {**XID_GPU_3, "status": "False"}
    healthy = node([cleared, {"type": "SomethingElse", "status": "True", "message": "GPU:1"}])
    assert healthy.allocatable["nvidia.com/gpu"] == 8
    assert healthy.health_gap_by == ""


def test_reported_gpus_by_device_name_in_index_order():
    two = {"type": "GpuMemWatch", "status": "True", "message": "DBE on GPU:1 and GPU:10"}
    out = node_reported_gpus([XID_GPU_3, two], 16)
    assert list(out) == ["gpu-1", "gpu-3", "gpu-10"]
    assert out["gpu-1"] == "GpuMemWatch=True: DBE on GPU:1 and GPU:10"


def test_a_quarantined_node_is_cordoned_for_health():
    n = node([XID_GPU_3], unschedulable=True)
    assert n.unschedulable
    assert n.health_reason.startswith("1 device(s) excluded for health: gpu-3")
