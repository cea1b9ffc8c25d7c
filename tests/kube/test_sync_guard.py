"""The kube sync's import guard: a node list far shorter than what is known is suspect, the last good state stays."""

from __future__ import annotations

import pytest

from clusters.kube_sync.sync_inventory import SUSPECT_PREFIX
from pools.models import Allocation, Cluster, Node
from queues.diagnosis import cluster_staleness
from tests.kube.cluster import at, gpu_node

pytestmark = pytest.mark.django_db
NS = "team-vision"


def _running(world, kube, node: str = "gpu-a1"):
    job = world.submit("train")
    kube.create_workload(job.k8s_name, NS)
    kube.admit(job.k8s_name, NS, cluster_queue="vision", flavor="h100", nodes=[node], gpus_per_pod=8, when=at(1))
    kube.run_pods(job.k8s_name, NS, [node], when=at(2))
    world.sync()
    job = world.job(job)
    assert job.state == "running"
    return job


def _live(cluster) -> set[str]:
    return set(Node.objects.filter(cluster=cluster, gone_at__isnull=True).values_list("name", flat=True))


@pytest.mark.parametrize("full", [False, True], ids=["watch then relist", "full relist"])
def test_an_empty_node_list_keeps_the_pool_and_marks_the_sync_stale(world, kube, cluster, emulator, full):
    job = _running(world, kube)
    emulator.remove("Node", "gpu-a1")
    emulator.remove("Node", "gpu-a2")
    report = world.sync(full=full)
    assert report.suspect.startswith(SUSPECT_PREFIX)
    assert "would mark all 2 nodes gone" in report.suspect or "2 of 2" in report.suspect
    assert "SUSPECT" in report.text()
    assert _live(cluster) == {"gpu-a1", "gpu-a2"}
    job = world.job(job)
    assert job.state == "running"
    assert Allocation.objects.filter(job=job, ended_at__isnull=True).count() == 8
    stored = Cluster.objects.get(pk=cluster.pk)
    assert stored.last_sync_error.startswith(SUSPECT_PREFIX)
    assert stored.last_synced_at is None or stored.last_sync_error_at > stored.last_synced_at  # shown as stale
    assert "nodes" not in stored.sync_bookmarks  # the next pass relists
    stale = cluster_staleness(stored)
    assert "last node list of cluster" in stale
    assert "was not applied" in stale

    again = world.sync()  # still suspect: still kept, still stale
    assert again.suspect
    assert _live(cluster) == {"gpu-a1", "gpu-a2"}

    emulator.put(gpu_node("gpu-a1"))
    emulator.put(gpu_node("gpu-a2"))
    healed = world.sync()
    assert not healed.suspect
    stored = Cluster.objects.get(pk=cluster.pk)
    assert stored.last_sync_error == ""
    assert stored.last_synced_at >= stored.last_sync_error_at
    assert world.job(job).state == "running"


def test_losing_one_node_is_ordinary(world, kube, cluster, emulator):
    emulator.remove("Node", "gpu-a2")
    report = world.sync()
    assert not report.suspect
    assert _live(cluster) == {"gpu-a1"}
    assert Cluster.objects.get(pk=cluster.pk).last_sync_error == ""


def test_a_large_share_lost_at_once_is_suspect(world, kube, cluster, emulator):
    for i in range(3, 11):
        emulator.put(gpu_node(f"gpu-a{i}"))
    world.sync(full=True)
    assert len(_live(cluster)) == 10
    for i in range(3, 6):
        emulator.remove("Node", f"gpu-a{i}")  # 3 of 10 > 20 %
    report = world.sync()
    assert "3 of 10 nodes" in report.suspect
    assert len(_live(cluster)) == 10
