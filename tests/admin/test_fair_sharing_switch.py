"""The cluster's fair-sharing switch: what the engine input carries and how the admin preview shows it."""

from __future__ import annotations

import pytest
from django.urls import reverse

from queues.engine import FairSharing
from queues.engine_input import cluster_engine_input
from queues.policy.whatif import config_changes, policy_configuration
from tests.factories import UserFactory


@pytest.fixture
def admin_client(client, pool):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def test_engine_input_carries_the_switch(pool):
    assert cluster_engine_input(cluster=pool.cluster, jobs=[]).state.fair_sharing is None
    pool.cluster.fair_sharing = True
    pool.cluster.save()
    assert cluster_engine_input(cluster=pool.cluster, jobs=[]).state.fair_sharing == FairSharing()
    pool.cluster.fair_sharing_strategies = "LessThanInitialShare"
    pool.cluster.save()
    assert policy_configuration(cluster=pool.cluster).fair_sharing == FairSharing(("LessThanInitialShare",))


def test_config_changes_names_the_switch(pool):
    current = policy_configuration(cluster=pool.cluster)
    pool.cluster.fair_sharing = True
    pool.cluster.save()
    proposed = policy_configuration(cluster=pool.cluster)
    assert config_changes(current, proposed) == [
        "fair sharing: off → on (LessThanOrEqualToFinalShare, LessThanInitialShare)"
    ]


def test_admin_turning_it_on_previews_first(admin_client, pool):
    c = pool.cluster
    data = {
        "name": c.name,
        "display_name": c.display_name,
        "backend": c.backend,
        "kubeconfig_path": c.kubeconfig_path,
        "kube_context": c.kube_context,
        "fair_sharing": "on",
        "fair_sharing_strategies": "LessThanOrEqualToFinalShare",
        "_save": "Save",
    }
    response = admin_client.post(reverse("admin:pools_cluster_change", args=[c.pk]), data)
    assert response.status_code == 302  # to the preview page, which lists the change while the replay runs
    body = admin_client.get(response.url).content.decode()
    assert "fair sharing: off → on (LessThanOrEqualToFinalShare)" in body
    c.refresh_from_db()
    assert c.fair_sharing is False
    data["_whatif_apply"] = "Apply change"
    response = admin_client.post(reverse("admin:pools_cluster_change", args=[c.pk]), data)
    assert response.status_code == 302
    c.refresh_from_db()
    assert c.fair_sharing is True
    assert c.fair_sharing_strategies == "LessThanOrEqualToFinalShare"
