"""Kueue's own configuration against the cluster's fair-sharing switch, checked at each push, over HTTP.

Kueue's manager ConfigMap is put into the API emulator as its release manifest installs it (validated against the
ConfigMap schema); the portal reads it through the real client, as it does in production.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from clusters.kube_sync.config import kube_config_push
from clusters.kube_sync.drift import kube_drift_check
from clusters.kube_sync.kueue_config import kueue_config_check
from kernel.errors import DomainError
from pools.models import Cluster
from tests.factories import ResourceClassFactory, ResourceFlavorFactory
from tests.kube.cluster import at, kueue_config_map

pytestmark = pytest.mark.django_db

BOTH = "LessThanOrEqualToFinalShare,LessThanInitialShare"
CONFIG_MAP_PATH = "/api/v1/namespaces/kueue-system/configmaps/kueue-manager-config"
V1BETA2_OFF = """\
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
health:
  healthProbeBindAddress: :8081
integrations:
  frameworks: ["batch/job"]
"""
V1BETA2_BOTH = (
    V1BETA2_OFF + "fairSharing:\n  preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]\n"
)
V1BETA2_FINAL_ONLY = V1BETA2_OFF + "fairSharing:\n  preemptionStrategies: [LessThanOrEqualToFinalShare]\n"
V1BETA1_DISABLED = """\
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
fairSharing:
  enable: false
"""
V1BETA1_ENABLED = "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\nfairSharing:\n  enable: true\n"


def _switch(cluster: Cluster, on: bool, strategies: str = BOTH) -> Cluster:
    Cluster.objects.filter(pk=cluster.pk).update(fair_sharing=on, fair_sharing_strategies=strategies)
    return Cluster.objects.get(pk=cluster.pk)


def _check(cluster: Cluster, api, emulator, configuration: str | None, *, on: bool, strategies: str = BOTH):
    if configuration is not None:
        emulator.put(kueue_config_map(configuration))
    cluster = _switch(cluster, on, strategies)
    outcome = kueue_config_check(cluster=cluster, api=api, now=at(0))
    cluster.refresh_from_db()
    assert (cluster.kueue_config_state, cluster.kueue_config_problem) == (outcome.state, outcome.problem)
    assert cluster.kueue_config_checked_at == at(0)
    return cluster


@pytest.mark.parametrize(
    ("configuration", "on", "strategies"),
    [
        (V1BETA2_BOTH, True, BOTH),
        (V1BETA2_FINAL_ONLY, True, "LessThanOrEqualToFinalShare"),
        (V1BETA2_OFF, False, BOTH),
        (V1BETA1_DISABLED, False, BOTH),
        (V1BETA1_ENABLED, True, BOTH),  # v1beta1's default strategies
    ],
    ids=["on-on", "on-on-one-strategy", "off-off", "v1beta1-enable-false", "v1beta1-enable-true-defaults"],
)
def test_kueue_config_matching_the_switch(cluster, api, emulator, configuration, on, strategies):
    cluster = _check(cluster, api, emulator, configuration, on=on, strategies=strategies)
    assert (cluster.kueue_config_state, cluster.kueue_config_problem) == ("matches", "")
    assert not cluster.kueue_config_needs_attention
    gets = [r for r in emulator.requests if r["path"] == CONFIG_MAP_PATH]
    assert [r["method"] for r in gets] == ["GET"]  # one read, by name, in Kueue's namespace: nothing else


def test_kueue_config_on_but_the_switch_off(cluster, api, emulator):
    cluster = _check(cluster, api, emulator, V1BETA2_BOTH, on=False)
    assert cluster.kueue_config_state == "mismatch"
    assert cluster.kueue_config_needs_attention
    assert cluster.kueue_config_problem.startswith(
        "Kueue's configuration has fair sharing on (LessThanOrEqualToFinalShare, LessThanInitialShare) but this "
        "cluster's switch is off: previews and explanations assume the wrong behaviour"
    )


def test_kueue_config_off_but_the_switch_on(cluster, api, emulator):
    cluster = _check(cluster, api, emulator, V1BETA1_DISABLED, on=True, strategies="LessThanInitialShare")
    assert cluster.kueue_config_state == "mismatch"
    assert cluster.kueue_config_problem.startswith(
        "Kueue's configuration has fair sharing off but this cluster's switch is on (LessThanInitialShare):"
    )


def test_kueue_config_other_strategies_do_not_match(cluster, api, emulator):
    cluster = _check(cluster, api, emulator, V1BETA2_FINAL_ONLY, on=True, strategies=BOTH)
    assert cluster.kueue_config_state == "mismatch"
    assert (
        "fair sharing on (LessThanOrEqualToFinalShare) but this cluster's switch is on "
        "(LessThanOrEqualToFinalShare, LessThanInitialShare)"
    ) in cluster.kueue_config_problem


def test_kueue_config_strategies_in_the_other_order_are_not_a_configuration_kueue_accepts(cluster, api, emulator):
    """Order matters to Kueue (tried in turn), and only [Final, Initial] is valid: reversed, it is refused."""
    reversed_order = (
        V1BETA2_OFF + "fairSharing:\n  preemptionStrategies: [LessThanInitialShare, LessThanOrEqualToFinalShare]\n"
    )
    cluster = _check(cluster, api, emulator, reversed_order, on=True)
    assert cluster.kueue_config_state == "invalid"
    assert "unsupported combination [LessThanInitialShare, LessThanOrEqualToFinalShare]" in (
        cluster.kueue_config_problem
    )


def test_kueue_config_map_missing(cluster, api, emulator):
    cluster = _check(cluster, api, emulator, None, on=False)
    assert cluster.kueue_config_state == "missing"
    assert cluster.kueue_config_problem.startswith("ConfigMap kueue-system/kueue-manager-config not found")
    assert cluster.kueue_config_needs_attention


def test_kueue_config_map_not_allowed(cluster, api, emulator):
    emulator.put(kueue_config_map(V1BETA2_OFF))
    fault = emulator.fail(
        "GET",
        CONFIG_MAP_PATH + r"\?",
        status=403,
        times=5,
        message='configmaps "kueue-manager-config" is forbidden: User "system:serviceaccount:gpu-portal:gpu-portal" '
        'cannot get resource "configmaps" in API group "" in the namespace "kueue-system"',
    )
    cluster = _check(cluster, api, emulator, None, on=False)
    assert fault.hits == 1  # a 403 is not retried
    assert cluster.kueue_config_state == "forbidden"
    assert cluster.kueue_config_problem.startswith(
        "not allowed to read ConfigMap kueue-system/kueue-manager-config (HTTP 403): apply the Role and "
        "RoleBinding gpu-portal-kueue-config"
    )
    assert 'cannot get resource "configmaps"' in cluster.kueue_config_problem


def test_kueue_config_bad_yaml_says_what_the_parser_says(cluster, api, emulator):
    cluster = _check(cluster, api, emulator, "kind: Configuration\nfairSharing: [unclosed\n", on=False)
    assert cluster.kueue_config_state == "invalid"
    assert cluster.kueue_config_problem.startswith(
        'ConfigMap kueue-system/kueue-manager-config: data["controller_manager_config.yaml"]: cannot parse:'
    )


def test_kueue_config_wrong_field_names_the_field(cluster, api, emulator):
    cluster = _check(cluster, api, emulator, V1BETA2_OFF + "fairSharing:\n  enable: true\n", on=True)
    assert cluster.kueue_config_state == "invalid"
    assert 'data["controller_manager_config.yaml"].fairSharing.enable: unknown field in v1beta2' in (
        cluster.kueue_config_problem
    )


def test_kueue_config_map_named_by_the_setting(cluster, api, emulator, settings):
    settings.KUEUE_CONFIG_MAP = "kueue/manager-config"
    emulator.put(kueue_config_map(V1BETA2_BOTH, namespace="kueue", name="manager-config"))
    cluster = _check(cluster, api, emulator, None, on=True)
    assert cluster.kueue_config_state == "matches"
    assert [r["path"] for r in emulator.requests] == ["/api/v1/namespaces/kueue/configmaps/manager-config"]


# --- as part of the push and of the admin's "check now" -------------------------------------------------------------


def test_kueue_config_checked_by_every_push(portal, cluster, api, emulator):
    emulator.put(kueue_config_map(V1BETA2_BOTH))
    report = kube_config_push(cluster=cluster, api=api, now=at(0))
    assert (report.kueue_config.state, report.kueue_config.needs_attention) == ("mismatch", True)
    cluster.refresh_from_db()
    assert (cluster.kueue_config_state, cluster.kueue_config_checked_at) == ("mismatch", at(0))
    cluster = _switch(cluster, True)
    report = kube_config_push(cluster=cluster, api=api, now=at(5))
    assert report.kueue_config.state == "matches"
    cluster.refresh_from_db()
    assert (cluster.kueue_config_state, cluster.kueue_config_problem, cluster.kueue_config_checked_at) == (
        "matches",
        "",
        at(5),
    )


def test_kueue_config_check_is_not_policy_history(portal, cluster, api, emulator):
    """The outcome is bookkeeping: recording it every push would bury the policy changes in the audit."""
    before = cluster.history.count()
    kube_config_push(cluster=cluster, api=api, now=at(0))
    kube_config_push(cluster=cluster, api=api, now=at(5))
    assert cluster.history.count() == before


def test_kueue_config_read_failing_transiently_keeps_the_last_outcome(portal, cluster, api, emulator):
    emulator.put(kueue_config_map(V1BETA2_BOTH))
    kube_config_push(cluster=cluster, api=api, now=at(0))
    emulator.fail("GET", CONFIG_MAP_PATH + r"\?", status=503, times=20)
    report = kube_config_push(cluster=cluster, api=api, now=at(5))
    assert report.kueue_config is None
    assert report.errors == []  # the rest of the push went through
    cluster.refresh_from_db()
    assert (cluster.kueue_config_state, cluster.kueue_config_checked_at) == ("mismatch", at(0))
    assert "Kueue's configuration has fair sharing on" in cluster.kueue_config_problem


def test_kueue_config_unreachable_cluster_keeps_the_last_outcome(portal, cluster, api, emulator):
    emulator.put(kueue_config_map(V1BETA2_BOTH))
    kube_drift_check(cluster_id=cluster.pk, api=api)
    cluster.refresh_from_db()
    checked_at = cluster.kueue_config_checked_at
    emulator.fail("*", ".*", status=503, times=1000)
    with pytest.raises(DomainError, match="cannot be reached"):
        kube_drift_check(cluster_id=cluster.pk, api=api)
    cluster.refresh_from_db()
    assert (cluster.kueue_config_state, cluster.kueue_config_checked_at) == ("mismatch", checked_at)


def test_kueue_config_checked_by_the_admins_check_now_button(portal, cluster, emulator, admin_client):
    emulator.put(kueue_config_map(V1BETA2_BOTH))
    response = admin_client.post(reverse("admin:clusters_kubeconfigobject_check"), follow=True)
    page = response.content.decode()
    assert "Cluster gpu-east: 5 created" in page
    assert "Cluster gpu-east: Kueue&#x27;s configuration has fair sharing on" in page
    cluster.refresh_from_db()
    assert cluster.kueue_config_state == "mismatch"


# --- what admins see --------------------------------------------------------------------------------------------------

CHANGELIST = "admin:clusters_kubeconfigobject_changelist"


def test_kueue_config_mismatch_on_the_drift_page_is_highlighted_with_how_to_fix(
    portal, cluster, emulator, admin_client
):
    emulator.put(kueue_config_map(V1BETA2_BOTH))
    admin_client.post(reverse("admin:clusters_kubeconfigobject_check"))
    page = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert f'<tr id="pools-kueue-config-{cluster.pk}" class="kube-attention">' in page
    assert "<strong>Does not match the switch</strong>" in page
    assert "Kueue&#x27;s configuration has fair sharing on (LessThanOrEqualToFinalShare, LessThanInitialShare)" in page
    assert reverse("admin:pools_cluster_change", args=[cluster.pk]) in page
    assert 'id="pools-kueue-config-fix"' in page
    assert "edit this cluster&#x27;s fair-sharing switch" in page
    assert "rollout restart deployment kueue-controller-manager" in page


def test_kueue_config_match_on_the_drift_page_is_quiet(portal, cluster, emulator, admin_client):
    emulator.put(kueue_config_map(V1BETA2_OFF))
    admin_client.post(reverse("admin:clusters_kubeconfigobject_check"))
    page = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert f'<tr id="pools-kueue-config-{cluster.pk}" class="kube-ok">' in page
    assert "Matches the switch" in page
    assert 'id="pools-kueue-config-fix"' not in page


def test_kueue_config_missing_on_the_drift_page_needs_attention(portal, cluster, emulator, admin_client):
    admin_client.post(reverse("admin:clusters_kubeconfigobject_check"))
    page = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert f'<tr id="pools-kueue-config-{cluster.pk}" class="kube-attention">' in page
    assert "<strong>ConfigMap not found</strong>" in page
    assert 'id="pools-kueue-config-fix"' not in page  # the problem itself says what to do


def test_kueue_config_on_the_cluster_admin_page(portal, cluster, api, emulator, admin_client):
    url = reverse("admin:pools_cluster_change", args=[cluster.pk])
    assert "Not checked yet" in admin_client.get(url).content.decode()
    emulator.put(kueue_config_map(V1BETA2_BOTH))
    kube_config_push(cluster=cluster, api=api)
    page = admin_client.get(url).content.decode()
    assert '<div id="cluster-kueue-config" class="errornote"><strong>Does not match the switch</strong>' in page
    assert "this cluster&#x27;s switch is off" in page
    assert "rollout restart deployment kueue-controller-manager" in page
    assert 'name="kueue_config' not in page  # read-only: no form field
    _switch(cluster, True)
    kube_config_push(cluster=Cluster.objects.get(pk=cluster.pk), api=api)
    page = admin_client.get(url).content.decode()
    assert '<span id="cluster-kueue-config">Matches the switch (checked ' in page
    assert "errornote" not in page.split('id="cluster-kueue-config"')[0][-200:]


def test_kueue_config_not_checked_on_a_simulated_cluster(db, admin_client):
    simulated = Cluster.objects.create(name="sim")
    page = admin_client.get(reverse("admin:pools_cluster_change", args=[simulated.pk])).content.decode()
    assert "Not checked: the simulated cluster follows the switch itself." in page


# --- the integrations the classes' workload kinds need ------------------------------------------------------------


def test_kueue_config_lacking_an_integration_a_class_allows_needs_attention(portal, cluster, api, emulator):
    portal.rc.allowed_kinds = ["batch", "jobset", "session", "inference-lws"]
    portal.rc.save()
    cluster = _check(cluster, api, emulator, V1BETA2_OFF, on=False)
    assert cluster.kueue_config_state == "mismatch"
    assert cluster.kueue_config_problem == (
        "Kueue's configuration does not enable the integrations jobset.x-k8s.io/jobset (classes h100); "
        "leaderworkerset.x-k8s.io/leaderworkerset (classes h100); pod (classes h100): jobs of those kinds would "
        "never be admitted. Add jobset.x-k8s.io/jobset, leaderworkerset.x-k8s.io/leaderworkerset, pod to "
        "integrations.frameworks."
    )


def test_kueue_config_with_the_integrations_the_classes_need_matches(portal, cluster, api, emulator):
    portal.rc.allowed_kinds = ["batch", "jobset", "session", "inference-lws"]
    portal.rc.save()
    frameworks = '["batch/job", "jobset.x-k8s.io/jobset", "pod", "leaderworkerset.x-k8s.io/leaderworkerset"]'
    configuration = V1BETA2_OFF.replace('["batch/job"]', frameworks)
    cluster = _check(cluster, api, emulator, configuration, on=False)
    assert (cluster.kueue_config_state, cluster.kueue_config_problem) == ("matches", "")


def test_kueue_config_integrations_of_a_class_not_offered_on_the_cluster_are_not_asked(portal, cluster, api, emulator):
    other = ResourceClassFactory(slug="a100", flavors=[ResourceFlavorFactory(name="a100")])
    other.allowed_kinds = ["rayjob"]  # no team has quota for its flavor on this cluster
    other.save()
    cluster = _check(cluster, api, emulator, V1BETA2_OFF, on=False)
    assert (cluster.kueue_config_state, cluster.kueue_config_problem) == ("matches", "")


def test_kueue_config_without_integrations_enables_batch_jobs_only(portal, cluster, api, emulator):
    portal.rc.allowed_kinds = ["batch", "rayjob"]
    portal.rc.save()
    cluster = _check(cluster, api, emulator, V1BETA1_DISABLED, on=False)  # no integrations: Kueue's default
    assert "ray.io/rayjob (classes h100)" in cluster.kueue_config_problem


def test_kueue_config_missing_integration_on_the_drift_page(portal, cluster, emulator, admin_client):
    portal.rc.allowed_kinds = ["batch", "pytorchjob"]
    portal.rc.save()
    emulator.put(kueue_config_map(V1BETA2_OFF))
    admin_client.post(reverse("admin:clusters_kubeconfigobject_check"))
    page = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert f'<tr id="pools-kueue-config-{cluster.pk}" class="kube-attention">' in page
    assert "does not enable the integrations kubeflow.org/pytorchjob (classes h100)" in page
    assert "Kueue's own configuration: fair sharing and integrations" in page
