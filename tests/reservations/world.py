"""The world of the reservation tests: 16 H100 (two racks of two 4-GPU nodes), two teams in cohort org.

Vision (lead carol, researcher alice) holds 12 of them, Speech (lead frank, researcher bob) 4; the cohort itself holds
8 more (over-committed, as real cohorts often are), so a reservation can move quota without touching a single team.
Both queues reclaim from borrowers whatever their priority.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from queues.models import Cohort, Membership, QuotaLine, Reservation, ReservationPolicy, TeamQuota
from tests.browser.scenarios import Pool, research_pool
from tests.factories import MembershipFactory, UserFactory


@dataclass
class World:
    """What ``reservation_world`` built."""

    pool: Pool
    carol: object
    frank: object
    admin: object
    org: Cohort

    @property
    def vision(self):
        return self.pool.team

    @property
    def speech(self):
        return self.pool.other_team


def reservation_world(*, vision="12", speech="4", cohort_quota: str | None = "8") -> World:
    """Build the world (see the module's docstring)."""
    pool = research_pool(nominal=vision, other_nominal=speech)
    org = Cohort.objects.create(name="org")
    for quota in TeamQuota.objects.filter(cluster=pool.cluster):
        quota.cohort = org
        quota.reclaim_within_cohort = "Any"
        quota.within_cluster_queue = "LowerPriority"
        quota.save()
    if cohort_quota is not None:
        QuotaLine.objects.create(cohort=org, flavor=pool.flavor, resource_name="nvidia.com/gpu", nominal=cohort_quota)
    carol = UserFactory(username="carol")
    MembershipFactory(team=pool.team, user=carol, role=Membership.Role.LEAD)
    frank = UserFactory(username="frank")
    MembershipFactory(team=pool.other_team, user=frank, role=Membership.Role.LEAD)
    admin = UserFactory(username="admin", is_staff=True, is_superuser=True)
    ReservationPolicy.objects.get_or_create(pk=1)
    return World(pool=pool, carol=carol, frank=frank, admin=admin, org=org)


def at(day: int, hour: int, minute: int = 0, *, base: datetime | None = None) -> datetime:
    """``day`` days after the next Monday 00:00 (local time) plus the hour: windows in a known week."""
    now = timezone.localtime(base or timezone.now())
    monday = (now + timedelta(days=7 - now.weekday())).replace(hour=0, minute=0, second=0, microsecond=0)
    return monday + timedelta(days=day, hours=hour, minutes=minute)


def approved(world: World, *, team=None, count=8, start: datetime, end: datetime, by=None) -> Reservation:
    """An approved reservation recorded directly (the rules are the services' tests' business)."""
    team = team or world.speech
    return Reservation.objects.create(
        team=team,
        cluster=world.pool.cluster,
        resource_class=world.pool.rc,
        flavor=world.pool.flavor,
        resource_name="nvidia.com/gpu",
        count=count,
        starts_at=start,
        ends_at=end,
        purpose="evaluation run",
        requested_by=by or world.frank,
        requested_at=timezone.now(),
        state=Reservation.State.APPROVED,
        decision=Reservation.Decision.AUTO,
        decided_at=timezone.now(),
    )
