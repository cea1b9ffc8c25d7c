"""``simulate`` reads a Node's health as the kube sync does: NVSentinel's conditions name the GPUs out for health
(queues.engine.scenario.kinds), with the same condition types the health policy defaults to."""

from __future__ import annotations

import pytest
import yaml

from pools.inventory.parse import parse_inventory
from pools.models.health import _default_node_condition_types
from queues.engine.model import NODE_HEALTH_CONDITION_TYPES, NODE_REPORTS
from queues.engine.scenario import load_scenario, run_scenario
from queues.engine.scenario.kinds import node_reported_gpus, parse_node
from queues.engine.scenario.manifest import Manifest, ScenarioError
from tests.pools.fixtures.builders import excerpt_cases, excerpt_node

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


# --- capacity dropped below nvidia.com/gpu.count (NVIDIA's "GPU Node does not have the expected number of GPUs") --


def dropped_node(name="gpu-node-08", count="8", capacity="7", **labels):
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "gpu-class": "h100", "nvidia.com/gpu.count": count, **labels},
        },
        "status": {
            "capacity": {"nvidia.com/gpu": capacity},
            "allocatable": {"nvidia.com/gpu": capacity},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_a_gpu_the_device_plugin_dropped_from_capacity_is_out_for_health():
    n = parse_node(Manifest(dropped_node(), 0))
    assert (n.capacity["nvidia.com/gpu"], n.allocatable["nvidia.com/gpu"]) == (8, 7)
    assert n.health_gap_by == ""  # the device plugin's doing: the wait reason says so
    assert n.health_reason == (
        "1 device(s) excluded for health: gpu-7: node capacity 7 < 8 expected from nvidia.com/gpu.count=8 "
        "(device plugin dropped devices it marked unhealthy)"
    )
    # Every card gone from the plugin's list: all of them out, none allocatable.
    gone = parse_node(Manifest(dropped_node(capacity="0"), 0))
    assert (gone.capacity["nvidia.com/gpu"], gone.allocatable["nvidia.com/gpu"]) == (8, 0)
    # As many cards listed as counted, or MIG strategy single (nvidia.com/gpu counts MIG devices): nothing added.
    assert parse_node(Manifest(dropped_node(capacity="8"), 0)).health_reason == ""
    mig = parse_node(Manifest(dropped_node(capacity="7", **{"nvidia.com/mig.config": "all-1g.10gb"}), 0))
    assert mig.capacity["nvidia.com/gpu"] == 7


def test_a_bad_gpu_count_label_is_an_error_naming_the_node_and_label():
    with pytest.raises(ScenarioError) as err:
        parse_node(Manifest(dropped_node(count="eight"), 0))
    assert 'metadata.labels["nvidia.com/gpu.count"]' in str(err.value)
    assert "not an integer: 'eight'" in str(err.value)
    with pytest.raises(ScenarioError) as err:
        parse_node(Manifest(dropped_node(count="5000"), 0))
    assert "5000 is not between 0 and 4096" in str(err.value)


def test_simulate_counts_each_nodes_gpus_as_the_kube_sync_inventory_does(reference):
    """Every Node status excerpt of the reference (NVIDIA's documented cases), as listed and with gpu.count 8:
    the units simulate gives each NVIDIA resource, and the healthy ones, are the kube sync inventory's."""
    compared = 0
    for case in excerpt_cases(reference):
        for labels in ({}, {"nvidia.com/gpu.count": "8"}):
            raw = excerpt_node(case, labels=labels)
            inventory = parse_inventory([raw])
            engine = parse_node(Manifest(raw, 0))
            for resource in {d.resource_name for d in inventory.devices if d.resource_name}:
                units = [d for d in inventory.devices if d.resource_name == resource]
                healthy = [d for d in units if d.health == "healthy"]
                where = (case.get("case"), labels, resource)
                assert engine.capacity.get(resource) == len(units), where
                assert engine.allocatable.get(resource) == len(healthy), where
                compared += 1
    assert compared >= 20


GONE_BAD = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h100}
spec: {nodeLabels: {gpu-class: h100}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: ml}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: h100, resources: [{name: nvidia.com/gpu, nominalQuota: '16'}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: main, namespace: ml}
spec: {clusterQueue: ml}
"""


def _workload(name, minute, admitted=False):
    wl = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": f"2026-04-01T10:{minute:02d}:00Z"},
        "spec": {
            "queueName": "main",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {"containers": [{"name": "t", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}
                    },
                }
            ],
        },
    }
    if admitted:
        wl["status"] = {
            "admission": {
                "clusterQueue": "ml",
                "podSetAssignments": [
                    {
                        "name": "main",
                        "count": 1,
                        "flavors": {"nvidia.com/gpu": "h100"},
                        "resourceUsage": {"nvidia.com/gpu": "8"},
                    }
                ],
            },
            "conditions": [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}],
        }
    return wl


def test_the_wait_is_health_blocked_naming_node_and_gpu_not_class_full(tmp_path):
    """A healthy node busy, the other's device plugin dropped a GPU from its capacity: main read the second node
    as a 7-GPU node ("class full"; alone, "exceeds maximum"); as the kube sync counts it, the 8-GPU job waits for
    the repair of gpu-7 on gpu-node-08."""
    healthy = dropped_node(name="gpu-node-07", capacity="8")
    docs = [*yaml.safe_load_all(GONE_BAD), healthy, dropped_node(), _workload("resident", 0, admitted=True)]
    docs.append(_workload("train-8x", 5))
    path = tmp_path / "gone-bad.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    out = run_scenario(load_scenario(path))
    (train,) = [w for w in out["workloads"] if w["name"] == "ml/train-8x"]
    assert train["reason"]["code"] == "health_blocked", train["reason"]
    assert train["reason"]["message"] == (
        "The capacity this job needs exists, but part of it is out for health: 1 h100 GPU on gpu-node-08 is marked "
        "unhealthy by the device plugin (capacity 8, allocatable 7): 1 device(s) excluded for health: gpu-7: node "
        "capacity 7 < 8 expected from nvidia.com/gpu.count=8 (device plugin dropped devices it marked unhealthy). "
        "Free now on healthy devices: 7, needed: 8; once repaired this job can start."
    )
