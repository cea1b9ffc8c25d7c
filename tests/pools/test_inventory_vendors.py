"""Capacity and allocatable kept apart for every vendor's resource (issue 16 item 6), from parse to the engine.

The resource names come from the reference (tests/fixtures/reference/vendors.yaml, see its SOURCE.md): each one
it lists is either a device unit here, with a node reporting allocatable below capacity, or named as not a device
unit (Intel's monitoring resources). The nodes are constructed by us around those names; the labels are the
ones the importer needs to read the resource (card counts, products), as vendors.yaml gives them.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import yaml
from django.utils import timezone

from pools.inventory.parse import parse_inventory
from pools.inventory.records import is_device_plugin_reason, is_source_reason
from pools.inventory.service import inventory_import
from pools.models import Device, HealthState, Node
from queues.engine.model import DEVICE_PLUGIN
from queues.engine_input import engine_nodes
from tests.factories import ClusterFactory

T0 = timezone.now().replace(microsecond=0) - timedelta(days=1)

#: resource -> (labels the importer reads, capacity, allocatable) of one node that has lost some units.
CASES: dict[str, tuple[dict[str, str], dict[str, str], dict[str, str]]] = {
    "nvidia.com/gpu": (
        {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
        {"nvidia.com/gpu": "8"},
        {"nvidia.com/gpu": "2"},
    ),
    "nvidia.com/gpu.shared": (
        {"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.count": "4", "nvidia.com/gpu.replicas": "4"},
        {"nvidia.com/gpu": "0", "nvidia.com/gpu.shared": "16"},
        {"nvidia.com/gpu": "0", "nvidia.com/gpu.shared": "12"},
    ),
    "nvidia.com/mig-1g.10gb": (
        {
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.count": "1",
            "nvidia.com/mig.strategy": "mixed",
        },
        {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "7"},
        {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "5"},
    ),
    "amd.com/gpu": (
        {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"},
        {"amd.com/gpu": "8"},
        {"amd.com/gpu": "7"},
    ),
    "amd.com/cpx_nps4": ({}, {"amd.com/cpx_nps4": "64"}, {"amd.com/cpx_nps4": "62"}),
    "amd.com/cpx_nps1": ({}, {"amd.com/cpx_nps1": "16"}, {"amd.com/cpx_nps1": "8"}),
    "amd.com/spx_nps1": ({}, {"amd.com/spx_nps1": "8"}, {"amd.com/spx_nps1": "6"}),
    "gpu.intel.com/i915": (
        {"gpu.intel.com/product": "Flex_170"},
        {"gpu.intel.com/i915": "2"},
        {"gpu.intel.com/i915": "1"},
    ),
    "gpu.intel.com/xe": ({"gpu.intel.com/product": "Max_1550"}, {"gpu.intel.com/xe": "4"}, {"gpu.intel.com/xe": "1"}),
    "habana.ai/gaudi": ({}, {"habana.ai/gaudi": "8"}, {"habana.ai/gaudi": "6"}),
    "aws.amazon.com/neuron": (
        {"node.kubernetes.io/instance-type": "trn1.32xlarge"},
        {"aws.amazon.com/neuron": "16"},
        {"aws.amazon.com/neuron": "15"},
    ),
    "aws.amazon.com/neuroncore": (
        {"node.kubernetes.io/instance-type": "inf2.xlarge"},
        {"aws.amazon.com/neuron": "1", "aws.amazon.com/neuroncore": "2"},
        {"aws.amazon.com/neuron": "1", "aws.amazon.com/neuroncore": "1"},
    ),
    "aws.amazon.com/neurondevice": ({}, {"aws.amazon.com/neurondevice": "4"}, {"aws.amazon.com/neurondevice": "3"}),
    "google.com/tpu": (
        {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice", "cloud.google.com/gke-tpu-topology": "2x4"},
        {"google.com/tpu": "4"},
        {"google.com/tpu": "3"},
    ),
}
#: Resources vendors.yaml lists that are not device units (access to a GPU's telemetry, shared with workloads).
NOT_UNITS = {"gpu.intel.com/monitoring", "gpu.intel.com/i915_monitoring", "gpu.intel.com/xe_monitoring"}
#: Templates in vendors.yaml and the concrete name standing for each here.
TEMPLATES = {"nvidia.com/mig-<N>g.<M>gb": "nvidia.com/mig-1g.10gb", "amd.com/<compute>_<memory>": "amd.com/cpx_nps4"}


def reference_resources(reference) -> set[str]:
    """Every resource name vendors.yaml lists, templates replaced by their concrete stand-in."""
    vendors = yaml.safe_load((reference / "vendors.yaml").read_text())["vendors"]
    names = set()
    for vendor in vendors:
        for name in re.findall(r"[a-z0-9.-]+\.[a-z]+/[A-Za-z0-9_.<>-]+", str(vendor["resources"])):
            names.add(TEMPLATES.get(name, name))
    return names


def vendor_node(resource: str, name: str | None = None) -> dict:
    """The Node of one case."""
    labels, capacity, allocatable = CASES[resource]
    node_name = name or re.sub(r"[^a-z0-9-]", "-", resource.lower())
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node_name, "labels": {"kubernetes.io/hostname": node_name, **labels}},
        "status": {"capacity": dict(capacity), "allocatable": dict(allocatable)},
    }


def test_every_reference_resource_is_covered(reference):
    listed = reference_resources(reference)
    assert listed - NOT_UNITS - set(CASES) == set(), "a resource vendors.yaml lists is neither a case nor NOT_UNITS"
    assert "nvidia.com/mig-1g.10gb" in listed
    assert "habana.ai/gaudi" in listed


@pytest.mark.parametrize("resource", sorted(CASES))
def test_parse_marks_the_allocatable_gap_of_each_vendor(resource):
    _, capacity, allocatable = CASES[resource]
    inv = parse_inventory([vendor_node(resource)])
    units = [d for d in inv.devices if d.resource_name == resource]
    cap, alloc = int(capacity[resource]), int(allocatable[resource])
    assert len(units) == cap
    bad = [d for d in units if d.health == "unhealthy"]
    assert len(bad) == cap - alloc
    assert units[:alloc] == [d for d in units if d.health == "healthy"]  # the highest-index units are the bad ones
    reason = f"node allocatable {alloc} < capacity {cap} (device plugin marked devices unhealthy)"
    assert {d.health_reason for d in bad} == {reason}
    assert is_device_plugin_reason(reason)
    assert is_source_reason(reason)
    (node,) = inv.nodes
    assert (node.capacity[resource], node.allocatable[resource]) == (capacity[resource], allocatable[resource])


@pytest.mark.parametrize("resource", sorted(NOT_UNITS))
def test_monitoring_resources_are_not_units(resource):
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "intel-1"},
        "status": {"capacity": {resource: "1"}, "allocatable": {resource: "1"}},
    }
    assert parse_inventory([node]).devices == []


@pytest.mark.django_db
def test_import_keeps_capacity_and_allocatable_apart_and_the_engine_sees_the_gap():
    """All vendors in one import: rows keep both maps verbatim; the engine's node has the same two numbers."""
    cluster = ClusterFactory()
    inventory_import(cluster=cluster, objects=[vendor_node(r) for r in sorted(CASES)], now=T0)
    nodes, _ = engine_nodes(cluster)
    by_name = {n.name: n for n in nodes}
    for resource, (_, capacity, allocatable) in sorted(CASES.items()):
        name = re.sub(r"[^a-z0-9-]", "-", resource.lower())
        row = Node.objects.get(cluster=cluster, name=name)
        assert (row.capacity, row.allocatable) == (capacity, allocatable)
        cap, alloc = int(capacity[resource]), int(allocatable[resource])
        assert Device.objects.filter(node=row, resource_name=resource).count() == cap
        out = Device.objects.filter(node=row, resource_name=resource, health=HealthState.UNHEALTHY).count()
        assert out == cap - alloc
        engine_node = by_name[name]
        assert (engine_node.capacity[resource], engine_node.allocatable[resource]) == (cap, alloc), resource
        assert engine_node.health_gap_by == DEVICE_PLUGIN


@pytest.mark.django_db
def test_a_gap_the_portal_made_is_not_the_device_plugins():
    """A device quarantined by the portal (a ticket, DCGM) on top of the device plugin's gap: the portal's."""
    cluster = ClusterFactory()
    inventory_import(cluster=cluster, objects=[vendor_node("nvidia.com/gpu", "node-17")], now=T0)
    device = Device.objects.get(node__name="node-17", key="nvidia.com/gpu-0")
    device.health, device.health_reason = HealthState.QUARANTINED, "XID 79 by hand"
    device.save(update_fields=["health", "health_reason"])
    (node,), _ = engine_nodes(cluster)
    assert (node.capacity["nvidia.com/gpu"], node.allocatable["nvidia.com/gpu"]) == (8, 1)
    assert node.health_gap_by == "the portal's health checks"
    assert "XID 79 by hand" in node.health_reason


# --- a fault-quarantine cordon (NVSentinel) ------------------------------------------------------------------

#: ILLUSTRATIVE, NOT A CAPTURE: the shape of NVSentinel's ``quarantineHealthEvent`` annotation (a JSON health
#: event with a check name, error codes and a message), values made up by us.
EVENT = '{"checkName": "GpuXidError", "errorCode": ["79"], "message": "GPU has fallen off the bus"}'


def quarantined_node(*, cordoned: bool = True, event: str = EVENT) -> dict:
    node = vendor_node("nvidia.com/gpu", "node-9")
    node["status"]["allocatable"] = {"nvidia.com/gpu": "8"}
    node["metadata"]["annotations"] = {"quarantineHealthEvent": event}
    node["spec"] = {"unschedulable": cordoned}
    return node


def test_fault_quarantine_cordon_marks_the_nodes_gpus_unhealthy():
    inv = parse_inventory([quarantined_node()])
    gpus = [d for d in inv.devices if d.resource_name == "nvidia.com/gpu"]
    assert len(gpus) == 8
    assert {d.health for d in gpus} == {"unhealthy"}
    reason = "node quarantined (NVSentinel fault quarantine: GpuXidError 79 GPU has fallen off the bus)"
    assert {d.health_reason for d in gpus} == {reason}
    assert is_source_reason(reason)  # cleared by the import once the node is uncordoned
    assert not is_device_plugin_reason(reason)


def test_quarantine_annotation_without_cordon_or_unreadable():
    """Uncordoned by hand (the annotation lingers): the GPUs count again; an unreadable event still quarantines."""
    assert {d.health for d in parse_inventory([quarantined_node(cordoned=False)]).devices} == {"healthy"}
    inv = parse_inventory([quarantined_node(event="{not json")])
    assert {d.health_reason for d in inv.devices} == {"node quarantined (NVSentinel fault quarantine)"}


@pytest.mark.django_db
def test_fault_quarantine_reaches_the_engine_as_a_health_cordon():
    cluster = ClusterFactory()
    inventory_import(cluster=cluster, objects=[quarantined_node()], now=T0)
    (node,), _ = engine_nodes(cluster)
    assert node.unschedulable
    assert (node.capacity["nvidia.com/gpu"], node.allocatable["nvidia.com/gpu"]) == (8, 0)
    assert "NVSentinel fault quarantine" in node.health_reason
    assert node.health_gap_by == "the node's own health reports"  # NVSentinel's cordon, not the portal's checks
    inventory_import(cluster=cluster, objects=[quarantined_node(cordoned=False)], now=T0 + timedelta(minutes=5))
    (node,), _ = engine_nodes(cluster)
    assert node.allocatable["nvidia.com/gpu"] == 8
