"""Saved policy reaches the cluster: the kubernetes backend over HTTP (API emulator), failures shown and retried."""

from __future__ import annotations

import pytest
import yaml
from django.urls import reverse

from clusters.backends.k8s.client import forget_client
from clusters.tasks import policy_push_retry_due
from queues.models import PolicyPush, QuotaLine, TeamQuota
from queues.policy.pushes import backoff_seconds, policy_push_request, policy_pushes_due
from tests.admin.test_admin_flow import _line, _quota_post
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def _nominal(emulator, name: str) -> str:
    (cq,) = [o for o in emulator.all("ClusterQueue") if o["metadata"]["name"] == name]
    quotas = {
        (f["name"], r["name"]): r["nominalQuota"]
        for rg in cq["spec"]["resourceGroups"]
        for f in rg["flavors"]
        for r in f["resources"]
    }
    return str(quotas[("h100", "nvidia.com/gpu")])


def test_admin_apply_reaches_the_kubernetes_cluster(
    client, portal, cluster, emulator, django_capture_on_commit_callbacks
):
    quota = TeamQuota.objects.get(cluster=cluster)
    line = QuotaLine.objects.get(team_quota=quota, resource_name="nvidia.com/gpu")
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    lines = [_line(ln) for ln in QuotaLine.objects.filter(team_quota=quota).order_by("pk")]
    lines = [dict(ln, nominal="24") if ln["id"] == line.pk else ln for ln in lines]
    data = _quota_post(quota, lines, _whatif_apply="Apply change")
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("admin:queues_teamquota_change", args=[quota.pk]), data)
    assert response.status_code == 302
    push = PolicyPush.objects.get()
    assert (push.state, push.error) == (PolicyPush.State.SUCCEEDED, "")
    assert push.report.startswith("kubernetes: ")
    assert _nominal(emulator, "vision") == "24"


def test_unreachable_cluster_is_shown_and_retried_with_backoff(
    portal, cluster, emulator, settings, tmp_path, django_capture_on_commit_callbacks
):
    good = cluster.kubeconfig_path
    bad = tmp_path / "unreachable"
    config = yaml.safe_load(open(good))
    config["clusters"][0]["cluster"]["server"] = "http://127.0.0.1:9"
    bad.write_text(yaml.safe_dump(config))
    cluster.kubeconfig_path = str(bad)
    cluster.save()
    forget_client(cluster)
    with django_capture_on_commit_callbacks(execute=True):
        (push,) = policy_push_request(clusters=[cluster], reason="test", user=None)
    push.refresh_from_db()
    assert push.state == PolicyPush.State.RETRYING
    assert push.attempts == 1
    assert "cluster unreachable (attempt 1)" in push.error
    assert (push.next_attempt_at - push.last_attempt_at).total_seconds() == backoff_seconds(1) == 30
    assert policy_pushes_due(now=push.last_attempt_at) == []
    assert policy_pushes_due(now=push.next_attempt_at) == [push.pk]

    # The cluster comes back; the beat sweep retries the due push.
    cluster.kubeconfig_path = good
    cluster.save()
    forget_client(cluster)
    PolicyPush.objects.filter(pk=push.pk).update(next_attempt_at=push.last_attempt_at)
    policy_push_retry_due()
    push.refresh_from_db()
    assert (push.state, push.attempts, push.error) == (PolicyPush.State.SUCCEEDED, 2, "")
    assert _nominal(emulator, "vision") == "16"


def test_push_gives_up_after_max_attempts(portal, cluster, settings, tmp_path, django_capture_on_commit_callbacks):
    settings.POLICY_PUSH_MAX_ATTEMPTS = 1
    bad = tmp_path / "unreachable"
    config = yaml.safe_load(open(cluster.kubeconfig_path))
    config["clusters"][0]["cluster"]["server"] = "http://127.0.0.1:9"
    bad.write_text(yaml.safe_dump(config))
    cluster.kubeconfig_path = str(bad)
    cluster.save()
    forget_client(cluster)
    with django_capture_on_commit_callbacks(execute=True):
        (push,) = policy_push_request(clusters=[cluster], reason="test")
    push.refresh_from_db()
    assert push.state == PolicyPush.State.FAILED
    assert push.next_attempt_at is None
    assert "unreachable" in push.error


def test_backoff_doubles_and_is_capped(settings):
    settings.POLICY_PUSH_BACKOFF_SECONDS = 30
    settings.POLICY_PUSH_BACKOFF_MAX_SECONDS = 200
    assert [backoff_seconds(n) for n in (1, 2, 3, 4, 5)] == [30, 60, 120, 200, 200]
