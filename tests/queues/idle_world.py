"""A small simulated pool for the idle-GPU tests: one node of four cards, a class with a one-hour idle window."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from clusters.backends.simulated import simulated_cluster_tick_run
from pools.gpu_usage import utilisation_record
from queues import services
from queues.models import Job
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

HOUR = 3600


class World:
    """One simulated node of four cards; a class with a one-hour idle window; ada in team ml."""

    def __init__(self) -> None:
        self.cluster = ClusterFactory(name="sim")
        flavor = ResourceFlavorFactory(name="h100")
        node = NodeFactory(cluster=self.cluster, flavor=flavor, name="gpu-node-0")
        self.devices = [DeviceFactory(node=node, index=i) for i in range(4)]
        self.rc = ResourceClassFactory(slug="dev", name="Dev", flavors=[flavor], allowed_counts=[1, 2])
        self.rc.idle_window_seconds = HOUR
        self.rc.save(update_fields=["idle_window_seconds"])
        membership = MembershipFactory(user=UserFactory(username="ada"))
        self.team, self.user = membership.team, membership.user
        quota = TeamQuotaFactory(team=self.team, cluster=self.cluster)
        QuotaLineFactory(team_quota=quota, flavor=flavor, resource_name="nvidia.com/gpu", nominal="4")
        PriorityClassFactory(name="normal", value=100, is_default=True)
        self.t0 = timezone.now().replace(microsecond=0) - timedelta(days=1)

    def at(self, seconds: float) -> datetime:
        return self.t0 + timedelta(seconds=seconds)

    def running(self, name: str, *, devices: int = 1, checkpoint: bool = False) -> Job:
        """A job submitted at t0 and running from t0 + 1 s."""
        extra = {"checkpoint_path": "/ckpt", "checkpoint_signal": "SIGUSR1"} if checkpoint else {}
        spec = services.JobSpec(
            name=name,
            image="registry.example.org/ml/notebook:1.0",
            resource_class=self.rc,
            devices_per_pod=devices,
            sim_runtime_seconds=30 * 86400,
            **extra,
        )
        job = services.job_submit(owner=self.user, team=self.team, spec=spec, now=self.t0, notify_backend=False)
        simulated_cluster_tick_run(cluster_id=self.cluster.pk, now=self.t0)
        simulated_cluster_tick_run(cluster_id=self.cluster.pk, now=self.at(1))
        job.refresh_from_db()
        assert job.state == Job.State.RUNNING
        return job

    def samples(self, job: Job, *, start: float, end: float, percent: float, every: float = 300) -> None:
        """One sample per card of the job every ``every`` seconds in [start, end]."""
        cards = list(job.allocations.values_list("device_id", flat=True))
        t = start
        while t <= end:
            utilisation_record([(c, percent) for c in cards], now=self.at(t))
            t += every


@pytest.fixture
def world(settings) -> World:
    """The pool, with the idle settings the tests' numbers assume."""
    settings.NOTIFY_IDLE_PERCENT = 5.0
    settings.IDLE_GRACE_SECONDS = 1800
    settings.SIMULATED_CHECKPOINT_SECONDS = 10
    return World()
