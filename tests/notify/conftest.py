"""Fixtures of the notification tests: a team with a quota over one H100 node, and jobs moved through services."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from pools.models import Device
from queues import services
from queues.models import Job, Membership, Team
from queues.services import JobSpec
from tests.factories import (
    ClusterFactory,
    DeviceFactory,
    MembershipFactory,
    NodeFactory,
    ResourceClassFactory,
    ResourceFlavorFactory,
    TeamQuotaFactory,
)


@dataclass
class World:
    team: Team
    rc: object
    devices: list[Device]


@pytest.fixture(autouse=True)
def _deliver_at_once(settings):
    """Digests are made at once (no gathering window) in these tests unless a test says otherwise."""
    settings.NOTIFY_BATCH_SECONDS = 0


@pytest.fixture(autouse=True)
def _loopback_receivers(settings):
    """The tests' webhook receivers listen on 127.0.0.1, which the egress guard refuses unless an admin allows it:
    these tests allow it (tests/notify/test_ssrf.py takes it back to check the refusals)."""
    settings.NOTIFY_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]


@pytest.fixture
def world():
    """A team with a quota on a simulated cluster, a class over 8 H100s."""
    flavor = ResourceFlavorFactory(name="h100")
    devices = DeviceFactory.create_batch(8, node=NodeFactory(flavor=flavor))
    rc = ResourceClassFactory(flavors=[flavor], allowed_counts=[1, 2, 4, 8])
    team = MembershipFactory().team
    TeamQuotaFactory(team=team, cluster=ClusterFactory(name="sim"))
    return World(team=team, rc=rc, devices=devices)


def submit(world: World, owner, *, name: str = "train", now: datetime | None = None, **spec) -> Job:
    """Submit a job of ``owner`` (made a member of the team)."""
    Membership.objects.get_or_create(team=world.team, user=owner)
    values = {"name": name, "image": "registry.example.org/ml/train:1", "resource_class": world.rc}
    return services.job_submit(owner=owner, team=world.team, spec=JobSpec(**values, **spec), now=now)


def run(world: World, job: Job, *, now: datetime, devices: int = 1, borrowing: bool = False) -> Job:
    """Admit and start a pending job on free devices."""
    free = [d for d in world.devices if not d.allocations.filter(ended_at__isnull=True).exists()][:devices]
    services.job_admit(job, now=now, cluster_queue="q", pod_sets=[], borrowing=borrowing, devices=[free])
    services.job_start(job, now=now + timedelta(seconds=1))
    return job


@pytest.fixture
def now() -> datetime:
    """A recent instant (deliveries drop events older than NOTIFY_STALE_SECONDS)."""
    return timezone.now() - timedelta(minutes=30)
