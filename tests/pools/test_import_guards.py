"""Import guards: a complete listing that would empty the pool or remove a large share of it is refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from pools.inventory.service import MassRemovalRefused, inventory_import
from pools.models import Allocation, Device, Node
from tests.factories import AllocationFactory, ClusterFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def node(name: str, gpus: int = 8) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "status": {"capacity": {"nvidia.com/gpu": str(gpus)}, "allocatable": {"nvidia.com/gpu": str(gpus)}},
    }


def pool(n: int) -> list[dict]:
    return [node(f"gpu-{i:02d}") for i in range(n)]


@pytest.fixture
def seeded():
    cluster = ClusterFactory(name="sim")
    inventory_import(cluster=cluster, objects=pool(10), now=T0)
    AllocationFactory(device=Device.objects.get(node__name="gpu-00", key="nvidia.com/gpu-0"))
    return cluster


def snapshot():
    return (
        sorted(Node.objects.values_list("name", "gone_at", "last_seen_at")),
        sorted(Device.objects.values_list("node__name", "key", "gone_at", "health")),
        Allocation.objects.filter(ended_at__isnull=True).count(),
    )


EMPTY_LISTINGS = {
    "empty file": "",
    "comments only": "# kubectl get nodes -o yaml\n# (nothing)\n",
    "empty List": "apiVersion: v1\nkind: List\nitems: []\n",
    "only a Pod": "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: []}\n",
}


@pytest.mark.parametrize("text", EMPTY_LISTINGS.values(), ids=EMPTY_LISTINGS.keys())
def test_complete_listing_without_nodes_is_refused_exit_2_nothing_changed(seeded, tmp_path, text):
    path = tmp_path / "nodes.yaml"
    path.write_text(text)
    before = snapshot()
    with pytest.raises(CommandError) as caught:
        call_command("import_inventory", str(path), "--cluster", "sim", stdout=StringIO())
    assert caught.value.returncode == 2
    assert "holds no Node" in str(caught.value)
    assert "would mark all 10 nodes gone" in str(caught.value)
    assert snapshot() == before


def test_listing_without_nodes_into_an_empty_pool_is_refused_too(tmp_path):
    ClusterFactory(name="sim")
    path = tmp_path / "empty.yaml"
    path.write_text("kind: List\nitems: []\n")
    with pytest.raises(CommandError) as caught:
        call_command("import_inventory", str(path), "--cluster", "sim", stdout=StringIO())
    assert caught.value.returncode == 2
    assert not Node.objects.exists()


def test_mass_removal_needs_the_flag(seeded, tmp_path, settings):
    path = tmp_path / "nodes.yaml"
    path.write_text(yaml.safe_dump({"kind": "List", "apiVersion": "v1", "items": pool(7)}))  # 3 of 10 gone
    before = snapshot()
    with pytest.raises(CommandError) as caught:
        call_command("import_inventory", str(path), "--cluster", "sim", stdout=StringIO())
    assert caught.value.returncode == 2
    assert "would mark 3 of 10 nodes gone" in str(caught.value)
    assert "INVENTORY_MAX_REMOVAL_SHARE=20%" in str(caught.value)
    assert snapshot() == before

    settings.INVENTORY_MAX_REMOVAL_SHARE = 0.3  # the share is a setting
    out = StringIO()
    call_command("import_inventory", str(path), "--cluster", "sim", stdout=out)
    assert "3 gone" in out.getvalue()


def test_allow_mass_removal_accepts_even_an_empty_listing(seeded, tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("kind: List\nitems: []\n")
    out = StringIO()
    call_command("import_inventory", str(path), "--cluster", "sim", "--allow-mass-removal", stdout=out)
    assert "10 gone" in out.getvalue()
    assert not Node.objects.filter(gone_at__isnull=True).exists()


def test_small_removals_pass_and_one_node_may_always_go():
    cluster = ClusterFactory()
    inventory_import(cluster=cluster, objects=pool(10), now=T0)
    report = inventory_import(cluster=cluster, objects=pool(8), now=T0 + timedelta(hours=1))  # 20 %: allowed
    assert report.nodes.gone == 2
    small = ClusterFactory()
    inventory_import(cluster=small, objects=pool(3), now=T0)
    assert inventory_import(cluster=small, objects=pool(2), now=T0 + timedelta(hours=1)).nodes.gone == 1
    with pytest.raises(MassRemovalRefused):
        inventory_import(cluster=small, objects=[node("other")], now=T0 + timedelta(hours=2))


def test_partial_listing_is_not_guarded():
    cluster = ClusterFactory()
    inventory_import(cluster=cluster, objects=pool(10), now=T0)
    report = inventory_import(cluster=cluster, objects=[], now=T0, complete=False)
    assert not report.changed
