"""Metering: usage records from the allocations' timestamps, exact, idempotent, never after the pods are gone."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum

from billing import selectors, services
from billing.models import RollupDay, UsageRecord
from billing.services import metering
from pools.models import Allocation
from queues import services as job_services
from queues.models import Job
from tests.billing.conftest import T0, H, allocation_us, run_job
from tests.factories import DeviceFactory, NodeFactory, ResourceClassFactory, ResourceFlavorFactory

pytestmark = pytest.mark.django_db


def total_us(**filters) -> int:
    return UsageRecord.objects.filter(**filters).aggregate(t=Sum("duration_us"))["t"] or 0


def total_cost(**filters) -> Decimal:
    return UsageRecord.objects.filter(**filters).aggregate(t=Sum("cost"))["t"] or Decimal(0)


def snapshot() -> list[tuple]:
    return list(
        UsageRecord.objects.order_by("allocation_id", "start").values_list(
            "pk", "allocation_id", "start", "end", "duration_us", "cost", "borrowed", "open", "final", "metered_at"
        )
    )


def test_metering_sync_bills_closed_allocations_to_the_second(world):
    run_job(world, devices=2, start=T0, end=T0 + timedelta(hours=3, minutes=20, seconds=7))
    report = services.metering_sync(now=T0 + 10 * H)
    assert report.created == 2
    assert total_us() == 2 * (3 * 3600 + 20 * 60 + 7) * 10**6
    assert total_cost().quantize(Decimal("0.000001")) == Decimal("13.341111")  # 2 × 3h20m07s at 2.00 EUR/h
    record = UsageRecord.objects.first()
    assert record.final
    assert not record.open
    assert record.stop == UsageRecord.Stop.ENDED
    assert record.team == world.team
    assert record.user == world.alice
    assert record.resource_class == world.rc
    assert record.flavor == world.flavor
    assert record.currency == "EUR"


def test_metering_sync_twice_changes_nothing(world):
    run_job(world, devices=2, start=T0, end=T0 + 2 * H)
    run_job(world, devices=1, start=T0 + H, end=None)
    services.metering_sync(now=T0 + 3 * H)
    before = snapshot()
    again = services.metering_sync(now=T0 + 3 * H)
    assert again.changed == 0
    assert snapshot() == before


def test_metering_sync_meters_open_allocation_up_to_now_then_finalises_at_true_end(world):
    job = run_job(world, devices=1, start=T0)
    services.metering_sync(now=T0 + 30 * timedelta(minutes=1))
    [record] = UsageRecord.objects.all()
    assert record.open
    assert not record.final
    assert record.duration_us == 30 * 60 * 10**6
    services.metering_sync(now=T0 + 50 * timedelta(minutes=1))
    assert total_us() == 50 * 60 * 10**6
    job_services.job_finish(job, state=Job.State.SUCCEEDED, now=T0 + timedelta(minutes=55), message="ok")
    services.metering_sync(now=T0 + 2 * H)  # runs late: still billed to the true end
    [record] = UsageRecord.objects.all()
    assert record.final
    assert not record.open
    assert record.duration_us == 55 * 60 * 10**6
    assert record.end == T0 + timedelta(minutes=55)


def test_metering_no_usage_after_pods_gone_when_allocation_closes_retroactively(world):
    """The sync ran while the pods were already gone; the cluster's end timestamp wins."""
    job = run_job(world, devices=2, start=T0)
    services.metering_sync(now=T0 + 2 * H)
    assert total_us() == 2 * 2 * 3600 * 10**6
    job_services.job_finish(job, state=Job.State.FAILED, now=T0 + H, message="pods gone at T0+1h")
    services.metering_sync(now=T0 + 3 * H)
    assert total_us() == 2 * 3600 * 10**6
    assert not UsageRecord.objects.filter(end__gt=T0 + H).exists()


def test_metering_stops_at_node_gone_even_if_allocation_still_open(world):
    run_job(world, devices=1, start=T0)
    node = world.devices[0].node
    node.gone_at = T0 + H
    node.save(update_fields=["gone_at"])
    report = services.metering_sync(now=T0 + 5 * H)
    assert total_us() == 3600 * 10**6
    [record] = UsageRecord.objects.all()
    assert record.stop == UsageRecord.Stop.NODE_GONE
    assert not record.open
    assert report.stopped_early == list(Allocation.objects.values_list("pk", flat=True))


def test_metering_stops_at_job_end_for_an_allocation_left_open(world):
    job = run_job(world, devices=1, start=T0)
    Job.objects.filter(pk=job.pk).update(state=Job.State.SUCCEEDED, finished_at=T0 + 2 * H)
    services.metering_sync(now=T0 + 6 * H)
    assert total_us() == 2 * 3600 * 10**6
    assert UsageRecord.objects.get().stop == UsageRecord.Stop.JOB_FINISHED


def test_metering_rebuilds_usage_after_portal_down_for_an_hour(world):
    """Jobs started and ended while no sync ran: the next sync bills exactly up to the closing timestamps."""
    services.metering_sync(now=T0)
    down_from, down_to = T0 + timedelta(minutes=5), T0 + timedelta(minutes=65)
    a = run_job(world, devices=2, start=T0 + timedelta(minutes=7), end=T0 + timedelta(minutes=41, seconds=13))
    b = run_job(world, devices=1, start=T0 + timedelta(minutes=20))
    c = run_job(world, devices=1, start=T0 + timedelta(minutes=30), end=T0 + timedelta(minutes=64, microseconds=250))
    assert not UsageRecord.objects.exists()
    services.metering_sync(now=down_to)
    for job in (a, b, c):
        expected = allocation_us(job.allocations.all(), down_from, down_to)
        assert total_us(job=job) == expected
    assert total_us(job=c) == (34 * 60) * 10**6 + 250
    assert UsageRecord.objects.get(job=b).open


def test_metering_splits_usage_at_a_rate_change(world):
    services.rate_set(flavor=world.flavor, price_per_hour="3.50", effective_from=T0 + H)
    run_job(world, devices=1, start=T0, end=T0 + 3 * H)
    services.metering_sync(now=T0 + 4 * H)
    records = list(UsageRecord.objects.order_by("start"))
    assert [(r.start, r.end, r.unit_price) for r in records] == [
        (T0, T0 + H, Decimal("2.00")),
        (T0 + H, T0 + 3 * H, Decimal("3.50")),
    ]
    assert total_cost() == Decimal("9.00")


def test_metering_splits_usage_at_billing_midnight(world):
    start = datetime(2026, 3, 10, 22, 30, tzinfo=UTC)
    run_job(world, devices=1, start=start, end=start + 3 * H)
    services.metering_sync(now=start + 4 * H)
    days = dict(UsageRecord.objects.values_list("day", "duration_us"))
    assert days == {date(2026, 3, 10): 90 * 60 * 10**6, date(2026, 3, 11): 90 * 60 * 10**6}
    assert set(RollupDay.objects.filter(dirty=True).values_list("day", flat=True)) == set(days)


def test_metering_reprices_history_after_a_retroactive_rate(world):
    run_job(world, devices=1, start=T0, end=T0 + 2 * H)
    services.metering_sync(now=T0 + 3 * H)
    assert total_cost() == Decimal("4.00")
    services.rate_set(flavor=world.flavor, price_per_hour="5.00", effective_from=T0 + H)
    assert services.metering_sync(now=T0 + 3 * H).changed
    assert total_cost() == Decimal("7.00")
    assert services.metering_sync(now=T0 + 3 * H).changed == 0


def test_metering_borrowed_split_is_above_nominal_at_admission(world):
    run_job(world, owner=world.bob, devices=2, start=T0 - H)  # the team already holds 2 of its nominal 4
    job = run_job(world, devices=4, start=T0, end=T0 + H, borrowing=True)
    services.metering_sync(now=T0 + 2 * H)
    flags = list(
        UsageRecord.objects.filter(job=job).order_by("allocation__device_id").values_list("borrowed", flat=True)
    )
    assert flags == [False, False, True, True]


def test_metering_workload_not_borrowing_is_all_owned(world):
    job = run_job(world, devices=6, start=T0, end=T0 + H, borrowing=False)
    services.metering_sync(now=T0 + 2 * H)
    assert not UsageRecord.objects.filter(job=job, borrowed=True).exists()


def test_metering_borrowed_flag_survives_a_later_requeue(world):
    """Job.borrowing is reset on requeue; the records keep what the admission decided."""
    job = run_job(world, devices=6, start=T0, borrowing=True)
    services.metering_sync(now=T0 + H)
    job_services.job_requeue(job, now=T0 + 2 * H, reason="preempted", message="evicted", checkpointed=False)
    services.metering_sync(now=T0 + 3 * H)
    assert total_us(job=job, borrowed=True) == 2 * 2 * 3600 * 10**6
    assert total_us(job=job, borrowed=False) == 4 * 2 * 3600 * 10**6


def test_metering_prices_a_mig_slice_as_a_seventh_of_the_card(world):
    a100 = ResourceFlavorFactory(name="a100")
    services.rate_set(flavor=a100, price_per_hour="7.00", effective_from=datetime(2026, 1, 1, tzinfo=UTC))
    node = NodeFactory(cluster=world.cluster, flavor=a100, name="gpu-mig")
    card = DeviceFactory(node=node, partitioned=True)
    slices = [DeviceFactory(node=node, mig=True, parent=card) for _ in range(2)]
    rc = ResourceClassFactory(slug="mig-small", resource_name="nvidia.com/mig-1g.10gb", sharing="mig", flavors=[a100])
    run_job(world, devices=[slices[0]], start=T0, end=T0 + 2 * H, rc=rc)
    services.metering_sync(now=T0 + 3 * H)
    record = UsageRecord.objects.get()
    assert (record.unit_kind, record.mig_profile, record.unit_price) == ("mig", "1g.10gb", Decimal("1.00"))
    assert record.cost == Decimal("2.00")
    services.rate_set(flavor=a100, kind="mig", mig_profile="1g.10gb", price_per_hour="1.25", effective_from=T0)
    services.metering_sync(now=T0 + 3 * H)
    assert UsageRecord.objects.get().cost == Decimal("2.50")


def test_metering_prices_a_time_shared_replica_as_one_over_replicas(world):
    l4 = ResourceFlavorFactory(name="l4")
    services.rate_set(flavor=l4, price_per_hour="0.80", effective_from=datetime(2026, 1, 1, tzinfo=UTC))
    node = NodeFactory(cluster=world.cluster, flavor=l4, name="gpu-l4")
    card = DeviceFactory(node=node, resource_name="", product="NVIDIA L4")
    replicas = [DeviceFactory(node=node, shared=True, parent=card) for _ in range(4)]
    rc = ResourceClassFactory(
        slug="l4-shared", resource_name="nvidia.com/gpu.shared", sharing="time-shared", flavors=[l4]
    )
    run_job(world, devices=[replicas[1]], start=T0, end=T0 + 5 * H, rc=rc)
    services.metering_sync(now=T0 + 6 * H)
    record = UsageRecord.objects.get()
    assert record.unit_price == Decimal("0.20")
    assert record.slice_fraction == Decimal("0.25")
    assert record.cost == Decimal("1.00")


def test_metering_rolls_back_when_the_worker_dies_mid_run_and_rerun_is_exact(world, monkeypatch):
    for i in range(4):
        run_job(world, devices=1, start=T0 + i * timedelta(minutes=10), end=T0 + 2 * H)
    monkeypatch.setattr(metering, "BATCH", 1)
    real = metering._meter_batch
    calls = {"n": 0}

    def dying(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("worker killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(metering, "_meter_batch", dying)
    with pytest.raises(RuntimeError):
        services.metering_sync(now=T0 + 3 * H)
    assert not UsageRecord.objects.exists()  # the whole run rolled back: nothing half-counted
    assert not RollupDay.objects.exists()
    monkeypatch.setattr(metering, "_meter_batch", real)
    services.metering_sync(now=T0 + 3 * H)
    assert total_us() == allocation_us(Allocation.objects.all(), T0, T0 + 3 * H)


def test_metering_open_allocation_never_moves_backwards_with_a_late_clock(world):
    run_job(world, devices=1, start=T0)
    services.metering_sync(now=T0 + 2 * H)
    services.metering_sync(now=T0 + H)  # a worker whose clock lags
    assert total_us() == 2 * 3600 * 10**6


def test_metering_zero_length_allocation_is_recorded_once(world):
    run_job(world, devices=1, start=T0, end=T0)
    services.metering_sync(now=T0 + H)
    assert UsageRecord.objects.get().duration_us == 0
    assert services.metering_sync(now=T0 + H).changed == 0
    assert not metering.dirty_allocations(now=T0 + H).exists()


def test_usage_reconciles_with_allocations_clipped_to_the_range(world):
    """The sum of a team's usage over any day range equals its allocations' device time in that range, to the µs."""
    rng = random.Random(7)
    start = datetime(2026, 3, 1, tzinfo=UTC)
    for n in range(40):
        begin = start + timedelta(seconds=rng.randrange(0, 20 * 86400))
        length = timedelta(seconds=rng.randrange(0, 3 * 86400), microseconds=rng.randrange(0, 10**6))
        team = world.team if n % 3 else world.other
        owner = world.alice if team == world.team else world.carol
        if n % 7:
            run_job(world, team=team, owner=owner, devices=rng.choice([1, 2]), start=begin, end=begin + length)
            continue
        # Some jobs are evicted half-way, then admitted again an hour later on other devices.
        job = run_job(world, team=team, owner=owner, devices=2, start=begin)
        job_services.job_requeue(job, now=begin + length / 2, reason="preempted", message="x", checkpointed=False)
        again = begin + length / 2 + H
        job_services.job_admit(
            job, now=again, cluster_queue=team.slug, pod_sets=[], borrowing=True, devices=[world.free(2)[::-1]]
        )
        job_services.job_start(job, now=again)
        job_services.job_finish(job, state=Job.State.SUCCEEDED, now=again + length / 2, message="ok")
    now = start + timedelta(days=30)
    services.metering_sync(now=now)
    services.usage_rollup_range(start=date(2026, 3, 1), end=date(2026, 3, 30), now=now)
    for lo_day, hi_day in [
        (date(2026, 3, 1), date(2026, 3, 30)),
        (date(2026, 3, 5), date(2026, 3, 9)),
        (date(2026, 3, 17), date(2026, 3, 17)),
    ]:
        lo = datetime.combine(lo_day, datetime.min.time(), tzinfo=UTC)
        hi = datetime.combine(hi_day + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
        for team in (world.team, world.other):
            truth = allocation_us(Allocation.objects.filter(job__team=team), lo, hi)
            assert selectors.usage_us(teams=[team], start=lo_day, end=hi_day) == truth
            assert selectors.usage_us(teams=[team], start=lo_day, end=hi_day, rollups=True) == truth
            report = selectors.cost_report(teams=[team], start=lo_day, end=hi_day)  # the team-level rollup
            assert report.totals.owned_us + report.totals.borrowed_us == truth
            owner = world.alice if team == world.team else world.carol
            by_user = selectors.cost_report(teams=[team], start=lo_day, end=hi_day, user=owner)  # the user rollup
            assert by_user.totals.owned_us + by_user.totals.borrowed_us == truth
            assert sum(g.usage.owned_us + g.usage.borrowed_us for g in report.by_user) == truth
            # Per job (the cost page's jobs panel): every job's usage is its own allocations clipped to the range.
            jobs = selectors.report_jobs(teams=[team], start=lo_day, end=hi_day, limit=None)
            assert jobs.totals.owned_us + jobs.totals.borrowed_us == truth
            assert jobs.totals.cost == report.totals.cost
            for row in jobs.rows:
                job_truth = allocation_us(row.job.allocations.all(), lo, hi)
                assert row.usage.owned_us + row.usage.borrowed_us == job_truth
            active = {a.job_id for a in Allocation.objects.filter(job__team=team) if allocation_us([a], lo, hi) > 0}
            assert {row.job.pk for row in jobs.rows} == active
            assert jobs.count == len(active)
