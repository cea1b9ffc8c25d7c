"""The testbed as a cluster of the portal: its inventory, and the queue configuration Kueue accepts."""

from __future__ import annotations

import pytest

from clusters.models import KubeConfigObject
from pools.models import Device, Node
from queues.models import Cohort, PriorityClass, QuotaLine
from tests.realcluster.conftest import NODES

pytestmark = pytest.mark.django_db


def _condition(obj: dict, kind: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def test_inventory_is_imported_from_the_kwok_nodes(world, cluster):
    nodes = Node.objects.filter(cluster=cluster, name__startswith="gpu-")
    assert nodes.count() == NODES
    assert all(n.ready and not n.unschedulable for n in nodes)
    assert Device.objects.filter(node__in=nodes, resource_name="nvidia.com/gpu").count() == 8 * NODES
    node = nodes.get(name="gpu-002")
    assert node.labels["cloud.provider.com/topology-rack"] == "rack-1"
    assert node.labels["cloud.provider.com/topology-block"] == "block-0"
    device = Device.objects.filter(node=node).first()
    assert "H100" in device.product
    assert node.flavor == world.flavor


def test_kueue_accepts_the_pushed_configuration(world, kubectl):
    root = Cohort.objects.create(name=f"{world.prefix}-org")
    research = Cohort.objects.create(name=f"{world.prefix}-research", parent=root, fair_weight=2)
    QuotaLine.objects.create(cohort=root, flavor=world.flavor, resource_name="nvidia.com/gpu", nominal="8")
    world.quota.cohort = research
    world.quota.reclaim_within_cohort = "Any"
    world.quota.borrow_within_cohort = "LowerPriority"
    world.quota.save()
    world.add_team("nlp", gpus=8, cohort=research, borrowing_limit=8, lending_limit=4)
    PriorityClass.objects.create(name=f"{world.prefix}-urgent", value=1000, description="Deadlines")

    report = world.push()
    assert report.errors == []
    assert report.conflicts == []
    assert report.drifted == []

    for name in (f"{world.prefix}-vision", f"{world.prefix}-nlp"):
        cq = kubectl.get("ClusterQueue", name)
        assert _condition(cq, "Active").get("status") == "True", cq.get("status")
        assert cq["spec"]["cohortName"] == research.name
        lq = kubectl.get("LocalQueue", "main", name)
        assert _condition(lq, "Active").get("status") == "True", lq.get("status")
    assert kubectl.get("Cohort", research.name)["spec"]["parentName"] == root.name
    assert kubectl.get("WorkloadPriorityClass", f"{world.prefix}-urgent")["value"] == 1000

    # Kueue's webhooks default fields the portal does not set; the portal's next push must not call that drift
    again = world.push()
    assert (again.created, again.updated, again.drifted, again.errors) == ([], [], [], [])
    rows = KubeConfigObject.objects.filter(cluster=world.cluster)
    assert set(rows.values_list("status", flat=True)) == {KubeConfigObject.Status.IN_SYNC}


def test_a_lending_limit_above_the_nominal_is_pushed_as_the_nominal_and_kueue_accepts_it(world, kubectl):
    """Kueue's webhook refuses a lendingLimit above nominalQuota. A row written behind the forms' back (they refuse it
    too) is pushed with the lending limit brought down to the quota in force (queues.guarantees), so the real Kueue
    accepts the ClusterQueue instead of the push failing on it."""
    world.quota.cohort = Cohort.objects.create(name=f"{world.prefix}-org")
    world.quota.save()
    QuotaLine.objects.filter(team_quota=world.quota, resource_name="nvidia.com/gpu").update(lending_limit="32")
    report = world.push()
    assert report.errors == []
    row = KubeConfigObject.objects.get(cluster=world.cluster, kind="ClusterQueue", name=world.quota.cluster_queue_name)
    assert row.status == KubeConfigObject.Status.IN_SYNC
    cq = kubectl.get("ClusterQueue", world.quota.cluster_queue_name)
    gpu = next(
        r
        for g in cq["spec"]["resourceGroups"]
        for f in g["flavors"]
        for r in f["resources"]
        if r["name"] == "nvidia.com/gpu"
    )
    assert (gpu["nominalQuota"], gpu["lendingLimit"]) == ("16", "16")
