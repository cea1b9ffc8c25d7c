"""Drift in the admin: objects edited with kubectl are listed with their difference, re-applied or adopted.

Everything goes over HTTP: the admin's browser requests through Django's test client, the portal's calls to the
cluster through the real client to the API emulator (which validates every object against Kueue's CRDs).
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from clusters.kube_sync import drift
from clusters.kube_sync.config import kube_config_push
from clusters.models import KubeConfigObject
from queues.models import PriorityClass, QuotaLine
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:clusters_kubeconfigobject_changelist"
GPU_PATH = "spec.resourceGroups[0].flavors[name=h100].resources[name=nvidia.com/gpu].nominalQuota"


def _edit_nominal(emulator, value: str, *, manager: str = "kubectl-edit", **spec) -> None:
    """What `kubectl edit clusterqueue vision` does to the GPU nominal quota."""
    live = emulator.get_obj("ClusterQueue", "vision")
    groups = live["spec"]["resourceGroups"]
    for res in groups[0]["flavors"][0]["resources"]:
        if res["name"] == "nvidia.com/gpu":
            res["nominalQuota"] = value
    emulator.edit("ClusterQueue", "vision", manager=manager, spec={"resourceGroups": groups, **spec})


def _gpu_nominal(emulator) -> str:
    spec = emulator.get_obj("ClusterQueue", "vision")["spec"]
    return {r["name"]: r["nominalQuota"] for r in spec["resourceGroups"][0]["flavors"][0]["resources"]}[
        "nvidia.com/gpu"
    ]


@pytest.fixture
def drifted(portal, cluster, api, emulator, admin_client):
    """The portal pushed; someone set the vision ClusterQueue's GPU quota to 12 and held it; the admin checked."""
    kube_config_push(cluster=cluster, api=api)
    _edit_nominal(emulator, "12", stopPolicy="Hold")
    response = admin_client.post(reverse("admin:clusters_kubeconfigobject_check"))
    assert response.status_code == 302
    return KubeConfigObject.objects.get(cluster=cluster, kind="ClusterQueue", name="vision")


def test_drift_check_button_detects_the_kubectl_edit(drifted, admin_client):
    assert drifted.status == "drifted"
    page = admin_client.get(reverse(CHANGELIST), follow=True).content.decode()
    assert "Cluster gpu-east: 0 created, 0 updated, 4 unchanged, 1 drifted" in page
    assert "ClusterQueue vision" in page
    assert "Drifted (changed in the cluster)" in page


def test_drift_list_shows_only_what_needs_attention_by_default(drifted, admin_client):
    page = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert "ClusterQueue vision" in page
    assert "LocalQueue team-vision/main" not in page  # in sync: only under "All objects"
    everything = admin_client.get(reverse(CHANGELIST), {"attention": "all"}).content.decode()
    assert "LocalQueue team-vision/main" in everything


def test_drift_page_shows_a_readable_field_diff(drifted, admin_client):
    page = admin_client.get(reverse("admin:clusters_kubeconfigobject_change", args=[drifted.pk])).content.decode()
    assert GPU_PATH in page
    assert "<td><code>16</code></td><td><code>12</code></td>" in page
    assert "spec.stopPolicy" in page
    assert "<td><code>None</code></td><td><code>Hold</code></td>" in page
    assert "nominalQuota: &#x27;12&#x27;" in page  # the YAML diff
    assert 'id="kube-reapply"' in page
    assert 'id="kube-adopt"' in page
    assert "the quota lines" in page  # where adopting writes
    fields = {f.path: f for f in drift.drift_fields(drifted)}
    assert (fields[GPU_PATH].portal, fields[GPU_PATH].live, fields[GPU_PATH].change) == ("16", "12", "changed")
    diff = drift.drift_yaml_diff(drifted)
    assert diff.startswith("--- portal\n+++ cluster")
    lines = [ln.replace(" ", "") for ln in diff.splitlines()]
    assert "-nominalQuota:'16'" in lines
    assert "+nominalQuota:'12'" in lines
    assert "+stopPolicy:Hold" in lines


def test_drift_reapply_makes_the_cluster_match_the_portal(drifted, admin_client, emulator):
    response = admin_client.post(reverse("admin:clusters_kubeconfigobject_reapply", args=[drifted.pk]), follow=True)
    assert "re-applied the portal&#x27;s version" in response.content.decode()
    assert _gpu_nominal(emulator) == "16"
    assert emulator.get_obj("ClusterQueue", "vision")["spec"]["stopPolicy"] == "None"
    drifted.refresh_from_db()
    assert (drifted.status, drifted.drift) == ("in_sync", [])
    applies = [r for r in emulator.requests if r["method"] == "PATCH" and "/clusterqueues/vision" in r["path"]]
    assert applies[-1]["query"].get("force") == "true"
    assert applies[-1]["query"]["fieldManager"] == "gpu-pool-portal"


def test_drift_adopt_writes_the_clusters_quota_into_the_portal(drifted, admin_client, emulator, portal, cluster, api):
    _edit_nominal(emulator, "12", stopPolicy="None")  # only the quota differs now
    kube_config_push(cluster=cluster, api=api)
    response = admin_client.post(reverse("admin:clusters_kubeconfigobject_adopt", args=[drifted.pk]), follow=True)
    assert "adopted the cluster&#x27;s values" in response.content.decode()
    assert QuotaLine.objects.get(team_quota=portal.quota, resource_name="nvidia.com/gpu").nominal == "12"
    drifted.refresh_from_db()
    assert drifted.status == "in_sync"
    assert _gpu_nominal(emulator) == "12"  # the cluster was not touched
    assert kube_config_push(cluster=cluster, api=api).drifted == []  # and nothing differs any more


def test_drift_adopt_refuses_what_the_portal_cannot_express(drifted, admin_client, emulator, portal):
    live = emulator.get_obj("ClusterQueue", "vision")
    groups = live["spec"]["resourceGroups"]
    groups[0]["flavors"][0]["name"] = "b200"  # a flavor the portal does not know
    emulator.edit("ClusterQueue", "vision", spec={"resourceGroups": groups})
    response = admin_client.post(reverse("admin:clusters_kubeconfigobject_adopt", args=[drifted.pk]), follow=True)
    page = response.content.decode()
    assert "flavor b200, which the portal does not know" in page
    assert QuotaLine.objects.get(team_quota=portal.quota, resource_name="nvidia.com/gpu").nominal == "16"
    drifted.refresh_from_db()
    assert drifted.status == "drifted"


def test_drift_adopt_a_priority_class_through_the_bulk_action(portal, cluster, api, emulator, admin_client):
    kube_config_push(cluster=cluster, api=api)
    emulator.edit("WorkloadPriorityClass", "normal", value=150)
    admin_client.post(reverse("admin:clusters_kubeconfigobject_check"))
    row = KubeConfigObject.objects.get(kind="WorkloadPriorityClass", name="normal")
    assert row.status == "drifted"
    admin_client.post(reverse(CHANGELIST), {"action": "adopt_selected", "_selected_action": [row.pk]}, follow=True)
    assert PriorityClass.objects.get(name="normal").value == 150


def test_drift_local_queue_cannot_be_adopted_only_reapplied(portal, cluster, api, emulator, admin_client):
    kube_config_push(cluster=cluster, api=api)
    emulator.edit("LocalQueue", "main", "team-vision", metadata={"labels": {"gpu-pool-portal.io/team": "nlp"}})
    admin_client.post(reverse("admin:clusters_kubeconfigobject_check"))
    row = KubeConfigObject.objects.get(kind="LocalQueue", name="main")
    assert row.status == "drifted"
    page = admin_client.get(reverse("admin:clusters_kubeconfigobject_change", args=[row.pk])).content.decode()
    assert 'id="kube-adopt"' not in page
    assert "points at its team&#x27;s ClusterQueue" in page
    response = admin_client.post(reverse("admin:clusters_kubeconfigobject_adopt", args=[row.pk]), follow=True)
    assert "cannot be adopted" in response.content.decode()
    admin_client.post(reverse("admin:clusters_kubeconfigobject_reapply", args=[row.pk]))
    labels = emulator.get_obj("LocalQueue", "main", "team-vision")["metadata"]["labels"]
    assert labels["gpu-pool-portal.io/team"] == "vision"


def test_drift_reapply_refused_by_the_cluster_says_why(portal, cluster, api, emulator, admin_client):
    """A LocalQueue created by hand for another ClusterQueue: its clusterQueue is immutable in Kueue's CRD."""
    emulator.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-vision"}})
    emulator.put(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "main", "namespace": "team-vision"},
            "spec": {"clusterQueue": "legacy"},
        },
        manager="kubectl",
    )
    kube_config_push(cluster=cluster, api=api)
    row = KubeConfigObject.objects.get(kind="LocalQueue", name="main")
    assert row.status == "drifted"
    response = admin_client.post(reverse("admin:clusters_kubeconfigobject_reapply", args=[row.pk]), follow=True)
    assert "the cluster refused" in response.content.decode()
    assert "immutable" in response.content.decode()
    row.refresh_from_db()
    assert row.status == "drifted"
    assert emulator.rejected == ["LocalQueue main: spec.clusterQueue: field is immutable"]
    emulator.rejected.clear()  # the refusal this test expects


def test_drift_unreachable_cluster_changes_nothing(drifted, admin_client, emulator):
    emulator.fail("PATCH", "/clusterqueues/vision", status=503, times=10)
    response = admin_client.post(reverse("admin:clusters_kubeconfigobject_reapply", args=[drifted.pk]), follow=True)
    assert "cannot be reached" in response.content.decode()
    drifted.refresh_from_db()
    assert drifted.status == "drifted"
    assert _gpu_nominal(emulator) == "12"


def test_drift_orphan_reapply_deletes_it(portal, cluster, api, emulator, admin_client):
    PriorityClass.objects.create(name="urgent", value=1000)
    kube_config_push(cluster=cluster, api=api)
    PriorityClass.objects.filter(name="urgent").delete()
    admin_client.post(reverse("admin:clusters_kubeconfigobject_check"))
    row = KubeConfigObject.objects.get(kind="WorkloadPriorityClass", name="urgent")
    assert row.status == "orphaned"
    page = admin_client.get(reverse("admin:clusters_kubeconfigobject_change", args=[row.pk])).content.decode()
    assert "no longer wants this object" in page
    response = admin_client.post(reverse("admin:clusters_kubeconfigobject_reapply", args=[row.pk]))
    assert response.status_code == 302
    assert emulator.get_obj("WorkloadPriorityClass", "urgent") is None
    assert not KubeConfigObject.objects.filter(pk=row.pk).exists()


def test_drift_pages_are_for_staff_with_change_permission(drifted, client, emulator):
    user = UserFactory(username="ada2")
    client.force_login(user)
    assert client.get(reverse(CHANGELIST)).status_code == 302  # not staff: to the admin login
    user.is_staff = True
    user.save()
    assert client.get(reverse(CHANGELIST)).status_code == 403  # staff without the permission
    assert client.post(reverse("admin:clusters_kubeconfigobject_reapply", args=[drifted.pk])).status_code == 403
    assert _gpu_nominal(emulator) == "12"


def test_drift_buttons_need_post(drifted, admin_client, emulator):
    assert admin_client.get(reverse("admin:clusters_kubeconfigobject_reapply", args=[drifted.pk])).status_code == 405
    assert admin_client.get(reverse("admin:clusters_kubeconfigobject_check")).status_code == 405
    assert _gpu_nominal(emulator) == "12"
