"""The demo pool: real Node objects, deterministic, installed idempotently through the inventory import."""

from __future__ import annotations

from collections import Counter

import pytest

from pools.demo import DEGRADED_NODE, demo_pool, demo_pool_install
from pools.inventory.parse import parse_inventory
from pools.models import Device, HealthState, Node, ResourceFlavor, Topology
from tests.factories import ClusterFactory


def test_demo_pool_is_deterministic_and_big_enough():
    pool = demo_pool()
    assert pool == demo_pool()
    inv = parse_inventory(pool.nodes)
    assert not inv.warnings
    assert len(inv.devices) >= 80
    units = Counter((d.vendor, d.kind, d.resource_name) for d in inv.devices if d.resource_name)
    assert units == {
        ("nvidia", "full", "nvidia.com/gpu"): 48,
        ("nvidia", "mig", "nvidia.com/mig-1g.10gb"): 32,
        ("nvidia", "mig", "nvidia.com/mig-2g.20gb"): 16,
        ("nvidia", "mig", "nvidia.com/mig-3g.40gb"): 16,
        ("nvidia", "shared", "nvidia.com/gpu.shared"): 32,
        ("amd", "full", "amd.com/gpu"): 16,
    }
    physical = [d for d in inv.devices if d.parent_key is None]
    assert len(physical) == 88


def test_demo_h100_topology_labels():
    h100 = [n for n in demo_pool().nodes if n["metadata"]["name"].startswith("h100-")]
    labels = [n["metadata"]["labels"] for n in h100]
    assert {lab["nvidia.com/gpu.product"] for lab in labels} == {"NVIDIA-H100-80GB-HBM3"}
    cliques = Counter((lab["topology.portal.example/rack"], lab["nvidia.com/gpu.clique"]) for lab in labels)
    assert len(cliques) == 2
    assert set(cliques.values()) == {3}
    assert all(lab["kubernetes.io/hostname"] == n["metadata"]["name"] for lab, n in zip(labels, h100, strict=True))
    degraded = next(n for n in h100 if n["metadata"]["name"] == DEGRADED_NODE)
    assert degraded["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert degraded["status"]["allocatable"]["nvidia.com/gpu"] == "7"


@pytest.mark.django_db
def test_demo_install_is_idempotent():
    cluster = ClusterFactory(name="demo")
    report = demo_pool_install(cluster=cluster)
    assert (report.nodes.created, report.devices.created) == (12, 184)
    assert Topology.objects.get(name="block-rack-host").levels[-1] == "kubernetes.io/hostname"
    flavors = dict(Node.objects.values_list("name", "flavor__name"))
    assert flavors["h100-r1-01"] == "h100"
    assert flavors["a100-mig-02"] == "a100-mig"
    assert flavors["l4-01"] == "l4-shared"
    assert flavors["mi300x-02"] == "mi300x"
    assert ResourceFlavor.objects.get(name="h100").topology.name == "block-rack-host"
    bad = Device.objects.get(node__name=DEGRADED_NODE, health=HealthState.UNHEALTHY)
    assert bad.key == "nvidia.com/gpu-7"
    again = demo_pool_install(cluster=cluster)
    assert not again.changed
    assert again.devices.unchanged == 184
