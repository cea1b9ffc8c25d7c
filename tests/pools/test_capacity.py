"""Capacity selectors: exists / in use / available / unhealthy / cordoned per class, flavor and node."""

from __future__ import annotations

import pytest
from django.utils import timezone

from pools.models import Device, HealthState, ResourceClass
from pools.selectors import class_capacity, flavor_capacity, node_capacity_page
from tests.factories import (
    AllocationFactory,
    DeviceFactory,
    NodeFactory,
    QuotaLineFactory,
    ResourceClassFactory,
    ResourceFlavorFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool():
    """Two H100 nodes (one cordoned), one busy and one unhealthy card, and a time-shared L4 node."""
    h100 = ResourceFlavorFactory(name="h100")
    l4 = ResourceFlavorFactory(name="l4")
    n1 = NodeFactory(flavor=h100, name="h100-a")
    n2 = NodeFactory(flavor=h100, name="h100-b", unschedulable=True)
    cards = DeviceFactory.create_batch(8, node=n1)
    DeviceFactory.create_batch(8, node=n2)
    AllocationFactory(device=cards[0])
    cards[1].health = HealthState.UNHEALTHY
    cards[1].save()
    cards[2].health = HealthState.DEGRADED
    cards[2].save()
    gone = DeviceFactory(node=n1)
    gone.gone_at = timezone.now()
    gone.save()
    parent = DeviceFactory(node=NodeFactory(flavor=l4, name="l4-a"), partitioned=True)
    for i in range(4):
        DeviceFactory(
            node=parent.node,
            parent=parent,
            kind=Device.Kind.SHARED,
            resource_name="nvidia.com/gpu",
            key=f"gpu-0-replica-{i}",
            replica_index=i,
        )
    QuotaLineFactory(flavor=h100, team_quota__team__slug="vision")
    return h100, l4


def test_class_capacity_counts_each_unit_once(pool):
    h100, l4 = pool
    rc = ResourceClassFactory(flavors=[h100, l4])
    [cap] = class_capacity(classes=[rc])
    # 16 H100 cards present; the L4 replicas are time-shared and never count for a dedicated class.
    assert (cap.exists, cap.in_use, cap.unhealthy, cap.cordoned, cap.available) == (16, 1, 1, 8, 6)
    assert cap.teams_allowed == ["vision"]


def test_class_capacity_time_shared_class_sees_only_replicas(pool):
    _, l4 = pool
    rc = ResourceClassFactory(flavors=[l4], sharing=ResourceClass.Sharing.TIME_SHARED, allowed_counts=[1])
    [cap] = class_capacity(classes=[rc])
    assert (cap.exists, cap.available) == (4, 4)


def test_class_capacity_applies_minimum_driver_numerically(pool):
    h100, _ = pool
    new = ResourceClassFactory(flavors=[h100], min_driver_version="550.54.9")  # 550.54.15 is newer
    newer = ResourceClassFactory(flavors=[h100], min_driver_version="560")
    caps = {c.resource_class.pk: c for c in class_capacity(classes=[new, newer])}
    assert caps[new.pk].exists == 16
    assert caps[newer.pk].exists == 0


def test_flavor_capacity_groups_by_flavor_and_resource(pool):
    caps = {(c.flavor.name, c.resource_name): c for c in flavor_capacity()}
    assert caps[("h100", "nvidia.com/gpu")].exists == 16
    assert caps[("h100", "nvidia.com/gpu")].teams_allowed == ["vision"]
    assert caps[("l4", "nvidia.com/gpu")].exists == 4


def test_node_capacity_page_grid_states(pool):
    page = node_capacity_page()
    by_name = {n.node.name: n for n in page.nodes}
    a = by_name["h100-a"]
    states = sorted(cell.state for cell in a.devices)
    assert states.count("in-use") == 1
    assert states.count("unhealthy") == 1
    assert states.count("degraded") == 1
    assert (a.exists, a.in_use, a.unhealthy, a.available) == (8, 1, 1, 6)
    assert {c.state for c in by_name["h100-b"].devices} == {"cordoned"}
    [card] = by_name["l4-a"].devices
    assert len(card.children) == 4
    assert page.total_nodes == 3


def test_node_capacity_page_problems_only(pool):
    names = {n.node.name for n in node_capacity_page(problems_only=True).nodes}
    assert names == {"h100-a", "h100-b"}


def test_node_capacity_page_counts_matching_and_present_nodes(pool):
    h100, _ = pool
    page = node_capacity_page(flavor=h100, problems_only=True)
    assert (page.total_nodes, page.scope_nodes, page.narrowed) == (2, 3, True)
    page = node_capacity_page()
    assert (page.total_nodes, page.scope_nodes, page.narrowed) == (3, 3, False)


def test_capacity_narrows_with_the_node_filters(pool):
    h100, l4 = pool
    [cap] = flavor_capacity(flavor=l4)
    assert (cap.flavor, cap.exists) == (l4, 4)
    # problem nodes: h100-a (an unhealthy card) and h100-b (cordoned); the L4 node is fine
    caps = flavor_capacity(problems_only=True)
    assert [(c.flavor.name, c.exists, c.in_use, c.unhealthy, c.cordoned) for c in caps] == [("h100", 16, 1, 1, 8)]
    rc = ResourceClassFactory(flavors=[h100, l4])
    [cap] = class_capacity(classes=[rc], flavor=l4)
    assert cap.exists == 0  # the L4 node has only time-shared replicas


def test_flavor_capacity_for_a_class_counts_only_the_units_behind_it(pool):
    h100, l4 = pool
    shared = ResourceClassFactory(flavors=[l4], sharing=ResourceClass.Sharing.TIME_SHARED, allowed_counts=[1])
    assert [(c.flavor, c.exists) for c in flavor_capacity(resource_class=shared)] == [(l4, 4)]
    Device.objects.filter(node__name="h100-b").update(driver_version="535.104.05")
    new_driver = ResourceClassFactory(flavors=[h100], min_driver_version="550")
    [cap] = flavor_capacity(resource_class=new_driver)
    [class_cap] = class_capacity(classes=[new_driver], resource_class=new_driver)
    assert cap.exists == class_cap.exists == 8  # h100-b's older driver does not back the class
