"""An admin's journeys against real Kueue: a quota change saved in the admin reaching Kueue (and starting a job
that waited), drift when someone edits a ClusterQueue with the API, and reconciling after the portal was down."""

from __future__ import annotations

import html

import pytest
from django.urls import reverse

from clusters.kube_sync.reconcile import kube_reconcile
from clusters.models import KubeConfigObject
from pools.models import Allocation
from queues.models import PolicyPush, QuotaLine
from testbed.kubeapi import wait_for
from tests.admin.test_admin_flow import _line, _quota_post
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

LONG = ["sleep", "3600"]


def _nominal(kubectl, name: str, resource: str = "nvidia.com/gpu") -> str:
    cq = kubectl.get("ClusterQueue", name)
    return next(
        r["nominalQuota"]
        for rg in cq["spec"]["resourceGroups"]
        for f in rg["flavors"]
        for r in f["resources"]
        if r["name"] == resource
    )


@pytest.fixture
def admin(client):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def test_a_quota_change_in_the_admin_reaches_kueue_and_starts_the_waiting_job(world, admin, kubectl):
    running = [world.submit(f"run{i}", gpus=8, command=LONG) for i in range(2)]
    for job in running:
        world.until_state(job, "running")
    waiting = world.submit("waiting", gpus=8, command=LONG)
    world.until("waiting to wait", lambda: world.job(waiting).wait_reason == "quota_exhausted")

    lines = [_line(ln) for ln in QuotaLine.objects.filter(team_quota=world.quota).order_by("pk")]
    bigger = {"nvidia.com/gpu": "24", "cpu": "192", "memory": "1536Gi"}
    lines = [dict(ln, nominal=bigger[ln["resource_name"]]) for ln in lines]
    data = _quota_post(world.quota, lines, _whatif_apply="Apply change")
    with world.capture(execute=True):
        response = admin.post(reverse("admin:queues_teamquota_change", args=[world.quota.pk]), data)
    assert response.status_code == 302
    push = PolicyPush.objects.get()
    assert (push.state, push.error) == (PolicyPush.State.SUCCEEDED, "")
    assert _nominal(kubectl, world.quota.cluster_queue_name) == "24"
    job = world.until_state(waiting, "running")
    assert job.admitted_at >= push.finished_at.replace(microsecond=0)


def test_an_api_edit_of_a_clusterqueue_is_drift_then_re_applied(world, admin, kubectl):
    name = world.quota.cluster_queue_name
    cq = kubectl.get("ClusterQueue", name)
    groups = cq["spec"]["resourceGroups"]
    index = next(i for i, r in enumerate(groups[0]["flavors"][0]["resources"]) if r["name"] == "nvidia.com/gpu")
    kubectl.patch(  # what `kubectl edit clusterqueue` of the nominal quota sends
        "ClusterQueue",
        name,
        [{"op": "replace", "path": f"/spec/resourceGroups/0/flavors/0/resources/{index}/nominalQuota", "value": "4"}],
    )
    response = admin.post(reverse("admin:clusters_kubeconfigobject_check"))
    assert response.status_code == 302
    row = KubeConfigObject.objects.get(cluster=world.cluster, kind="ClusterQueue", name=name)
    assert row.status == KubeConfigObject.Status.DRIFTED
    assert [(d["portal"], d["live"]) for d in row.drift] == [("16", "4")]
    assert "nominalQuota" in row.drift[0]["path"]
    page = html.unescape(admin.get(reverse("admin:clusters_kubeconfigobject_change", args=[row.pk])).content.decode())
    assert "nominalQuota" in page

    admin.post(reverse("admin:clusters_kubeconfigobject_reapply", args=[row.pk]))
    assert _nominal(kubectl, name) == "16"
    row.refresh_from_db()
    assert row.status == KubeConfigObject.Status.IN_SYNC
    assert world.push().drifted == []


def test_an_api_edit_adopted_into_the_portal(world, admin, kubectl):
    name = world.quota.cluster_queue_name
    cq = kubectl.get("ClusterQueue", name)
    resources = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    index = next(i for i, r in enumerate(resources) if r["name"] == "nvidia.com/gpu")
    kubectl.patch(
        "ClusterQueue",
        name,
        [{"op": "replace", "path": f"/spec/resourceGroups/0/flavors/0/resources/{index}/nominalQuota", "value": "24"}],
    )
    world.push()
    row = KubeConfigObject.objects.get(cluster=world.cluster, kind="ClusterQueue", name=name)
    assert row.status == KubeConfigObject.Status.DRIFTED
    admin.post(reverse("admin:clusters_kubeconfigobject_adopt", args=[row.pk]))
    assert QuotaLine.objects.get(team_quota=world.quota, resource_name="nvidia.com/gpu").nominal == "24"
    again = world.push()
    assert (again.drifted, again.updated, again.errors) == ([], [], [])


def test_reconcile_after_the_portal_was_down(world, kubectl):
    """Jobs run, finish and are deleted in the cluster while the portal is not syncing; one pass of the
    reconciler brings every job to the cluster's state at the cluster's times."""
    short = world.submit("short", gpus=8, command=["sleep", "2"])
    doomed = world.submit("doomed", gpus=8, command=LONG)
    world.until_state(short, "admitted", "running", "succeeded")
    world.until_state(doomed, "admitted", "running")
    # --- the portal is down: the cluster moves on ---
    wait_for(
        "short's Job to complete",
        lambda: any(
            c["type"] == "Complete" and c["status"] == "True"
            for c in (kubectl.get("Job", short.k8s_name, short.k8s_namespace).get("status") or {}).get("conditions")
            or []
        ),
        timeout=60,
    )
    kubectl.delete("Job", doomed.k8s_name, doomed.k8s_namespace)
    wait_for(
        "doomed's pods to go",
        lambda: (
            not kubectl.list(
                "Pod", doomed.k8s_namespace, label_selector=f"batch.kubernetes.io/job-name={doomed.k8s_name}"
            )
        ),
        timeout=60,
    )
    # --- the portal is back ---
    report = kube_reconcile(cluster=world.cluster, api=world.api)
    assert report.error == ""
    short, doomed = world.job(short), world.job(doomed)
    assert short.state == "succeeded"
    completed = kubectl.get("Job", short.k8s_name, short.k8s_namespace)["status"]["completionTime"]
    assert short.finished_at.strftime("%Y-%m-%dT%H:%M:%SZ") == completed
    assert doomed.state == "cancelled"
    assert not Allocation.objects.filter(job__in=[short, doomed], ended_at__isnull=True).exists()
    again = kube_reconcile(cluster=world.cluster, api=world.api)
    assert again.repaired == 0
