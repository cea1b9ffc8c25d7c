"""ClusterQueue resourceGroups as Kueue accepts them: each resource and each flavor in exactly one group."""

from __future__ import annotations

import pytest

from clusters.kube_sync.config import kube_config_push
from clusters.kube_sync.manifests import desired_config
from queues.models import QuotaLine
from tests.factories import ResourceFlavorFactory

pytestmark = pytest.mark.django_db


def _groups(cluster, name: str) -> list[dict]:
    cq = next(o for o in desired_config(cluster) if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == name)
    return cq["spec"]["resourceGroups"]


def _assert_kueue_group_rules(groups: list[dict]) -> None:
    """The ClusterQueue webhook's rules: a resource and a flavor belong to one group; a flavor lists the group."""
    resources = [r for g in groups for r in g["coveredResources"]]
    assert len(resources) == len(set(resources))
    flavors = [f["name"] for g in groups for f in g["flavors"]]
    assert len(flavors) == len(set(flavors))
    for g in groups:
        for f in g["flavors"]:
            assert [r["name"] for r in f["resources"]] == g["coveredResources"]


def test_flavors_sharing_a_resource_share_a_group_with_zero_quota_where_they_have_no_line(
    portal, cluster, api, emulator
):
    # h100 has gpu, cpu and memory lines (the portal fixture); a second flavor only a GPU line, preferred second
    spot = ResourceFlavorFactory(name="h100-spot", node_labels={"pool": "spot"})
    QuotaLine.objects.create(
        team_quota=portal.quota, flavor=spot, resource_name="nvidia.com/gpu", nominal="8", flavor_order=1
    )
    groups = _groups(cluster, "vision")
    _assert_kueue_group_rules(groups)
    assert len(groups) == 1
    assert groups[0]["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    assert [f["name"] for f in groups[0]["flavors"]] == ["h100", "h100-spot"]
    assert groups[0]["flavors"][1]["resources"] == [
        {"name": "cpu", "nominalQuota": "0"},
        {"name": "memory", "nominalQuota": "0"},
        {"name": "nvidia.com/gpu", "nominalQuota": "8"},
    ]
    report = kube_config_push(cluster=cluster, api=api)
    assert report.errors == []
    assert emulator.rejected == []
    assert kube_config_push(cluster=cluster, api=api).drifted == []  # the live object reads back the same


def test_flavors_with_disjoint_resources_get_their_own_groups(portal, cluster):
    mig = ResourceFlavorFactory(name="a100-mig", node_labels={"pool": "mig"})
    QuotaLine.objects.create(
        team_quota=portal.quota, flavor=mig, resource_name="nvidia.com/mig-1g.10gb", nominal="14", flavor_order=1
    )
    groups = _groups(cluster, "vision")
    _assert_kueue_group_rules(groups)
    assert [g["coveredResources"] for g in groups] == [
        ["cpu", "memory", "nvidia.com/gpu"],
        ["nvidia.com/mig-1g.10gb"],
    ]


def test_groups_chain_through_a_shared_resource(portal, cluster):
    """a: gpu+cpu, b: cpu+mig, c: mig — one group, because a shares cpu with b and b shares mig with c."""
    a, b, c = (ResourceFlavorFactory(name=n, node_labels={"pool": n}) for n in ("fa", "fb", "fc"))
    QuotaLine.objects.filter(team_quota=portal.quota).delete()
    for i, (flavor, resources) in enumerate(((a, ("nvidia.com/gpu", "cpu")), (b, ("cpu", "mig")), (c, ("mig",)))):
        for r in resources:
            QuotaLine.objects.create(
                team_quota=portal.quota, flavor=flavor, resource_name=r, nominal="4", flavor_order=i
            )
    groups = _groups(cluster, "vision")
    _assert_kueue_group_rules(groups)
    assert len(groups) == 1
    assert groups[0]["coveredResources"] == ["cpu", "mig", "nvidia.com/gpu"]
