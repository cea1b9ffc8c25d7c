"""A team's recent usage from its allocations (fairness that remembers), and where the engine input applies it.

Hand-worked, half-life 1 day, window 7 days; the window's weight is 1 − 0.5^7 = 0.9921875:

* 4 GPUs held over the whole window → 4 × (0.5^0 − 0.5^7) / 0.9921875 = 4.0 (a constant usage reads as itself);
* 2 GPUs held over the last day only → 2 × (1 − 0.5) / 0.9921875 = 1.00787…;
* 1 GPU held from 10 days ago to 8 days ago → outside the window: 0.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pools.models import Allocation, Cluster
from queues.engine.model import UsageDecay
from queues.engine_input import cluster_engine_input
from queues.models import Cohort, TeamQuota
from queues.policy.previews import policy_digest
from queues.policy.whatif import policy_configuration
from queues.recent_usage import decayed_share, recent_usage, state_policies
from tests.factories import (
    ClusterFactory,
    DeviceFactory,
    JobFactory,
    NodeFactory,
    QuotaLineFactory,
    ResourceClassFactory,
    ResourceFlavorFactory,
    TeamFactory,
)

NOW = datetime(2026, 3, 10, 12, tzinfo=UTC)
DAY = timedelta(days=1)


@pytest.fixture
def world(db):
    cluster = ClusterFactory(name="sim")
    flavor = ResourceFlavorFactory(name="h100")
    node = NodeFactory(cluster=cluster, flavor=flavor, name="gpu-a")
    devices = [DeviceFactory(node=node, index=i) for i in range(8)]
    rc = ResourceClassFactory(slug="h100", flavors=[flavor])
    cohort = Cohort.objects.create(name="research", usage_half_life=DAY, usage_window=7 * DAY)
    teams = {}
    for slug in ("vision", "nlp"):
        team = TeamFactory(slug=slug, name=slug.title())
        quota = TeamQuota.objects.create(team=team, cluster=cluster, cluster_queue_name=slug, cohort=cohort)
        QuotaLineFactory(team_quota=quota, flavor=flavor, resource_name="nvidia.com/gpu", nominal="2")
        teams[slug] = team

    def held(team, n, start, end):
        job = JobFactory(team=teams[team], cluster=cluster, resource_class=rc, devices_per_pod=n, running=True)
        free = [d for d in devices if not Allocation.objects.filter(device=d, ended_at__isnull=True).exists()]
        for d in free[:n]:
            Allocation.objects.create(job=job, device=d, started_at=start, ended_at=end)

    held("vision", 4, NOW - 7 * DAY, None)
    held("nlp", 2, NOW - DAY, NOW)
    held("nlp", 1, NOW - 10 * DAY, NOW - 8 * DAY)
    return {"cluster": cluster, "cohort": cohort}


def test_decayed_share_by_hand():
    policy = UsageDecay(half_life=86400.0, window=7 * 86400.0)
    assert decayed_share(NOW - 7 * DAY, NOW, as_of=NOW, policy=policy) == pytest.approx(1.0)
    assert decayed_share(NOW - DAY, NOW, as_of=NOW, policy=policy) == pytest.approx(0.5 / 0.9921875)
    assert decayed_share(NOW - 10 * DAY, NOW - 8 * DAY, as_of=NOW, policy=policy) == 0


def test_recent_usage_from_the_allocations(world):
    config = policy_configuration(cluster=world["cluster"], nodes=False)
    recent = recent_usage(cluster=world["cluster"], as_of=NOW, policies=state_policies(config))
    assert recent["vision"]["nvidia.com/gpu"] == pytest.approx(4.0)
    assert recent["nlp"]["nvidia.com/gpu"] == pytest.approx(2 * 0.5 / 0.9921875)


def test_the_engine_applies_it_on_simulated_clusters_only(world):
    state = cluster_engine_input(cluster=world["cluster"], jobs=[], usage_as_of=NOW).state
    (cohort,) = state.cohorts
    assert cohort.usage_decay.half_life == 86400.0
    queues = {cq.name: cq for cq in state.cluster_queues}
    assert queues["vision"].consumed["nvidia.com/gpu"] == pytest.approx(4.0)
    assert queues["vision"].consumed_at == NOW.timestamp()
    Cluster.objects.filter(pk=world["cluster"].pk).update(backend=Cluster.Backend.KUBERNETES)
    kube = cluster_engine_input(cluster=Cluster.objects.get(pk=world["cluster"].pk), jobs=[], usage_as_of=NOW).state
    assert kube.cohorts[0].usage_decay is None  # Kueue decides there; the diagnosis follows it
    assert all(not cq.consumed for cq in kube.cluster_queues)


def test_a_policys_digest_does_not_move_with_the_usage(world):
    config = policy_configuration(cluster=world["cluster"], nodes=False)
    assert all(not cq.consumed for cq in config.cluster_queues)  # the replay reads it at its window's start
    before = policy_digest(cluster_engine_input(cluster=world["cluster"], jobs=[], usage_as_of=NOW).state)
    later = policy_digest(cluster_engine_input(cluster=world["cluster"], jobs=[], usage_as_of=NOW + DAY).state)
    assert before == later
    Cohort.objects.filter(pk=world["cohort"].pk).update(usage_half_life=2 * DAY)
    changed = policy_digest(cluster_engine_input(cluster=world["cluster"], jobs=[], usage_as_of=NOW).state)
    assert changed != before
