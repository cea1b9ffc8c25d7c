"""The import_inventory and inventory commands: output, JSON shape, exit status 2 on bad input."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from pools.models import Cluster, Device, Node
from tests.factories import (
    AllocationFactory,
    ClusterFactory,
    JobFactory,
    QuotaLineFactory,
    ResourceClassFactory,
    ResourceFlavorFactory,
    TeamFactory,
)

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).parent / "fixtures"
VKS = "dra/examples/vks_resourceslices_gpu.nvidia.com_compute-domain_v25.12.0.yaml"


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_import_creates_default_cluster_and_says_so():
    Cluster.objects.all().delete()
    out = run("import_inventory", str(FIXTURES / "amd-mi300x-node.yaml"))
    assert "Cluster default (created: no cluster existed)" in out
    assert "Nodes:   3 created, 0 updated, 0 unchanged, 0 gone" in out
    assert "Devices: 84 created" in out
    assert "gpu-7/cpx_nps4-7: new -> unhealthy (node allocatable 62 < capacity 64" in out
    again = run("import_inventory", str(FIXTURES / "amd-mi300x-node.yaml"))
    assert "Cluster default (the only simulated cluster)" in again
    assert "Nothing changed." in again


def test_import_uses_the_only_simulated_cluster(reference):
    ClusterFactory(name="sim", backend=Cluster.Backend.SIMULATED)
    ClusterFactory(name="prod", backend=Cluster.Backend.KUBERNETES)
    out = run("import_inventory", str(reference / VKS))
    assert "Cluster sim (the only simulated cluster)" in out
    assert "Ignored: 8 compute-domain.nvidia.com device" in out
    assert Node.objects.filter(cluster__name="sim").count() == 4


def test_import_into_named_cluster_partial_json(reference):
    ClusterFactory(name="prod", backend=Cluster.Backend.KUBERNETES)
    out = run("import_inventory", str(reference / VKS), "--cluster", "prod", "--partial", "--json")
    report = json.loads(out)
    assert report["cluster"] == "prod"
    assert report["complete"] is False
    assert report["nodes"]["created"] == 4
    assert report["devices"] == {"created": 4, "updated": 0, "unchanged": 0, "gone": 0, "returned": 0}


def test_import_bad_file_exits_2_naming_the_field():
    ClusterFactory(name="sim")
    with pytest.raises(CommandError) as exc:
        call_command("import_inventory", str(FIXTURES / "bad-node.yaml"))
    assert exc.value.returncode == 2
    assert 'Node "gpu-1": status.capacity["nvidia.com/gpu"]: invalid quantity "eight"' in str(exc.value)
    assert str(exc.value).startswith("Nothing imported.")
    assert not Node.objects.exists()


def test_import_unknown_cluster_or_missing_file_exits_2(tmp_path):
    with pytest.raises(CommandError, match='cluster "nope": no such cluster') as exc:
        call_command("import_inventory", str(FIXTURES / "amd-mi300x-node.yaml"), "--cluster", "nope")
    assert exc.value.returncode == 2
    with pytest.raises(CommandError, match="cannot read") as exc:
        call_command("import_inventory", str(tmp_path / "missing.yaml"))
    assert exc.value.returncode == 2


@pytest.fixture
def pool():
    """The AMD fixture imported, a class and a quota over its flavor, one card held by a job."""
    cluster = ClusterFactory(name="sim")
    flavor = ResourceFlavorFactory(name="mi300x", node_labels={"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"})
    run("import_inventory", str(FIXTURES / "amd-mi300x-node.yaml"), "--cluster", "sim")
    rc = ResourceClassFactory(slug="mi300x", resource_name="amd.com/gpu", flavors=[flavor])
    team = TeamFactory(slug="vision")
    QuotaLineFactory(team_quota__team=team, team_quota__cluster=cluster, flavor=flavor, resource_name="amd.com/gpu")
    job = JobFactory(team=team, name="train-1", resource_class=rc, cluster=cluster)
    AllocationFactory(job=job, device=Device.objects.get(node__name="mi300x-01", key="amd.com/gpu-0"))
    return cluster


def test_inventory_json_shape(pool):
    data = json.loads(run("inventory", "--json", "--cluster", "sim"))
    assert set(data) == {"cluster", "devices", "totals"}
    first = next(d for d in data["devices"] if (d["node"], d["key"]) == ("mi300x-01", "amd.com/gpu-0"))
    assert first == {
        "cluster": "sim",
        "node": "mi300x-01",
        "key": "amd.com/gpu-0",
        "vendor": "amd",
        "product": "AMD_Instinct_MI300X_OAM",
        "kind": "full",
        "resourceName": "amd.com/gpu",
        "parent": None,
        "memory": "192Gi",
        "health": "healthy",
        "healthReason": None,
        "source": "device-plugin",
        "flavor": "mi300x",
        "allocatedTo": "vision/train-1",
    }
    part = next(d for d in data["devices"] if d["key"] == "gpu-7/cpx_nps4-7")
    assert (part["kind"], part["parent"], part["health"], part["memory"]) == ("mig", "gpu-7", "unhealthy", None)
    assert len(data["devices"]) == 84
    (cls,) = data["totals"]["classes"]
    assert cls == {
        "class": "mi300x",
        "name": cls["name"],
        "resourceName": "amd.com/gpu",
        "flavors": ["mi300x"],
        "exists": 8,
        "inUse": 1,
        "available": 7,
        "unhealthy": 0,
        "cordoned": 0,
        "teamsAllowed": ["vision"],
    }
    flavors = {(f["flavor"], f["resourceName"]): f for f in data["totals"]["flavors"]}
    assert flavors[("mi300x", "amd.com/gpu")]["inUse"] == 1
    assert flavors[("mi300x", "amd.com/cpx_nps4")]["unhealthy"] == 2
    assert flavors[(None, "amd.com/gpu")]["unhealthy"] == 4  # the legacy node is NotReady


def test_inventory_table(pool):
    out = run("inventory")
    assert out.splitlines()[0].split() == [
        "NODE",
        "DEVICE",
        "VENDOR",
        "PRODUCT",
        "KIND",
        "RESOURCE",
        "MEMORY",
        "HEALTH",
        "ALLOCATED",
        "TO",
    ]
    assert any(
        line.split()[:2] == ["mi300x-01", "amd.com/gpu-0"] and line.endswith("vision/train-1")
        for line in out.splitlines()
    )
    assert "CLASS" in out
    assert "(no flavor)" in out


def test_inventory_unknown_cluster_exits_2():
    with pytest.raises(CommandError) as exc:
        call_command("inventory", "--cluster", "nope")
    assert exc.value.returncode == 2
