"""Fixtures of the health tests: a small simulated pool with a team, a class and its quota."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from pools.models import Cluster, Device, Node, ResourceClass
from queues.models import Team
from tests.factories import (
    ClusterFactory,
    DeviceFactory,
    MembershipFactory,
    NodeFactory,
    PriorityClassFactory,
    QuotaLineFactory,
    ResourceClassFactory,
    ResourceFlavorFactory,
    TeamQuotaFactory,
    UserFactory,
)


@dataclass
class Pool:
    """Two H100 nodes of four GPUs in one simulated cluster, one team with a quota of eight."""

    cluster: Cluster
    nodes: list[Node]
    devices: list[Device]
    rc: ResourceClass
    team: Team
    user: object
    admin: object
    t0: datetime

    def at(self, seconds: float) -> datetime:
        """A time ``seconds`` after the fixture's start."""
        return self.t0 + timedelta(seconds=seconds)


@pytest.fixture
def pool(db) -> Pool:
    cluster = ClusterFactory(name="sim")
    flavor = ResourceFlavorFactory(name="h100")
    nodes = [NodeFactory(cluster=cluster, flavor=flavor, name=f"gpu-node-{i}") for i in range(2)]
    devices = [DeviceFactory(node=n, index=i) for n in nodes for i in range(4)]
    rc = ResourceClassFactory(slug="h100", name="H100", flavors=[flavor], allowed_counts=[1, 2, 4])
    membership = MembershipFactory(user=UserFactory(username="ada", email="ada@example.org"))
    quota = TeamQuotaFactory(team=membership.team, cluster=cluster)
    QuotaLineFactory(team_quota=quota, flavor=flavor, resource_name="nvidia.com/gpu", nominal="8")
    PriorityClassFactory(name="normal", value=100, is_default=True)
    admin = UserFactory(username="ops", email="ops@example.org", is_staff=True, is_superuser=True)
    t0 = timezone.now().replace(microsecond=0) - timedelta(days=1)
    return Pool(cluster, nodes, devices, rc, membership.team, membership.user, admin, t0)


def tick(pool: Pool, seconds: float):
    """One simulated tick at ``pool.at(seconds)``."""
    from clusters.backends.simulated import simulated_cluster_tick_run

    return simulated_cluster_tick_run(cluster_id=pool.cluster.pk, now=pool.at(seconds))


def submit(pool: Pool, name: str, *, at: float, devices: int = 1, checkpoint: bool = False, runtime: int = 86400):
    """Submit a job of the pool's class as its user."""
    from queues import services

    extra = {"checkpoint_path": "/ckpt", "checkpoint_signal": "SIGUSR1"} if checkpoint else {}
    spec = services.JobSpec(
        name=name,
        image="registry.example.org/ml/train:1.0",
        resource_class=pool.rc,
        devices_per_pod=devices,
        sim_runtime_seconds=runtime,
        **extra,
    )
    return services.job_submit(owner=pool.user, team=pool.team, spec=spec, now=pool.at(at), notify_backend=False)
