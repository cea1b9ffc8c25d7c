"""inventory_import: every reference sample into the database, idempotency, disappearance, atomicity, health."""

from __future__ import annotations

import copy
import re
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from pools.inventory.parse import load_file
from pools.inventory.records import InventoryError
from pools.inventory.service import inventory_import, inventory_import_files, inventory_import_into
from pools.models import Cluster, Device, HealthState, Node
from pools.selectors import flavor_capacity
from tests.factories import AllocationFactory, ClusterFactory, ResourceFlavorFactory
from tests.pools.fixtures.builders import excerpt_cases, excerpt_node, illustrative_mig_slice, label_dump_node

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).parent / "fixtures"
VKS = "dra/examples/vks_resourceslices_gpu.nvidia.com_compute-domain_v25.12.0.yaml"
OPENSHIFT = "dra/examples/openshift_resourceslice_t4_condensed.yaml"
T0 = timezone.now().replace(microsecond=0) - timedelta(days=1)


def case(reference, title_start):
    """One excerpt case as a Node object."""
    doc = next(c for c in excerpt_cases(reference) if str(c.get("case", "")).startswith(title_start))
    name = re.sub(r"[^a-z0-9-]+", "", title_start.split(",")[0].lower().replace(" ", "-"))[:40]  # a valid node name
    return excerpt_node(doc, name=name)


def samples(reference) -> dict[str, list]:
    """Every reference sample as importable objects, by name."""
    return {
        "xid-unhealthy": [case(reference, "device-plugin marked")],
        "full-cards": [case(reference, "DGX H100 (8 GPUs), MIG disabled")],
        "time-slicing": [case(reference, "time-slicing, renameByDefault=false")],
        "time-slicing-renamed": [case(reference, "time-slicing, renameByDefault=true")],
        "mig-mixed-excerpt": [case(reference, "DGX H100 (8 GPUs), mig strategy mixed")],
        "mig-single-excerpt": [case(reference, "DGX H100 (8 GPUs) re-configured")],
        "mig-mixed-composite": [excerpt_cases(reference)[-1]],
        "mig-single-labels": [
            label_dump_node(
                reference, "gpu-operator-docs_mig-node-labels.json", name="s4124-0073", capacity={"nvidia.com/gpu": "1"}
            )
        ],
        "vgpu-labels": [
            label_dump_node(
                reference, "vks_grid-a100-40c_vgpu_node-labels.json", name="vgpu", capacity={"nvidia.com/gpu": "1"}
            )
        ],
        "dra-vks": load_file(reference / VKS),
        "dra-openshift-t4": load_file(reference / OPENSHIFT),
        "dra-mig-illustrative": [illustrative_mig_slice(reference)],
        "amd": load_file(FIXTURES / "amd-mi300x-node.yaml"),
        "other-vendors": load_file(FIXTURES / "other-vendors.yaml"),
    }


#: (nodes, device rows, schedulable units, unhealthy rows) per sample.
EXPECTED = {
    "xid-unhealthy": (1, 7, 7, 0),
    "full-cards": (1, 8, 8, 0),
    "time-slicing": (1, 20, 16, 0),
    "time-slicing-renamed": (1, 20, 16, 0),
    "mig-mixed-excerpt": (1, 32, 32, 0),
    "mig-single-excerpt": (1, 16, 16, 0),
    "mig-mixed-composite": (1, 5, 4, 0),
    "mig-single-labels": (1, 1, 1, 0),
    "vgpu-labels": (1, 1, 1, 0),
    "dra-vks": (4, 4, 4, 0),
    "dra-openshift-t4": (1, 2, 2, 0),
    "dra-mig-illustrative": (1, 2, 1, 0),
    "amd": (3, 8 + 72 + 4, 8 + 64 + 4, 2),
    "other-vendors": (6, 8 + 48 + 4 + 1 + 2 + 1, 64, 0),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_reference_sample_imports(reference, name):
    cluster = ClusterFactory()
    report = inventory_import(cluster=cluster, objects=samples(reference)[name], now=T0)
    nodes, rows, schedulable, unhealthy = EXPECTED[name]
    devices = Device.objects.filter(node__cluster=cluster)
    assert (report.nodes.created, report.devices.created) == (nodes, rows)
    assert Node.objects.filter(cluster=cluster).count() == nodes
    assert devices.exclude(resource_name="").count() == schedulable
    assert devices.filter(health=HealthState.UNHEALTHY).count() == unhealthy
    assert all(d.parent is None or d.parent.node_id == d.node_id for d in devices.select_related("parent"))
    again = inventory_import(cluster=cluster, objects=samples(reference)[name], now=T0)
    assert not again.changed
    assert (again.nodes.unchanged, again.devices.unchanged) == (nodes, rows)


def test_xid_allocatable_drop_is_reported_and_stored(reference):
    cluster = ClusterFactory()
    node = case(reference, "device-plugin marked")
    node["status"]["capacity"]["nvidia.com/gpu"] = "8"
    report = inventory_import(cluster=cluster, objects=[node], now=T0)
    (change,) = report.health_changes
    assert (change.key, change.before, change.after) == ("nvidia.com/gpu-7", None, "unhealthy")
    bad = Device.objects.get(key="nvidia.com/gpu-7")
    assert bad.health_reason == "node allocatable 7 < capacity 8 (device plugin marked devices unhealthy)"
    assert bad.health_changed_at == T0
    stored = Node.objects.get(cluster=cluster)
    assert stored.capacity["nvidia.com/gpu"] == "8"
    assert stored.allocatable["nvidia.com/gpu"] == "7"

    node["status"]["allocatable"]["nvidia.com/gpu"] = "8"  # the plugin restarted: the card is back
    report = inventory_import(cluster=cluster, objects=[node], now=T0 + timedelta(minutes=5))
    assert [(c.key, c.before, c.after) for c in report.health_changes] == [("nvidia.com/gpu-7", "unhealthy", "healthy")]
    bad.refresh_from_db()
    assert (bad.health, bad.health_reason) == ("healthy", "")


def test_mig_parents_are_linked_in_the_database(reference):
    cluster = ClusterFactory()
    inventory_import(cluster=cluster, objects=[excerpt_cases(reference)[-1]], now=T0)
    card = Device.objects.get(key="gpu-0")
    assert card.resource_name == ""
    assert not card.schedulable
    assert sorted(card.children.values_list("resource_name", flat=True)) == [
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-2g.20gb",
        "nvidia.com/mig-3g.40gb",
    ]
    inventory_import(cluster=cluster, objects=[illustrative_mig_slice(reference)], now=T0, complete=False)
    mig = Device.objects.get(key="MIG-9d14fb21-4ae1-546f-a636-011582899c39")
    assert mig.parent.uuid == "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4"
    assert (mig.source, mig.dra_driver, mig.dra_device) == ("dra", "gpu.nvidia.com", "gpu-0-mig-1g10gb-19-0")


def test_flavor_is_assigned_by_labels(reference):
    h100 = ResourceFlavorFactory(name="h100", node_labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    ResourceFlavorFactory(
        name="h100-mixed",
        node_labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/mig.strategy": "mixed"},
    )
    cluster = ClusterFactory()
    node = copy.deepcopy(excerpt_cases(reference)[-1])
    inventory_import(cluster=cluster, objects=[node], now=T0)
    assert Node.objects.get(cluster=cluster).flavor.name == "h100-mixed"  # the most specific match
    node["metadata"]["labels"]["nvidia.com/mig.strategy"] = "single"
    report = inventory_import(cluster=cluster, objects=[node], now=T0)
    assert report.nodes.updated == 1
    assert Node.objects.get(cluster=cluster).flavor == h100


# --- idempotency and efficiency -------------------------------------------------------------------------------


def _writes(queries) -> list[str]:
    return [q["sql"] for q in queries if q["sql"].split()[0].upper() in ("INSERT", "UPDATE", "DELETE")]


def _h100_nodes(n: int) -> list[dict]:
    """n simple 8-GPU nodes."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"h100-{i:04d}", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
            "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}},
        }
        for i in range(n)
    ]


def test_second_run_writes_nothing(reference):
    cluster = ClusterFactory()
    objects = [
        obj for name in ("amd", "mig-mixed-composite", "time-slicing", "dra-vks") for obj in samples(reference)[name]
    ]
    inventory_import(cluster=cluster, objects=objects, now=T0)
    with CaptureQueriesContext(connection) as ctx:
        report = inventory_import(cluster=cluster, objects=objects, now=T0)
    assert _writes(ctx.captured_queries) == []
    assert not report.changed
    assert report.nodes.text() == "9 unchanged".join(["0 created, 0 updated, ", ", 0 gone"])


def test_later_run_only_advances_last_seen_in_set_based_updates():
    cluster = ClusterFactory()
    inventory_import(cluster=cluster, objects=_h100_nodes(3), now=T0)
    later = T0 + timedelta(minutes=10)
    with CaptureQueriesContext(connection) as ctx:
        report = inventory_import(cluster=cluster, objects=_h100_nodes(3), now=later)
    assert not report.changed
    assert len(_writes(ctx.captured_queries)) == 2  # one UPDATE for nodes, one for devices
    assert set(Node.objects.values_list("last_seen_at", flat=True)) == {later}
    assert set(Device.objects.values_list("last_seen_at", flat=True)) == {later}
    assert set(Device.objects.values_list("first_seen_at", flat=True)) == {T0}


def test_no_per_device_queries(django_assert_max_num_queries):
    """480 devices take a few bulk statements (SQLite caps rows per INSERT); a re-run takes a constant number."""
    small, large = ClusterFactory(), ClusterFactory()
    with django_assert_max_num_queries(40):
        inventory_import(cluster=large, objects=_h100_nodes(60), now=T0)
    assert Device.objects.filter(node__cluster=large).count() == 480
    inventory_import(cluster=small, objects=_h100_nodes(2), now=T0)
    with CaptureQueriesContext(connection) as ctx:
        inventory_import(cluster=small, objects=_h100_nodes(2), now=T0 + timedelta(1))
    with django_assert_max_num_queries(len(ctx.captured_queries)):
        inventory_import(cluster=large, objects=_h100_nodes(60), now=T0 + timedelta(1))


# --- disappearance and return ----------------------------------------------------------------------------------


def test_node_missing_from_a_complete_listing_is_gone_and_leaves_capacity():
    flavor = ResourceFlavorFactory(name="h100", node_labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    cluster = ClusterFactory()
    inventory_import(cluster=cluster, objects=_h100_nodes(2), now=T0)
    held = Device.objects.get(node__name="h100-0001", key="nvidia.com/gpu-0")
    AllocationFactory(device=held)
    later = T0 + timedelta(hours=1)
    report = inventory_import(cluster=cluster, objects=_h100_nodes(1), now=later)
    assert (report.nodes.gone, report.devices.gone, report.orphaned_allocations) == (1, 8, 1)
    gone = Node.objects.get(name="h100-0001")
    assert gone.gone_at == later
    assert set(gone.devices.values_list("gone_at", flat=True)) == {later}
    assert not any(d.schedulable for d in gone.devices.all())
    (cap,) = [c for c in flavor_capacity(cluster=cluster) if c.flavor == flavor]
    assert cap.exists == 8
    assert Node.objects.filter(cluster=cluster).count() == 2  # never deleted

    back = T0 + timedelta(hours=2)
    report = inventory_import(cluster=cluster, objects=_h100_nodes(2), now=back)
    assert (report.nodes.returned, report.devices.returned) == (1, 8)
    gone.refresh_from_db()
    assert gone.gone_at is None
    assert gone.devices.filter(gone_at__isnull=True).count() == 8
    assert gone.first_seen_at == T0
    (cap,) = [c for c in flavor_capacity(cluster=cluster) if c.flavor == flavor]
    assert cap.exists == 16


def test_partial_import_leaves_other_nodes_alone():
    cluster = ClusterFactory()
    inventory_import(cluster=cluster, objects=_h100_nodes(3), now=T0)
    report = inventory_import(cluster=cluster, objects=_h100_nodes(1), now=T0, complete=False)
    assert report.nodes.gone == 0
    assert Node.objects.filter(cluster=cluster, gone_at__isnull=True).count() == 3


def test_other_clusters_are_untouched():
    a, b = ClusterFactory(), ClusterFactory()
    inventory_import(cluster=a, objects=_h100_nodes(2), now=T0)
    inventory_import(cluster=b, objects=_h100_nodes(1), now=T0)
    assert Node.objects.filter(cluster=a, gone_at__isnull=True).count() == 2


def test_device_vanishing_from_a_present_node_is_gone():
    cluster = ClusterFactory()
    nodes = _h100_nodes(1)
    inventory_import(cluster=cluster, objects=nodes, now=T0)
    nodes[0]["status"] = {"capacity": {"nvidia.com/gpu": "6"}, "allocatable": {"nvidia.com/gpu": "6"}}
    report = inventory_import(cluster=cluster, objects=nodes, now=T0 + timedelta(1))
    assert (report.nodes.updated, report.devices.gone, report.devices.unchanged) == (1, 2, 6)
    assert sorted(Device.objects.filter(gone_at__isnull=False).values_list("key", flat=True)) == [
        "nvidia.com/gpu-6",
        "nvidia.com/gpu-7",
    ]


def test_mig_reconfiguration_replaces_units(reference):
    """all-balanced → single 3g.40gb: the old units go, new ones come, the physical cards stay."""
    cluster = ClusterFactory()
    mixed = case(reference, "DGX H100 (8 GPUs), mig strategy mixed")
    mixed["metadata"]["labels"]["nvidia.com/gpu.count"] = "8"
    inventory_import(cluster=cluster, objects=[mixed], now=T0)
    single = case(reference, "DGX H100 (8 GPUs) re-configured")
    single["metadata"]["name"] = mixed["metadata"]["name"]
    single["metadata"]["labels"] |= {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb"}
    report = inventory_import(cluster=cluster, objects=[single], now=T0 + timedelta(1))
    present = Device.objects.filter(node__cluster=cluster, gone_at__isnull=True)
    assert Counter(present.values_list("resource_name", flat=True)) == {"": 8, "nvidia.com/gpu": 16}
    assert report.devices.gone == 32 - 8  # 3g.40gb units on gpu-N keep their keys: gpu-N/mig-3g.40gb-0


def test_dra_slices_after_node_objects_do_not_double_count(reference):
    cluster = ClusterFactory()
    name = "test-ai-0-node-pool-40c-kn48j-7n6h9-gvhpn"
    node = label_dump_node(
        reference, "vks_grid-a100-40c_vgpu_node-labels.json", name=name, capacity={"nvidia.com/gpu": "1"}
    )
    inventory_import(cluster=cluster, objects=[node], now=T0)
    assert Device.objects.get(node__name=name).source == "device-plugin"
    report = inventory_import(cluster=cluster, objects=load_file(reference / VKS), now=T0, complete=False)
    present = Device.objects.filter(node__name=name, gone_at__isnull=True)
    assert [(d.source, d.uuid) for d in present] == [("dra", "GPU-b65409f1-9131-4932-bbf9-065400000000")]
    assert report.devices.gone == 1
    stored = Node.objects.get(name=name)
    assert stored.labels["nvidia.com/gpu.product"] == "GRID-A100-40C"  # a slice-only import keeps the node's fields


# --- health and the repair workflow ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "source_unhealthy", "expected"),
    [
        (HealthState.QUARANTINED, False, HealthState.QUARANTINED),
        (HealthState.VALIDATING, False, HealthState.VALIDATING),
        (HealthState.RETIRED, False, HealthState.RETIRED),
        (HealthState.DEGRADED, False, HealthState.DEGRADED),
        # The repair workflow keeps these out of the pool already; writing unhealthy over them would only flap
        # (the health sweep restores the workflow's state, see docs/health.md).
        (HealthState.QUARANTINED, True, HealthState.QUARANTINED),
        (HealthState.VALIDATING, True, HealthState.VALIDATING),
        (HealthState.RETIRED, True, HealthState.RETIRED),
    ],
)
def test_repair_states_survive_a_healthy_report(state, source_unhealthy, expected):
    cluster = ClusterFactory()
    nodes = _h100_nodes(1)
    inventory_import(cluster=cluster, objects=nodes, now=T0)
    Device.objects.filter(key="nvidia.com/gpu-7").update(health=state, health_reason="ticket 12")
    if source_unhealthy:
        nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] = "7"
    inventory_import(cluster=cluster, objects=nodes, now=T0 + timedelta(1))
    assert Device.objects.get(key="nvidia.com/gpu-7").health == expected


def test_unhealthy_from_another_observer_is_not_cleared():
    cluster = ClusterFactory()
    inventory_import(cluster=cluster, objects=_h100_nodes(1), now=T0)
    Device.objects.filter(key="nvidia.com/gpu-2").update(health=HealthState.UNHEALTHY, health_reason="DCGM: XID 79")
    report = inventory_import(cluster=cluster, objects=_h100_nodes(1), now=T0)
    assert not report.changed
    assert Device.objects.get(key="nvidia.com/gpu-2").health_reason == "DCGM: XID 79"


# --- atomicity and files ---------------------------------------------------------------------------------------


def _snapshot():
    return (
        sorted(Node.objects.values_list("name", "gone_at", "last_seen_at")),
        sorted(Device.objects.values_list("node__name", "key", "gone_at", "health", "last_seen_at")),
    )


def test_bad_object_in_the_middle_changes_nothing(tmp_path):
    cluster = ClusterFactory()
    inventory_import(cluster=cluster, objects=_h100_nodes(2), now=T0)
    before = _snapshot()
    with pytest.raises(
        InventoryError, match=r'Node "gpu-1": status\.capacity\["nvidia\.com/gpu"\]: invalid quantity "eight"'
    ):
        inventory_import_files(cluster=cluster, paths=[FIXTURES / "bad-node.yaml"], now=T0 + timedelta(1))
    assert _snapshot() == before


def test_bad_second_file_changes_nothing(reference, tmp_path):
    cluster = ClusterFactory()
    bad = tmp_path / "broken.json"
    bad.write_text('{"kind": "Node", "metadata": {"name": "x"}, "status": {"capacity": {"amd.com/gpu": "-1"}}}')
    with pytest.raises(InventoryError, match=r'broken\.json: Node "x": status\.capacity\["amd\.com/gpu"\]'):
        inventory_import_files(cluster=cluster, paths=[reference / OPENSHIFT, bad])
    assert Node.objects.count() == 0


def test_import_into_default_cluster_is_rolled_back_on_error():
    Cluster.objects.all().delete()
    with pytest.raises(InventoryError):
        inventory_import_into(cluster_name=None, paths=[FIXTURES / "bad-node.yaml"])
    assert not Cluster.objects.exists()
    choice, report = inventory_import_into(cluster_name=None, paths=[FIXTURES / "amd-mi300x-node.yaml"])
    assert (choice.cluster.name, choice.note) == ("default", "created: no cluster existed")
    assert report.nodes.created == 3


def test_naive_now_is_refused():
    with pytest.raises(ValueError, match="timezone-aware"):
        inventory_import(cluster=ClusterFactory(), objects=[], now=timezone.now().replace(tzinfo=None))


def test_time_sliced_mig_three_levels():
    """time-slicing-config-fine: mig-1g.5gb replicas 2 with renameByDefault; card → MIG device → replica."""
    node = {
        "kind": "Node",
        "metadata": {
            "name": "a100-40gb",
            "labels": {
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                "nvidia.com/gpu.count": "1",
                "nvidia.com/mig.strategy": "mixed",
                "nvidia.com/gpu.sharing-strategy": "time-slicing",
                "nvidia.com/mig-1g.5gb.replicas": "2",
                "nvidia.com/mig-1g.5gb.memory": "4864",
            },
        },
        "status": {"capacity": {"nvidia.com/mig-1g.5gb.shared": "14"}},
    }
    cluster = ClusterFactory()
    inventory_import(cluster=cluster, objects=[node], now=T0)
    replica = Device.objects.select_related("parent__parent").get(key="gpu-0/mig-1g.5gb-6/replica-1")
    assert (replica.kind, replica.resource_name, replica.replica_index) == ("shared", "nvidia.com/mig-1g.5gb.shared", 1)
    assert (replica.parent.kind, replica.parent.resource_name, replica.parent.mig_profile) == ("mig", "", "1g.5gb")
    assert replica.parent.parent.key == "gpu-0"
    assert Device.objects.exclude(resource_name="").count() == 14
