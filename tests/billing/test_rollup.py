"""Daily rollups: per team × user × class × flavor × day; idle reserved per hour; lent hours; lost hours."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from billing import services
from billing.models import CapacityDaily, QuotaPeriod, RollupDay, UsageDaily
from billing.pricing import US_PER_HOUR
from queues import services as job_services
from queues.models import JobEvent
from tests.billing.conftest import T0, H, run_job
from tests.factories import DeviceFactory

pytestmark = pytest.mark.django_db

DAY = T0.date()
MIDNIGHT = datetime.combine(DAY, datetime.min.time(), tzinfo=UTC)
END_OF_DAY = MIDNIGHT + timedelta(days=1)


def rows(model, **filters) -> list[tuple]:
    return sorted(
        tuple(r.values()) for r in model.objects.filter(**filters).values().order_by("pk") if r.pop("id", True)
    )


def capacity(team) -> CapacityDaily:
    return CapacityDaily.objects.get(day=DAY, team=team)


def test_usage_rollup_is_idempotent(world):
    run_job(world, devices=2, start=T0, end=T0 + 2 * H)
    run_job(world, owner=world.bob, devices=1, start=T0 + H, end=T0 + 5 * H)
    services.metering_sync(now=END_OF_DAY)
    services.usage_rollup(day=DAY, now=END_OF_DAY)
    first = rows(UsageDaily), rows(CapacityDaily)
    services.usage_rollup(day=DAY, now=END_OF_DAY)
    assert (rows(UsageDaily), rows(CapacityDaily)) == first
    assert UsageDaily.objects.count() == 2
    assert RollupDay.objects.get(day=DAY).complete


def test_usage_rollup_sums_per_user_class_and_flavor(world):
    run_job(world, devices=2, start=T0, end=T0 + 2 * H)
    # Bob holds 1 GPU at 11:00, so of these 4 only 3 fit in the nominal 4: 3 owned, 1 borrowed.
    run_job(world, devices=4, start=T0 + 3 * H, end=T0 + 4 * H, borrowing=True)
    run_job(world, owner=world.bob, devices=1, start=T0 + H, end=T0 + 5 * H)
    services.metering_sync(now=END_OF_DAY)
    services.usage_rollup(day=DAY, now=END_OF_DAY)
    alice = UsageDaily.objects.get(user=world.alice)
    assert alice.owned_us == (2 * 2 + 3 * 1) * US_PER_HOUR
    assert alice.borrowed_us == 1 * US_PER_HOUR
    assert (alice.owned_cost, alice.borrowed_cost) == (Decimal("14.00"), Decimal("2.00"))
    assert (alice.team, alice.resource_class, alice.flavor, alice.currency) == (
        world.team,
        world.rc,
        world.flavor,
        "EUR",
    )
    assert UsageDaily.objects.get(user=world.bob).owned_us == 4 * US_PER_HOUR


def test_idle_reserved_is_hourly_nominal_minus_owned_never_negative(world):
    # 6 devices for the 09:00 hour: 4 owned + 2 borrowed. Idle that hour is 0, not -2.
    run_job(world, devices=6, start=T0 + H, end=T0 + 2 * H, borrowing=True)
    # 1 device for half of the 12:00 hour.
    run_job(world, devices=1, start=T0 + 4 * H, end=T0 + 4 * H + timedelta(minutes=30))
    services.metering_sync(now=END_OF_DAY)
    services.usage_rollup(day=DAY, now=END_OF_DAY)
    cap = capacity(world.team)
    assert cap.reserved_us == 4 * 24 * US_PER_HOUR
    assert cap.owned_us == 4 * US_PER_HOUR + US_PER_HOUR // 2
    assert cap.idle_us == (4 * 24 - 4 - Decimal("0.5")) * US_PER_HOUR
    assert cap.idle_cost == Decimal("2.00") * (4 * 24 - 4 - Decimal("0.5"))


def test_no_idle_reservation_is_charged_before_the_cluster_has_any_history(db):
    """Issue 32: the demo's cost CSV charged idle reservation on days before any job ran (billing's first run
    took the quotas as in force for all the past), and 864 idle hours came to 48.00 EUR on a day priced for only
    part of it. The first run now opens each quota where its cluster's history begins."""
    from billing.models import QuotaPeriod
    from tests.billing.conftest import make_world

    QuotaPeriod.objects.all().delete()
    world = make_world()
    QuotaPeriod.objects.all().delete()  # as on a deployment whose billing starts now, with history to backfill
    run_job(world, devices=1, start=T0 + 4 * H, end=T0 + 5 * H)  # the cluster's first job: 12:00
    services.metering_sync(now=END_OF_DAY)
    services.usage_rollup(day=DAY - timedelta(days=1), now=END_OF_DAY)
    services.usage_rollup(day=DAY, now=END_OF_DAY)
    assert not CapacityDaily.objects.filter(day=DAY - timedelta(days=1), reserved_us__gt=0).exists()
    cap = capacity(world.team)
    assert cap.reserved_us == 4 * 12 * US_PER_HOUR  # from 12:00, when the history begins
    assert cap.idle_us == (4 * 12 - 1) * US_PER_HOUR
    assert cap.idle_cost == Decimal("2.00") * (4 * 12 - 1)  # every idle hour priced: hours and cost agree


def test_idle_of_today_counts_only_hours_until_now(world):
    services.usage_rollup(day=DAY, now=T0)  # 08:00
    cap = capacity(world.team)
    assert cap.reserved_us == cap.idle_us == 4 * 8 * US_PER_HOUR
    assert not RollupDay.objects.get(day=DAY).complete


def test_lent_hours_are_credited_to_the_team_whose_idle_quota_others_borrowed(world):
    # nlp borrows 2 GPUs above its nominal 4 for one hour, while vision uses nothing.
    run_job(world, team=world.other, owner=world.carol, devices=6, start=T0, end=T0 + H, borrowing=True)
    services.metering_sync(now=END_OF_DAY)
    services.usage_rollup(day=DAY, now=END_OF_DAY)
    vision, nlp = capacity(world.team), capacity(world.other)
    assert vision.lent_us == 2 * US_PER_HOUR
    assert vision.lent_credit == Decimal("4.00")
    assert vision.idle_us == 4 * 24 * US_PER_HOUR
    assert nlp.lent_us == 0
    assert nlp.idle_us == 4 * 23 * US_PER_HOUR


def test_lost_hours_from_preemption_and_hardware(world):
    preempted = run_job(world, devices=2, start=T0)
    job_services.job_requeue(preempted, now=T0 + H, reason="preempted", message="evicted", checkpointed=False)
    lost_node = run_job(world, owner=world.bob, devices=1, start=T0)
    job_services.job_requeue(lost_node, now=T0 + 3 * H, reason="node_lost", message="node left", checkpointed=False)
    # A job that failed with its node (no requeue): the allocation's time since its last checkpoint is lost.
    failed = run_job(world, devices=1, start=T0)
    job_services.record_event(failed, JobEvent.Kind.CHECKPOINT_DONE, "ckpt", at=T0 + H)
    job_services.release_allocations(failed, now=T0 + 2 * H, reason="node_lost")
    services.usage_rollup(day=DAY, now=END_OF_DAY)
    alice = UsageDaily.objects.get(user=world.alice)
    bob = UsageDaily.objects.get(user=world.bob)
    assert alice.lost_preemption_hours == Decimal("2.000")
    assert alice.lost_hardware_hours == Decimal("1.000")
    assert bob.lost_hardware_hours == Decimal("3.000")
    assert bob.lost_preemption_hours == 0


def test_usage_rollup_pending_rolls_today_dirty_incomplete_and_missing_days(world):
    now = datetime(2026, 3, 12, 9, 0, tzinfo=UTC)
    run_job(world, devices=1, start=datetime(2026, 3, 8, 10, tzinfo=UTC), end=datetime(2026, 3, 8, 11, tzinfo=UTC))
    services.metering_sync(now=now)
    assert services.pending_days(now=now) == [
        date(2026, 3, 8),
        date(2026, 3, 9),
        date(2026, 3, 10),
        date(2026, 3, 11),
        date(2026, 3, 12),
    ]
    services.usage_rollup_pending(now=now)
    assert services.pending_days(now=now) == [date(2026, 3, 12)]  # today is always re-rolled
    assert UsageDaily.objects.get(day=date(2026, 3, 8)).owned_us == US_PER_HOUR
    later = now + timedelta(days=1)
    assert services.pending_days(now=later) == [date(2026, 3, 12), date(2026, 3, 13)]


def test_usage_rollup_follows_a_retroactive_change(world):
    job = run_job(world, devices=1, start=T0)
    services.metering_sync(now=T0 + 3 * H)
    services.usage_rollup_pending(now=T0 + 3 * H)
    assert UsageDaily.objects.get().owned_us == 3 * US_PER_HOUR
    from queues.models import Job

    job_services.job_finish(job, state=Job.State.FAILED, now=T0 + H, message="gone at T0+1h")
    services.metering_sync(now=T0 + 4 * H)
    services.usage_rollup_pending(now=T0 + 4 * H)
    assert UsageDaily.objects.get().owned_us == US_PER_HOUR


def test_idle_uses_the_nominal_in_force_at_the_time(world):
    from billing.models import QuotaPeriod
    from queues.models import QuotaLine

    services.metering_sync(now=MIDNIGHT - 3 * H)  # the history starts with nominal 4 (assumed since ever)
    # 4 more GPUs join with the larger guarantee, so that healthy devices back it (12 guaranteed on 12)
    DeviceFactory.create_batch(4, node=world.devices[0].node)
    QuotaLine.objects.filter(team_quota__team=world.team).update(nominal="8")
    services.metering_sync(now=MIDNIGHT + 12 * H)  # the change is seen at noon
    services.usage_rollup(day=DAY, now=END_OF_DAY)
    services.usage_rollup(day=DAY - timedelta(days=1), now=END_OF_DAY)
    assert capacity(world.team).reserved_us == (4 * 12 + 8 * 12) * US_PER_HOUR
    assert capacity(world.team).nominal == Decimal(6)  # the average over the day
    before = CapacityDaily.objects.get(day=DAY - timedelta(days=1), team=world.team)
    assert before.reserved_us == before.idle_us == 4 * 24 * US_PER_HOUR  # not today's 8
    assert capacity(world.other).reserved_us == 4 * 24 * US_PER_HOUR
    periods = QuotaPeriod.objects.filter(team=world.team).order_by("pk")
    assert [(p.nominal, p.valid_from, p.valid_to) for p in periods] == [
        (Decimal(4), datetime(2026, 1, 1, tzinfo=UTC), MIDNIGHT + 12 * H),  # billing's first run (conftest)
        (Decimal(8), MIDNIGHT + 12 * H, None),
    ]
    services.metering_sync(now=MIDNIGHT + 13 * H)
    assert QuotaPeriod.objects.count() == 3  # nothing changed: no new period


def test_a_quota_removed_stops_reserving(world):
    from queues.models import QuotaLine

    services.metering_sync(now=MIDNIGHT - H)
    QuotaLine.objects.filter(team_quota__team=world.team).delete()
    services.metering_sync(now=MIDNIGHT + 6 * H)
    services.usage_rollup(day=DAY, now=END_OF_DAY)
    assert capacity(world.team).reserved_us == 4 * 6 * US_PER_HOUR


def test_lending_limit_caps_the_lent_hours(world):
    from queues.models import QuotaLine

    QuotaLine.objects.filter(team_quota__team=world.team).update(lending_limit="1")
    services.metering_sync(now=MIDNIGHT)  # billing sees the limit from the start of the day
    run_job(world, team=world.other, owner=world.carol, devices=6, start=T0, end=T0 + H, borrowing=True)
    services.metering_sync(now=END_OF_DAY)
    services.usage_rollup(day=DAY, now=END_OF_DAY)
    assert capacity(world.team).lent_us == 1 * US_PER_HOUR
    assert capacity(world.team).lent_credit == Decimal("2.00")


def test_guaranteed_quota_repairs_left_unbacked_is_reported_not_charged(world):
    from pools.health.services import Actor, device_health_set
    from pools.models import HealthState

    services.metering_sync(now=MIDNIGHT - H)  # 8 guaranteed (4 + 4) on 8 healthy GPUs
    # two GPUs go to repair at noon: 6 healthy for 8 guaranteed; the cohort warns only, each team's guarantee is
    # backed 3 of 4 (2 short, split 4:4)
    for device in world.devices[:2]:
        device_health_set(
            device, to=HealthState.UNHEALTHY, reason="XID 79", now=MIDNIGHT + 12 * H, actor=Actor(label="ops")
        )
    services.metering_sync(now=MIDNIGHT + 12 * H)
    services.usage_rollup(day=DAY, now=END_OF_DAY)
    for team in (world.team, world.other):
        cap = capacity(team)
        assert cap.reserved_us == (4 * 12 + 3 * 12) * US_PER_HOUR
        assert cap.unbacked_us == 1 * 12 * US_PER_HOUR
        assert cap.idle_cost == Decimal("2.00") * (4 * 12 + 3 * 12)  # nothing used: the backed reservation, idle
    periods = QuotaPeriod.objects.filter(team=world.team).order_by("pk")
    assert [(p.nominal, p.backed) for p in periods] == [(Decimal(4), None), (Decimal(4), Decimal(3))]
