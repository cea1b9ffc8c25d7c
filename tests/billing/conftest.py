"""Fixtures of the billing tests: a small pool, two teams of one cohort, rates, and a job lifecycle helper."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from billing import services
from pools.models import Allocation, Device, ResourceClass, ResourceFlavor
from queues import services as job_services
from queues.models import Cohort, Job, Membership, QuotaLine, Team
from tests.factories import (
    ClusterFactory,
    DeviceFactory,
    JobFactory,
    MembershipFactory,
    NodeFactory,
    ResourceClassFactory,
    ResourceFlavorFactory,
    TeamFactory,
    TeamQuotaFactory,
    UserFactory,
)

#: A Tuesday morning, far from any midnight, in UTC.
T0 = datetime(2026, 3, 10, 8, 0, tzinfo=UTC)
H = timedelta(hours=1)


@dataclass
class World:
    """What the billing tests run on."""

    cluster: object
    flavor: ResourceFlavor
    devices: list[Device]
    rc: ResourceClass
    cohort: Cohort
    team: Team
    other: Team
    lead: object
    alice: object
    bob: object
    carol: object

    def free(self, n: int) -> list[Device]:
        """``n`` devices of the H100 node that no open allocation holds."""
        held = set(Allocation.objects.filter(ended_at__isnull=True).values_list("device_id", flat=True))
        free = [d for d in self.devices if d.pk not in held]
        assert len(free) >= n, "not enough free devices in the test pool"
        return free[:n]


@pytest.fixture(autouse=True)
def billing_settings(settings):
    """UTC billing days, euros, mail kept in memory."""
    settings.BILLING_TIME_ZONE = "UTC"
    settings.BILLING_CURRENCY = "EUR"
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    return settings


def make_world() -> World:
    """One 8 × H100 node; teams *vision* (lead + alice + bob) and *nlp* (carol), 4 GPUs of nominal quota each,
    in one cohort, recorded by billing since 2026-01-01; an H100 rate of 2.00 EUR per device-hour since then."""
    cluster = ClusterFactory(name="sim")
    flavor = ResourceFlavorFactory(name="h100", display_name="H100")
    node = NodeFactory(cluster=cluster, flavor=flavor, name="gpu-a")
    devices = [DeviceFactory(node=node, index=i) for i in range(8)]
    rc = ResourceClassFactory(slug="h100-train", name="H100 training", flavors=[flavor])
    cohort = Cohort.objects.create(name="research")
    team = TeamFactory(slug="vision", name="Vision")
    other = TeamFactory(slug="nlp", name="NLP")
    for t in (team, other):
        quota = TeamQuotaFactory(team=t, cluster=cluster, cohort=cohort)
        QuotaLine.objects.create(team_quota=quota, flavor=flavor, resource_name="nvidia.com/gpu", nominal="4")
    lead = UserFactory(username="lead", email="lead@example.org")
    MembershipFactory(team=team, user=lead, role=Membership.Role.LEAD)
    alice = UserFactory(username="alice", email="alice@example.org")
    MembershipFactory(team=team, user=alice)
    bob = UserFactory(username="bob", email="bob@example.org")
    MembershipFactory(team=team, user=bob)
    carol = UserFactory(username="carol", email="carol@example.org")
    MembershipFactory(team=other, user=carol, role=Membership.Role.LEAD)
    services.rate_set(flavor=flavor, price_per_hour="2.00", effective_from=datetime(2026, 1, 1, tzinfo=UTC))
    # Billing has watched the quotas since the rate began (its first run opens them then): the days tested below
    # have a full day of reservation whether a job ran before them or not.
    services.quota_history_sync(now=datetime(2026, 1, 1, tzinfo=UTC))
    return World(cluster, flavor, devices, rc, cohort, team, other, lead, alice, bob, carol)


@pytest.fixture
def world(db) -> World:
    """The billing test world (see ``make_world``)."""
    return make_world()


def run_job(
    world: World,
    *,
    owner=None,
    team: Team | None = None,
    devices: list[Device] | int = 1,
    start: datetime,
    end: datetime | None = None,
    borrowing: bool = False,
    state: str = Job.State.SUCCEEDED,
    rc: ResourceClass | None = None,
) -> Job:
    """A job through the real lifecycle services: admitted (allocations open) at ``start``, running, and
    finished at ``end`` (allocations closed at the true end) unless ``end`` is None."""
    team = team or world.team
    owner = owner or world.alice
    if isinstance(devices, int):
        devices = world.free(devices)
    job = JobFactory(
        team=team, owner=owner, cluster=world.cluster, resource_class=rc or world.rc, devices_per_pod=len(devices),
        submitted_at=start - timedelta(minutes=5),
    )  # fmt: skip
    job_services.job_admit(
        job,
        now=start,
        cluster_queue=team.slug,
        pod_sets=[{"name": "main", "count": 1, "flavors": {"nvidia.com/gpu": world.flavor.name}, "nodes": ["gpu-a"]}],
        borrowing=borrowing,
        devices=[devices],
    )
    job_services.job_start(job, now=start)
    if end is not None:
        job_services.job_finish(job, state=state, now=end, message="done")
    return job


def allocation_us(allocations, lo: datetime, hi: datetime) -> int:
    """Ground truth: microseconds of the allocations clipped to [lo, hi) (open ones up to ``hi``)."""
    total = 0
    for a in allocations:
        end = a.ended_at or hi
        s, e = max(a.started_at, lo), min(end, hi)
        if e > s:
            d = e - s
            total += (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds
    return total


EUR = Decimal("0.01")
