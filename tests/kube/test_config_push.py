"""Pushing quota configuration with server-side apply; drift detection, re-apply and adopt."""

from __future__ import annotations

import pytest

from clusters.kube_sync.config import kube_config_adopt, kube_config_push, kube_config_reapply
from clusters.models import KubeConfigObject
from kernel.errors import Conflict
from pools.models import Topology
from queues.models import Cohort, PriorityClass, QuotaLine, TeamQuota
from tests.factories import ResourceFlavorFactory, TeamFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def config(portal, cluster):
    """A nested cohort, a second team borrowing from it, a TAS flavor with a topology."""
    root = Cohort.objects.create(name="org")
    research = Cohort.objects.create(name="research", parent=root, fair_weight=2)
    topo = Topology.objects.create(name="gpu-topology", levels=["cloud.com/block", "kubernetes.io/hostname"])
    tas = ResourceFlavorFactory(
        name="h100-tas",
        node_labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "pool": "tas"},
        node_taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        topology=topo,
    )
    portal.quota.cohort = research
    portal.quota.reclaim_within_cohort = "Any"
    portal.quota.save()
    QuotaLine.objects.filter(team_quota=portal.quota, resource_name="nvidia.com/gpu").update(borrowing_limit="8")
    nlp = TeamFactory(slug="nlp", namespace="team-nlp")
    quota = TeamQuota.objects.create(team=nlp, cluster=cluster, cluster_queue_name="nlp", cohort=research)
    QuotaLine.objects.create(
        team_quota=quota, flavor=tas, resource_name="nvidia.com/gpu", nominal="32", lending_limit="16"
    )
    QuotaLine.objects.create(cohort=root, flavor=tas, resource_name="nvidia.com/gpu", nominal="8")
    PriorityClass.objects.create(name="urgent", value=1000, description="Deadlines")
    return portal


def _kinds(emulator) -> dict[str, list[str]]:
    return {
        kind: sorted(o["metadata"]["name"] for o in emulator.all(kind))
        for kind in (
            "Namespace",
            "ResourceFlavor",
            "Topology",
            "Cohort",
            "ClusterQueue",
            "LocalQueue",
            "WorkloadPriorityClass",
        )
    }


def test_push_applies_every_kind_valid_against_the_crds(config, cluster, api, emulator):
    report = kube_config_push(cluster=cluster, api=api)
    assert report.errors == []
    assert emulator.rejected == []
    assert _kinds(emulator) == {
        "Namespace": ["kube-system", "team-nlp", "team-vision"],
        "ResourceFlavor": ["h100", "h100-tas"],
        "Topology": ["gpu-topology"],
        "Cohort": ["org", "research"],
        "ClusterQueue": ["nlp", "vision"],
        "LocalQueue": ["main", "main"],
        "WorkloadPriorityClass": ["normal", "urgent"],
    }
    vision = emulator.get_obj("ClusterQueue", "vision")["spec"]
    assert vision["cohortName"] == "research"
    assert vision["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "team-vision"}}
    gpu = vision["resourceGroups"][0]["flavors"][0]["resources"]
    assert {r["name"]: r.get("borrowingLimit") for r in gpu}["nvidia.com/gpu"] == "8"
    assert emulator.get_obj("Cohort", "research")["spec"]["parentName"] == "org"
    assert emulator.get_obj("ResourceFlavor", "h100-tas")["spec"]["topologyName"] == "gpu-topology"
    lq = emulator.get_obj("LocalQueue", "main", "team-nlp")
    assert lq["spec"]["clusterQueue"] == "nlp"
    applies = [r for r in emulator.requests if r["method"] == "PATCH"]
    assert applies
    assert all(r["query"]["fieldManager"] == "gpu-pool-portal" for r in applies)
    assert KubeConfigObject.objects.filter(cluster=cluster, status="in_sync").count() == 13


def test_push_twice_writes_nothing(config, cluster, api, emulator):
    kube_config_push(cluster=cluster, api=api)
    writes = len([r for r in emulator.requests if r["method"] != "GET"])
    report = kube_config_push(cluster=cluster, api=api)
    assert report.created == []
    assert report.updated == []
    assert report.unchanged == 13
    assert len([r for r in emulator.requests if r["method"] != "GET"]) == writes


def test_portal_change_is_applied(config, cluster, api, emulator):
    kube_config_push(cluster=cluster, api=api)
    QuotaLine.objects.filter(team_quota=config.quota, resource_name="nvidia.com/gpu").update(nominal="24")
    report = kube_config_push(cluster=cluster, api=api)
    assert report.updated == ["ClusterQueue vision"]
    spec = emulator.get_obj("ClusterQueue", "vision")["spec"]
    assert {r["name"]: r["nominalQuota"] for r in spec["resourceGroups"][0]["flavors"][0]["resources"]}[
        "nvidia.com/gpu"
    ] == "24"


def test_live_edit_is_drift_not_overwritten(config, cluster, api, emulator):
    kube_config_push(cluster=cluster, api=api)
    live = emulator.get_obj("ClusterQueue", "vision")
    groups = live["spec"]["resourceGroups"]
    for res in groups[0]["flavors"][0]["resources"]:
        if res["name"] == "nvidia.com/gpu":
            res["nominalQuota"] = "12"
    emulator.edit(
        "ClusterQueue", "vision", manager="kubectl-edit", spec={"resourceGroups": groups, "stopPolicy": "Hold"}
    )
    report = kube_config_push(cluster=cluster, api=api)
    assert report.drifted == ["ClusterQueue vision"]
    row = KubeConfigObject.objects.get(cluster=cluster, kind="ClusterQueue", name="vision")
    assert row.status == "drifted"
    paths = {d["path"]: (d["portal"], d["live"]) for d in row.drift}
    assert paths["spec.resourceGroups[0].flavors[name=h100].resources[name=nvidia.com/gpu].nominalQuota"] == (
        "16",
        "12",
    )
    assert paths["spec.stopPolicy"] == ("None", "Hold")
    assert emulator.get_obj("ClusterQueue", "vision")["spec"]["stopPolicy"] == "Hold"  # left alone
    kube_config_reapply(row=row, api=api)
    row.refresh_from_db()
    assert row.status == "in_sync"
    assert row.drift == []
    assert emulator.get_obj("ClusterQueue", "vision")["spec"]["stopPolicy"] == "None"


def test_adopt_copies_the_live_object_into_the_portal(config, cluster, api, emulator):
    kube_config_push(cluster=cluster, api=api)
    live = emulator.get_obj("ClusterQueue", "vision")
    groups = live["spec"]["resourceGroups"]
    for res in groups[0]["flavors"][0]["resources"]:
        if res["name"] == "nvidia.com/gpu":
            res["nominalQuota"] = "20"
    emulator.edit(
        "ClusterQueue", "vision", spec={"resourceGroups": groups, "preemption": {"withinClusterQueue": "LowerPriority"}}
    )
    kube_config_push(cluster=cluster, api=api)
    row = KubeConfigObject.objects.get(cluster=cluster, kind="ClusterQueue", name="vision")
    kube_config_adopt(row=row, api=api)
    config.quota.refresh_from_db()
    assert config.quota.within_cluster_queue == "LowerPriority"
    assert QuotaLine.objects.get(team_quota=config.quota, resource_name="nvidia.com/gpu").nominal == "20"
    row.refresh_from_db()
    assert row.status == "in_sync"
    assert kube_config_push(cluster=cluster, api=api).drifted == []


def test_adopt_a_priority_class_and_a_flavor(config, cluster, api, emulator):
    kube_config_push(cluster=cluster, api=api)
    emulator.edit("WorkloadPriorityClass", "urgent", value=5000)
    emulator.edit("ResourceFlavor", "h100", spec={"nodeLabels": {"nvidia.com/gpu.product": "H100-SXM"}})
    kube_config_push(cluster=cluster, api=api)
    for kind, name in (("WorkloadPriorityClass", "urgent"), ("ResourceFlavor", "h100")):
        kube_config_adopt(row=KubeConfigObject.objects.get(cluster=cluster, kind=kind, name=name), api=api)
    assert PriorityClass.objects.get(name="urgent").value == 5000
    config.flavor.refresh_from_db()
    assert config.flavor.node_labels == {"nvidia.com/gpu.product": "H100-SXM"}


def test_conflicting_field_owned_by_the_portal_is_forced(config, cluster, api, emulator):
    kube_config_push(cluster=cluster, api=api)
    emulator.edit("ClusterQueue", "vision", manager="helm", spec={"queueingStrategy": "StrictFIFO"})
    config.quota.queueing_strategy = "BestEffortFIFO"
    config.quota.fair_weight = 3  # a portal change: the next push applies, conflicts on queueingStrategy, forces
    config.quota.save()
    report = kube_config_push(cluster=cluster, api=api)
    assert report.updated == ["ClusterQueue vision"]
    assert report.took_over
    assert "helm" in report.took_over[0]
    assert emulator.get_obj("ClusterQueue", "vision")["spec"]["queueingStrategy"] == "BestEffortFIFO"


def test_namespace_labels_owned_by_someone_else_are_not_forced(config, cluster, api, emulator):
    kube_config_push(cluster=cluster, api=api)
    emulator.edit(
        "Namespace", "team-vision", manager="argocd", metadata={"labels": {"gpu-pool-portal.io/team": "other"}}
    )
    config.team.slug = "vision2"  # the portal wants a new label value
    config.team.save()
    report = kube_config_push(cluster=cluster, api=api)
    assert report.conflicts == ["Namespace team-vision"]
    row = KubeConfigObject.objects.get(cluster=cluster, kind="Namespace", name="team-vision")
    assert row.status == "conflict"
    assert "argocd" in row.message
    assert emulator.get_obj("Namespace", "team-vision")["metadata"]["labels"]["gpu-pool-portal.io/team"] == "other"


def test_pre_existing_object_with_other_settings_is_drift(config, cluster, api, emulator):
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "vision"},
        "spec": {"namespaceSelector": {}, "queueingStrategy": "StrictFIFO"},
    }
    emulator.put(cq, manager="kubectl")
    report = kube_config_push(cluster=cluster, api=api)
    assert "ClusterQueue vision" in report.drifted
    assert emulator.get_obj("ClusterQueue", "vision")["spec"]["queueingStrategy"] == "StrictFIFO"


def test_orphans_are_reported_and_deleted_on_reapply(config, cluster, api, emulator):
    kube_config_push(cluster=cluster, api=api)
    PriorityClass.objects.filter(name="urgent").delete()
    report = kube_config_push(cluster=cluster, api=api)
    assert report.orphaned == ["WorkloadPriorityClass urgent"]
    row = KubeConfigObject.objects.get(cluster=cluster, kind="WorkloadPriorityClass", name="urgent")
    kube_config_reapply(row=row, api=api)
    assert emulator.get_obj("WorkloadPriorityClass", "urgent") is None
    TeamQuota.objects.filter(team__slug="nlp").delete()
    kube_config_push(cluster=cluster, api=api)
    ns = KubeConfigObject.objects.get(cluster=cluster, kind="Namespace", name="team-nlp")
    assert ns.status == "orphaned"
    with pytest.raises(Conflict):
        kube_config_reapply(row=ns, api=api)


def test_deleted_in_the_cluster_is_recreated(config, cluster, api, emulator):
    kube_config_push(cluster=cluster, api=api)
    emulator.remove("LocalQueue", "main", "team-vision")
    report = kube_config_push(cluster=cluster, api=api)
    assert report.created == ["LocalQueue team-vision/main"]
    assert KubeConfigObject.objects.get(kind="LocalQueue", namespace="team-vision").message.startswith(
        "created (it had"
    )


def test_push_without_cohort_drops_borrowing_limits(portal, cluster, api, emulator):
    QuotaLine.objects.filter(team_quota=portal.quota, resource_name="nvidia.com/gpu").update(borrowing_limit="4")
    report = kube_config_push(cluster=cluster, api=api)
    assert report.errors == []
    assert emulator.rejected == []


def test_push_labels_a_team_namespace_the_deployer_made_without_calling_it_drift(config, cluster, api, emulator):
    """The portal may not create namespaces (deploy/: it can only patch its team namespaces), so they exist first, with
    labels of their own (Pod Security): the first push adds the portal's labels and leaves those alone."""
    pss = {"pod-security.kubernetes.io/enforce": "restricted"}
    emulator.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-vision", "labels": pss}},
                 manager="kubectl")  # fmt: skip
    report = kube_config_push(cluster=cluster, api=api)
    assert "Namespace team-vision" not in report.drifted
    labels = emulator.get_obj("Namespace", "team-vision")["metadata"]["labels"]
    assert labels["gpu-pool-portal.io/team"] == "vision"
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert KubeConfigObject.objects.get(cluster=cluster, kind="Namespace", name="team-vision").status == "in_sync"
