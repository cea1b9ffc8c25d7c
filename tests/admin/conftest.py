"""Fixtures of the policy-admin tests: a small pool, two teams in a cohort, recorded jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from queues.models import Cohort, Job, QuotaLine, TeamQuota
from tests.factories import (
    ClusterFactory,
    DeviceFactory,
    JobFactory,
    NodeFactory,
    ResourceClassFactory,
    ResourceFlavorFactory,
    TeamFactory,
    UserFactory,
)
from tests.kube.conftest import _kube_settings, _schemas_loaded, cluster, emulator, portal  # noqa: F401  (the API emulator's fixtures)

GPU = "nvidia.com/gpu"
T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)


class Pool:
    """Handles on the objects of the small pool."""

    def __init__(self) -> None:
        self.cluster = ClusterFactory(name="sim-east")
        self.flavor = ResourceFlavorFactory(name="h100", node_labels={"nvidia.com/gpu.product": "NVIDIA-H100"})
        self.node = NodeFactory(cluster=self.cluster, flavor=self.flavor, name="gpu-1")
        for index in range(4):
            DeviceFactory(node=self.node, index=index)
        self.rc = ResourceClassFactory(slug="h100", name="H100", flavors=[self.flavor])
        self.cohort = Cohort.objects.create(name="research")
        self.vision = TeamFactory(slug="vision", name="Vision")
        self.nlp = TeamFactory(slug="nlp", name="NLP")
        self.vq = TeamQuota.objects.create(
            team=self.vision, cluster=self.cluster, cluster_queue_name="vision", cohort=self.cohort
        )
        self.nq = TeamQuota.objects.create(
            team=self.nlp, cluster=self.cluster, cluster_queue_name="nlp", cohort=self.cohort
        )
        self.vline = QuotaLine.objects.create(team_quota=self.vq, flavor=self.flavor, resource_name=GPU, nominal="2")
        self.nline = QuotaLine.objects.create(team_quota=self.nq, flavor=self.flavor, resource_name=GPU, nominal="2")
        self.owner = UserFactory(username="ada")

    def job(self, team, *, devices: int, submitted: timedelta, started: timedelta | None, finished: timedelta | None):
        """A recorded job, times relative to T0."""
        state = (
            Job.State.SUCCEEDED
            if finished is not None
            else (Job.State.RUNNING if started is not None else Job.State.PENDING)
        )
        return JobFactory(
            team=team,
            owner=self.owner,
            cluster=self.cluster,
            resource_class=self.rc,
            devices_per_pod=devices,
            state=state,
            submitted_at=T0 + submitted,
            admitted_at=T0 + started if started is not None else None,
            started_at=T0 + started if started is not None else None,
            finished_at=T0 + finished if finished is not None else None,
        )


@pytest.fixture
def pool(db) -> Pool:
    """Two teams (vision, nlp) with 2 GPUs nominal each in cohort research, one node of 4 GPUs."""
    return Pool()
