"""Fairness that remembers on Kubernetes: what the push gives Kueue, and what the configuration check says.

Kueue's admission fair sharing (beta since v0.15; ``site/content/en/docs/concepts/admission_fair_sharing.md``)
is switched on per ClusterQueue by ``spec.admissionScope.admissionMode: UsageBasedAdmissionFairSharing`` and
decays usage with the Configuration's ``admissionFairSharing.usageHalfLifeTime``. The push sends the first
(validated against the ClusterQueue CRD by the emulator); the second is Kueue's ConfigMap, which the portal reads and
compares but does not write.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from clusters.kube_sync.config import kube_config_push
from clusters.kube_sync.kueue_config import go_duration_seconds, kueue_config_check
from clusters.kube_sync.manifests import desired_config
from pools.models import Cluster
from queues.models import Cohort, TeamQuota
from tests.kube.cluster import at, kueue_config_map
from tests.kube.test_kueue_config import V1BETA2_OFF

pytestmark = pytest.mark.django_db


def _cluster_queue(cluster) -> dict:
    return next(o for o in desired_config(cluster) if o["kind"] == "ClusterQueue")


@pytest.fixture
def remembering(portal):
    top = Cohort.objects.create(name="research", usage_half_life=timedelta(days=3, hours=12))
    inner = Cohort.objects.create(name="vision-org", parent=top)
    TeamQuota.objects.filter(pk=portal.quota.pk).update(cohort=inner)
    return top


def test_no_admission_scope_without_the_policy(portal, cluster):
    assert "admissionScope" not in _cluster_queue(cluster)["spec"]


def test_the_push_sets_the_admission_scope_kueue_accepts(portal, cluster, api, emulator, remembering):
    spec = _cluster_queue(cluster)["spec"]
    assert spec["admissionScope"] == {"admissionMode": "UsageBasedAdmissionFairSharing"}
    report = kube_config_push(cluster=cluster, api=api)
    assert report.errors == []
    assert emulator.rejected == []  # the ClusterQueue validates against Kueue's CRD schema
    assert kube_config_push(cluster=cluster, api=api).drifted == []


def test_go_durations():
    assert go_duration_seconds("84h") == 84 * 3600
    assert go_duration_seconds("1h30m") == 5400
    assert go_duration_seconds("5m") == 300
    assert go_duration_seconds("a week") is None


def test_the_check_asks_for_admission_fair_sharing(portal, cluster, api, emulator, remembering):
    emulator.put(kueue_config_map(V1BETA2_OFF))
    outcome = kueue_config_check(cluster=Cluster.objects.get(pk=cluster.pk), api=api, now=at(0))
    assert outcome.state == Cluster.KueueConfig.MISMATCH
    assert "has no admissionFairSharing" in outcome.problem
    assert "usageHalfLifeTime: 84h" in outcome.problem
    emulator.put(kueue_config_map(V1BETA2_OFF + "admissionFairSharing:\n  usageHalfLifeTime: 168h\n"))
    outcome = kueue_config_check(cluster=Cluster.objects.get(pk=cluster.pk), api=api, now=at(1))
    assert "usageHalfLifeTime is '168h'" in outcome.problem
    emulator.put(
        kueue_config_map(V1BETA2_OFF + "admissionFairSharing:\n  usageHalfLifeTime: 84h\n  usageSamplingInterval: 5m\n")
    )
    outcome = kueue_config_check(cluster=Cluster.objects.get(pk=cluster.pk), api=api, now=at(2))
    assert outcome.state == Cluster.KueueConfig.MATCHES, outcome.problem


def test_the_check_says_nothing_without_the_policy(portal, cluster, api, emulator):
    emulator.put(kueue_config_map(V1BETA2_OFF))
    outcome = kueue_config_check(cluster=Cluster.objects.get(pk=cluster.pk), api=api, now=at(0))
    assert "admissionFairSharing" not in outcome.problem
