"""Which flavor a node belongs to: Kueue's meaning, the same as the engine's (a flavor without labels fits every node)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from django.utils import timezone

from pools.inventory.service import inventory_import
from pools.matching import flavor_matches, match_flavor
from pools.models import Node
from queues.engine.model import Node as EngineNode
from queues.engine.model import ResourceFlavor as EngineFlavor
from queues.engine.placement import NodePool
from tests.factories import ClusterFactory, ResourceFlavorFactory

H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
L4 = {"nvidia.com/gpu.product": "NVIDIA-L4"}


@dataclass
class Flavor:
    name: str
    node_labels: dict = field(default_factory=dict)


def test_flavor_matches_a_flavor_without_labels_matches_every_node():
    assert flavor_matches(H100, {})
    assert flavor_matches({}, {})
    assert flavor_matches(H100, H100)
    assert not flavor_matches(L4, H100)
    assert not flavor_matches({}, H100)


def test_match_flavor_prefers_the_most_specific_and_falls_back_to_the_catch_all():
    default, h100 = Flavor("default"), Flavor("h100", H100)
    assert match_flavor(H100, [default, h100]) is h100
    assert match_flavor(L4, [default, h100]) is default
    assert match_flavor({}, [default]) is default
    assert match_flavor(L4, [h100]) is None


def test_match_flavor_agrees_with_the_engine():
    """The pool page's "nodes of this flavor" is the set of nodes the engine places the flavor's pods on."""
    nodes = [
        EngineNode(name="h", labels=H100, allocatable={"nvidia.com/gpu": 8}),
        EngineNode(name="l", labels=L4, allocatable={"nvidia.com/gpu": 1}),
        EngineNode(name="bare", labels={}, allocatable={"cpu": 4000}),
    ]
    pool = NodePool(nodes)
    for flavor in (EngineFlavor(name="default"), EngineFlavor(name="h100", node_labels=H100)):
        engine_side = {n.name for n in pool.flavor_nodes(flavor.node_labels)}
        pool_side = {n.name for n in nodes if flavor_matches(n.labels, flavor.node_labels)}
        assert pool_side == engine_side


@pytest.mark.django_db
def test_inventory_import_puts_unmatched_nodes_in_the_flavor_without_labels():
    default = ResourceFlavorFactory(name="default", node_labels={})
    h100 = ResourceFlavorFactory(name="h100", node_labels=H100)
    cluster = ClusterFactory()
    objects = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "status": {"capacity": {"nvidia.com/gpu": "1"}, "allocatable": {"nvidia.com/gpu": "1"}},
        }
        for name, labels in (("h100-0", H100), ("l4-0", L4))
    ]
    inventory_import(cluster=cluster, objects=objects, now=timezone.now())
    flavors = {n.name: n.flavor for n in Node.objects.filter(cluster=cluster)}
    assert flavors == {"h100-0": h100, "l4-0": default}
