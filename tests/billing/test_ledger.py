"""The borrowing ledger and its monthly statements, hand-worked over March 2026 (UTC, H100 at 2.00 EUR/h).

Vision and NLP each have 4 of the 8 H100s as nominal quota, in one cohort.

* Mon 2 Mar 10:00–12:00: a vision job on 6 GPUs, admitted borrowing: 4 owned, 2 borrowed. NLP uses nothing, so
  each hour its idle 4 GPU-h are the cohort's whole idle pool and the others borrowed 2: NLP lends
  min(4, 4 × 2 / 4) = 2 GPU-h per hour → 4 GPU-h to vision, worth 8.00 EUR.
* Tue 3 Mar 09:00: vision runs A (4 GPUs, owned, until 13:00) and B (2 GPUs, borrowed). 11:00: NLP submits C on
  4 GPUs (within its nominal quota); only 2 are free, so C reclaims B (InCohortReclamation). B has no checkpoint:
  2 GPUs × 2 h = 4 device-hours lost. NLP lent 2 GPU-h per hour 09:00–11:00 → 4 GPU-h, 8.00 EUR.
  C runs 11:00–13:00.

    March statement of NLP:    lent to Vision 8 GPU-h = 16.00 EUR (= its lent credit); reclaim made: 1.
    March statement of Vision: borrowed from NLP 8 GPU-h = 16.00 EUR (= its borrowed usage cost, nothing from the
                               pool); reclaim suffered: 1, 2 GPUs, 4 device-hours lost.

    Cost report, March (744 h × 4 GPUs = 2976 GPU-h reserved each):
      Vision: owned 8 + 16 = 24 GPU-h (48.00) + borrowed 8 (16.00) + idle 2952 (5904.00) − lent 0 = 5968.00
      NLP:    owned 8 (16.00) + idle 2968 (5936.00) − lent credit 16.00                       = 5936.00
    Settlement at 50 % from March: NLP is credited 8.00 instead of 16.00 (+8.00), Vision pays NLP 8.00 instead of
    the platform 16.00 (−8.00): 5960.00 and 5944.00 — the same 11 904.00 in all.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from billing import services
from billing.models import CohortSettlement, LedgerDaily, LedgerMonthly, ReclaimRecord
from billing.reporting import report_csv
from billing.selectors import cost_report
from billing.services.ledger import split_int, split_money
from billing.statements import borrowing_statement, ledger_lines, month_range
from queues import services as job_services
from tests.billing.conftest import EUR, make_world, run_job
from tests.factories import JobFactory

H = timedelta(hours=1)
MON = datetime(2026, 3, 2, tzinfo=UTC)
TUE = MON + timedelta(days=1)
APRIL = datetime(2026, 4, 1, tzinfo=UTC)
MARCH = date(2026, 3, 1)


def _march(world):
    run_job(world, devices=6, start=MON + 10 * H, end=MON + 12 * H, borrowing=True)
    run_job(world, devices=4, start=TUE + 9 * H, end=TUE + 13 * H, borrowing=False)
    b = run_job(world, devices=2, start=TUE + 9 * H, borrowing=True)
    c = JobFactory(
        team=world.other, owner=world.carol, cluster=world.cluster, resource_class=world.rc, devices_per_pod=4,
        submitted_at=TUE + 11 * H,
    )  # fmt: skip
    reclaim_at = TUE + 11 * H
    job_services.job_preempt(
        b, now=reclaim_at, preemptor=c, reason="InCohortReclamation", message="Preempted to accommodate a workload"
    )
    job_services.job_requeue(b, now=reclaim_at, reason="preempted", message="Requeued.", checkpointed=False)
    job_services.job_admit(
        c,
        now=reclaim_at,
        cluster_queue="nlp",
        pod_sets=[{"name": "main", "count": 1, "flavors": {"nvidia.com/gpu": "h100"}, "nodes": ["gpu-a"]}],
        borrowing=False,
        devices=[world.free(4)],
    )
    job_services.job_start(c, now=reclaim_at)
    job_services.job_finish(c, state="succeeded", now=TUE + 13 * H, message="done")
    services.metering_sync(now=APRIL)
    services.usage_rollup_range(start=MARCH, end=date(2026, 3, 31), now=APRIL)
    return b, c


@pytest.fixture
def march(db):
    world = make_world()
    b, c = _march(world)
    return world, b, c


def _cents(money: dict) -> dict:
    return {k: v.quantize(EUR) for k, v in money.items() if v}


def test_split_adds_up_exactly():
    assert split_int(10, [1, 1, 1]) == [4, 3, 3]
    assert split_int(7, [2, 1]) == [5, 2]
    assert sum(split_money(Decimal("0.00000010"), [1, 2])) == Decimal("0.00000010")


def test_a_ledger_month_with_a_reclaim(march):
    world, b, c = march
    daily = sorted(LedgerDaily.objects.values_list("day", "lender__slug", "borrower__slug", "lent_us", "value"))
    assert daily == [
        (date(2026, 3, 2), "nlp", "vision", 4 * 3_600_000_000, Decimal("8.00000000")),
        (date(2026, 3, 3), "nlp", "vision", 4 * 3_600_000_000, Decimal("8.00000000")),
    ]
    assert list(LedgerMonthly.objects.values_list("month", "lender__slug", "borrower__slug", "lent_us", "value")) == [
        (MARCH, "nlp", "vision", 8 * 3_600_000_000, Decimal("16.00000000"))
    ]
    (reclaim,) = ReclaimRecord.objects.all()
    assert (reclaim.victim_job_id, reclaim.preemptor_job_id, reclaim.victim_team, reclaim.reclaimer_team) == (
        b.pk,
        c.pk,
        world.team,
        world.other,
    )
    assert (reclaim.reason, reclaim.devices, reclaim.lost_device_hours) == ("InCohortReclamation", 2, Decimal("4"))

    first, last = month_range(MARCH)
    nlp = borrowing_statement(team=world.other, start=first, end=last)
    assert [(ln.team.slug, ln.hours, _cents(ln.value)) for ln in nlp.lent] == [("vision", 8, {"EUR": Decimal("16.00")})]
    assert nlp.borrowed == []
    assert [r.victim_job_id for r in nlp.reclaims_made] == [b.pk]
    # the statement adds up with the cost report of the same month
    assert nlp.lent_us == nlp.report.capacity.lent_us
    assert _cents(nlp.lent_value) == _cents(nlp.report.capacity.lent_credit) == {"EUR": Decimal("16.00")}
    assert _cents(nlp.report.charge) == {"EUR": Decimal("5936.00")}

    vision = borrowing_statement(team=world.team, start=first, end=last)
    assert [(ln.team.slug, ln.hours, _cents(ln.value)) for ln in vision.borrowed] == [
        ("nlp", 8, {"EUR": Decimal("16.00")})
    ]  # nothing from the cohort's pool
    assert vision.borrowed_us == vision.report.totals.borrowed_us
    assert _cents(vision.borrowed_value) == _cents(vision.report.totals.borrowed_cost)
    assert [(r.victim_job_id, r.devices, r.lost_device_hours) for r in vision.reclaims_suffered] == [
        (b.pk, 2, Decimal("4"))
    ]
    assert vision.lost_hours == 4
    assert _cents(vision.report.charge) == {"EUR": Decimal("5968.00")}
    assert not vision.settles
    assert vision.settlement_charge == {}

    (line,) = ledger_lines(teams=None, start=first, end=last)
    assert (line.lender.slug, line.borrower.slug, line.hours, line.reclaims) == ("nlp", "vision", 8, 1)


def test_settlement_moves_half_the_value_between_the_teams(march):
    world, _b, _c = march
    CohortSettlement.objects.create(cohort=world.cohort, effective_from=MARCH, share_percent=Decimal("50"))
    first, last = month_range(MARCH)
    nlp = borrowing_statement(team=world.other, start=first, end=last)
    vision = borrowing_statement(team=world.team, start=first, end=last)
    assert _cents(nlp.settlement_credit) == {"EUR": Decimal("8.00")}
    assert _cents(vision.settlement_charge) == {"EUR": Decimal("8.00")}
    assert _cents(nlp.report.settlement) == {"EUR": Decimal("8.00")}
    assert _cents(vision.report.settlement) == {"EUR": Decimal("-8.00")}
    assert _cents(nlp.report.charge) == {"EUR": Decimal("5944.00")}
    assert _cents(vision.report.charge) == {"EUR": Decimal("5960.00")}
    both = cost_report(teams=[world.team, world.other], start=first, end=last, bucket="day")
    assert all(v == 0 for v in both.settlement.values())  # zero-sum between the two teams
    assert _cents(both.charge) == {"EUR": Decimal("11904.00")}
    # the CSV's total row carries the settlement and the same charge, per day the periods add up to it
    per_day = cost_report(teams=[world.team], start=first, end=last, bucket="day")
    assert sum(p.settlement.get("EUR", 0) for p in per_day.periods) == Decimal("-8")
    header, *_rows, total_row = report_csv(per_day).splitlines()
    total = dict(zip(header.split(","), total_row.split(","), strict=True))
    assert (total["settlement_EUR"], total["charge_EUR"]) == ("-8.00", "5960.00")
    # a settlement switched off from April leaves March as it was
    CohortSettlement.objects.create(cohort=world.cohort, effective_from=date(2026, 4, 1), share_percent=None)
    assert _cents(borrowing_statement(team=world.team, start=first, end=last).report.charge) == {
        "EUR": Decimal("5960.00")
    }


def test_rolling_a_day_again_changes_nothing(march):
    _world, _b, _c = march
    before = sorted(LedgerDaily.objects.values_list("day", "lender_id", "borrower_id", "lent_us", "value"))
    reclaims = list(ReclaimRecord.objects.values_list("victim_job_id", "at", "lost_device_hours"))
    services.usage_rollup(day=date(2026, 3, 3), now=APRIL)
    assert sorted(LedgerDaily.objects.values_list("day", "lender_id", "borrower_id", "lent_us", "value")) == before
    assert list(ReclaimRecord.objects.values_list("victim_job_id", "at", "lost_device_hours")) == reclaims
