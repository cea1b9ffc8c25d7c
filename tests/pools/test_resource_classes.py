"""Resource classes: validation that explains itself, kinds never mixed, the many-classes warning."""

from __future__ import annotations

import pytest
from django.test import override_settings

from kernel.errors import ValidationFailed
from pools.models import Device, ResourceClass
from pools.services import ClassSpec, resource_class_check, resource_class_save
from tests.factories import DeviceFactory, NodeFactory, ResourceClassFactory, ResourceFlavorFactory, TopologyFactory

pytestmark = pytest.mark.django_db


def spec(**overrides) -> ClassSpec:
    """A valid dedicated H100 class over one flavor with nodes."""
    values = {
        "slug": "h100-train",
        "name": "H100 for training",
        "resource_name": "nvidia.com/gpu",
        "sharing": ResourceClass.Sharing.DEDICATED,
        "flavors": [],
        "allowed_counts": [1, 2, 4, 8],
    }
    values.update(overrides)
    return ClassSpec(**values)


@pytest.fixture
def h100():
    """An H100 flavor with one node of 8 full cards."""
    flavor = ResourceFlavorFactory(name="h100")
    node = NodeFactory(flavor=flavor)
    DeviceFactory.create_batch(8, node=node)
    return flavor


def test_resource_class_save_creates_class_with_ordered_flavors(h100):
    other = ResourceFlavorFactory(name="h100-spare")
    DeviceFactory(node=NodeFactory(flavor=other))
    rc, warnings = resource_class_save(spec=spec(flavors=[other, h100]))
    assert [link.flavor.name for link in rc.flavor_links.order_by("order")] == ["h100-spare", "h100"]
    assert rc.allowed_counts == [1, 2, 4, 8]
    assert warnings == []


@pytest.mark.parametrize(
    ("overrides", "field", "text"),
    [
        ({"allowed_counts": []}, "allowed_counts", "at least one count"),
        ({"allowed_counts": [1, 0]}, "allowed_counts", "at least 1"),
        ({"allowed_counts": [2, 2]}, "allowed_counts", "listed twice"),
        ({"cpu_per_device": "eight"}, "cpu_per_device", "invalid quantity 'eight'"),
        ({"memory_per_device": "0"}, "memory_per_device", "more than zero"),
        ({"resource_name": "not a name"}, "resource_name", "not a Kubernetes resource name"),
        ({"sharing": "mig"}, "resource_name", "MIG profile resource"),
        ({"resource_name": "nvidia.com/mig-1g.10gb"}, "sharing", "is a MIG profile"),
        ({"resource_name": "nvidia.com/gpu.shared"}, "sharing", "time-shared resource"),
        ({"topology_mode": "required"}, "topology_level", "both the topology mode"),
        ({"min_driver_version": "new"}, "min_driver_version", "not a version"),
        ({"flavors": None}, "flavors", "at least one flavor"),
        ({"idle_window_seconds": 60}, "idle_window_seconds", "between 300 s and 7 days"),
        ({"idle_window_seconds": 0}, "idle_window_seconds", "between 300 s and 7 days"),
    ],
)
def test_resource_class_check_names_field_and_limit(h100, overrides, field, text):
    values = {"flavors": [h100], **overrides}
    if values["flavors"] is None:
        values["flavors"] = []
    check = resource_class_check(spec(**values))
    assert field in check.errors, check.errors
    assert any(text in message for message in check.errors[field]), check.errors[field]


def test_resource_class_check_rejects_flavor_twice(h100):
    check = resource_class_check(spec(flavors=[h100, h100]))
    assert "flavor listed twice: h100" in check.errors["flavors"]


def test_resource_class_never_mixes_dedicated_and_time_shared():
    shared = ResourceFlavorFactory(name="l4-shared")
    DeviceFactory(node=NodeFactory(flavor=shared), kind=Device.Kind.SHARED, resource_name="nvidia.com/gpu")
    check = resource_class_check(spec(flavors=[shared]))
    assert any("time-shared replica" in m and "must not mix" in m for m in check.errors["flavors"])


def test_resource_class_flavor_without_the_resource_is_an_error(h100):
    amd = ResourceFlavorFactory(name="mi300x")
    DeviceFactory(node=NodeFactory(flavor=amd), resource_name="amd.com/gpu", vendor="amd")
    check = resource_class_check(spec(flavors=[h100, amd]))
    assert "flavor mi300x has nodes but none offers nvidia.com/gpu" in check.errors["flavors"]


def test_resource_class_flavor_without_nodes_is_a_warning():
    empty = ResourceFlavorFactory(name="b200")
    check = resource_class_check(spec(flavors=[empty]))
    assert not check.errors
    assert any("flavor b200 has no nodes yet" in w for w in check.warnings)


def test_resource_class_topology_level_must_exist_in_flavor_topology(h100):
    h100.topology = TopologyFactory(levels=["example.com/rack", "kubernetes.io/hostname"])
    h100.save()
    ok = resource_class_check(spec(flavors=[h100], topology_mode="required", topology_level="example.com/rack"))
    assert not ok.errors
    bad = resource_class_check(spec(flavors=[h100], topology_mode="required", topology_level="example.com/block"))
    assert "no topology level example.com/block" in bad.errors["topology_level"][0]


@override_settings(MAX_RESOURCE_CLASSES_ADVISED=3)
def test_resource_class_warns_past_the_advised_number(h100):
    ResourceClassFactory.create_batch(3)
    _, warnings = resource_class_save(spec=spec(flavors=[h100]))
    assert any("4 active classes (advised at most 3)" in w for w in warnings)


def test_resource_class_save_is_all_or_nothing(h100):
    with pytest.raises(ValidationFailed) as exc:
        resource_class_save(spec=spec(flavors=[h100], allowed_counts=[], cpu_per_device="x"))
    assert set(exc.value.errors) == {"allowed_counts", "cpu_per_device"}
    assert not ResourceClass.objects.filter(slug="h100-train").exists()


def test_resource_class_save_keeps_the_idle_window(h100):
    rc, _ = resource_class_save(spec=spec(flavors=[h100], idle_window_seconds=1800))
    assert rc.idle_window_seconds == 1800
    rc, _ = resource_class_save(spec=spec(flavors=[h100]), instance=rc)
    assert rc.idle_window_seconds is None  # empty: never


@pytest.mark.parametrize(
    ("overrides", "field", "text"),
    [
        ({"allowed_kinds": []}, "allowed_kinds", "at least one workload kind"),
        ({"allowed_kinds": ["batch", "notebook"]}, "allowed_kinds", "unknown workload kind(s) ['notebook']"),
        ({"allowed_kinds": ["session", "session"]}, "allowed_kinds", "listed twice"),
        ({"idle_window_seconds": 10}, "idle_window_seconds", "between 300 s and 7 days, got 10"),
        ({"idle_window_seconds": 8 * 86400}, "idle_window_seconds", "between 300 s and 7 days"),
    ],
)
def test_resource_class_check_refuses_bad_kinds_and_idle_window(h100, overrides, field, text):
    check = resource_class_check(spec(flavors=[h100], **overrides))
    assert any(text in m for m in check.errors[field]), check.errors


def test_resource_class_save_stores_kinds_in_their_order_and_the_idle_window(h100):
    rc, _ = resource_class_save(
        spec=spec(flavors=[h100], allowed_kinds=["session", "batch", "rayjob"], idle_window_seconds=1800)
    )
    rc.refresh_from_db()
    assert rc.allowed_kinds == ["batch", "rayjob", "session"]
    assert rc.idle_window_seconds == 1800
